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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The median of 5 samples, each a run of calls lasting at least `sample` seconds: a
// shared machine's preemptions land in the samples the way they land in a step,
// instead of being dodged by a best-of (the first call builds the primitive).
static double time_gemm(kernel_ctx *kc, const shape *s, float *a, float *w, float *o, double sample) {
    matmul_weights_changed(kc);
    matmul_forward(kc, o, a, w, s->M, s->K, s->N);
    double t[5];
    for (int r = 0; r < 5; r++) {
        double t0 = bg_now(), dt;
        long calls = 0;
        do {
            matmul_forward(kc, o, a, w, s->M, s->K, s->N);
            calls++;
        } while ((dt = bg_now() - t0) < sample);
        t[r] = dt / calls;
    }
    qsort(t, 5, sizeof(double), cmp_double);
    return s->flops / t[2];
}

static void add_shape(shape *v, int *n, double M, double K, double N) {
    if (M < 1 || K < 1 || N < 1 || *n >= 3 * PLAN_GEMM_POINTS) return;
    if (M * K > 6e7 || K * N > 6e7 || M * N > 6e7) return;  // keep the buffers modest
    for (int i = 0; i < *n; i++)
        if (v[i].M == (int)M && v[i].K == (int)K && v[i].N == (int)N) return;
    v[(*n)++] = (shape){2 * M * K * N, (int)M, (int)K, (int)N};
}

// The flash attention core forward + backward at the model's shape: FLOP/s counted
// as the planner counts them (7·N·T·C: forward 2, backward 5, causal halves).
static double time_attention(bg_dtype dt, int B, int T, int C, int NH, int NKV, double budget) {
    kernel_ctx *kc = kernel_ctx_create(dt);
    size_t n = (size_t)B * T * C, nqkv = (size_t)B * T * (C + 2 * (size_t)NKV * (C / NH));
    float *qkv = bg_aligned_alloc(nqkv * 4), *dqkv = bg_aligned_alloc(nqkv * 4);
    float *out = bg_aligned_alloc(n * 4), *dout = bg_aligned_alloc(n * 4);
    float *lse = bg_aligned_alloc((size_t)B * NH * T * 4);
    float *scratch = bg_aligned_alloc(flash_attention_scratch_size(B, T, C, NH, NKV) * 4 + 64);
    for (size_t i = 0; i < nqkv; i++) qkv[i] = (float)(i % 23) * 0.01f, dqkv[i] = 0;
    for (size_t i = 0; i < n; i++) dout[i] = (float)(i % 7) * 0.01f;
    double t[5];
    flash_attention_forward(kc, out, lse, scratch, qkv, B, T, C, NH, NKV);
    for (int r = 0; r < 5; r++) {  // samples as time_gemm's
        double t0 = bg_now(), dt;
        long calls = 0;
        do {
            flash_attention_forward(kc, out, lse, scratch, qkv, B, T, C, NH, NKV);
            flash_attention_backward(kc, dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV);
            calls++;
        } while ((dt = bg_now() - t0) < budget / 5);
        t[r] = dt / calls;
    }
    qsort(t, 5, sizeof(double), cmp_double);
    double best = t[2];
    free(qkv), free(dqkv), free(out), free(dout), free(lse), free(scratch);
    kernel_ctx_free(kc);
    return 7.0 * B * T * (double)T * C / best;
}

int plan_calibrate_compute(plan_cluster *cl, const model_config *c, int B, int T, int threads,
                           double seconds) {
    bg_threads_set(threads);
    shape v[3 * PLAN_GEMM_POINTS];
    int n = 0;
    if (c) {
        double N = (double)B * T, C = c->hidden_size;
        double in = c->hidden_act == FFN_SWIGLU ? 2 : 1;
        add_shape(v, &n, N, C, model_qkv_width(c));
        add_shape(v, &n, N, C, C);
        add_shape(v, &n, N, C, in * c->intermediate_size);
        add_shape(v, &n, N, c->intermediate_size, C);
        if (c->num_local_experts > 0) {
            double rows = N * c->num_experts_per_tok / c->num_local_experts;
            add_shape(v, &n, N, C, c->num_local_experts);
            for (int f = 1; f <= 4; f *= 2) {  // the experts at EP = 1, 2, 4
                add_shape(v, &n, f * rows, C, in * c->moe_intermediate_size);
                add_shape(v, &n, f * rows, c->moe_intermediate_size, C);
            }
        }
        add_shape(v, &n, N, C, c->vocab_size);
    }
    // A spread of each class, so the curves reach sizes the model's shapes do not.
    for (int s = 64; s <= 1024; s *= 2) add_shape(v, &n, s, s, s);
    for (int s = 128; s <= 2048; s *= 2) add_shape(v, &n, 16, s, s), add_shape(v, &n, 64, s, s);
    for (int s = 256; s <= 2048; s *= 2) add_shape(v, &n, s / 2, s, s);
    qsort(v, n, sizeof *v, by_flops);
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
        double peak = 0;
        for (int k = 0; k < PLAN_GEMM_CLASSES; k++) cl->gemm[pd[d]][k].n = 0;
        for (int i = 0; i < n; i++) {
            plan_gemm_curve *g = &cl->gemm[pd[d]][plan_gemm_class_of(v[i].M, v[i].K, v[i].N)];
            // A curve needs increasing flops: near-equal sizes keep the first.
            if (g->n == PLAN_GEMM_POINTS || (g->n && v[i].flops <= g->flops[g->n - 1] * 1.05)) continue;
            double r = time_gemm(kc, &v[i], a, w, o, 0.8 * seconds / (3.0 * 5 * n));
            g->flops[g->n] = v[i].flops, g->rate[g->n++] = r;
            if (r > peak) peak = r;
        }
        cl->peak[pd[d]] = peak;
        kernel_ctx_free(kc);
        if (c) cl->attention_rate[pd[d]] = time_attention(dts[d], B, T, c->hidden_size,
                                                          c->num_attention_heads, model_kv_heads(c),
                                                          0.1 * seconds / 3);  // 5 samples
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
