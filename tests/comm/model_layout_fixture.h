#ifndef BG_TESTS_MODEL_LAYOUT_FIXTURE_H
#define BG_TESTS_MODEL_LAYOUT_FIXTURE_H
// Shared by the tests/comm programs that train a tiny MoE model in a parallel layout
// and compare it with one process: the layout (or the job ends with exit 2) and the
// model both start from.
#include <stdio.h>
#include <string.h>

#include "comm/dist.h"
#include "core/error.h"
#include "model/config.h"

static inline void layout_fixture_init(dist_layout *L, int E, int ep, int ranks_per_node) {
    if (dist_layout_init(L, E, ep, ranks_per_node) != BG_OK) {
        fprintf(stderr, "layout: %s\n", bg_last_error());
        dist_abort(2);
    }
}

// Two MoE layers of E experts, top-k, context T; the caller sets the routing.
static inline void layout_fixture_config(model_config *c, int T, int E, int k) {
    model_config_defaults(c);
    c->vocab_size = 32;
    c->max_position_embeddings = T;
    c->hidden_size = 16;
    c->num_hidden_layers = 2;
    c->num_attention_heads = 2;
    c->intermediate_size = 24;
    c->num_local_experts = E;
    c->num_experts_per_tok = k;
    c->moe_intermediate_size = 12;
    c->router_z_loss_coef = 0.001f;
    c->initializer_range = 0.1f;
}

// The router_type with that name, -1 if none.
static inline int layout_fixture_router(const char *name) {
    for (int t = 0; model_router_type_name(t); t++)
        if (!strcmp(model_router_type_name(t), name)) return t;
    return -1;
}
#endif
