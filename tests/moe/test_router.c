// Router: softmax + top-k (ties, stability), balance losses, and the backward of the
// gate weights plus aux / z losses against finite differences of a double reference.
#include "kernels/kernels.h"
#include "moe/router.h"
#include "moe_ref.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Softmax in fp32 of O(1) logits: relative error a few 1e-7; the GEMM of C = 12 terms
// adds ~1e-6 absolute to logits, which moves probs by ~1e-6 relative. atol 1e-5 /
// rtol 1e-4 leave a 10x+ margin over that; a wrong formula is off by 1e-2 or more.
#define FWD_ATOL 1e-5
#define FWD_RTOL 1e-4
// Losses are O(1) doubles computed from float probs: same 1e-6-level error.
#define LOSS_TOL 1e-5
// Backward vs FD of the double reference (eps 1e-5, FD error < 1e-9): float rounding
// of softmax backward and one GEMM, ~1e-6 on O(1) gradients; same tolerances.
#define BWD_ATOL 1e-5
#define BWD_RTOL 1e-4
#define FD_EPS 1e-5
// A parameter moved by FD_EPS moves a logit by at most FD_EPS·max|x| ~ 1e-4; the top-k
// choice cannot flip while every token's margin stays well above that.
#define MIN_MARGIN 1e-3

static void check_crafted(void) {
    printf("router crafted logits (ties, order, overflow)\n");
    enum { E = 6 };
    // Each row with the expected top-3 (descending; exact ties → lower index).
    const float logits[][E] = {
        {1, 3, 3, 0, 3, -1},       // three-way tie at the top
        {0, 0, 0, 0, 0, 0},        // all equal
        {5, 4, 3, 2, 1, 0},        // descending
        {0, 1, 2, 3, 4, 5},        // ascending
        {2, -1, 2, 2, -1, 2},      // ties spread out
        {-1, 7, -1, -1, 7.5f, -1}, // tie below the top
        {1000, 999, -1000, 998, 0, 1000},  // would overflow exp() without the max shift
        {-1000, -1001, -1000, -999, -1002, -1003},  // would underflow to 0/0
    };
    const int want3[][3] = {{1, 2, 4}, {0, 1, 2}, {0, 1, 2}, {5, 4, 3},
                            {0, 2, 3}, {4, 1, 0}, {0, 5, 1}, {3, 0, 2}};
    const int N = (int)(sizeof(logits) / sizeof(logits[0]));
    float probs[8 * E], lse[8], w[8 * 3];
    int idx[8 * 3];
    double dl[8 * E], dp[8 * E], dlse[8], dw[8 * 3];
    int didx[8 * 3];
    for (int t = 0; t < N; t++)
        for (int e = 0; e < E; e++) dl[t * E + e] = logits[t][e];
    for (int k = 1; k <= 3; k++)
        for (int norm = 0; norm <= 1; norm++) {
            moe_router_softmax_topk(probs, lse, idx, w, &logits[0][0], N, E, k, norm);
            ref_router_from_logits(dp, dlse, didx, dw, dl, N, E, k, norm, 1);
            for (int t = 0; t < N; t++)
                for (int j = 0; j < k; j++)
                    TU_CHECK(idx[t * k + j] == want3[t][j] && didx[t * k + j] == want3[t][j],
                             "row %d k=%d slot %d: got expert %d (reference %d), want %d", t, k,
                             j, idx[t * k + j], didx[t * k + j], want3[t][j]);
            ref_expect("crafted probs", probs, dp, (size_t)N * E, FWD_ATOL, FWD_RTOL);
            // lse reaches 1000 here: relative tolerance only (float spacing at 1000 is 6e-5).
            ref_expect("crafted lse", lse, dlse, (size_t)N, 0, FWD_RTOL);
            ref_expect("crafted topk_w", w, dw, (size_t)N * k, FWD_ATOL, FWD_RTOL);
        }
    // All-equal logits: exact uniform probabilities, and with renormalization the k
    // weights are exactly 1/k (up to one rounding).
    moe_router_softmax_topk(probs, lse, idx, w, &logits[1][0], 1, E, 2, 1);
    TU_CHECK(fabsf(w[0] - 0.5f) < 1e-7f && fabsf(w[1] - 0.5f) < 1e-7f, "uniform k=2 weights %g %g",
             w[0], w[1]);

    // Balance losses at uniform probabilities: aux = Σ_i f_i = 1 whatever the choice,
    // z = log(E)² for zero logits.
    float zeros[4 * E] = {0};
    int counts[E] = {0};
    moe_router_softmax_topk(probs, lse, idx, w, zeros, 4, E, 2, 1);
    for (int r = 0; r < 4 * 2; r++) counts[idx[r]]++;
    TU_CHECK(counts[0] == 4 && counts[1] == 4, "ties must all go to experts 0 and 1");
    double aux, z;
    moe_router_balance_losses(&aux, &z, probs, lse, counts, 4, E, 2);
    TU_CHECK(fabs(aux - 1.0) < LOSS_TOL, "uniform aux %.9g want 1", aux);
    TU_CHECK(fabs(z - log(E) * log(E)) < LOSS_TOL, "uniform z %.9g want %.9g", z, log(E) * log(E));
    moe_router_balance_losses(&aux, &z, probs, lse, counts, 0, E, 2);
    TU_CHECK(aux == 0 && z == 0, "N == 0 losses must be 0");
}

typedef struct {
    double *inp, *gate, *g;
    int *idx;  // held fixed
    int N, C, E, k, norm;
    double aux_coef, z_coef;
    double *logits, *probs, *lse, *w;
} router_ctx;

// L = Σ g·topk_w + aux_coef·aux + z_coef·z with the chosen experts fixed.
static double router_loss(void *vctx) {
    router_ctx *c = vctx;
    ref_logits(c->logits, c->inp, c->gate, c->N, c->C, c->E);
    ref_router_from_logits(c->probs, c->lse, c->idx, c->w, c->logits, c->N, c->E, c->k, c->norm, 0);
    double aux, z, L = 0;
    ref_balance(&aux, &z, c->probs, c->lse, c->idx, c->N, c->E, c->k);
    for (int i = 0; i < c->N * c->k; i++) L += c->g[i] * c->w[i];
    return L + c->aux_coef * aux + c->z_coef * z;
}

static kernel_ctx *g_kc;  // fp32 GEMMs

static void check_random(int N, int C, int E, int k, int norm, double aux_coef, double z_coef,
                         uint64_t seed) {
    printf("router N=%d C=%d E=%d k=%d norm=%d aux_coef=%g z_coef=%g\n", N, C, E, k, norm,
           aux_coef, z_coef);
    size_t nx = (size_t)N * C, ng = (size_t)E * C, nl = (size_t)N * E, nk = (size_t)N * k;
    tu_seed(seed);
    float *inp = malloc(sizeof(float) * nx), *gate = malloc(sizeof(float) * ng);
    float *g = malloc(sizeof(float) * nk);
    tu_fill_normal(inp, nx, 1.0);
    tu_fill_normal(gate, ng, 0.5);
    tu_fill_normal(g, nk, 1.0);
    float *logits = malloc(sizeof(float) * nl), *probs = malloc(sizeof(float) * nl);
    float *lse = malloc(sizeof(float) * N), *w = malloc(sizeof(float) * nk);
    int *idx = malloc(sizeof(int) * nk), *counts = calloc((size_t)E, sizeof(int));
    moe_router_forward(g_kc, logits, probs, lse, idx, w, inp, gate, N, C, E, k, norm);
    for (size_t r = 0; r < nk; r++) counts[idx[r]]++;

    router_ctx c = {ref_from_float(inp, nx), ref_from_float(gate, ng), ref_from_float(g, nk),
                    malloc(sizeof(int) * nk), N, C, E, k, norm, aux_coef, z_coef,
                    malloc(sizeof(double) * nl), malloc(sizeof(double) * nl),
                    malloc(sizeof(double) * N), malloc(sizeof(double) * nk)};
    ref_logits(c.logits, c.inp, c.gate, N, C, E);
    ref_router_from_logits(c.probs, c.lse, c.idx, c.w, c.logits, N, E, k, norm, 1);
    double margin = ref_topk_margin(c.logits, c.idx, N, E, k);
    TU_CHECK(margin > MIN_MARGIN, "test set-up: top-k margin %g too small for FD", margin);
    TU_CHECK(!memcmp(idx, c.idx, sizeof(int) * nk), "top-k choice differs from the reference");
    ref_expect("router logits", logits, c.logits, nl, FWD_ATOL, FWD_RTOL);
    ref_expect("router probs", probs, c.probs, nl, FWD_ATOL, FWD_RTOL);
    ref_expect("router lse", lse, c.lse, (size_t)N, FWD_ATOL, FWD_RTOL);
    ref_expect("router topk_w", w, c.w, nk, FWD_ATOL, FWD_RTOL);
    if (norm)
        for (int t = 0; t < N; t++) {
            double s = 0;
            for (int j = 0; j < k; j++) s += w[t * k + j];
            TU_CHECK(fabs(s - 1) < 1e-6, "token %d: normalized weights sum to %.9g", t, s);
        }
    double aux, z, raux, rz;
    moe_router_balance_losses(&aux, &z, probs, lse, counts, N, E, k);
    ref_balance(&raux, &rz, c.probs, c.lse, c.idx, N, E, k);
    TU_CHECK(fabs(aux - raux) <= LOSS_TOL * (1 + fabs(raux)), "aux %.9g want %.9g", aux, raux);
    TU_CHECK(fabs(z - rz) <= LOSS_TOL * (1 + fabs(rz)), "z %.9g want %.9g", z, rz);

    float *dinp = malloc(sizeof(float) * nx), *dgate = malloc(sizeof(float) * ng);
    tu_fill_normal(dinp, nx, 1.0);  // backward must accumulate
    tu_fill_normal(dgate, ng, 1.0);
    double *want_inp = ref_from_float(dinp, nx), *want_gate = ref_from_float(dgate, ng);
    float *dlogits = malloc(sizeof(float) * nl), *dprobs = malloc(sizeof(float) * nl);
    for (size_t i = 0; i < nl; i++) dlogits[i] = dprobs[i] = NAN;  // dirty workspace
    moe_router_backward(g_kc, dinp, dgate, dlogits, dprobs, g, inp, gate, probs, lse, idx, w,
                        counts, N, C, E, k, norm, (float)aux_coef, (float)z_coef);
    double *fd = malloc(sizeof(double) * (nx > ng ? nx : ng));
    ref_fd_grad(fd, c.inp, nx, FD_EPS, router_loss, &c);
    for (size_t i = 0; i < nx; i++) want_inp[i] += fd[i];
    ref_fd_grad(fd, c.gate, ng, FD_EPS, router_loss, &c);
    for (size_t i = 0; i < ng; i++) want_gate[i] += fd[i];
    ref_expect("router dinp", dinp, want_inp, nx, BWD_ATOL, BWD_RTOL);
    ref_expect("router dgate", dgate, want_gate, ng, BWD_ATOL, BWD_RTOL);

    // dinp == NULL skips the input gradient and leaves dgate the same, bit for bit.
    float *dgate2 = calloc(ng, sizeof(float)), *dgate3 = calloc(ng, sizeof(float));
    float *dinp3 = calloc(nx, sizeof(float));
    moe_router_backward(g_kc, NULL, dgate2, dlogits, dprobs, g, inp, gate, probs, lse, idx, w,
                        counts, N, C, E, k, norm, (float)aux_coef, (float)z_coef);
    moe_router_backward(g_kc, dinp3, dgate3, dlogits, dprobs, g, inp, gate, probs, lse, idx, w,
                        counts, N, C, E, k, norm, (float)aux_coef, (float)z_coef);
    TU_CHECK(!memcmp(dgate2, dgate3, sizeof(float) * ng), "dgate depends on dinp being NULL");

    free(inp); free(gate); free(g); free(logits); free(probs); free(lse); free(w); free(idx);
    free(counts); free(c.inp); free(c.gate); free(c.g); free(c.idx); free(c.logits);
    free(c.probs); free(c.lse); free(c.w); free(dinp); free(dgate); free(want_inp);
    free(want_gate); free(dlogits); free(dprobs); free(fd); free(dgate2); free(dgate3); free(dinp3);
}

int main(void) {
    g_kc = kernel_ctx_create(BG_FP32);
    check_crafted();
    uint64_t seed = 10;
    for (int k = 1; k <= 2; k++)
        for (int norm = 0; norm <= 1; norm++) {
            check_random(7, 12, 5, k, norm, 0.0, 0.0, seed++);   // gate weights only
            check_random(7, 12, 5, k, norm, 0.7, 0.0, seed++);   // + aux loss
            check_random(7, 12, 5, k, norm, 0.0, 0.3, seed++);   // + z-loss
            check_random(7, 12, 5, k, norm, 0.7, 0.3, seed++);   // all together
        }
    check_random(7, 12, 5, 5, 1, 0.7, 0.3, seed++);  // k == E: renormalization is identity
    check_random(16, 12, 8, 3, 0, 0.01, 0.001, seed++);
    kernel_ctx_free(g_kc);
    return tu_finish("moe/test_router");
}
