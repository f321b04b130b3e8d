#ifndef BG_CORE_HALF_H
#define BG_CORE_HALF_H
// The 16-bit float formats: bf16 (fp32's exponent, 8 mantissa bits) and IEEE fp16
// (5 exponent bits, 11 mantissa bits, largest finite 65504). Conversions from fp32
// round to nearest even; out-of-range values become infinity; NaN stays NaN.
// Used by checkpoints (bf16/fp16 tensors) and by mixed-precision GEMMs, whose
// vector loops inline the bf16 pair.
#include <stdint.h>
#include <string.h>

// Bit casts through memcpy: the only aliasing-safe way in C.
static inline uint32_t bg_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static inline float bg_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static inline uint16_t bg_f32_to_bf16(float x) {
    uint32_t u = bg_f32_bits(x);
    // NaN: truncation could clear every mantissa bit and turn it into infinity, so keep the
    // sign and the top payload bits and force the quiet bit.
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    // Round to nearest even on the 16 dropped bits: adding 0x7fff rounds halfway cases down,
    // the extra lsb of the kept part turns them up exactly when that lsb is odd. A carry out
    // of the mantissa correctly bumps the exponent (and past the largest finite, gives inf).
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bg_bf16_to_f32(uint16_t h) { return bg_f32_from_bits((uint32_t)h << 16); }

// Exact bit-level fp16 conversions (subnormals included), independent of the CPU's
// half-precision instructions: the reference those are tested against.
uint16_t bg_f32_to_f16(float x);
float bg_f16_to_f32(uint16_t h);

// x rounded to fp16 and back: fp16's precision and range, held in fp32. The compiler's
// _Float16 becomes the CPU's conversion instructions (F16C / AVX-512), with IEEE
// rounding, overflow and subnormals; the integer reference where the type is missing.
static inline float bg_round_f16(float x) {
#ifdef __FLT16_MAX__
    return (float)(_Float16)x;
#else
    return bg_f16_to_f32(bg_f32_to_f16(x));
#endif
}
#endif
