// bagualu's f32 GEMM on AVX2 with FMA (AMD Zen 3, Intel before AVX-512): the AVX-512
// kernel's blocking (gemm_f32_blocking.h) with a 6 x 16 micro-kernel in 12 ymm
// accumulators (two 8-float B vectors, one A broadcast feeding two FMAs). The A micro-
// panel (6 KiB) fits a 32 KiB L1d; the B block is wider than a 512 KiB L2 because
// repacking A for every block cost more than streaming B from L3 (BENCHMARKS.md).
// Each C element is the same FMA chain as in the AVX-512 kernel: the same bits.
#include "kernels/gemm_f32.h"
#include "kernels/avx2_transpose.h"
#include "kernels/gemm_f32_pack.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>

#include "core/error.h"

#define MR 6
#define NR 16
#define KC GEMM_F32_KC
#define MC (24 * MR)
#define NC (128 * NR)

// Prefetch distances: B in k steps, A's transposed packing in source rows.
#define PREFETCH_B 8
#define PACK_AHEAD 4

// SLACK: the packing's last full-width store runs 2 floats past an A block.
#define SLACK 32
#define A_FLOATS ((size_t)MC * KC + SLACK)
#define B_FLOATS ((size_t)KC * NC)

size_t gemm_f32_avx2_scratch_floats(void) { return A_FLOATS + B_FLOATS; }

int gemm_f32_avx2_supported(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (!((c >> 12) & 1) || !((c >> 27) & 1) || !((c >> 28) & 1)) return 0;  // FMA, OSXSAVE, AVX
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((b >> 5) & 1)) return 0;  // AVX2
    unsigned xcr0;
    __asm__("xgetbv" : "=a"(xcr0) : "c"(0) : "edx");
    return (xcr0 & 0x6u) == 0x6u;  // the OS saves the ymm state
}

#define TARGET __attribute__((target("avx2,fma")))

static inline int imin(int a, int b) { return a < b ? a : b; }

// Lanes below n set (n clamped to 0..8).
static TARGET inline __m256i mask_of(int n) {
    static const int32_t ones_then_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    n = n < 0 ? 0 : n > 8 ? 8 : n;
    return _mm256_loadu_si256((const __m256i *)(ones_then_zeros + 8 - n));
}

// ---- packing ----------------------------------------------------------------------

// n (<= 8) vectors, each contiguous at src + v*stride, transposed in blocks of 8 along
// the vectors: dst[k*dst_stride + v] = src[v*stride + k] for k < len, v < 8 (zero for
// v >= n). pf_rows: source vectors after the n to prefetch (the next panel's rows).
// Each dst row gets all 8 lanes (masked moves are slow on AMD): with dst_stride < 8 the
// lanes past it land on the next rows, which are written after (rows go in order), and
// past the last row on the next panel, packed after, or the scratch's slack (SLACK).
static TARGET void pack_transposed(float *dst, ptrdiff_t dst_stride, const float *src, ptrdiff_t stride,
                                   int n, int len, int pf_rows) {
    __m256 in[8], out[8];
    for (int k0 = 0; k0 < len; k0 += 8) {
        const int kn = imin(8, len - k0);
        if (kn == 8) {
            for (int v = 0; v < 8; v++) in[v] = v < n ? _mm256_loadu_ps(src + v * stride + k0) : _mm256_setzero_ps();
        } else {
            const __m256i m = mask_of(kn);
            for (int v = 0; v < 8; v++)
                in[v] = v < n ? _mm256_maskload_ps(src + v * stride + k0, m) : _mm256_setzero_ps();
        }
        for (int v = 0; v < pf_rows; v++) _mm_prefetch((const char *)(src + (n + v) * stride + k0), _MM_HINT_T0);
        avx2_transpose8(in, out);
        for (int k = 0; k < kn; k++) _mm256_storeu_ps(dst + (k0 + k) * dst_stride, out[k]);
    }
}

static TARGET void pack_a_panel(float *dst, const gemm_f32_args *g, int i0, int mr, int p0, int kc) {
    const float *a = g->a + i0 * g->a_rs + p0 * g->a_cs;
    if (g->a_cs == 1) pack_transposed(dst, MR, a, g->a_rs, mr, kc, MR);
    else gemm_f32_pack_strided(dst, MR, a, g->a_rs, g->a_cs, mr, kc);
}

// The MC x KC block of A, whose k-columns are contiguous, into its MR panels. A store's
// 2 lanes past MR land on the next k's floats, written after them; the last k's would
// land on the next panel, written before, so it is masked.
static TARGET void pack_a_columns(float *apack, const gemm_f32_args *g, int ic, int mc, int pc, int kc) {
    const float *a = g->a + ic + pc * g->a_cs;
    const __m256i last = mask_of(MR);
    for (int k = 0; k < kc; k++) {
        const float *ak = a + k * g->a_cs;
        if (k + PACK_AHEAD < kc)
            for (int i = 0; i < mc; i += 16)
                _mm_prefetch((const char *)(ak + PACK_AHEAD * g->a_cs + i), _MM_HINT_T0);
        for (int i = 0; i < mc; i += MR) {
            const __m256 v = mc - i >= 8 ? _mm256_loadu_ps(ak + i) : _mm256_maskload_ps(ak + i, mask_of(imin(MR, mc - i)));
            if (k + 1 < kc) _mm256_storeu_ps(apack + (size_t)i * kc + k * MR, v);
            else _mm256_maskstore_ps(apack + (size_t)i * kc + k * MR, last, v);
        }
    }
}

// A few-row product (an expert's rows) packs a weight straight from memory for little
// compute: each source line of the next panel is prefetched while this one is packed.
static TARGET void pack_b_panel(float *dst, const gemm_f32_args *g, int p0, int kc, int j0, int nr) {
    const float *b = g->b + p0 * g->b_rs + j0 * g->b_cs;
    const __m256i m0 = mask_of(nr), m1 = mask_of(nr - 8);
    if (g->b_cs == 1 && nr == NR) {
        for (int k = 0; k < kc; k++) {
            _mm_prefetch((const char *)(b + k * g->b_rs + NR), _MM_HINT_T0);
            _mm256_store_ps(dst + k * NR, _mm256_loadu_ps(b + k * g->b_rs));
            _mm256_store_ps(dst + k * NR + 8, _mm256_loadu_ps(b + k * g->b_rs + 8));
        }
    } else if (g->b_cs == 1) {
        for (int k = 0; k < kc; k++) {
            _mm256_store_ps(dst + k * NR, _mm256_maskload_ps(b + k * g->b_rs, m0));
            _mm256_store_ps(dst + k * NR + 8, _mm256_maskload_ps(b + k * g->b_rs + 8, m1));
        }
    } else if (g->b_rs == 1) {
        pack_transposed(dst, NR, b, g->b_cs, imin(nr, 8), kc, 8);
        pack_transposed(dst + 8, NR, b + 8 * g->b_cs, g->b_cs, nr - 8, kc, 8);
    } else {
        gemm_f32_pack_strided(dst, NR, b, g->b_cs, g->b_rs, nr, kc);
    }
}

// ---- micro-kernel -------------------------------------------------------------------

static TARGET void kernel_6x16(int kc, const float *restrict a, const float *restrict b, float *c,
                               ptrdiff_t ldc, int mr, int nr, int add) {
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define DECL(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();
    ROWS(DECL)
#undef DECL
    for (int i = 0; i < mr; i++) {
        __builtin_prefetch(c + (ptrdiff_t)i * ldc, 1, 3);
        __builtin_prefetch(c + (ptrdiff_t)i * ldc + 8, 1, 3);
    }
    #pragma GCC unroll 4
    for (int k = 0; k < kc; k++) {
        _mm_prefetch((const char *)(b + PREFETCH_B * NR), _MM_HINT_T0);
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#define STEP(i)                                       \
    {                                                 \
        const __m256 ai = _mm256_broadcast_ss(a + i); \
        c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0);   \
        c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1);   \
    }
        ROWS(STEP)
#undef STEP
        a += MR, b += NR;
    }
    // Masked moves are slow on AMD (microcoded stores): full tiles take plain ones.
    if (nr == NR) {
#define STORE(i)                                                                       \
    if (i < mr) {                                                                      \
        float *ci = c + (ptrdiff_t)(i) * ldc;                                          \
        if (add) {                                                                     \
            c##i##0 = _mm256_add_ps(_mm256_loadu_ps(ci), c##i##0);                     \
            c##i##1 = _mm256_add_ps(_mm256_loadu_ps(ci + 8), c##i##1);                 \
        }                                                                              \
        _mm256_storeu_ps(ci, c##i##0);                                                 \
        _mm256_storeu_ps(ci + 8, c##i##1);                                             \
    }
        ROWS(STORE)
#undef STORE
        return;
    }
    const __m256i m0 = mask_of(nr), m1 = mask_of(nr - 8);
#define STORE(i)                                                                       \
    if (i < mr) {                                                                      \
        float *ci = c + (ptrdiff_t)(i) * ldc;                                          \
        if (add) {                                                                     \
            c##i##0 = _mm256_add_ps(_mm256_maskload_ps(ci, m0), c##i##0);              \
            c##i##1 = _mm256_add_ps(_mm256_maskload_ps(ci + 8, m1), c##i##1);          \
        }                                                                              \
        _mm256_maskstore_ps(ci, m0, c##i##0);                                          \
        _mm256_maskstore_ps(ci + 8, m1, c##i##1);                                      \
    }
    ROWS(STORE)
#undef STORE
#undef ROWS
}

#define MICRO_KERNEL kernel_6x16
#include "kernels/gemm_f32_blocking.h"

GEMM_F32_ENTRY(gemm_f32_avx2)
