// Measuring this machine's compute rates for a cluster file (calibrate.h).
#include "plan/calibrate.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    double flops;
    int M, K, N;
} shape;

static int by_flops(const void *a, const void *b) {
    double x = ((const shape *)a)->flops, y = ((const shape *)b)->flops;
    return (x > y) - (x < y);
}

// Best of a few timed calls within the budget (the first call builds the primitive).
static double time_gemm(kernel_ctx *kc, const shape *s, float *a, float *w, float *o, double budget) {
    matmul_weights_changed(kc);
    matmul_forward(kc, o, a, w, s->M, s->K, s->N);
    double best = 1e30, t_end = bg_now() + budget;
    for (int r = 0; r < 20 && (r < 2 || bg_now() < t_end); r++) {
        double t0 = bg_now();
        matmul_forward(kc, o, a, w, s->M, s->K, s->N);
        double dt = bg_now() - t0;
        if (dt < best) best = dt;
    }
    return s->flops / best;
}

static void add_shape(shape *v, int *n, double M, double K, double N) {
    if (M < 1 || K < 1 || N < 1 || *n >= PLAN_GEMM_POINTS) return;
    if (M * K > 6e7 || K * N > 6e7 || M * N > 6e7) return;  // keep the buffers modest
    for (int i = 0; i < *n; i++)
        if (v[i].M == (int)M && v[i].K == (int)K && v[i].N == (int)N) return;
    v[(*n)++] = (shape){2 * M * K * N, (int)M, (int)K, (int)N};
}

int plan_calibrate_compute(plan_cluster *cl, const model_config *c, int B, int T, int threads,
                           double seconds) {
    bg_threads_set(threads);
    shape v[PLAN_GEMM_POINTS];
    int n = 0;
    if (c) {
        double N = (double)B * T, C = c->hidden_size;
        double in = c->hidden_act == FFN_SWIGLU ? 2 : 1;
        add_shape(v, &n, N, C, 3 * C);
        add_shape(v, &n, N, C, C);
        add_shape(v, &n, N, C, in * c->intermediate_size);
        add_shape(v, &n, N, c->intermediate_size, C);
        if (c->num_local_experts > 0) {
            double rows = N * c->num_experts_per_tok / c->num_local_experts;
            add_shape(v, &n, rows, C, in * c->moe_intermediate_size);
            add_shape(v, &n, rows, c->moe_intermediate_size, C);
            add_shape(v, &n, 2 * rows, C, in * c->moe_intermediate_size);
        }
        add_shape(v, &n, N, C, c->vocab_size);
    }
    // Squares, so the curve spans sizes the model's shapes do not reach.
    for (int s = 32; s <= 1024 && n < PLAN_GEMM_POINTS; s *= 2) add_shape(v, &n, s, s, s);
    qsort(v, n, sizeof *v, by_flops);
    // Remove near-equal sizes: the curve needs increasing flops.
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!m || v[i].flops > v[m - 1].flops * 1.05) v[m++] = v[i];
    n = m;
    size_t maxa = 0, maxw = 0, maxo = 0;
    for (int i = 0; i < n; i++) {
        size_t a = (size_t)v[i].M * v[i].K, w = (size_t)v[i].N * v[i].K, o = (size_t)v[i].M * v[i].N;
        if (a > maxa) maxa = a;
        if (w > maxw) maxw = w;
        if (o > maxo) maxo = o;
    }
    float *a = bg_aligned_alloc(maxa * 4), *w = bg_aligned_alloc(maxw * 4), *o = bg_aligned_alloc(maxo * 4);
    for (size_t i = 0; i < maxa; i++) a[i] = (float)(i % 17) * 0.01f;
    for (size_t i = 0; i < maxw; i++) w[i] = (float)(i % 13) * 0.01f;
    const bg_dtype dts[3] = {BG_FP32, BG_BF16, BG_FP16};
    const plan_dtype pd[3] = {PLAN_FP32, PLAN_BF16, PLAN_FP16};
    for (int d = 0; d < 3; d++) {
        kernel_ctx *kc = kernel_ctx_create(dts[d]);
        plan_gemm_curve *g = &cl->gemm[pd[d]];
        g->n = 0;
        double peak = 0;
        for (int i = 0; i < n; i++) {
            double r = time_gemm(kc, &v[i], a, w, o, seconds / (3.0 * n));
            g->flops[g->n] = v[i].flops, g->rate[g->n++] = r;
            if (r > peak) peak = r;
        }
        cl->peak[pd[d]] = peak;
        kernel_ctx_free(kc);
    }
    free(a), free(w), free(o);
    // Memory bandwidth: a copy plus scale over 2 x 64 MiB (read + write counted).
    size_t len = (size_t)16 << 20;
    float *x = bg_aligned_alloc(len * 4), *y = bg_aligned_alloc(len * 4);
    memset(x, 0, len * 4), memset(y, 0, len * 4);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = bg_now();
        #pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t i = 0; i < len; i++) y[i] = 1.0001f * x[i] + y[i];
        double dt = bg_now() - t0;
        if (dt < best) best = dt;
    }
    free(x), free(y);
    cl->mem_bw = 3.0 * len * 4 / best;
    cl->cores_per_rank = threads;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    cl->mem_per_node = pages > 0 && page > 0 ? (double)pages * page : 1e9;
    cl->gemm_efficiency = 0.7;
    cl->attention_efficiency = 0.5;
    return BG_OK;
}
