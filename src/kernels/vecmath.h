#ifndef BG_KERNELS_VECMATH_H
#define BG_KERNELS_VECMATH_H
// exp and tanh that the compiler can vectorise. glibc's expf/tanhf are scalar
// calls unless built with -ffast-math and libmvec, and softmax, cross-entropy,
// GELU and SiLU spend most of their time in them. Plain arithmetic, so results
// are identical on every run of a build (no library or run-time CPU dispatch behind
// them; what the build targets, FMA, AVX2 or AVX-512, is chosen at compile time), and
// the vector form (vf_exp) gives bg_expf's bits. Internal to kernels/.
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "core/half.h"

// a·b + c, fused where the CPU has FMA (one rounding; in vectorised loops one
// instruction instead of two): -std=c11 builds with -ffp-contract=off, so GCC never
// fuses a·b + c by itself, and fmaf vectorises only when it is an instruction.
static inline float bg_fmaf(float a, float b, float c) {
#if defined(__FMA__)
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

// Cephes' expf: x = n·ln2 + r with n rounded to nearest and |r| <= ln2/2, a
// degree-6 polynomial for e^r, and 2^n built in the exponent bits. Relative error
// below 1e-7 over the clamped range (tests/kernels/test_vecmath). The clamp keeps 2^n
// a normal float: below -87 the result is e^-87 ≈ 1.6e-38 instead of a denormal or 0, above
// 88 it saturates at e^88 ≈ 1.7e38 instead of overflowing. NaN propagates. With FMA
// the polynomial takes half the instructions.
static inline float bg_expf(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    // Round to nearest by adding and removing 1.5·2^23 (floorf does not vectorise
    // without -fno-trapping-math); exact for |x·log2 e| < 2^22.
    float n = bg_fmaf(x, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
    float r = bg_fmaf(n, -0.693359375f, x);  // ln2 split in two (Cody-Waite) keeps r accurate
    r = bg_fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = bg_fmaf(p, r, 1.3981999507e-3f);
    p = bg_fmaf(p, r, 8.3334519073e-3f);
    p = bg_fmaf(p, r, 4.1665795894e-2f);
    p = bg_fmaf(p, r, 1.6666665459e-1f);
    p = bg_fmaf(p, r, 5.0000001201e-1f);
    p = bg_fmaf(p * r, r, r) + 1.0f;
    // Type punning through a union is defined in C11 and, unlike memcpy, leaves
    // the loop vectorisable for GCC 12. The shift is unsigned: for a NaN x the biased
    // exponent is garbage (the result is NaN anyway), and a signed shift of it undefined.
    union { uint32_t u; float f; } two_n = {.u = (uint32_t)((int32_t)n + 127) << 23};
    return p * two_n.f;
}

// vf: the widest float vector of the build (zmm with AVX-512, ymm with AVX2 and FMA), for
// loops written once for every width; VF_LANES is undefined elsewhere.
// The one-instruction operations of a width, W its intrinsics' prefix (_mm512, _mm256).
#define VF_OPERATIONS(W)                                                                \
    static inline vf vf_load(const float *p) { return W##_loadu_ps(p); }               \
    static inline void vf_store(float *p, vf a) { W##_storeu_ps(p, a); }               \
    static inline vf vf_set1(float x) { return W##_set1_ps(x); }                       \
    static inline vf vf_add(vf a, vf b) { return W##_add_ps(a, b); }                   \
    static inline vf vf_sub(vf a, vf b) { return W##_sub_ps(a, b); }                   \
    static inline vf vf_mul(vf a, vf b) { return W##_mul_ps(a, b); }                   \
    static inline vf vf_div(vf a, vf b) { return W##_div_ps(a, b); }                   \
    static inline vf vf_max(vf a, vf b) { return W##_max_ps(a, b); }                   \
    static inline vf vf_min(vf a, vf b) { return W##_min_ps(a, b); }                   \
    static inline vf vf_fma(vf a, vf b, vf c) { return W##_fmadd_ps(a, b, c); }  /* a·b + c */ \
    static inline vf vf_fnma(vf a, vf b, vf c) { return W##_fnmadd_ps(a, b, c); } /* c - a·b */

#if defined(__AVX512F__)
#include <immintrin.h>

typedef __m512 vf;
#define VF_LANES 16
VF_OPERATIONS(_mm512)
// p·2^n for integral n in the exponent's range: vscalefps, exact.
static inline vf vf_scale2(vf p, vf n) { return _mm512_scalef_ps(p, n); }
// 1 - 2/d for d >= 1: a 14-bit reciprocal and one Newton step, within 3e-7 of the
// division (vdivps had been GELU's bottleneck under perf); 1/d is 0 or 1 at the ends.
static inline vf vf_one_minus_two_over(vf d) {
    const vf one = vf_set1(1.0f), two = vf_set1(2.0f);
    vf y = _mm512_rcp14_ps(d);
    y = _mm512_mul_ps(y, _mm512_fnmadd_ps(d, y, two));  // y·(2 - d·y)
    return _mm512_fnmadd_ps(two, y, one);               // 1 - 2y
}
static inline float vf_sum(vf a) { return _mm512_reduce_add_ps(a); }
static inline float vf_hmax(vf a) { return _mm512_reduce_max_ps(a); }

#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

typedef __m256 vf;
#define VF_LANES 8
VF_OPERATIONS(_mm256)
// p·2^n for integral n: 2^n built in the exponent bits, as bg_expf does.
static inline vf vf_scale2(vf p, vf n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
// 1 - 2/d, divided as bg_tanhf does (an approximate reciprocal's error left tanh short
// of ±1 in the tails, so GELU's gradient short of 0).
static inline vf vf_one_minus_two_over(vf d) { return vf_sub(vf_set1(1.0f), vf_div(vf_set1(2.0f), d)); }
static inline float vf_sum(vf a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float vf_hmax(vf a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
#endif

#if defined(VF_LANES)
// bg_expf on every lane, bit for bit (the same clamp, rounding and polynomial; 2^n
// exact): 15 instructions with AVX-512, against about 24 for GCC's vectorisation of
// bg_expf, which builds the clamps from masked moves.
static inline vf vf_exp(vf x) {
    x = vf_max(vf_set1(-87.0f), x);  // a NaN x passes through both
    x = vf_min(vf_set1(88.0f), x);
    const vf magic = vf_set1(12582912.0f);
    const vf n = vf_sub(vf_fma(x, vf_set1(1.44269504088896341f), magic), magic);
    vf r = vf_fma(n, vf_set1(-0.693359375f), x);
    r = vf_fma(n, vf_set1(2.12194440e-4f), r);
    vf p = vf_set1(1.9875691500e-4f);
    p = vf_fma(p, r, vf_set1(1.3981999507e-3f));
    p = vf_fma(p, r, vf_set1(8.3334519073e-3f));
    p = vf_fma(p, r, vf_set1(4.1665795894e-2f));
    p = vf_fma(p, r, vf_set1(1.6666665459e-1f));
    p = vf_fma(p, r, vf_set1(5.0000001201e-1f));
    p = vf_add(vf_fma(vf_mul(p, r), r, r), vf_set1(1.0f));
    return vf_scale2(p, n);
}

// bg_tanhf, 1 - 2/(e^{2u}+1): bit for bit with AVX2, within 3e-7 with AVX-512.
static inline vf vf_tanh(vf u) { return vf_one_minus_two_over(vf_add(vf_exp(vf_add(u, u)), vf_set1(1.0f))); }

// bg_sigmoidf, bit for bit.
static inline vf vf_sigmoid(vf x) {
    const vf one = vf_set1(1.0f);
    return vf_div(one, vf_add(one, vf_exp(vf_sub(vf_set1(0.0f), x))));
}
#endif

// e[0 .. n) = exp(x - shift), returning Σ e in float (the order of the sum depends on
// the build, not on the data or the threads). The softmax and cross-entropy rows' core.
static inline float bg_exp_shifted_sum(float *e, const float *x, float shift, int n) {
    int i = 0;
    float sum = 0.0f;
#if defined(VF_LANES)
    const vf s = vf_set1(shift);
    vf acc = vf_set1(0.0f);
    for (; i + VF_LANES <= n; i += VF_LANES) {
        const vf v = vf_exp(vf_sub(vf_load(x + i), s));
        vf_store(e + i, v);
        acc = vf_add(acc, v);
    }
    sum = vf_sum(acc);
#endif
    #pragma omp simd reduction(+ : sum)
    for (int j = i; j < n; j++) {
        e[j] = bg_expf(x[j] - shift);
        sum += e[j];
    }
    return sum;
}

// o[0 .. n) = bf16(exp(x - shift)), returning Σ exp(x - shift) in float (the unrounded
// values), as bg_exp_shifted_sum followed by bg_f32_to_bf16, bit for bit. With
// AVX512-BF16 the rounding is one instruction per 16 values: vcvtneps2bf16 rounds to
// nearest even and turns a NaN into (bits >> 16) | 0x40 exactly as bg_f32_to_bf16 does
// (its definition in Intel's SDM; test_vecmath checks NaN lanes with a payload), and
// reads subnormals as zero, which bg_expf never returns. That replaces the ~9 integer
// operations of the portable rounding: in the cross-entropy, where the exponentials are
// the time, a quarter of the work.
static inline float bg_exp_shifted_sum_bf16(uint16_t *o, const float *x, float shift, int n) {
    int i = 0;
    float sum = 0.0f;
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
    const __m512 s = _mm512_set1_ps(shift);
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        const __m512 v = vf_exp(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
        acc = _mm512_add_ps(acc, v);
        _mm256_storeu_si256((__m256i *)(o + i), (__m256i)_mm512_cvtneps_pbh(v));
    }
    sum = _mm512_reduce_add_ps(acc);
#endif
    float e[16];
    while (i < n) {
        const int m = n - i < 16 ? n - i : 16;
        sum += bg_exp_shifted_sum(e, x + i, shift, m);
        for (int j = 0; j < m; j++) o[i + j] = bg_f32_to_bf16(e[j]);
        i += m;
    }
    return sum;
}

// max(x[0 .. n)), -FLT_MAX for n = 0 (a NaN may or may not win, as with fmaxf).
static inline float bg_max_f32(const float *x, int n) {
    int i = 0;
    float m = -FLT_MAX;
#if defined(VF_LANES)
    // Four accumulators: one would chain every load behind the previous max.
    vf m0 = vf_set1(m), m1 = m0, m2 = m0, m3 = m0;
    for (; i + 4 * VF_LANES <= n; i += 4 * VF_LANES) {
        m0 = vf_max(m0, vf_load(x + i));
        m1 = vf_max(m1, vf_load(x + i + VF_LANES));
        m2 = vf_max(m2, vf_load(x + i + 2 * VF_LANES));
        m3 = vf_max(m3, vf_load(x + i + 3 * VF_LANES));
    }
    m = vf_hmax(vf_max(vf_max(m0, m1), vf_max(m2, m3)));
#endif
    #pragma omp simd reduction(max : m)
    for (int j = i; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

// tanh(u) = 1 - 2/(e^{2u}+1): limits ±1 for large |u| (the clamp in bg_expf keeps
// the division finite); absolute error below 2e-7 (relative error grows near 0,
// but GELU, 0.5·x·(1 + tanh), only needs the absolute one).
static inline float bg_tanhf(float u) { return 1.0f - 2.0f / (bg_expf(2.0f * u) + 1.0f); }

// Logistic sigmoid 1/(1+e^{-x}).
static inline float bg_sigmoidf(float x) { return 1.0f / (1.0f + bg_expf(-x)); }

#endif
