// include/bagualu.h: every failure is a returned status with a message and the process
// goes on (a bad config, file, option; running out of memory in a workspace leaves the
// handle unusable and nothing else); training through the API in pieces is the CLI's
// training bit for bit (the same log lines' losses and gradient norms as trainer_run).
// Why it can fail: an error that aborts or exits, a missing or wrong message, a handle
// that works after running out of memory, or an API run that differs from trainer_run.
#include "bagualu.h"
#include "core/args.h"
#include "core/error.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "train/train_flags.h"
#include "train/trainer.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

// configs/tiny_moe.json, given as JSON text (bagualu_open_config takes either)
#define TINY \
    "{\"vocab_size\":64,\"max_position_embeddings\":64,\"hidden_size\":64,\"num_hid" \
    "den_layers\":2,\"num_attention_heads\":4,\"intermediate_size\":256,\"norm\":\"" \
    "layernorm\",\"hidden_act\":\"gelu\",\"position_embedding\":\"learned\",\"tie_w" \
    "ord_embeddings\":true,\"initializer_range\":0.02,\"num_local_experts\":4,\"num" \
    "_experts_per_tok\":2,\"moe_intermediate_size\":128,\"moe_layer_freq\":1,\"num_" \
    "shared_experts\":0,\"norm_topk_prob\":true,\"router_aux_loss_coef\":0.01,\"rou" \
    "ter_z_loss_coef\":0.001}"

static int contains(const char *s, const char *part) { return s && strstr(s, part) != NULL; }

static void test_errors(const char *dir) {
    TU_CHECK(bagualu_open_config("{\"vocab_size\": 64,") == NULL, "bad JSON opened");
    TU_CHECK(contains(bagualu_open_error(), "not valid JSON"), "bad JSON: \"%s\"", bagualu_open_error());
    TU_CHECK(bagualu_open_config("/nonexistent/cfg.json") == NULL, "missing file opened");
    TU_CHECK(contains(bagualu_open_error(), "/nonexistent/cfg.json"), "missing file: \"%s\"", bagualu_open_error());
    char path[4096];
    snprintf(path, sizeof path, "%s/no_checkpoint", dir);
    TU_CHECK(bagualu_open_checkpoint(path) == NULL, "a missing checkpoint opened");
    TU_CHECK(contains(bagualu_open_error(), "no_checkpoint"), "checkpoint: \"%s\"", bagualu_open_error());
    bagualu *h = bagualu_open_config(TINY);
    TU_CHECK(h != NULL, "tiny: %s", bagualu_open_error());
    if (!h) return;
    TU_CHECK(bagualu_set_option(h, "stepz", "3") == BAGUALU_BAD_INPUT && contains(bagualu_last_error(h), "stepz"),
             "unknown option: \"%s\"", bagualu_last_error(h));
    TU_CHECK(bagualu_set_option(h, "steps", "3x") == BAGUALU_BAD_INPUT && contains(bagualu_last_error(h), "--steps"),
             "bad value: \"%s\"", bagualu_last_error(h));
    TU_CHECK(bagualu_set_option(h, "comm-timeout", "5") == BAGUALU_BAD_INPUT, "comm-timeout accepted");
    TU_CHECK(bagualu_train(h, 1) == BAGUALU_BAD_INPUT && contains(bagualu_last_error(h), "--data"),
             "no data: \"%s\"", bagualu_last_error(h));
    TU_CHECK(bagualu_set_option(h, "data", "/nonexistent.bin") == BAGUALU_OK, "data");
    TU_CHECK(bagualu_train(h, 1) == BAGUALU_BAD_INPUT && contains(bagualu_last_error(h), "nonexistent.bin"),
             "bad data: \"%s\"", bagualu_last_error(h));
    int prompt = 64, out[2], n;
    TU_CHECK(bagualu_generate(h, &prompt, 1, 2, out, &n) == BAGUALU_BAD_INPUT, "an id past the vocabulary");
    prompt = 3;
    TU_CHECK(bagualu_generate(h, &prompt, 1, 2, out, &n) == BAGUALU_OK && n == 2, "generate: %s",
             bagualu_last_error(h));
    bagualu_close(h);
}

// Under an address-space limit, a model of tens of GB cannot have its parameters:
// the never-failing allocator's handler jumps back to the call.
static void test_out_of_memory(void) {
#if defined(__SANITIZE_ADDRESS__)
    printf("out of memory: skipped under the sanitizers (address-space limit)\n");
    return;
#endif
    const char *big = "{\"vocab_size\": 64, \"max_position_embeddings\": 64, \"hidden_size\": 8192, "
                      "\"num_hidden_layers\": 8, \"num_attention_heads\": 8, \"intermediate_size\": 32768}";
    bagualu *h = bagualu_open_config(big);
    TU_CHECK(h != NULL, "big config: %s", bagualu_open_error());
    if (!h) return;
    struct rlimit was, lim;
    getrlimit(RLIMIT_AS, &was);
    lim = was;
    lim.rlim_cur = (rlim_t)4 << 30;  // far below the model, far above the tiny one
    setrlimit(RLIMIT_AS, &lim);
    int prompt = 1, out[1], n;
    int rc = bagualu_generate(h, &prompt, 1, 1, out, &n);
    setrlimit(RLIMIT_AS, &was);
    TU_CHECK(rc == BAGUALU_OUT_OF_MEMORY, "out of memory: status %d (%s)", rc, bagualu_last_error(h));
    TU_CHECK(contains(bagualu_last_error(h), "out of memory allocating"), "message: \"%s\"", bagualu_last_error(h));
    TU_CHECK(bagualu_generate(h, &prompt, 1, 1, out, &n) == BAGUALU_UNUSABLE, "usable after running out of memory");
    TU_CHECK(contains(bagualu_last_error(h), "out of memory"), "the error did not stay");
    bagualu_close(h);
}

// "loss" and "grad_norm" of every step line of a JSON Lines log, as text.
static char *step_numbers(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *out = calloc(cap, 1), line[1 << 15];
    while (fgets(line, sizeof line, f)) {
        const char *keys[] = {"\"step\":", "\"loss\":", "\"grad_norm\":"};
        if (strncmp(line, "{\"step\":", 8) != 0) continue;
        for (int k = 0; k < 3; k++) {
            const char *p = strstr(line, keys[k]);
            size_t len = p ? strcspn(p, ",}") : 0;
            if (p && n + len + 2 < cap) n += (size_t)snprintf(out + n, cap - n, "%.*s ", (int)len, p);
        }
        if (n + 2 < cap) out[n++] = '\n';
    }
    fclose(f);
    return out;
}

static void test_same_as_cli(const char *dir) {
    char data[4096], log_cli[4096], log_api[4096], save[4096];
    snprintf(save, sizeof save, "%s/save", dir);
    snprintf(data, sizeof data, "%s/data.bin", dir);
    snprintf(log_cli, sizeof log_cli, "%s/cli.jsonl", dir);
    snprintf(log_api, sizeof log_api, "%s/api.jsonl", dir);
    uint32_t *tok = malloc(sizeof(uint32_t) * 50000);
    synth_generate(tok, 50000, SYNTH_COPY, 64, 8, 7);
    TU_CHECK(shard_write(data, tok, 50000, SHARD_VERSION_U16) == BG_OK, "shard");
    free(tok);
    const char *opts[][2] = {{"data", data}, {"steps", "7"}, {"batch-size", "4"}, {"seq-len", "32"},
                             {"lr", "3e-3"}, {"threads", "2"}, {"warmup", "2"}};
    enum { NO = sizeof opts / sizeof opts[0] };
    train_flags *f = malloc(sizeof *f);
    train_flags_init(f);
    for (int i = 0; i < NO; i++) args_set(f->specs, f->count, opts[i][0], opts[i][1], "test");
    f->o.config_json = TINY;
    args_set(f->specs, f->count, "log", log_cli, "test");
    TU_CHECK(train_flags_finish(f) == BG_OK, "flags: %s", bg_last_error());
    f->o.quiet = 1;
    int report;
    TU_CHECK(trainer_run(&f->o, &report) == TRAIN_OK, "trainer_run: %s", bg_last_error());
    free(f);

    bagualu *h = bagualu_open_config(TINY);
    TU_CHECK(h != NULL, "open: %s", bagualu_open_error());
    if (!h) return;
    for (int i = 0; i < NO; i++) bagualu_set_option(h, opts[i][0], opts[i][1]);
    bagualu_set_option(h, "log", log_api);
    bagualu_set_option(h, "save-dir", save);
    TU_CHECK(bagualu_train(h, 3) == BAGUALU_OK, "train 3: %s", bagualu_last_error(h));
    TU_CHECK(bagualu_train(h, 1) == BAGUALU_OK, "train 1: %s", bagualu_last_error(h));
    TU_CHECK(bagualu_train(h, 10) == BAGUALU_OK, "train to the end: %s", bagualu_last_error(h));
    double step = 0;
    bagualu_metric(h, "step", &step);
    TU_CHECK(step == 7, "step %g after training past \"steps\" 7", step);
    TU_CHECK(bagualu_train(h, 1) == BAGUALU_BAD_INPUT, "trained past \"steps\"");
    bagualu_close(h);
    char *a = step_numbers(log_cli), *b = step_numbers(log_api);
    TU_CHECK(a && b && strlen(a) > 50 && !strcmp(a, b), "the API's steps differ from trainer_run's:\n%s---\n%s",
             a ? a : "(none)", b ? b : "(none)");
    free(a);
    free(b);

    // The run's checkpoint (saved at its last step): evaluate, sample, train on.
    h = bagualu_open_checkpoint(save);
    TU_CHECK(h != NULL, "open_checkpoint: %s", bagualu_open_error());
    if (!h) return;
    bagualu_metric(h, "step", &step);
    TU_CHECK(step == 7, "the checkpoint's step is %g, not 7", step);
    double loss = -1;
    TU_CHECK(bagualu_evaluate(h, data, 2, &loss) == BAGUALU_OK && loss > 0 && loss < 10, "evaluate: %g (%s)",
             loss, bagualu_last_error(h));
    int prompt[2] = {1, 2}, out[4], n = 0;
    TU_CHECK(bagualu_generate(h, prompt, 2, 4, out, &n) == BAGUALU_OK && n == 4, "generate: %s",
             bagualu_last_error(h));
    bagualu_set_option(h, "data", data);
    bagualu_set_option(h, "steps", "9");
    TU_CHECK(bagualu_train(h, 5) == BAGUALU_OK, "resume: %s", bagualu_last_error(h));
    bagualu_metric(h, "step", &step);
    TU_CHECK(step == 9, "resumed to step %g, not 9", step);
    bagualu_close(h);
}

int main(void) {
    char dir[] = "/tmp/bagualu-test-api-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_errors(dir);
    test_out_of_memory();
    test_same_as_cli(dir);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (getenv("KEEP") == NULL && system(cmd) != 0) return 1;
    return tu_finish("test_api");
}
