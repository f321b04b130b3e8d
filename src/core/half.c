// Exact fp32 <-> IEEE fp16 conversions in integer arithmetic (core/half.h).
#include "core/half.h"

// Rounds m >> shift to nearest, ties to even (shift in 1..31).
static uint32_t shift_rne(uint32_t m, unsigned shift) {
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return q;
}

uint16_t bg_f32_to_f16(float x) {
    uint32_t u = bg_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u | (uint16_t)((a >> 13) & 0x3ffu);  // quiet NaN
    if (a >= 0x47800000u) return sign | 0x7c00u;  // >= 65536 (or inf): infinity
    if (a >= 0x38800000u) {
        // Normal half (>= 2^-14). Rebias the exponent (127 -> 15) and round the 13 dropped
        // mantissa bits; values in [65520, 65536) carry into exponent 31 = infinity, which
        // is the IEEE result (65520 is the tie between 65504 and 65536, and 65504 is odd).
        uint32_t r = shift_rne(a - ((127u - 15u) << 23), 13);
        return sign | (uint16_t)r;
    }
    // Subnormal half: value / 2^-24 rounded. With the implicit bit, a = m * 2^(e-150), so the
    // half mantissa is m * 2^(e-126). Below 2^-25 (e < 102) even the tie rounds to zero;
    // f32 subnormals (e == 0) are far below that. A round up to 0x400 is the smallest normal.
    uint32_t e = a >> 23;
    if (e < 102) return sign;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    return sign | (uint16_t)shift_rne(m, 126u - e);
}

float bg_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) return bg_f32_from_bits(sign | 0x7f800000u | (m << 13));  // inf / NaN (payload kept)
    if (e != 0) return bg_f32_from_bits(sign | ((e + 127u - 15u) << 23) | (m << 13));
    if (m == 0) return bg_f32_from_bits(sign);
    // Subnormal half: normalise into an f32 normal (every half subnormal is an f32 normal).
    e = 127u - 15u + 1u;
    while (!(m & 0x400u)) {
        m <<= 1;
        e--;
    }
    return bg_f32_from_bits(sign | (e << 23) | ((m & 0x3ffu) << 13));
}
