#ifndef BG_KERNELS_VECMATH_H
#define BG_KERNELS_VECMATH_H
// exp and tanh that the compiler can vectorise. glibc's expf/tanhf are scalar
// calls unless built with -ffast-math and libmvec, and softmax, cross-entropy,
// GELU and SiLU spend most of their time in them. Plain arithmetic, so results
// are identical on every run (no library or CPU dispatch behind them).
// Internal to kernels/.
#include <math.h>
#include <stdint.h>

// Cephes' expf: x = n·ln2 + r with n rounded to nearest and |r| <= ln2/2, a
// degree-6 polynomial for e^r, and 2^n built in the exponent bits. Relative error
// below 1e-7 (measured 8e-8) over the clamped range. The clamp keeps 2^n a normal
// float: below -87 the result is e^-87 ≈ 1.6e-38 instead of a denormal or 0, above
// 88 it saturates at e^88 ≈ 1.7e38 instead of overflowing. NaN propagates.
static inline float bg_expf(float x) {
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    // Round to nearest by adding and removing 1.5·2^23 (floorf does not vectorise
    // without -fno-trapping-math); exact for |x·log2 e| < 2^22.
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;  // ln2 split in two (Cody-Waite) keeps r accurate
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    // Type punning through a union is defined in C11 and, unlike memcpy, leaves
    // the loop vectorisable for GCC 12.
    union { int32_t i; float f; } two_n = {.i = ((int32_t)n + 127) << 23};
    return p * two_n.f;
}

// tanh(u) = 1 - 2/(e^{2u}+1): limits ±1 for large |u| (the clamp in bg_expf keeps
// the division finite); absolute error below 2e-7 (relative error grows near 0,
// but GELU, 0.5·x·(1 + tanh), only needs the absolute one).
static inline float bg_tanhf(float u) { return 1.0f - 2.0f / (bg_expf(2.0f * u) + 1.0f); }

// Logistic sigmoid 1/(1+e^{-x}).
static inline float bg_sigmoidf(float x) { return 1.0f / (1.0f + bg_expf(-x)); }

#endif
