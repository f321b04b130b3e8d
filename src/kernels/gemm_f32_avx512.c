// bagualu's f32 GEMM on AVX-512, BLIS-style: B is packed in panels of NR columns (KC x
// NC at a time), A in panels of MR rows (MC x KC), each thread in its own scratch, and a
// register-blocked micro-kernel computes an MR x NR tile of C in 28 zmm accumulators
// (two 16-float B vectors, one A broadcast feeding two FMAs). The packing reads any
// strides, so transposed operands cost nothing more than plain ones and nothing is
// copied by the callers. Edge tiles use the same kernel on zero-padded panels with
// masked C accesses, so every element takes the same arithmetic path.
//
// Sizes (the loops: gemm_f32_blocking.h): an A micro-panel (MR x KC floats) stays in the
// 48 KiB L1d while the B panels of a KC x NC block (in the 2 MiB L2) stream past it.
#include "kernels/gemm_f32.h"
#include "kernels/gemm_f32_pack.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>

#include "core/error.h"

#define MR 14
#define NR 32
#define KC GEMM_F32_KC
#define MC (24 * MR)
#define NC (48 * NR)

// Software prefetch distances, in k steps (B: both cache lines of its 32 floats; far
// enough ahead that a tile's start, whose B panel is cold in L1, waits less).
#define PREFETCH_A 8
#define PREFETCH_B 16
// Packing A read transposed: source rows ahead (the prefetchers cannot track hundreds
// of rows pages apart, each read for a short run).
#define PACK_AHEAD 4

#define A_FLOATS ((size_t)MC * KC)
#define B_FLOATS ((size_t)KC * NC)

size_t gemm_f32_avx512_scratch_floats(void) { return A_FLOATS + B_FLOATS; }

int gemm_f32_avx512_supported(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!((b >> 16) & 1)) return 0;
    // The OS must save the zmm state too (XCR0: opmask, ZMM_Hi256, Hi16_ZMM, SSE, AVX).
    __get_cpuid(1, &a, &b, &c, &d);
    if (!((c >> 27) & 1)) return 0;
    unsigned xcr0;
    __asm__("xgetbv" : "=a"(xcr0) : "c"(0) : "edx");
    return (xcr0 & 0xe6u) == 0xe6u;
}

// Compiled through a portable AVX-512 on other CPUs, the kernel's functions take no
// vector target (tests/kernels/gemm_f32_avx512_simde.c defines TARGET empty).
#ifndef TARGET
#define TARGET __attribute__((target("avx512f")))
#endif

static inline int imin(int a, int b) { return a < b ? a : b; }

static TARGET inline __mmask16 mask_of(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

// ---- packing ----------------------------------------------------------------------

// out[c] = column c of the 16 x 16 block in[0..15] (rows): three rounds of shuffles.
static TARGET inline void transpose16(const __m512 in[16], __m512 out[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(in[i], in[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(in[i], in[i + 1]);
    }
    // u[4g+q], 128-bit lane L: column 4L+q of rows 4g..4g+3
    for (int g = 0; g < 16; g += 4) {
        const __m512d lo0 = _mm512_castps_pd(t[g]), lo1 = _mm512_castps_pd(t[g + 2]);
        const __m512d hi0 = _mm512_castps_pd(t[g + 1]), hi1 = _mm512_castps_pd(t[g + 3]);
        u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo0, lo1));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo0, lo1));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi0, hi1));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi0, hi1));
    }
    // A 4 x 4 transpose of 128-bit lanes for each q.
    for (int q = 0; q < 4; q++) {
        const __m512 x0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x44);
        const __m512 x1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xee);
        const __m512 x2 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x44);
        const __m512 x3 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xee);
        out[q] = _mm512_shuffle_f32x4(x0, x2, 0x88);
        out[4 + q] = _mm512_shuffle_f32x4(x0, x2, 0xdd);
        out[8 + q] = _mm512_shuffle_f32x4(x1, x3, 0x88);
        out[12 + q] = _mm512_shuffle_f32x4(x1, x3, 0xdd);
    }
}

// n (<= 16) vectors of 16 floats, each contiguous at src + v*stride, transposed in blocks
// of 16 along the vectors: dst[k*dst_stride + v] = src[v*stride + k] for k < len, v < 16
// (zero for v >= n); `store` masks what each dst row receives. pf_rows: prefetch that
// many source vectors after the n (the next panel's rows; prefetching past the end of
// the source is harmless).
static TARGET void pack_transposed(float *dst, ptrdiff_t dst_stride, __mmask16 store,
                                   const float *src, ptrdiff_t stride, int n, int len, int pf_rows) {
    __m512 in[16], out[16];
    for (int k0 = 0; k0 < len; k0 += 16) {
        const int kn = imin(16, len - k0);
        const __mmask16 m = mask_of(kn);
        for (int v = 0; v < 16; v++)
            in[v] = v < n ? _mm512_maskz_loadu_ps(m, src + v * stride + k0) : _mm512_setzero_ps();
        for (int v = 0; v < pf_rows; v++) _mm_prefetch((const char *)(src + (n + v) * stride + k0), _MM_HINT_T0);
        transpose16(in, out);
        for (int k = 0; k < kn; k++) _mm512_mask_storeu_ps(dst + (k0 + k) * dst_stride, store, out[k]);
    }
}

// A rows [i0, i0+mr) x k [p0, p0+kc) into one MR panel: for each k, MR floats (rows
// beyond mr zero). A with contiguous k-columns goes through pack_a_block.
static TARGET void pack_a_panel(float *dst, const gemm_f32_args *g, int i0, int mr, int p0, int kc) {
    const float *a = g->a + i0 * g->a_rs + p0 * g->a_cs;
    const __mmask16 store = mask_of(MR);
    if (g->a_cs == 1) pack_transposed(dst, MR, store, a, g->a_rs, mr, kc, MR);  // 16 x 16 blocks
    else gemm_f32_pack_strided(dst, MR, a, g->a_rs, g->a_cs, mr, kc);
}

// The MC x KC block of A, whose k-columns are contiguous, into its MR panels
// (gemm_f32_blocking.h's pack_a_block).
static TARGET void pack_a_columns(float *apack, const gemm_f32_args *g, int ic, int mc, int pc, int kc) {
    const __mmask16 store = mask_of(MR);
    const float *a = g->a + ic + pc * g->a_cs;
    for (int k = 0; k < kc; k++) {
        const float *ak = a + k * g->a_cs;
        if (k + PACK_AHEAD < kc)
            for (int i = 0; i < mc; i += 16)
                _mm_prefetch((const char *)(ak + PACK_AHEAD * g->a_cs + i), _MM_HINT_T0);
        for (int i = 0; i < mc; i += MR)
            _mm512_mask_storeu_ps(apack + (size_t)i * kc + k * MR, store,
                                  _mm512_maskz_loadu_ps(mask_of(mc - i), ak + i));
    }
}

// B k [p0, p0+kc) x columns [j0, j0+nr) into one NR panel: for each k, NR floats.
static TARGET void pack_b_panel(float *dst, const gemm_f32_args *g, int p0, int kc, int j0, int nr) {
    const float *b = g->b + p0 * g->b_rs + j0 * g->b_cs;
    const __mmask16 m0 = mask_of(nr), m1 = mask_of(nr - 16);
    if (g->b_cs == 1) {  // a k-row of the panel is contiguous
        for (int k = 0; k < kc; k++) {
            _mm512_store_ps(dst + k * NR, _mm512_maskz_loadu_ps(m0, b + k * g->b_rs));
            _mm512_store_ps(dst + k * NR + 16, _mm512_maskz_loadu_ps(m1, b + k * g->b_rs + 16));
        }
    } else if (g->b_rs == 1) {  // columns contiguous: transpose 16 x 16 blocks
        pack_transposed(dst, NR, 0xffff, b, g->b_cs, imin(nr, 16), kc, 0);
        pack_transposed(dst + 16, NR, 0xffff, b + 16 * g->b_cs, g->b_cs, nr - 16, kc, 0);
    } else {
        gemm_f32_pack_strided(dst, NR, b, g->b_cs, g->b_rs, nr, kc);
    }
}

// ---- micro-kernel -------------------------------------------------------------------

// C tile (mr x nr of MR x NR) = or += the kc-long products of one A and one B panel.
// Each accumulator lane is one C element's FMA chain over k in order.
static TARGET void kernel_14x32(int kc, const float *restrict a, const float *restrict b,
                                float *c, ptrdiff_t ldc, int mr, int nr, int add) {
#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define DECL(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
    ROWS(DECL)
#undef DECL
    // The C tile is read (or written) only after the loop, which hides the misses: the
    // rows of a wide C lie pages apart and are cold.
    for (int i = 0; i < mr; i++) {
        __builtin_prefetch(c + (ptrdiff_t)i * ldc, 1, 3);
        __builtin_prefetch(c + (ptrdiff_t)i * ldc + 16, 1, 3);
    }
    // Unrolled: the loop's own instructions compete with the FMAs' operand loads.
    #pragma GCC unroll 4
    for (int k = 0; k < kc; k++) {
        // B streams from L2; A is in L1 after the first tile of its panel.
        _mm_prefetch((const char *)(a + PREFETCH_A * MR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + PREFETCH_B * NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + PREFETCH_B * NR + 16), _MM_HINT_T0);
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#define STEP(i)                                       \
    {                                                 \
        const __m512 ai = _mm512_set1_ps(a[i]);       \
        c##i##0 = _mm512_fmadd_ps(ai, b0, c##i##0);   \
        c##i##1 = _mm512_fmadd_ps(ai, b1, c##i##1);   \
    }
        ROWS(STEP)
#undef STEP
        a += MR, b += NR;
    }
    const __mmask16 m0 = mask_of(nr), m1 = mask_of(nr - 16);
#define STORE(i)                                                                         \
    if (i < mr) {                                                                        \
        float *ci = c + (ptrdiff_t)(i) * ldc;                                            \
        if (add) {                                                                       \
            c##i##0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), c##i##0);             \
            c##i##1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + 16), c##i##1);        \
        }                                                                                \
        _mm512_mask_storeu_ps(ci, m0, c##i##0);                                          \
        _mm512_mask_storeu_ps(ci + 16, m1, c##i##1);                                     \
    }
    ROWS(STORE)
#undef STORE
#undef ROWS
}

#define MICRO_KERNEL kernel_14x32
#include "kernels/gemm_f32_blocking.h"

GEMM_F32_ENTRY(gemm_f32_avx512)
