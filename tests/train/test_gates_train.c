// Each gate trains: 60 steps of the copy task with switch (jitter on), gshard with a
// capacity, bias (sigmoid scores), noisy_topk (with a group limit), topk with the
// sequence balance loss, and topk itself for reference. A smoke test, not a learning test (test_learning is): in 60 steps the
// copy task only starts to leave ln 32 (by ~0.015 nats with topk), so it checks that
// the mean training loss of the last 5 steps is finite and below that of the first 5,
// that evaluation (no noise, no random drops) gives a finite loss, and that
// noisy_topk's gate_noise weights (zeros at the start) receive gradient.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/params.h"
#include "test_util.h"
#include "train_fixture.h"

#define STEPS 60

static void train_gate(const char *name, const char *extra, int k) {
    train_fixture f;
    fixture_make(&f, 8);
    FILE *c = fopen(f.config, "w");
    BG_ASSERT(c);
    fprintf(c,
            "{\"vocab_size\": 32, \"max_position_embeddings\": 32, \"hidden_size\": 32,"
            " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 64,"
            " \"num_local_experts\": 4, \"num_experts_per_tok\": %d, \"moe_intermediate_size\": 64,"
            " \"moe_layer_freq\": 1, \"router_aux_loss_coef\": 0.01, \"router_z_loss_coef\": 0.001,"
            " %s}", k, extra);
    fclose(c);
    train_options o;
    fixture_options(&o, &f);
    o.steps = STEPS;
    o.warmup = 5;
    trainer tr;
    TU_CHECK(trainer_init(&tr, &o) == BG_OK, "%s: trainer_init: %s", name, bg_last_error());
    double first = 0, last = 0;
    while (tr.step < o.steps) {
        double l = fixture_step(&tr);
        if (tr.step <= 5) first += l / 5;
        if (tr.step > o.steps - 5) last += l / 5;
    }
    double val = fixture_evaluate(&tr);
    printf("%-34s train loss first 5 %.4f, last 5 %.4f; val %.4f\n", name, first, last, val);
    TU_CHECK(isfinite(last) && last < first, "%s: loss %.4f -> %.4f did not fall", name, first, last);
    TU_CHECK(isfinite(val), "%s: evaluation loss %g", name, val);
    const param_tensor *noise = param_table_find(&tr.m.table, "model.layers.0.block_sparse_moe.gate_noise.weight");
    if (strstr(extra, "noisy_topk")) {
        TU_CHECK(noise != NULL, "noisy_topk has no gate_noise weights");
        double norm = 0;
        for (size_t i = 0; noise && i < noise->numel; i++) norm += fabs(tr.m.params[noise->offset + i]);
        TU_CHECK(norm > 0, "gate_noise did not move from zero");
    } else {
        TU_CHECK(noise == NULL, "%s: gate_noise exists", name);
    }
    trainer_free(&tr);
    fixture_remove(&f);
}

int main(void) {
    train_gate("switch, jitter 0.01", "\"router_type\": \"switch\", \"router_jitter\": 0.01", 1);
    train_gate("topk", "\"router_type\": \"topk\"", 2);  // the reference
    train_gate("gshard, capacity 2", "\"router_type\": \"gshard\", \"capacity_factor\": 2.0", 2);
    train_gate("bias, sigmoid", "\"router_type\": \"bias\", \"router_score\": \"sigmoid\"", 2);
    train_gate("noisy_topk, 2 of 4 groups",
               "\"router_type\": \"noisy_topk\", \"router_groups\": 4, \"router_topk_groups\": 2", 2);
    train_gate("topk, sequence aux", "\"router_aux_loss_scope\": \"sequence\"", 2);
    return tu_finish("train/test_gates_train");
}
