// One training run of a tiny MoE model in a given parallel layout; rank 0 writes
// the loss, aux loss and z-loss of every step. test_layout_equivalence.sh compares
// layouts against one process. Flags: --ep EP --ranks-per-node R --algo flat|hier
// --chunks C --experts E --top-k K --global-batch GB --seq T --steps S --out FILE;
// the gate: --router TYPE (router_type; bias with sigmoid scores, switch with input
// jitter 0.1) --capacity CF (capacity_factor) --virtual-workers W (swipe on one process
// as W workers). Without --out (as a plain CTest run) it trains on one process and
// checks the losses are finite.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "comm/dist.h"
#include "model/model.h"
#include "model_layout_fixture.h"
#include "test_util.h"
#include "train/adamw.h"
#include "train/grad_norm.h"
#include "train/grad_sync.h"

int main(int argc, char **argv) {
    dist_init(&argc, &argv);
    int chunks = 1, ep = 0, rpn = 0, E = 4, k = 2, GB = 12, steps = 10, T = 8, vw = 0;
    float cf = 0.0f;
    const char *algo = "flat", *out = NULL, *router = "topk";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ep")) ep = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ranks-per-node")) rpn = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--algo")) algo = argv[i + 1];
        else if (!strcmp(argv[i], "--experts")) E = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--top-k")) k = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--global-batch")) GB = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunks")) chunks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
        else if (!strcmp(argv[i], "--router")) router = argv[i + 1];
        else if (!strcmp(argv[i], "--capacity")) cf = (float)atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--virtual-workers")) vw = atoi(argv[i + 1]);
    }
    dist_layout L;
    layout_fixture_init(&L, E, ep, rpn);
    int P = L.world_size, r = L.world_rank;
    BG_ASSERT(GB % P == 0);
    int B = GB / P;

    model_config c;
    layout_fixture_config(&c, T, E, k);
    c.num_shared_experts = 1;
    c.router_aux_loss_coef = 0.01f;
    c.router_type = layout_fixture_router(router);
    c.router_score = !strcmp(router, "bias");  // sigmoid: the bias gate's DeepSeek-V3 scores
    c.router_jitter = !strcmp(router, "switch") ? 0.1f : 0.0f;
    c.capacity_factor = cf;
    if (c.router_type < 0 || model_config_validate(&c, "test") != BG_OK) {
        fprintf(stderr, "config: %s\n", c.router_type < 0 ? "unknown --router" : bg_last_error());
        dist_abort(2);
    }

    model_parallel par = {.layout = &L, .a2a_algo = strcmp(algo, "hier") ? DIST_A2A_FLAT : DIST_A2A_HIER,
                          .a2a_chunks = chunks};
    model m;
    model_init_parallel(&m, &c, 42, P > 1 ? &par : NULL);
    m.opt.swipe_virtual_workers = vw;
    model_prepare(&m, B, T);
    adamw_state opt;
    adamw_init(&opt, m.table.numel);
    adamw_hparams hp = {0.9f, 0.95f, 1e-8f, 0.1f};

    FILE *f = out && r == 0 ? fopen(out, "w") : NULL;
    int *gin = malloc(sizeof(int) * GB * T), *gtg = malloc(sizeof(int) * GB * T);
    long zero_blocks = 0;
    for (int step = 0; step < steps; step++) {
        // The same global batch on every rank; each trains on its slice of it.
        bg_rng rng;
        bg_rng_seed(&rng, 1000 + step);
        for (int i = 0; i < GB * T; i++) {
            gin[i] = (int)(bg_rng_u64(&rng) % c.vocab_size);
            gtg[i] = (gin[i] * 7 + 3) % c.vocab_size;  // learnable: a fixed map
        }
        model_forward(&m, gin + r * B * T, gtg + r * B * T);
        grad_sync_loss(&m);
        model_zero_grad(&m);
        model_backward(&m);
        grad_sync_grads(&m);
        double norm = grad_sync_norm(&m);
        adamw_update(&opt, m.params, m.grads, &m.table, &hp, 3e-3f, grad_clip_scale(norm, 1.0f));
        model_router_after_step(&m);  // the bias gate's bias moves by the global counts
        if (P > 1 && L.ep > 1)
            for (int l = 0; l < c.num_hidden_layers; l++)
                for (int q = 0; q < L.ep; q++) zero_blocks += m.acts.layers[l].moe.exchange.send_rows[q] == 0;
        if (f) fprintf(f, "%d %.17g %.17g %.17g %.17g\n", step + 1, m.loss, m.aux_loss, m.z_loss, norm);
        TU_CHECK(isfinite(m.loss), "loss not finite");
    }
    double zb = (double)zero_blocks;
    if (P > 1) dist_allreduce_sum_f64(L.world, &zb, 1);
    if (f) {
        fprintf(f, "# empty_send_blocks %.0f\n", zb);
        fclose(f);
    }
    free(gin), free(gtg);
    adamw_free(&opt);
    model_free(&m);
    dist_layout_free(&L);
    int rc = tu_finish("model_layout");
    dist_finalize();
    return rc;
}
