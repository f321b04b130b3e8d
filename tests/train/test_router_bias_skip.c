// The bias gate's update follows the optimizer: a step that fp16 skips (its gradients
// overflowed) leaves the biases as they were, and a step that updates the weights moves
// them. Why it can fail: model_router_after_step called before the overflow check, or
// not at all.
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "train_fixture.h"

static int biases_zero(const trainer *tr) {
    for (int l = 0; l < tr->m.cfg.num_hidden_layers; l++) {
        const float *b = model_router_state(&tr->m, l);
        for (int e = 0; b && e < tr->m.cfg.num_local_experts; e++)
            if (b[e] != 0) return 0;
    }
    return 1;
}

int main(void) {
    train_fixture f;
    fixture_make(&f, 8);
    FILE *c = fopen(f.config, "w");
    BG_ASSERT(c);
    fprintf(c, "%.*s, \"router_type\": \"bias\", \"router_bias_update_rate\": 0.01}",
            (int)strlen(tiny_moe_json) - 1, tiny_moe_json);
    fclose(c);
    train_options o;
    fixture_options(&o, &f);
    o.threads = 1;
    o.batch_size = 2;
    o.seq_len = 16;
    o.steps = 4;
    o.dtype = BG_FP16;
    o.loss_scale_init = 1e30f;  // scaled gradients overflow fp16: the first steps are skipped
    trainer tr;
    BG_ASSERT(trainer_init(&tr, &o) == BG_OK);
    TU_CHECK(model_router_state(&tr.m, 0) != NULL, "no state block for the bias gate");
    fixture_step(&tr);
    TU_CHECK(tr.skipped_at > 0, "test set-up: the fp16 step was not skipped");
    TU_CHECK(biases_zero(&tr), "a skipped step moved the biases");
    trainer_free(&tr);

    o.dtype = BG_FP32;
    BG_ASSERT(trainer_init(&tr, &o) == BG_OK);
    fixture_step(&tr);
    TU_CHECK(tr.skipped_at == 0 && !biases_zero(&tr), "an fp32 step did not move the biases");
    trainer_free(&tr);
    fixture_remove(&f);
    return tu_finish("router_bias_skip");
}
