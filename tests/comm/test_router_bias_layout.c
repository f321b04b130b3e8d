// The bias gate in a parallel layout: a tiny MoE model (router_type bias, sigmoid
// scores) trains a few steps as the trainer does (forward, backward, gradient sync,
// AdamW, then model_router_after_step). After every step each rank's biases must equal
// rank 0's bit for bit (they move by the global counts, the same on every rank); rank 0
// writes the step's loss and every bias as exact hex floats to --out, which
// test_router_bias_mpi.sh compares across layouts. Flags: --ep EP --steps S --out FILE.
// Without --out (a plain CTest run) it trains on one process and checks that the
// biases moved.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "comm/dist.h"
#include "model/model.h"
#include "dist_fixture.h"
#include "model_layout_fixture.h"
#include "test_util.h"
#include "train/adamw.h"
#include "train/grad_norm.h"
#include "train/grad_sync.h"

int main(int argc, char **argv) {
    dist_init(&argc, &argv);
    int ep = 0, steps = 8;
    const int E = 4, k = 2, GB = 8, T = 8;
    const char *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ep")) ep = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
    }
    dist_layout L;
    layout_fixture_init(&L, E, ep, 0);
    int P = L.world_size, r = L.world_rank;
    BG_ASSERT(GB % P == 0);
    int B = GB / P;

    model_config c;
    layout_fixture_config(&c, T, E, k);
    c.router_type = layout_fixture_router("bias");
    c.router_score = MOE_SCORE_SIGMOID;
    c.router_bias_update_rate = 0.01f;
    BG_ASSERT(model_config_validate(&c, "test") == BG_OK);

    model_parallel par = {.layout = &L, .a2a_algo = DIST_A2A_FLAT, .a2a_chunks = 1};
    model m;
    model_init_parallel(&m, &c, 42, P > 1 ? &par : NULL);
    model_prepare(&m, B, T);
    adamw_state opt;
    adamw_init(&opt, m.table.numel);
    adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 0.1f};
    const size_t nb = (size_t)c.num_hidden_layers * E;  // every layer is MoE here
    float *bias = malloc(sizeof(float) * nb), *root = malloc(sizeof(float) * nb);

    FILE *f = out && r == 0 ? fopen(out, "w") : NULL;
    int *gin = malloc(sizeof(int) * GB * T), *gtg = malloc(sizeof(int) * GB * T);
    int moved = 0;
    for (int step = 0; step < steps; step++) {
        bg_rng rng;
        bg_rng_seed(&rng, 1000 + step);
        for (int i = 0; i < GB * T; i++) {
            gin[i] = (int)(bg_rng_u64(&rng) % c.vocab_size);
            gtg[i] = (gin[i] * 7 + 3) % c.vocab_size;
        }
        m.step = step;
        model_forward(&m, gin + r * B * T, gtg + r * B * T);
        grad_sync_loss(&m);
        model_zero_grad(&m);
        model_backward(&m);
        grad_sync_grads(&m);
        double norm = grad_sync_norm(&m);
        adamw_update(&opt, m.params, m.grads, &m.table, &hp, 3e-3f, grad_clip_scale(norm, 1.0f));
        model_router_after_step(&m);
        for (int l = 0; l < c.num_hidden_layers; l++)
            memcpy(bias + (size_t)l * E, model_router_state(&m, l), sizeof(float) * E);
        memcpy(root, bias, sizeof(float) * nb);
        if (P > 1) dist_bcast(L.world, root, sizeof(float) * nb, 0);
        TU_CHECK(!memcmp(root, bias, sizeof(float) * nb), "rank %d step %d: biases differ from rank 0's", r,
                 step + 1);
        for (size_t i = 0; i < nb; i++) moved |= bias[i] != 0;
        if (f) {
            fprintf(f, "loss %d %.17g\nbias %d", step + 1, m.loss, step + 1);
            for (size_t i = 0; i < nb; i++) fprintf(f, " %a", bias[i]);
            fprintf(f, "\n");
        }
        TU_CHECK(isfinite(m.loss), "loss not finite");
    }
    TU_CHECK(moved, "the biases never moved");
    if (f) fclose(f);
    free(gin), free(gtg), free(bias), free(root);
    adamw_free(&opt);
    model_free(&m);
    int rc = comm_test_finish(L.world, "router_bias_layout");  // every rank's checks count
    dist_layout_free(&L);
    dist_finalize();
    return rc;
}
