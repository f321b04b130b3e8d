// Trains the tiny MoE model on a synthetic copy task for 30 steps, then samples from it.
// Build: cc train_and_generate.c $(pkg-config --cflags --libs bagualu)
// Run:   ./a.out configs/tiny_moe.json
#include <bagualu.h>
#include <stdio.h>

int main(int argc, char **argv) {
    bagualu *h = bagualu_open_config(argc > 1 ? argv[1] : "configs/tiny_moe.json");
    if (!h) return fprintf(stderr, "open: %s\n", bagualu_open_error()), 1;
    const char *options[][2] = {{"synthetic", "copy"}, {"steps", "30"}, {"batch-size", "8"},
                                {"seq-len", "32"}, {"lr", "3e-3"}, {"threads", "2"}};
    for (int i = 0; i < 6; i++)
        if (bagualu_set_option(h, options[i][0], options[i][1]) != BAGUALU_OK)
            return fprintf(stderr, "option: %s\n", bagualu_last_error(h)), 1;
    double loss = 0, step = 0, tps = 0;
    if (bagualu_train(h, 30) != BAGUALU_OK) return fprintf(stderr, "train: %s\n", bagualu_last_error(h)), 1;
    bagualu_metric(h, "step", &step), bagualu_metric(h, "loss", &loss), bagualu_metric(h, "tokens_per_s", &tps);
    printf("bagualu %s: step %.0f, loss %.4f, %.0f tokens/s\n", bagualu_version(), step, loss, tps);
    int prompt[8] = {5, 9, 14, 2, 5, 9, 14, 2}, out[16], n = 0;
    if (bagualu_generate(h, prompt, 8, 16, out, &n) != BAGUALU_OK)
        return fprintf(stderr, "generate: %s\n", bagualu_last_error(h)), 1;
    printf("generated:");
    for (int i = 0; i < n; i++) printf(" %d", out[i]);
    printf("\n");
    bagualu_close(h);
    return n == 16 && loss == loss ? 0 : 1;  // 16 tokens (no end-of-text without a tokenizer), a loss
}
