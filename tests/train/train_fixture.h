#ifndef BG_TEST_TRAIN_FIXTURE_H
#define BG_TEST_TRAIN_FIXTURE_H
// A tiny MoE config and a synthetic copy-task shard in a fresh temporary directory.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "train/trainer.h"

static const char tiny_moe_json[] =
    "{\"vocab_size\": 32, \"max_position_embeddings\": 32, \"hidden_size\": 32,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 64,"
    " \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 64,"
    " \"moe_layer_freq\": 1, \"router_aux_loss_coef\": 0.01, \"router_z_loss_coef\": 0.001}";

// trainer_step / trainer_compute_grads / trainer_evaluate that must succeed: the loss.
static inline double fixture_step(trainer *tr) {
    double loss;
    BG_ASSERT(trainer_step(tr, &loss) == BG_OK);
    return loss;
}
static inline double fixture_grads(trainer *tr) {
    double loss;
    BG_ASSERT(trainer_compute_grads(tr, &loss) == BG_OK);
    return loss;
}
static inline double fixture_evaluate(trainer *tr) {
    double loss;
    BG_ASSERT(trainer_evaluate(tr, &loss) == BG_OK);
    return loss;
}

typedef struct {
    char dir[256], config[300], data[300], val[300];
} train_fixture;

static inline void fixture_make_task(train_fixture *f, synth_task task, int span) {
    snprintf(f->dir, sizeof f->dir, "/tmp/bagualu_test_XXXXXX");
    BG_ASSERT(mkdtemp(f->dir));
    snprintf(f->config, sizeof f->config, "%s/model.json", f->dir);
    snprintf(f->data, sizeof f->data, "%s/train.bin", f->dir);
    snprintf(f->val, sizeof f->val, "%s/val.bin", f->dir);
    FILE *c = fopen(f->config, "w");
    BG_ASSERT(c);
    fputs(tiny_moe_json, c);
    fclose(c);
    size_t n = 60000;
    uint32_t *tok = malloc(n * sizeof *tok);
    synth_generate(tok, n, task, 32, span, 1);
    BG_ASSERT(shard_write(f->data, tok, n, SHARD_VERSION_U16) == BG_OK);
    synth_generate(tok, 8000, task, 32, span, 2);
    BG_ASSERT(shard_write(f->val, tok, 8000, SHARD_VERSION_U16) == BG_OK);
    free(tok);
}

// The copy task (most tests): learning it takes a few hundred steps.
static inline void fixture_make(train_fixture *f, int span) { fixture_make_task(f, SYNTH_COPY, span); }

static inline void fixture_remove(train_fixture *f) {
    remove(f->config);
    remove(f->data);
    remove(f->val);
    remove(f->dir);
}

static inline void fixture_options(train_options *o, const train_fixture *f) {
    train_options_defaults(o);
    o->config_path = f->config;
    o->data_path = f->data;
    o->val_path = f->val;
    o->batch_size = 8;
    o->seq_len = 32;
    o->lr = 3e-3f;
    o->warmup = 20;
}
#endif
