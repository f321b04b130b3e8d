#ifndef BG_KERNELS_VEC16_H
#define BG_KERNELS_VEC16_H
// Sixteen-float vectors for hand-blocked micro-kernels (flash attention).
//
// Why not plain loops with `omp simd`: the project builds with -std=c11, under which
// GCC does not contract a*b+c into a fused multiply-add (-ffp-contract=off), and it
// keeps register-blocked accumulator arrays in memory. A micro-kernel that is FMA-
// bound needs both, so it names its vectors and its FMAs here. With AVX-512 these are
// single instructions, with AVX2 and FMA pairs of them (the same results); elsewhere a
// portable fallback in GCC vector extensions gives the same results up to the rounding
// of a*b+c done in two steps. V16_TILE_VECS: the v16 per row of a 4-row register tile
// (its 4·V16_TILE_VECS accumulators and V16_TILE_VECS operands must fit the registers:
// 32 zmm, 16 ymm). Internal to kernels/.
#include <stddef.h>

#if defined(__AVX512F__)
#include <immintrin.h>

typedef __m512 v16;
#define V16_TILE_VECS 4
static inline v16 v16_zero(void) { return _mm512_setzero_ps(); }
static inline v16 v16_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v16_store(float *p, v16 a) { _mm512_storeu_ps(p, a); }
static inline v16 v16_set1(float x) { return _mm512_set1_ps(x); }
static inline v16 v16_fma(v16 a, v16 b, v16 c) { return _mm512_fmadd_ps(a, b, c); }  // a·b + c
// Keeps a loaded vector in a register: without it GCC folds the load into every FMA
// that uses it, one 512-bit load per FMA, and the loop becomes load-bound.
// (Under the tests' emulated AVX-512, BG_AVX512_EMULATED, a v16 is no register.)
#ifdef BG_AVX512_EMULATED
#define v16_keep(a) ((void)0)
#else
#define v16_keep(a) __asm__("" : "+v"(a))
#endif

// dst[c·ldd + r] = src[r·lds + c] for a 16 × 16 block: in registers (unpack floats, then
// pairs, then 128-bit lanes twice), instead of 256 scalar moves whose strided side
// misses L1. Exact: data movement only.
static inline void v16_transpose16(float *dst, size_t ldd, const float *src, size_t lds) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
        t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
        r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
        r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xdd);
    }
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ldd, r[i]);
}

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include "kernels/avx2_transpose.h"

// AVX2 (AMD Zen 3, Intel before AVX-512): a pair of 8-float registers, with the same
// fused multiply-adds as AVX-512, so each element's sums round as there.
typedef struct {
    __m256 lo, hi;
} v16;
#define V16_TILE_VECS 1
static inline v16 v16_zero(void) { return (v16){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline v16 v16_load(const float *p) { return (v16){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
static inline void v16_store(float *p, v16 a) { _mm256_storeu_ps(p, a.lo), _mm256_storeu_ps(p + 8, a.hi); }
static inline v16 v16_set1(float x) { return (v16){_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
static inline v16 v16_fma(v16 a, v16 b, v16 c) {
    return (v16){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
#define v16_keep(a) __asm__("" : "+x"((a).lo), "+x"((a).hi))

// 8 × 8 in registers (avx2_transpose.h), four times.
static inline void v16_transpose8(float *dst, size_t ldd, const float *src, size_t lds) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
    avx2_transpose8(r, t);
    for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + i * ldd, t[i]);
}

static inline void v16_transpose16(float *dst, size_t ldd, const float *src, size_t lds) {
    for (size_t r = 0; r < 16; r += 8)
        for (size_t c = 0; c < 16; c += 8) v16_transpose8(dst + c * ldd + r, ldd, src + r * lds + c, lds);
}

#else

// Macros rather than functions: a function passing 64-byte vectors by value draws
// GCC's ABI note (-Wpsabi) when AVX-512 is off. The unaligned, may_alias type lets
// a plain dereference load and store at any float address, legally.
typedef float v16 __attribute__((vector_size(64)));
#define V16_TILE_VECS 4
typedef float v16_unaligned __attribute__((vector_size(64), aligned(4), may_alias));
#define v16_zero() ((v16){0})
#define v16_load(p) ((v16)(*(const v16_unaligned *)(p)))
#define v16_store(p, a) ((void)(*(v16_unaligned *)(p) = (a)))
#define v16_set1(x) ((v16){0} + (float)(x))
#define v16_fma(a, b, c) ((a) * (b) + (c))
#define v16_keep(a) ((void)0)

static inline void v16_transpose16(float *dst, size_t ldd, const float *src, size_t lds) {
    for (size_t r = 0; r < 16; r++)
        for (size_t c = 0; c < 16; c++) dst[c * ldd + r] = src[r * lds + c];
}

#endif

// dst[c·ldd + r] = src[r·lds + c] for r < rows, c < cols: 16 × 16 blocks in registers,
// the edges one by one (done one float at a time, the strided side misses L1).
static inline void v16_transpose_block(float *restrict dst, size_t ldd, const float *restrict src,
                                       size_t lds, int rows, int cols) {
    int r0 = 0;
    for (; r0 + 16 <= rows; r0 += 16) {
        int c0 = 0;
        for (; c0 + 16 <= cols; c0 += 16)
            v16_transpose16(dst + (size_t)c0 * ldd + r0, ldd, src + (size_t)r0 * lds + c0, lds);
        for (int r = r0; r < r0 + 16; r++)
            for (int c = c0; c < cols; c++) dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
    }
    for (int r = r0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * ldd + r] = src[(size_t)r * lds + c];
}

#endif
