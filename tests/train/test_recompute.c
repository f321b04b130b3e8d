// Activation recomputation (--recompute block) gives bitwise the gradients, weights,
// losses and routing results of keeping every block's caches (none), and lays out
// fewer activation bytes: a few steps of each on dense and MoE configs, among them
// gates that keep state (bias), draw noise (noisy_topk, switch's jitter) or drop
// randomly (gshard with a capacity), a dense/MoE mix, naive attention and bf16.
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "test_util.h"
#include "train/routing_health.h"
#include "train_fixture.h"

#define STEPS 3

typedef struct {
    double loss[STEPS], aux[STEPS], z[STEPS], norm[STEPS];
    int counts[STEPS][2][4];        // MoE layers' expert counts (2 layers, 4 experts)
    routing_layer_health health[STEPS][2];
    float *params, *grads;          // after the last step / its gradients
    size_t numel, arena;
} run_result;

static void run(const train_fixture *f, const char *keys, model_recompute rc, int attention,
                bg_dtype dtype, run_result *r) {
    FILE *c = fopen(f->config, "w");
    BG_ASSERT(c);
    fprintf(c,
            "{\"vocab_size\": 32, \"max_position_embeddings\": 32, \"hidden_size\": 32,"
            " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 64,"
            " \"moe_intermediate_size\": 64, \"router_aux_loss_coef\": 0.01,"
            " \"router_z_loss_coef\": 0.001%s%s}", keys[0] ? ", " : "", keys);
    fclose(c);
    train_options o;
    fixture_options(&o, f);
    o.steps = STEPS;
    o.recompute = rc;
    o.dtype = dtype;
    trainer tr;
    TU_CHECK(trainer_init(&tr, &o) == BG_OK, "init: %s", bg_last_error());
    if (attention == MODEL_ATTN_NAIVE) {
        tr.m.opt.attention = MODEL_ATTN_NAIVE;
        model_prepare(&tr.m, o.batch_size, o.seq_len);
    }
    routing_health health;
    BG_ASSERT(routing_health_init(&health, &tr.m, NULL, 100, 0) == BG_OK);
    memset(r, 0, sizeof *r);
    for (int s = 0; s < STEPS; s++) {
        if (s == STEPS - 1) {  // the gradients of the last step, before the update
            r->loss[s] = fixture_grads(&tr);
            r->numel = tr.m.table.numel;
            r->grads = malloc(r->numel * sizeof(float));
            memcpy(r->grads, tr.m.grads, r->numel * sizeof(float));
            trainer_apply_grads(&tr);
        } else {
            r->loss[s] = fixture_step(&tr);
        }
        r->aux[s] = tr.m.aux_loss, r->z[s] = tr.m.z_loss, r->norm[s] = tr.last_grad_norm;
        routing_health_update(&health, &tr.m, NULL, tr.step);
        for (int i = 0; i < health.n_layers && i < 2; i++) {
            r->health[s][i] = health.layers[i];
            r->health[s][i].bias = NULL;  // a pointer, compared by value below
            const int *k = model_expert_counts(&tr.m, health.layer_index[i]);
            memcpy(r->counts[s][i], k, sizeof r->counts[s][i]);
        }
    }
    r->params = malloc(r->numel * sizeof(float));
    memcpy(r->params, tr.m.params, r->numel * sizeof(float));
    r->arena = tr.m.arena.capacity;
    routing_health_free(&health);
    trainer_free(&tr);
}

static void compare(const train_fixture *f, const char *name, const char *keys, int attention,
                    bg_dtype dtype) {
    run_result a, b;
    run(f, keys, MODEL_RECOMPUTE_NONE, attention, dtype, &a);
    run(f, keys, MODEL_RECOMPUTE_BLOCK, attention, dtype, &b);
    TU_CHECK(memcmp(a.grads, b.grads, a.numel * sizeof(float)) == 0, "%s: gradients differ", name);
    TU_CHECK(memcmp(a.params, b.params, a.numel * sizeof(float)) == 0, "%s: weights differ", name);
    TU_CHECK(!memcmp(a.loss, b.loss, sizeof a.loss) && !memcmp(a.norm, b.norm, sizeof a.norm),
             "%s: losses or gradient norms differ", name);
    TU_CHECK(!memcmp(a.aux, b.aux, sizeof a.aux) && !memcmp(a.z, b.z, sizeof a.z),
             "%s: aux or z losses differ (counted twice?)", name);
    TU_CHECK(!memcmp(a.counts, b.counts, sizeof a.counts), "%s: expert counts differ", name);
    TU_CHECK(!memcmp(a.health, b.health, sizeof a.health),
             "%s: routing health or dead experts differ", name);
    printf("%-28s bitwise equal; activation arena %zu -> %zu bytes\n", name, a.arena, b.arena);
    TU_CHECK(b.arena < a.arena, "%s: recompute did not lower the activation bytes", name);
    free(a.grads), free(a.params), free(b.grads), free(b.params);
}

int main(void) {
    train_fixture f;
    fixture_make(&f, 8);
    compare(&f, "dense", "", MODEL_ATTN_FLASH, BG_FP32);
    compare(&f, "dense, naive attention", "", MODEL_ATTN_NAIVE, BG_FP32);
    const char *moe = "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"moe_layer_freq\": 1";
    char keys[512];
    compare(&f, "MoE topk", moe, MODEL_ATTN_FLASH, BG_FP32);
    compare(&f, "MoE topk, bf16", moe, MODEL_ATTN_FLASH, BG_BF16);
    snprintf(keys, sizeof keys, "%s, \"router_type\": \"bias\", \"router_score\": \"sigmoid\"", moe);
    compare(&f, "MoE bias gate (state)", keys, MODEL_ATTN_FLASH, BG_FP32);
    snprintf(keys, sizeof keys, "%s, \"router_type\": \"noisy_topk\"", moe);
    compare(&f, "MoE noisy_topk (noise)", keys, MODEL_ATTN_FLASH, BG_FP32);
    snprintf(keys, sizeof keys, "%s, \"router_type\": \"gshard\", \"capacity_factor\": 1.0", moe);
    compare(&f, "MoE gshard, capacity 1", keys, MODEL_ATTN_FLASH, BG_FP32);
    snprintf(keys, sizeof keys,
             "\"num_local_experts\": 4, \"num_experts_per_tok\": 1, \"moe_layer_freq\": 2, "
             "\"router_type\": \"switch\", \"router_jitter\": 0.1, \"num_shared_experts\": 1");
    compare(&f, "dense+MoE, switch jitter", keys, MODEL_ATTN_FLASH, BG_FP32);
    fixture_remove(&f);
    return tu_finish("train/test_recompute");
}
