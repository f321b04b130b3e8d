// Dispatch plan (stable permutation), permute and combine, forward and backward.
#include "moe/dispatch.h"
#include "moe_ref.h"
#include "test_util.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Permute is a copy (exact). Combine sums k ≤ 4 float products of O(1) values:
// error ~1e-7; atol 1e-6 / rtol 1e-5 is 10x above that, far below a wrong row (O(1)).
#define FWD_ATOL 1e-6
#define FWD_RTOL 1e-5
// The layer is linear in y_perm and topk_w, so centered FD of the double reference is
// exact up to ~1e-11; dtopk_w is a C-term dot product accumulated in double, dy_perm a
// single product: float rounding only, same tolerances.
#define BWD_ATOL 1e-6
#define BWD_RTOL 1e-5
#define FD_EPS 1e-3

// Random routing: k distinct experts per token, optionally never using expert `skip`.
static void random_topk(int *idx, int N, int E, int k, int skip) {
    for (int t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = (int)(tu_uniform() * E);
                dup = e == skip;
                for (int i = 0; i < j; i++) dup |= idx[t * k + i] == e;
            } while (dup);
            idx[t * k + j] = e;
        }
}

// The plan against its definition: rows of expert e are its (token, slot) pairs in
// increasing token order, experts in increasing order.
static void check_plan(const int *idx, int N, int E, int k, const char *what) {
    size_t NK = (size_t)N * k;
    int *counts = malloc(sizeof(int) * E), *offsets = malloc(sizeof(int) * (E + 1));
    int *row_of = malloc(sizeof(int) * (NK + 1)), *token_of = malloc(sizeof(int) * (NK + 1));
    for (int e = 0; e < E; e++) counts[e] = -5;  // dirty: the plan must write everything
    moe_dispatch_plan(counts, offsets, row_of, token_of, idx, N, E, k);
    int r = 0, ok = 1;
    for (int e = 0; e < E; e++) {
        ok &= offsets[e] == r;
        int c = 0;
        for (int t = 0; t < N; t++)
            for (int j = 0; j < k; j++)
                if (idx[t * k + j] == e) {
                    ok &= row_of[t * k + j] == r && token_of[r] == t;
                    r++;
                    c++;
                }
        ok &= counts[e] == c;
    }
    ok &= offsets[E] == (int)NK && r == (int)NK;
    TU_CHECK(ok, "%s: plan differs from the stable order by definition", what);
    // Stability, stated directly: token ids strictly increase inside every expert.
    for (int e = 0; e < E; e++)
        for (int q = offsets[e] + 1; q < offsets[e + 1]; q++)
            TU_CHECK(token_of[q - 1] < token_of[q], "%s: expert %d rows not in token order", what, e);
    // The same routing gives the same plan (no hidden state).
    int *row2 = malloc(sizeof(int) * (NK + 1)), *tok2 = malloc(sizeof(int) * (NK + 1));
    moe_dispatch_plan(counts, offsets, row2, tok2, idx, N, E, k);
    TU_CHECK(!memcmp(row_of, row2, sizeof(int) * NK) && !memcmp(token_of, tok2, sizeof(int) * NK),
             "%s: plan not repeatable", what);
    free(counts); free(offsets); free(row_of); free(token_of); free(row2); free(tok2);
}

typedef struct {
    double *y, *w, *g;
    const int *idx, *row_of;
    int N, k, C;
} combine_ctx;

// L = Σ_t g[t] · Σ_j w[t,j] y[row_of[t,j]] by the definition.
static double combine_loss(void *vctx) {
    combine_ctx *c = vctx;
    double L = 0;
    for (int t = 0; t < c->N; t++)
        for (int j = 0; j < c->k; j++)
            for (int q = 0; q < c->C; q++)
                L += c->g[(size_t)t * c->C + q] * c->w[t * c->k + j] *
                     c->y[(size_t)c->row_of[t * c->k + j] * c->C + q];
    return L;
}

static void check_data(int N, int E, int k, int C, uint64_t seed) {
    printf("dispatch data path N=%d E=%d k=%d C=%d\n", N, E, k, C);
    tu_seed(seed);
    size_t NK = (size_t)N * k, nx = (size_t)N * C, np = NK * C;
    int *idx = malloc(sizeof(int) * NK), *counts = malloc(sizeof(int) * E);
    int *offsets = malloc(sizeof(int) * (E + 1)), *row_of = malloc(sizeof(int) * NK);
    int *token_of = malloc(sizeof(int) * NK);
    random_topk(idx, N, E, k, E - 1);  // the last expert gets no tokens
    moe_dispatch_plan(counts, offsets, row_of, token_of, idx, N, E, k);
    TU_CHECK(counts[E - 1] == 0 && offsets[E - 1] == offsets[E], "empty expert has rows");

    float *inp = malloc(sizeof(float) * nx), *x_perm = malloc(sizeof(float) * np);
    tu_fill_normal(inp, nx, 1.0);
    moe_permute_forward(x_perm, inp, token_of, (int)NK, C);
    int exact = 1;
    for (int t = 0; t < N; t++)
        for (int j = 0; j < k; j++)
            exact &= !memcmp(x_perm + (size_t)row_of[t * k + j] * C, inp + (size_t)t * C,
                             sizeof(float) * C);
    TU_CHECK(exact, "permute: x_perm[row_of[t,j]] != inp[t]");

    // Permute backward: dinp[t] += Σ_j dx_perm[row_of[t,j]].
    float *dx = malloc(sizeof(float) * np), *dinp = malloc(sizeof(float) * nx);
    tu_fill_normal(dx, np, 1.0);
    tu_fill_normal(dinp, nx, 1.0);
    double *want = ref_from_float(dinp, nx);
    for (int t = 0; t < N; t++)
        for (int j = 0; j < k; j++)
            for (int q = 0; q < C; q++)
                want[(size_t)t * C + q] += dx[(size_t)row_of[t * k + j] * C + q];
    moe_permute_backward(dinp, dx, row_of, N, k, C);
    ref_expect("permute dinp", dinp, want, nx, BWD_ATOL, BWD_RTOL);

    // Combine forward (accumulates onto what out holds).
    float *y = malloc(sizeof(float) * np), *w = malloc(sizeof(float) * NK);
    float *out = malloc(sizeof(float) * nx), *g = malloc(sizeof(float) * nx);
    tu_fill_normal(y, np, 1.0);
    tu_fill_normal(w, NK, 1.0);
    tu_fill_normal(out, nx, 1.0);
    tu_fill_normal(g, nx, 1.0);
    double *want_out = ref_from_float(out, nx);
    for (int t = 0; t < N; t++)
        for (int j = 0; j < k; j++)
            for (int q = 0; q < C; q++)
                want_out[(size_t)t * C + q] +=
                    (double)w[t * k + j] * y[(size_t)row_of[t * k + j] * C + q];
    float *out_copy = malloc(sizeof(float) * nx);
    memcpy(out_copy, out, sizeof(float) * nx);
    moe_combine_forward(out, y, w, row_of, N, k, C);
    ref_expect("combine out", out, want_out, nx, FWD_ATOL, FWD_RTOL);

    // Combine backward against FD of L = Σ g · combine(y, w).
    float *dy = malloc(sizeof(float) * np), *dw = malloc(sizeof(float) * NK);
    for (size_t i = 0; i < np; i++) dy[i] = NAN;  // WRITES: garbage must be overwritten
    for (size_t i = 0; i < NK; i++) dw[i] = NAN;
    moe_combine_backward(dy, dw, g, y, w, row_of, N, k, C);
    combine_ctx c = {ref_from_float(y, np), ref_from_float(w, NK), ref_from_float(g, nx), idx,
                     row_of, N, k, C};
    double *fd = malloc(sizeof(double) * np);
    ref_fd_grad(fd, c.y, np, FD_EPS, combine_loss, &c);
    ref_expect("combine dy_perm", dy, fd, np, BWD_ATOL, BWD_RTOL);
    ref_fd_grad(fd, c.w, NK, FD_EPS, combine_loss, &c);
    ref_expect("combine dtopk_w", dw, fd, NK, BWD_ATOL, BWD_RTOL);
    // Bit for bit the double sum over c in order, whatever number of slots run together.
    int in_order = 1;
    for (size_t i = 0; i < NK; i++) {
        double dot = 0.0;
        if (row_of[i] >= 0)
            for (int q = 0; q < C; q++) dot += (double)g[(i / k) * C + q] * y[(size_t)row_of[i] * C + q];
        in_order &= dw[i] == (float)dot;
    }
    TU_CHECK(in_order, "combine dtopk_w is not the in-order double sum");

    // Thread-count independence, bit for bit: every output row has one writer.
    int saved = omp_get_max_threads();
    float *x1 = malloc(sizeof(float) * np), *o1 = malloc(sizeof(float) * nx);
    float *dy1 = malloc(sizeof(float) * np), *dw1 = malloc(sizeof(float) * NK);
    float *di1 = calloc(nx, sizeof(float)), *di4 = calloc(nx, sizeof(float));
    float *x4 = malloc(sizeof(float) * np), *o4 = malloc(sizeof(float) * nx);
    float *dy4 = malloc(sizeof(float) * np), *dw4 = malloc(sizeof(float) * NK);
    memcpy(o1, out_copy, sizeof(float) * nx);
    memcpy(o4, out_copy, sizeof(float) * nx);
    omp_set_num_threads(1);
    moe_permute_forward(x1, inp, token_of, (int)NK, C);
    moe_combine_forward(o1, y, w, row_of, N, k, C);
    moe_combine_backward(dy1, dw1, g, y, w, row_of, N, k, C);
    moe_permute_backward(di1, dx, row_of, N, k, C);
    omp_set_num_threads(4);
    moe_permute_forward(x4, inp, token_of, (int)NK, C);
    moe_combine_forward(o4, y, w, row_of, N, k, C);
    moe_combine_backward(dy4, dw4, g, y, w, row_of, N, k, C);
    moe_permute_backward(di4, dx, row_of, N, k, C);
    omp_set_num_threads(saved);
    TU_CHECK(!memcmp(x1, x4, sizeof(float) * np) && !memcmp(o1, o4, sizeof(float) * nx) &&
                 !memcmp(dy1, dy4, sizeof(float) * np) && !memcmp(dw1, dw4, sizeof(float) * NK) &&
                 !memcmp(di1, di4, sizeof(float) * nx),
             "results depend on the thread count");

    free(idx); free(counts); free(offsets); free(row_of); free(token_of); free(inp);
    free(x_perm); free(dx); free(dinp); free(want); free(y); free(w); free(out); free(g);
    free(want_out); free(out_copy); free(dy); free(dw); free(c.y); free(c.w); free(c.g); free(fd);
    free(x1); free(o1); free(dy1); free(dw1); free(di1); free(di4); free(x4); free(o4);
    free(dy4); free(dw4);
}

int main(void) {
    printf("dispatch plan\n");
    // Hand-made routing, N = 5, E = 4, k = 2; expert 3 unused.
    const int idx[] = {1, 0,  0, 2,  2, 1,  0, 1,  2, 0};
    const int want_token_of[] = {0, 1, 3, 4,  0, 2, 3,  1, 2, 4};
    const int want_row_of[] = {4, 0,  1, 7,  8, 5,  2, 6,  9, 3};
    int counts[4], offsets[5], row_of[10], token_of[10];
    moe_dispatch_plan(counts, offsets, row_of, token_of, idx, 5, 4, 2);
    TU_CHECK(counts[0] == 4 && counts[1] == 3 && counts[2] == 3 && counts[3] == 0, "counts");
    TU_CHECK(offsets[0] == 0 && offsets[1] == 4 && offsets[2] == 7 && offsets[3] == 10 &&
                 offsets[4] == 10, "offsets");
    TU_CHECK(!memcmp(token_of, want_token_of, sizeof token_of), "token_of");
    TU_CHECK(!memcmp(row_of, want_row_of, sizeof row_of), "row_of");
    check_plan(idx, 5, 4, 2, "hand-made");
    check_plan(idx, 0, 4, 2, "no tokens");

    tu_seed(3);
    for (int k = 1; k <= 4; k++) {
        int N = 1000, E = 16;
        int *r = malloc(sizeof(int) * N * k);
        random_topk(r, N, E, k, k == 2 ? 5 : -1);
        check_plan(r, N, E, k, "random");
        free(r);
    }
    check_data(7, 4, 1, 12, 21);
    check_data(7, 4, 2, 12, 22);
    check_data(9, 6, 3, 5, 23);
    check_data(257, 8, 2, 33, 24);
    check_data(5, 12, 10, 7, 25);  // more slots than run side by side
    return tu_finish("moe/test_dispatch");
}
