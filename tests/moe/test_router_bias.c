// The `bias` gate (DeepSeek-V3's auxiliary-loss-free balancing): selection by score +
// bias with the weights from the scores alone, the backward against finite differences
// of a double reference (softmax and sigmoid scores), the bias update rule by hand,
// balance on a skewed router, determinism across thread counts, and the config rule
// that sigmoid scores belong to this gate only.
#include "core/arena.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "moe/router.h"
#include "moe_ref.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Tolerances as tests/moe/test_router.c (fp32 logits of C = 12 terms, softmax or
// sigmoid in fp32: ~1e-6 relative; a wrong formula is off by 1e-2 or more).
#define FWD_ATOL 1e-5
#define FWD_RTOL 1e-4
#define BWD_ATOL 1e-5
#define BWD_RTOL 1e-4
#define FD_EPS 1e-5
// FD moves a logit by ~1e-4 at most; the choice (on score + bias) must not flip.
#define MIN_MARGIN 1e-3

static kernel_ctx *g_kc;

typedef struct {
    bg_arena arena;
    moe_router_cache c;
    moe_router_scratch scr;
    moe_shape s;
} gate_run;

static void gate_open(gate_run *g, int N, int C, int E, int k, int norm, int sigmoid, float z_coef,
                      float rate) {
    memset(g, 0, sizeof *g);
    g->s = (moe_shape){.C = C, .E = E, .k = k, .F = 1, .norm_topk_prob = norm, .aux_coef = 0.5f,
                       .z_coef = z_coef, .router = &moe_router_bias,
                       .routing = {.score = sigmoid ? MOE_SCORE_SIGMOID : MOE_SCORE_SOFTMAX,
                                   .bias_update_rate = rate}};
    bg_arena measure;
    bg_arena_init(&measure, 0);
    moe_router_cache_layout(&g->c, &measure, &g->s, N);
    moe_router_scratch_layout(&g->scr, &measure, &g->s, N);
    bg_arena_init(&g->arena, measure.used);
    moe_router_cache_layout(&g->c, &g->arena, &g->s, N);
    moe_router_scratch_layout(&g->scr, &g->arena, &g->s, N);
}

static void gate_forward(gate_run *g, float *bias, const float *inp, const float *gate, int N) {
    moe_router_ctx ctx = {.state = bias};
    moe_router_bias.forward(g_kc, &g->c, &ctx, inp, gate, &g->s, N);
}

// ---- crafted: the bias changes the choice, not the weights ----------------------------

static void check_crafted(void) {
    printf("bias gate: crafted scores\n");
    enum { N = 2, C = 2, E = 4, k = 2 };
    // inp = identity rows, gate (E,C): logits[t][e] = gate[e][t].
    const float inp[N * C] = {1, 0, 0, 1};
    const float gate[E * C] = {2, 0, 1, 0, 0.5f, 0, -1, 0};  // token 0: logits 2, 1, 0.5, -1
    for (int sigmoid = 0; sigmoid <= 1; sigmoid++) {
        gate_run g;
        gate_open(&g, N, C, E, k, 0, sigmoid, 0.0f, 0.0f);
        float bias[E] = {0, 0, 0, 0};
        gate_forward(&g, bias, inp, gate, N);
        TU_CHECK(g.c.topk_idx[0] == 0 && g.c.topk_idx[1] == 1, "zero bias: plain top-k (%d, %d)",
                 g.c.topk_idx[0], g.c.topk_idx[1]);
        // Token 1 has all logits 0: equal scores, ties to the lower index.
        TU_CHECK(g.c.topk_idx[2] == 0 && g.c.topk_idx[3] == 1, "ties: (%d, %d), want (0, 1)",
                 g.c.topk_idx[2], g.c.topk_idx[3]);
        // A bias of +1 on expert 3 (the lowest score) and on expert 2 puts them first;
        // the weights stay their scores.
        float b2[E] = {0, 0, 1.0f, 1.5f};
        gate_forward(&g, b2, inp, gate, N);
        double l3 = -1, l2 = 0.5;
        double s3 = sigmoid ? 1 / (1 + exp(-l3)) : exp(l3) / (exp(2) + exp(1) + exp(0.5) + exp(-1));
        double s2 = sigmoid ? 1 / (1 + exp(-l2)) : exp(l2) / (exp(2) + exp(1) + exp(0.5) + exp(-1));
        TU_CHECK(g.c.topk_idx[0] == 3 && g.c.topk_idx[1] == 2, "%s: biased choice (%d, %d), want (3, 2)",
                 sigmoid ? "sigmoid" : "softmax", g.c.topk_idx[0], g.c.topk_idx[1]);
        TU_CHECK(fabs(g.c.topk_w[0] - s3) < 1e-6 && fabs(g.c.topk_w[1] - s2) < 1e-6,
                 "%s: weights %g %g, want the scores %g %g (no bias)", sigmoid ? "sigmoid" : "softmax",
                 g.c.topk_w[0], g.c.topk_w[1], s3, s2);
        // Token 1 (equal scores): biases 1 and 1.5 pick 3 then 2 as well.
        TU_CHECK(g.c.topk_idx[2] == 3 && g.c.topk_idx[3] == 2, "token 1 biased (%d, %d)",
                 g.c.topk_idx[2], g.c.topk_idx[3]);
        TU_CHECK(g.c.aux_loss == 0.0, "aux loss %g: the bias gate has none", g.c.aux_loss);
        TU_CHECK(g.c.counts_global[3] == 2 && g.c.counts_global[2] == 2 && g.c.counts_global[0] == 0,
                 "counts %d %d %d %d", g.c.counts_global[0], g.c.counts_global[1],
                 g.c.counts_global[2], g.c.counts_global[3]);
        bg_arena_free(&g.arena);
    }
}

// ---- backward against finite differences of a double reference ------------------------

typedef struct {
    double *inp, *gate, *g;
    const int *idx;  // held fixed: top-k is piecewise constant
    int N, C, E, k, norm, sigmoid;
    double z_coef;
} ref_ctx;

// L = Σ g·w + z_coef·mean_t lse_t², w the chosen scores (normalized when norm).
static double ref_loss(void *vctx) {
    ref_ctx *r = vctx;
    double L = 0, z = 0;
    double *l = malloc(sizeof(double) * (size_t)r->E);
    for (int t = 0; t < r->N; t++) {
        double mx = -INFINITY, sum = 0, S = 0;
        for (int e = 0; e < r->E; e++) {
            double a = 0;
            for (int c = 0; c < r->C; c++) a += r->inp[(size_t)t * r->C + c] * r->gate[(size_t)e * r->C + c];
            l[e] = a;
            mx = a > mx ? a : mx;
        }
        for (int e = 0; e < r->E; e++) sum += exp(l[e] - mx);
        double lse = mx + log(sum);
        z += lse * lse;
        double sc[8];
        for (int j = 0; j < r->k; j++) {
            double x = l[r->idx[t * r->k + j]];
            sc[j] = r->sigmoid ? 1 / (1 + exp(-x)) : exp(x - lse);
            S += sc[j];
        }
        for (int j = 0; j < r->k; j++) L += r->g[t * r->k + j] * (r->norm ? sc[j] / (S + 1e-20) : sc[j]);
    }
    free(l);
    return L + r->z_coef * z / r->N;
}

// Smallest gap between the k-th chosen and the best unchosen score + bias.
static double choice_margin(const float *scores, const float *bias, const int *idx, int N, int E, int k) {
    double m = INFINITY;
    for (int t = 0; t < N; t++) {
        double kth = scores[t * E + idx[t * k + k - 1]] + bias[idx[t * k + k - 1]];
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= idx[t * k + j] == e;
            if (!taken && kth - (scores[t * E + e] + bias[e]) < m) m = kth - (scores[t * E + e] + bias[e]);
        }
    }
    return m;
}

static void check_grad(int N, int C, int E, int k, int norm, int sigmoid, double z_coef, uint64_t seed) {
    printf("bias gate FD: N=%d C=%d E=%d k=%d norm=%d %s z_coef=%g\n", N, C, E, k, norm,
           sigmoid ? "sigmoid" : "softmax", z_coef);
    size_t nx = (size_t)N * C, ng = (size_t)E * C, nk = (size_t)N * k;
    tu_seed(seed);
    float *inp = malloc(sizeof(float) * nx), *gate = malloc(sizeof(float) * ng);
    float *g = malloc(sizeof(float) * nk), bias[8];
    tu_fill_normal(inp, nx, 1.0);
    tu_fill_normal(gate, ng, 0.5);
    tu_fill_normal(g, nk, 1.0);
    tu_fill_normal(bias, (size_t)E, 0.3);  // a bias that changes some choices
    gate_run run;
    gate_open(&run, N, C, E, k, norm, sigmoid, (float)z_coef, 0.0f);
    gate_forward(&run, bias, inp, gate, N);
    double margin = choice_margin(run.c.probs, bias, run.c.topk_idx, N, E, k);
    TU_CHECK(margin > MIN_MARGIN, "test set-up: choice margin %g too small for FD", margin);

    ref_ctx r = {ref_from_float(inp, nx), ref_from_float(gate, ng), ref_from_float(g, nk),
                 run.c.topk_idx, N, C, E, k, norm, sigmoid, z_coef};
    // Forward: the weights are the reference's (finite differences below need the same
    // function), and the z-loss is mean lse².
    ref_ctx w1 = r;
    double want_w[64], want_z = 0;
    for (size_t i = 0; i < nk; i++) {
        for (size_t j = 0; j < nk; j++) w1.g[j] = i == j;
        w1.z_coef = 0;
        want_w[i] = ref_loss(&w1);
    }
    for (size_t j = 0; j < nk; j++) r.g[j] = g[j];  // w1 shares r's buffers
    for (int t = 0; t < N; t++) want_z += (double)run.c.lse[t] * run.c.lse[t] / N;
    ref_expect("bias gate topk_w", run.c.topk_w, want_w, nk, FWD_ATOL, FWD_RTOL);
    TU_CHECK(fabs(run.c.z_loss - want_z) < 1e-9 * (1 + want_z), "z %.9g want %.9g", run.c.z_loss, want_z);

    float *dinp = malloc(sizeof(float) * nx), *dgate = malloc(sizeof(float) * ng);
    tu_fill_normal(dinp, nx, 1.0);  // the backward accumulates
    tu_fill_normal(dgate, ng, 1.0);
    double *want_inp = ref_from_float(dinp, nx), *want_gate = ref_from_float(dgate, ng);
    for (size_t i = 0; i < (size_t)N * E; i++) run.scr.dlogits[i] = run.scr.dprobs[i] = NAN;
    float bias_before[8];
    memcpy(bias_before, bias, sizeof bias);
    moe_router_ctx ctx = {.state = bias};
    moe_router_bias.backward(g_kc, dinp, dgate, &run.scr, g, inp, &run.c, &ctx, gate, &run.s, N);
    TU_CHECK(!memcmp(bias, bias_before, sizeof bias), "the backward changed the bias");
    double *fd = malloc(sizeof(double) * (nx > ng ? nx : ng));
    ref_fd_grad(fd, r.inp, nx, FD_EPS, ref_loss, &r);
    for (size_t i = 0; i < nx; i++) want_inp[i] += fd[i];
    ref_fd_grad(fd, r.gate, ng, FD_EPS, ref_loss, &r);
    for (size_t i = 0; i < ng; i++) want_gate[i] += fd[i];
    ref_expect("bias gate dinp", dinp, want_inp, nx, BWD_ATOL, BWD_RTOL);
    ref_expect("bias gate dgate", dgate, want_gate, ng, BWD_ATOL, BWD_RTOL);

    bg_arena_free(&run.arena);
    free(inp), free(gate), free(g), free(r.inp), free(r.gate), free(r.g), free(dinp), free(dgate);
    free(want_inp), free(want_gate), free(fd);
}

// ---- the update rule by hand --------------------------------------------------------

static void check_update_rule(void) {
    printf("bias gate: update rule on known counts\n");
    gate_run g;
    gate_open(&g, 1, 1, 4, 2, 0, 1, 0.0f, 0.25f);  // rate 0.25: exact in binary
    // counts 5, 1, 2, 0: total 8, mean 2 → expert 0 above (−rate), 1 and 3 below (+rate),
    // expert 2 exactly at the mean (unchanged).
    const int counts[4] = {5, 1, 2, 0};
    memcpy(g.c.counts_global, counts, sizeof counts);
    float b[4] = {0, 0, 0, 0};
    moe_router_bias.after_step(b, &g.c, &g.s);
    const float want1[4] = {-0.25f, 0.25f, 0.0f, 0.25f};
    TU_CHECK(!memcmp(b, want1, sizeof b), "after one update: %g %g %g %g", b[0], b[1], b[2], b[3]);
    // Counts 2, 2, 3, 2: total 9, mean 2.25 → 0, 1, 3 below, 2 above.
    const int counts2[4] = {2, 2, 3, 2};
    memcpy(g.c.counts_global, counts2, sizeof counts2);
    moe_router_bias.after_step(b, &g.c, &g.s);
    const float want2[4] = {0.0f, 0.5f, -0.25f, 0.5f};
    TU_CHECK(!memcmp(b, want2, sizeof b), "after two updates: %g %g %g %g", b[0], b[1], b[2], b[3]);
    TU_CHECK(moe_router_bias.state_size(&g.s) == 4 * sizeof(float), "state is E floats");
    TU_CHECK(moe_router_topk.state_size(&g.s) == 0 && !moe_router_topk.after_step &&
                 !moe_router_topk.state_name,
             "topk keeps no state");
    TU_CHECK(moe_router_find("bias") == &moe_router_bias, "bias gate not registered");
    bg_arena_free(&g.arena);
}

// ---- balance on a skewed router -------------------------------------------------------

// Coefficient of variation of the counts: std / mean.
static double load_cv(const int *counts, int E) {
    double mean = 0, var = 0;
    for (int e = 0; e < E; e++) mean += counts[e];
    mean /= E;
    for (int e = 0; e < E; e++) var += (counts[e] - mean) * (counts[e] - mean);
    return sqrt(var / E) / mean;
}

static void check_balance(int sigmoid) {
    enum { N = 256, C = 8, E = 8, k = 2, STEPS = 200 };
    printf("bias gate: skewed router balances (%s)\n", sigmoid ? "sigmoid" : "softmax");
    tu_seed(77);
    float *inp = malloc(sizeof(float) * N * C), gate[E * C], bias[E] = {0};
    tu_fill_normal(inp, (size_t)N * C, 1.0);
    tu_fill_normal(gate, (size_t)E * C, 0.3);
    // Expert 0 dominates: its gate row adds a large logit for every token (inputs get a
    // constant feature in column 0).
    for (int t = 0; t < N; t++) inp[t * C] = 1.0f;
    gate[0] = 3.0f;
    gate[C] = 2.0f;  // and expert 1 second
    gate_run g;
    gate_open(&g, N, C, E, k, 1, sigmoid, 0.0f, 0.01f);
    gate_forward(&g, bias, inp, gate, N);
    double cv0 = load_cv(g.c.counts_global, E);
    int max0 = g.c.counts_global[0];
    for (int s = 0; s < STEPS; s++) {
        gate_forward(&g, bias, inp, gate, N);
        moe_router_bias.after_step(bias, &g.c, &g.s);
    }
    gate_forward(&g, bias, inp, gate, N);
    double cv1 = load_cv(g.c.counts_global, E);
    printf("  load CV %.3f -> %.3f after %d updates (expert 0: %d -> %d of %d; mean %d); bias[0] %.3f\n",
           cv0, cv1, STEPS, max0, g.c.counts_global[0], N * k, N * k / E, bias[0]);
    TU_CHECK(cv0 > 1.0, "test set-up: the router is not skewed (CV %.3f)", cv0);
    TU_CHECK(cv1 < 0.25 * cv0, "load CV %.3f -> %.3f: the bias does not balance", cv0, cv1);
    TU_CHECK(bias[0] < 0, "the dominant expert's bias should fall: %g", bias[0]);
    bg_arena_free(&g.arena);
    free(inp);
}

// ---- determinism: same bits for 1 and 3 threads, and run to run ------------------------

static void check_determinism(void) {
    enum { N = 64, C = 12, E = 6, k = 2 };
    printf("bias gate: determinism\n");
    tu_seed(5);
    float *inp = malloc(sizeof(float) * N * C), gate[E * C], bias[E], g[N * k];
    tu_fill_normal(inp, (size_t)N * C, 1.0);
    tu_fill_normal(gate, (size_t)E * C, 0.5);
    tu_fill_normal(bias, E, 0.1);
    tu_fill_normal(g, N * k, 1.0);
    float *ref_w = malloc(sizeof(float) * N * k), ref_dg[E * C];
    int *ref_idx = malloc(sizeof(int) * N * k);
    for (int run = 0; run < 3; run++) {
        bg_threads_set(run == 1 ? 3 : 1);
        gate_run r;
        gate_open(&r, N, C, E, k, 1, 1, 0.01f, 0.0f);
        gate_forward(&r, bias, inp, gate, N);
        float dg[E * C];
        memset(dg, 0, sizeof dg);
        moe_router_ctx ctx = {.state = bias};
        moe_router_bias.backward(g_kc, NULL, dg, &r.scr, g, inp, &r.c, &ctx, gate, &r.s, N);
        if (run == 0) {
            memcpy(ref_w, r.c.topk_w, sizeof(float) * N * k);
            memcpy(ref_idx, r.c.topk_idx, sizeof(int) * N * k);
            memcpy(ref_dg, dg, sizeof dg);
        } else {
            TU_CHECK(!memcmp(ref_idx, r.c.topk_idx, sizeof(int) * N * k) &&
                         !memcmp(ref_w, r.c.topk_w, sizeof(float) * N * k) && !memcmp(ref_dg, dg, sizeof dg),
                     "run %d (%d threads) differs", run, bg_threads_get());
        }
        bg_arena_free(&r.arena);
    }
    bg_threads_set(1);
    free(inp), free(ref_w), free(ref_idx);
}

// ---- config: sigmoid only with the bias gate ---------------------------------------

static void check_config(void) {
    printf("bias gate: config\n");
    const char *base = "{\"vocab_size\": 32, \"max_position_embeddings\": 16, \"hidden_size\": 16,"
                       " \"num_hidden_layers\": 1, \"num_attention_heads\": 2,"
                       " \"num_local_experts\": 4, \"num_experts_per_tok\": 2,"
                       " \"moe_intermediate_size\": 8, %s}";
    char json[512];
    model_config c;
    snprintf(json, sizeof json, base, "\"router_type\": \"bias\", \"router_score\": \"sigmoid\"");
    TU_CHECK(model_config_parse(&c, json, "cfg") == BG_OK, "bias + sigmoid rejected: %s", bg_last_error());
    snprintf(json, sizeof json, base, "\"router_type\": \"topk\", \"router_score\": \"sigmoid\"");
    TU_CHECK(model_config_parse(&c, json, "cfg") == BG_ERR &&
                 strstr(bg_last_error(), "router_score sigmoid applies to router_type bias only"),
             "topk + sigmoid: %s", bg_last_error());
}

int main(void) {
    g_kc = kernel_ctx_create(BG_FP32);
    bg_threads_set(1);
    check_crafted();
    uint64_t seed = 40;
    for (int sigmoid = 0; sigmoid <= 1; sigmoid++)
        for (int norm = 0; norm <= 1; norm++) {
            check_grad(7, 12, 5, 2, norm, sigmoid, 0.0, seed++);
            check_grad(7, 12, 5, 2, norm, sigmoid, 0.3, seed++);
        }
    check_grad(6, 12, 4, 1, 1, 1, 0.3, seed++);  // k = 1 normalized: weight 1, no gradient but z
    check_grad(5, 12, 4, 4, 0, 1, 0.0, seed++);  // k == E
    check_update_rule();
    check_balance(0);
    check_balance(1);
    check_determinism();
    check_config();
    kernel_ctx_free(g_kc);
    return tu_finish("moe/test_router_bias");
}
