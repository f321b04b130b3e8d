#include "peak.h"

#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <time.h>

#include "core/error.h"
#include "core/timer.h"
#include "kernels/kernels.h"

#if defined(__AVX512F__)
#define PEAK_NAME "AVX-512 FMA"
#define VEC __m512
#define VLEN 16
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#define ADD _mm512_add_ps
#define STORE _mm512_storeu_ps
#elif defined(__AVX2__) && defined(__FMA__)
#define PEAK_NAME "AVX2 FMA"
#define VEC __m256
#define VLEN 8
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
#define ADD _mm256_add_ps
#define STORE _mm256_storeu_ps
#else
// A build for the baseline ISA (BG_NATIVE=OFF): GCC vector extensions, a·b + c in two
// instructions where the target has no FMA, still two flops a lane.
typedef float vec8 __attribute__((vector_size(32)));
#define PEAK_NAME "baseline vector mul+add"
#define VEC vec8
#define VLEN 8
#define SET1(x) ((vec8){0} + (float)(x))
#define FMA(a, b, c) ((a) * (b) + (c))
#define ADD(a, b) ((a) + (b))
#define STORE(p, v) __builtin_memcpy((p), &(v), sizeof(vec8))
#endif

const char *peak_fma_name(void) { return PEAK_NAME; }

// 12 independent accumulators: > latency (4) x FMA ports (2), with margin.
static double fma_block(long iters, float *sink) {
    VEC a = SET1(0.999999f), b = SET1(1e-7f);
    VEC c0 = SET1(0), c1 = SET1(1), c2 = SET1(2), c3 = SET1(3), c4 = SET1(4), c5 = SET1(5);
    VEC c6 = SET1(6), c7 = SET1(7), c8 = SET1(8), c9 = SET1(9), c10 = SET1(10), c11 = SET1(11);
    for (long i = 0; i < iters; i++) {
        c0 = FMA(c0, a, b); c1 = FMA(c1, a, b); c2 = FMA(c2, a, b); c3 = FMA(c3, a, b);
        c4 = FMA(c4, a, b); c5 = FMA(c5, a, b); c6 = FMA(c6, a, b); c7 = FMA(c7, a, b);
        c8 = FMA(c8, a, b); c9 = FMA(c9, a, b); c10 = FMA(c10, a, b); c11 = FMA(c11, a, b);
    }
    VEC s = ADD(ADD(ADD(c0, c1), ADD(c2, c3)), ADD(ADD(c4, c5), ADD(c6, c7)));
    s = ADD(s, ADD(ADD(c8, c9), ADD(c10, c11)));
    float out[VLEN];
    STORE(out, s);
    *sink += out[0];
    return 12.0 * VLEN * 2.0 * iters;  // flops
}

#if defined(__AVX512BF16__)
// bf16 pairs: each vdpbf16ps does 16 lanes x 2 products x (mul + add).
static double bf16_block(long iters, float *sink) {
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3400);
    __m512 c[12];
    for (int j = 0; j < 12; j++) c[j] = _mm512_set1_ps((float)j);
    for (long i = 0; i < iters; i++) {
        c[0] = _mm512_dpbf16_ps(c[0], a, b); c[1] = _mm512_dpbf16_ps(c[1], a, b);
        c[2] = _mm512_dpbf16_ps(c[2], a, b); c[3] = _mm512_dpbf16_ps(c[3], a, b);
        c[4] = _mm512_dpbf16_ps(c[4], a, b); c[5] = _mm512_dpbf16_ps(c[5], a, b);
        c[6] = _mm512_dpbf16_ps(c[6], a, b); c[7] = _mm512_dpbf16_ps(c[7], a, b);
        c[8] = _mm512_dpbf16_ps(c[8], a, b); c[9] = _mm512_dpbf16_ps(c[9], a, b);
        c[10] = _mm512_dpbf16_ps(c[10], a, b); c[11] = _mm512_dpbf16_ps(c[11], a, b);
    }
    __m512 s = c[0];
    for (int j = 1; j < 12; j++) s = _mm512_add_ps(s, c[j]);
    float out[16];
    _mm512_storeu_ps(out, s);
    *sink += out[0];
    return 12.0 * 16 * 4.0 * iters;
}
#endif

// Best of 3 timed rounds of `block` on every thread.
static double peak_of(double (*block)(long, float *), int threads, double seconds) {
    double best = 0;
    float sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        long iters = 1L << 22;
        double flops = 0, t0 = bg_now(), dt = 0;
        while (dt < seconds / 3) {
            #pragma omp parallel num_threads(threads) reduction(+ : flops)
            {
                float local = 0;
                flops += block(iters, &local);
                #pragma omp atomic
                sink += local;
            }
            dt = bg_now() - t0;
        }
        double g = flops / dt / 1e9;
        if (g > best) best = g;
    }
    if (sink == 12345.0f) abort();  // keep the result alive
    return best;
}

double peak_fma_gflops(int threads, double seconds) { return peak_of(fma_block, threads, seconds); }

double peak_bf16_gflops(int threads, double seconds) {
#if defined(__AVX512BF16__)
    return peak_of(bf16_block, threads, seconds);
#else
    (void)threads, (void)seconds;
    return 0;
#endif
}

double peak_gemm_gflops(int n, int reps, bg_dtype precision) {
    kernel_ctx *kc = kernel_ctx_create(precision);
    float *a = bg_aligned_alloc(sizeof(float) * n * n), *b = bg_aligned_alloc(sizeof(float) * n * n);
    float *c = bg_aligned_alloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) a[i] = b[i] = (float)(i % 13) * 0.01f;
    matmul_forward(kc, c, a, b, n, n, n);  // warm-up: primitive creation, page faults
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = bg_now();
        matmul_forward(kc, c, a, b, n, n, n);
        double dt = bg_now() - t0;
        if (dt < best) best = dt;
    }
    free(a), free(b), free(c);
    kernel_ctx_free(kc);
    return 2.0 * n * n * (double)n / best / 1e9;
}

// One thread, by its CPU time: on a shared machine the core's rate whatever else runs.
double peak_fma_gflops_cpu(double seconds) {
    double best = 0;
    float sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        double flops = 0, dt = 0, t0 = bg_thread_cpu_now();
        while (dt < seconds / 3) {
            flops += fma_block(1L << 22, &sink);
            dt = bg_thread_cpu_now() - t0;
        }
        if (flops / dt / 1e9 > best) best = flops / dt / 1e9;
    }
    if (sink == 12345.0f) abort();
    return best;
}
