#ifndef BG_TEST_MOE_REF_H
#define BG_TEST_MOE_REF_H
// Double-precision reference of the MoE layer for the tests in tests/moe/: written
// straight from the definitions (no permutation, no GEMM library), so a test compares
// the float library against an independent, more precise computation, and checks
// gradients against centered finite differences of this reference.
#include "moe/moe_layer.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline double ref_gelu(double x) {
    const double c = 0.7978845608028654;  // sqrt(2/pi), GPT-2's tanh approximation
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}
static inline double ref_silu(double x) { return x / (1.0 + exp(-x)); }

// One FFN on M rows: inp (M,C), w_in (U,C), w_out (C,F) → out (M,C) (writes).
static inline void ref_ffn(double *out, const double *inp, const double *w_in,
                           const double *w_out, int M, int C, int F, ffn_act act) {
    int U = ffn_in_rows(act, F);
    double *h = malloc(sizeof(double) * (size_t)U), *a = malloc(sizeof(double) * (size_t)F);
    for (int m = 0; m < M; m++) {
        const double *x = inp + (size_t)m * C;
        for (int u = 0; u < U; u++) {
            double s = 0;
            for (int c = 0; c < C; c++) s += x[c] * w_in[(size_t)u * C + c];
            h[u] = s;
        }
        for (int f = 0; f < F; f++)
            a[f] = act == FFN_SWIGLU ? ref_silu(h[f]) * h[F + f] : ref_gelu(h[f]);
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int f = 0; f < F; f++) s += a[f] * w_out[(size_t)c * F + f];
            out[(size_t)m * C + c] = s;
        }
    }
    free(h);
    free(a);
}

// Top-k of one row by the definition: descending value, exact ties to the lower index.
static inline void ref_topk(int *idx, const double *l, int E, int k) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= idx[i] == e;
            if (!taken && (best < 0 || l[e] > l[best])) best = e;
        }
        idx[j] = best;
    }
}

// Smallest gap, over tokens, between the weakest chosen logit and the strongest
// unchosen one: finite differences are valid while perturbations stay below it.
static inline double ref_topk_margin(const double *logits, const int *idx, int N, int E,
                                     int k) {
    double margin = INFINITY;
    for (int t = 0; t < N; t++) {
        double lo = INFINITY, hi = -INFINITY;
        for (int e = 0; e < E; e++) {
            int chosen = 0;
            for (int j = 0; j < k; j++) chosen |= idx[(size_t)t * k + j] == e;
            double l = logits[(size_t)t * E + e];
            if (chosen) lo = l < lo ? l : lo;
            else hi = l > hi ? l : hi;
        }
        if (lo - hi < margin) margin = lo - hi;
    }
    return margin;
}

// Router on given logits (N,E): probs, lse, and topk_w for topk_idx. When choose, topk_idx
// is computed here; otherwise it is an input (held fixed for finite differences).
static inline void ref_router_from_logits(double *probs, double *lse, int *topk_idx,
                                          double *topk_w, const double *logits, int N, int E,
                                          int k, int norm, int choose) {
    for (int t = 0; t < N; t++) {
        const double *l = logits + (size_t)t * E;
        double mx = l[0], s = 0;
        for (int e = 1; e < E; e++) mx = fmax(mx, l[e]);
        for (int e = 0; e < E; e++) s += exp(l[e] - mx);
        lse[t] = mx + log(s);
        for (int e = 0; e < E; e++) probs[(size_t)t * E + e] = exp(l[e] - lse[t]);
        int *idx = topk_idx + (size_t)t * k;
        if (choose) ref_topk(idx, l, E, k);
        double sw = 0;
        for (int j = 0; j < k; j++) sw += probs[(size_t)t * E + idx[j]];
        for (int j = 0; j < k; j++)
            topk_w[(size_t)t * k + j] = probs[(size_t)t * E + idx[j]] / (norm ? sw : 1.0);
    }
}

static inline void ref_logits(double *logits, const double *inp, const double *gate, int N,
                              int C, int E) {
    for (int t = 0; t < N; t++)
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int c = 0; c < C; c++) s += inp[(size_t)t * C + c] * gate[(size_t)e * C + c];
            logits[(size_t)t * E + e] = s;
        }
}

// aux = E Σ_i f_i P_i with f_i from topk_idx, z = mean_t lse².
static inline void ref_balance(double *aux, double *z, const double *probs, const double *lse,
                               const int *topk_idx, int N, int E, int k) {
    *aux = 0;
    *z = 0;
    if (N == 0) return;
    for (int i = 0; i < E; i++) {
        int cnt = 0;
        for (int r = 0; r < N * k; r++) cnt += topk_idx[r] == i;
        double P = 0;
        for (int t = 0; t < N; t++) P += probs[(size_t)t * E + i];
        *aux += (double)cnt / ((double)N * k) * (P / N);
    }
    *aux *= E;
    for (int t = 0; t < N; t++) *z += lse[t] * lse[t];
    *z /= N;
}

typedef struct {
    double *gate, *w_in, *w_out, *shared_in, *shared_out;
} ref_params;

// Whole layer by its definition: out[t] = Σ_j w_tj · expert_{e_tj}(x_t) + Σ_s shared_s(x_t).
// topk_idx is chosen here when choose, else held fixed.
static inline void ref_moe_forward(double *out, double *aux, double *z, int *topk_idx,
                                   const double *inp, const ref_params *p, const moe_shape *s,
                                   int N, int choose) {
    int C = s->C, E = s->E, k = s->k, F = s->F, U = ffn_in_rows(s->act, F);
    double *logits = malloc(sizeof(double) * (size_t)(N * E + 1));
    double *probs = malloc(sizeof(double) * (size_t)(N * E + 1));
    double *lse = malloc(sizeof(double) * (size_t)(N + 1));
    double *w = malloc(sizeof(double) * (size_t)(N * k + 1));
    double *y = malloc(sizeof(double) * (size_t)C);
    ref_logits(logits, inp, p->gate, N, C, E);
    ref_router_from_logits(probs, lse, topk_idx, w, logits, N, E, k, s->norm_topk_prob, choose);
    ref_balance(aux, z, probs, lse, topk_idx, N, E, k);
    memset(out, 0, sizeof(double) * (size_t)N * C);
    for (int t = 0; t < N; t++) {
        const double *x = inp + (size_t)t * C;
        for (int i = 0; i < s->S; i++) {
            ref_ffn(y, x, p->shared_in + (size_t)i * U * C, p->shared_out + (size_t)i * C * F,
                    1, C, F, s->act);
            for (int c = 0; c < C; c++) out[(size_t)t * C + c] += y[c];
        }
        for (int j = 0; j < k; j++) {
            int e = topk_idx[(size_t)t * k + j];
            ref_ffn(y, x, p->w_in + (size_t)e * U * C, p->w_out + (size_t)e * C * F, 1, C, F,
                    s->act);
            for (int c = 0; c < C; c++) out[(size_t)t * C + c] += w[(size_t)t * k + j] * y[c];
        }
    }
    free(logits);
    free(probs);
    free(lse);
    free(w);
    free(y);
}

// Centered finite differences of f with respect to x[0..n): grad[i] = (f(x+eps e_i) -
// f(x-eps e_i)) / 2eps. x must be memory that f reads (through ctx).
typedef double (*ref_loss_fn)(void *ctx);
static inline void ref_fd_grad(double *grad, double *x, size_t n, double eps, ref_loss_fn f,
                               void *ctx) {
    for (size_t i = 0; i < n; i++) {
        double save = x[i];
        x[i] = save + eps;
        double lp = f(ctx);
        x[i] = save - eps;
        double lm = f(ctx);
        x[i] = save;
        grad[i] = (lp - lm) / (2 * eps);
    }
}

static inline double *ref_from_float(const float *x, size_t n) {
    double *d = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

// Checks got against want and, when MOE_TEST_VERBOSE is set, prints how close it came
// (the tolerances below were chosen with this at 10x or more above what was observed).
static inline int ref_expect(const char *what, const float *got, const double *want, size_t n,
                             double atol, double rtol) {
    if (getenv("MOE_TEST_VERBOSE"))
        printf("  %-40s worst error / tolerance = %.3g\n", what,
               tu_tol_ratio(got, want, n, atol, rtol));
    return tu_expect_close(what, got, want, n, atol, rtol);
}
#endif
