// The memory report (model/memory_plan.h) against what the run allocates: parameters,
// gradients, the gates' state, AdamW's m and v and the activation arena are exact;
// recomputation lowers the activation bytes; ZeRO-1 divides the optimizer bytes by P
// (dense) and P/EP (experts). Then the process's resident memory: its growth over a
// run, minus the report's total, stays within MARGIN (oneDNN's JIT code and primitive
// caches, OpenMP's thread stacks, malloc's arenas and page rounding, the per-thread
// operand buffers the report does not plan).
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/memory_plan.h"
#include "test_util.h"
#include "train_fixture.h"

#define MIB (1024.0 * 1024.0)
// Allowed RSS growth beyond the report: a fixed part for the libraries' lazily built
// state plus a fraction of the total for page rounding and malloc's bookkeeping.
#define MARGIN_FIXED (24 * MIB)
#define MARGIN_FRACTION 0.05

static void write_config(const train_fixture *f, const char *json) {
    FILE *c = fopen(f->config, "w");
    BG_ASSERT(c);
    fputs(json, c);
    fclose(c);
}

static memory_report exact(const train_fixture *f, const char *name, model_recompute rc,
                           bg_dtype dtype) {
    train_options o;
    fixture_options(&o, f);
    o.steps = 2;
    o.recompute = rc;
    o.dtype = dtype;
    trainer tr;
    TU_CHECK(trainer_init(&tr, &o) == BG_OK, "%s: init: %s", name, bg_last_error());
    fixture_step(&tr);
    memory_report r;
    trainer_memory_report(&tr, &r);
    size_t L = (size_t)tr.cfg.num_hidden_layers;
    TU_CHECK(r.params == tr.m.table.numel * sizeof(float) + L * tr.m.router_state_bytes,
             "%s: parameters %zu", name, r.params);
    TU_CHECK(r.grads == tr.m.table.numel * sizeof(float), "%s: gradients %zu", name, r.grads);
    TU_CHECK(r.optimizer == 2 * tr.adam.numel * sizeof(float), "%s: optimizer %zu vs %zu", name,
             r.optimizer, 2 * tr.adam.numel * sizeof(float));
    TU_CHECK(r.arena == tr.m.arena.capacity && r.activations + r.moe_exchange == tr.m.arena.capacity,
             "%s: activations %zu + exchange %zu vs arena %zu", name, r.activations,
             r.moe_exchange, tr.m.arena.capacity);
    printf("%-26s params %zu grads %zu optimizer %zu activations %zu: equal to the allocations\n",
           name, r.params, r.grads, r.optimizer, r.activations);
    trainer_free(&tr);
    return r;
}

// ZeRO-1 from the report alone: per-rank optimizer elements are dense/P + experts/(P/EP)
// (up to the rounding of the slices).
static void zero_scaling(const model_config *c) {
    memory_plan_input in = {.B = 8, .T = 32, .dtype = BG_FP32, .world_size = 1, .ep = 1};
    in.opt = (model_options){.lm_head_chunk = MODEL_LM_HEAD_CHUNK, .loss_scale = 1.0f};
    memory_report one;
    memory_plan(&one, c, &in);
    size_t numel1, dense;
    param_table_numel_local(c, 0, c->num_local_experts, &numel1, &dense);
    for (int P = 2; P <= 4; P *= 2) {
        in.world_size = P, in.ep = P, in.zero = 1;
        memory_report z;
        memory_plan(&z, c, &in);
        size_t numel, d;
        param_table_numel_local(c, 0, c->num_local_experts / P, &numel, &d);
        size_t want = dense / P + (numel - dense) / (P / P);
        TU_CHECK(z.owned >= want && z.owned <= want + 2, "P=%d EP=%d: owned %zu, want ~%zu", P, P,
                 z.owned, want);
        in.zero = 0;
        memory_plan(&z, c, &in);
        TU_CHECK(z.owned == numel, "P=%d without ZeRO: owned %zu of %zu", P, z.owned, numel);
    }
    in.world_size = 4, in.ep = 2, in.zero = 1;
    memory_report z;
    memory_plan(&z, c, &in);
    size_t numel, d;
    param_table_numel_local(c, 0, c->num_local_experts / 2, &numel, &d);
    size_t want = dense / 4 + (numel - dense) / 2;
    TU_CHECK(z.owned >= want && z.owned <= want + 2, "P=4 EP=2: owned %zu, want ~%zu", z.owned, want);
}

int main(void) {
    train_fixture f;
    fixture_make(&f, 8);
    memory_report a = exact(&f, "MoE fp32", MODEL_RECOMPUTE_NONE, BG_FP32);
    memory_report b = exact(&f, "MoE fp32, recompute block", MODEL_RECOMPUTE_BLOCK, BG_FP32);
    TU_CHECK(b.activations < a.activations, "recompute: activations %zu !< %zu", b.activations,
             a.activations);
    exact(&f, "MoE bf16, recompute block", MODEL_RECOMPUTE_BLOCK, BG_BF16);
    write_config(&f, "{\"vocab_size\": 32, \"max_position_embeddings\": 32, \"hidden_size\": 32,"
                     " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 64,"
                     " \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 64,"
                     " \"router_type\": \"bias\"}");
    exact(&f, "MoE bias gate (state)", MODEL_RECOMPUTE_NONE, BG_FP32);
    write_config(&f, "{\"vocab_size\": 32, \"max_position_embeddings\": 32, \"hidden_size\": 32,"
                     " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"intermediate_size\": 64}");
    exact(&f, "dense", MODEL_RECOMPUTE_NONE, BG_FP32);
    exact(&f, "dense, recompute block", MODEL_RECOMPUTE_BLOCK, BG_FP32);

    // Resident memory: a model large enough that the report dominates the libraries.
    write_config(&f, "{\"vocab_size\": 512, \"max_position_embeddings\": 64, \"hidden_size\": 128,"
                     " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"intermediate_size\": 256,"
                     " \"num_local_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 256}");
    train_options o;
    fixture_options(&o, &f);
    o.seq_len = 64;
    o.batch_size = 8;
    o.val_path = NULL;
    trainer tr;
    TU_CHECK(trainer_init(&tr, &o) == BG_OK, "init: %s", bg_last_error());
    model_config cfg = tr.cfg;
    fixture_step(&tr);  // the libraries' first-use state, then measure without this run
    trainer_free(&tr);
    double before = tu_resident_bytes();
    TU_CHECK(trainer_init(&tr, &o) == BG_OK, "init: %s", bg_last_error());
    fixture_step(&tr);
    double grown = tu_resident_bytes() - before;
    memory_report r;
    trainer_memory_report(&tr, &r);
    trainer_free(&tr);
    double margin = MARGIN_FIXED + MARGIN_FRACTION * r.total;
    printf("resident memory grew %.1f MiB over a run; the report's total %.1f MiB "
           "(margin %.1f MiB)\n", grown / MIB, r.total / MIB, margin / MIB);
    TU_CHECK(grown >= 0.9 * r.total, "RSS grew %.1f MiB, less than the report's %.1f MiB",
             grown / MIB, r.total / MIB);
    TU_CHECK(grown - r.total <= margin, "RSS grew %.1f MiB past the report's %.1f MiB",
             (grown - r.total) / MIB, r.total / MIB);
    zero_scaling(&cfg);
    fixture_remove(&f);
    return tu_finish("train/test_memory_report");
}
