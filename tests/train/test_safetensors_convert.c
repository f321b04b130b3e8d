// fp32 <-> bf16 / fp16 conversions of the safetensors module.
// Exact checks only (no tolerance): every conversion has one correct IEEE 754 answer
// under round-to-nearest-even, and the widening directions are exact.
#include "core/half.h"
#include "io/safetensors.h"
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

// Reference decode of a half from its definition, in double.
static double half_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static void test_bf16_exhaustive(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bg_bf16_to_f32((uint16_t)h);
        TU_CHECK(bg_f32_bits(f) == h << 16, "bf16 %04x widens to %08x", h, bg_f32_bits(f));
        uint16_t back = bg_f32_to_bf16(f);
        if (isnan(f)) {
            TU_CHECK(isnan(bg_bf16_to_f32(back)) && (back & 0x8000) == (h & 0x8000) && (back & 0x40),
                     "bf16 NaN %04x narrows to %04x (want quiet NaN, same sign)", h, back);
            continue;
        }
        TU_CHECK(back == h, "bf16 %04x round trip gives %04x", h, back);
        // Ties and their neighbours: bf16 is the top half of an f32, so the midpoint between
        // h and the next magnitude h+1 is the f32 with low half 0x8000.
        if ((h & 0x7fff) >= 0x7f80) continue;  // inf: no next value
        uint32_t mid = h << 16 | 0x8000u;
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        TU_CHECK(bg_f32_to_bf16(bg_f32_from_bits(mid)) == even, "bf16 tie above %04x: got %04x want %04x",
                 h, bg_f32_to_bf16(bg_f32_from_bits(mid)), even);
        TU_CHECK(bg_f32_to_bf16(bg_f32_from_bits(mid - 1)) == h, "bf16 just below tie above %04x", h);
        TU_CHECK(bg_f32_to_bf16(bg_f32_from_bits(mid + 1)) == (uint16_t)(h + 1),
                 "bf16 just above tie above %04x", h);
    }
}

static void test_f16_exhaustive(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bg_f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 31;
        if (e == 31) {
            if (h & 1023) {
                TU_CHECK(isnan(f), "f16 %04x should widen to NaN", h);
                uint16_t back = bg_f32_to_f16(f);
                TU_CHECK((back & 0x7e00) == 0x7e00 && (back & 0x8000) == (h & 0x8000),
                         "f16 NaN %04x narrows to %04x (want quiet NaN, same sign)", h, back);
            } else {
                TU_CHECK(isinf(f) && (f < 0) == ((h & 0x8000) != 0), "f16 %04x should be inf", h);
                TU_CHECK(bg_f32_to_f16(f) == h, "f16 inf round trip");
            }
            continue;
        }
        TU_CHECK((double)f == half_value((uint16_t)h) && !!signbit(f) == !!(h & 0x8000),
                 "f16 %04x widens to %.9g, want %.9g", h, f, half_value((uint16_t)h));
        TU_CHECK(bg_f32_to_f16(f) == h, "f16 %04x round trip gives %04x", h, bg_f32_to_f16(f));
        // Ties: halves have 11 significant bits, the midpoint needs 12 and every f32 holds it
        // exactly (subnormal midpoints are multiples of 2^-25, f32 normals there). For the
        // largest finite (0x7bff) the next value is the overflow threshold 65536 of IEEE.
        uint32_t mag = h & 0x7fff;
        double lo = half_value((uint16_t)mag), hi = mag == 0x7bff ? 65536.0 : half_value((uint16_t)(mag + 1));
        float mid = (float)((lo + hi) / 2);
        TU_CHECK((double)mid == (lo + hi) / 2, "f16 midpoint not exact in f32");
        float sgn = (h & 0x8000) ? -1.0f : 1.0f;
        uint16_t up = (uint16_t)(h + 1), even = (h & 1) ? up : (uint16_t)h;
        TU_CHECK(bg_f32_to_f16(sgn * mid) == even, "f16 tie above %04x: got %04x want %04x", h,
                 bg_f32_to_f16(sgn * mid), even);
        TU_CHECK(bg_f32_to_f16(sgn * nextafterf(mid, 0.0f)) == h, "f16 just below tie above %04x", h);
        TU_CHECK(bg_f32_to_f16(sgn * nextafterf(mid, INFINITY)) == up,
                 "f16 just above tie above %04x: got %04x", h, bg_f32_to_f16(sgn * nextafterf(mid, INFINITY)));
    }
}

static void test_special_values(void) {
    // Overflow follows IEEE: beyond the largest finite by half an ulp or more gives infinity.
    TU_CHECK(bg_f32_to_f16(65504.0f) == 0x7bff, "f16 max");
    TU_CHECK(bg_f32_to_f16(65519.996f) == 0x7bff, "f16 just below overflow tie");
    TU_CHECK(bg_f32_to_f16(65520.0f) == 0x7c00, "f16 overflow tie rounds to inf");
    TU_CHECK(bg_f32_to_f16(-1e6f) == 0xfc00, "f16 negative overflow");
    TU_CHECK(bg_f32_to_f16(FLT_MAX) == 0x7c00, "f16 FLT_MAX");
    TU_CHECK(bg_f32_to_bf16(FLT_MAX) == 0x7f80, "bf16 FLT_MAX rounds to inf");
    TU_CHECK(bg_f32_to_bf16(bg_f32_from_bits(0x7f7f7fff)) == 0x7f7f, "bf16 largest below overflow tie");
    TU_CHECK(bg_f32_to_f16(INFINITY) == 0x7c00 && bg_f32_to_f16(-INFINITY) == 0xfc00, "f16 inf");
    TU_CHECK(bg_f32_to_bf16(INFINITY) == 0x7f80 && bg_f32_to_bf16(-INFINITY) == 0xff80, "bf16 inf");
    // NaN never becomes infinity, even a signalling NaN whose payload is in the dropped bits.
    TU_CHECK(bg_f32_to_bf16(bg_f32_from_bits(0x7f800001)) == 0x7fc0, "bf16 sNaN with low payload");
    TU_CHECK(bg_f32_to_bf16(bg_f32_from_bits(0xffc00000)) == 0xffc0, "bf16 negative qNaN");
    TU_CHECK(bg_f32_to_f16(bg_f32_from_bits(0x7f800001)) == 0x7e00, "f16 sNaN with low payload");
    TU_CHECK(bg_f32_to_f16(bg_f32_from_bits(0xffc00000)) == 0xfe00, "f16 negative qNaN");
    // Signed zeros and underflow.
    TU_CHECK(bg_f32_to_f16(-0.0f) == 0x8000 && bg_f32_to_bf16(-0.0f) == 0x8000, "-0");
    TU_CHECK(bg_f32_to_f16(ldexpf(1, -24)) == 0x0001, "f16 smallest subnormal");
    TU_CHECK(bg_f32_to_f16(ldexpf(1, -25)) == 0x0000, "f16 2^-25 ties to even zero");
    TU_CHECK(bg_f32_to_f16(-ldexpf(1, -25)) == 0x8000, "f16 -2^-25 ties to -0");
    TU_CHECK(bg_f32_to_f16(nextafterf(ldexpf(1, -25), 1)) == 0x0001, "f16 above 2^-25");
    TU_CHECK(bg_f32_to_f16(ldexpf(3, -25)) == 0x0002, "f16 1.5 ulp ties to even 2");
    TU_CHECK(bg_f32_to_f16(bg_f32_from_bits(1)) == 0 && bg_f32_to_f16(-bg_f32_from_bits(1)) == 0x8000,
             "f16 of f32 subnormal");
    TU_CHECK(bg_f32_to_f16(nextafterf(ldexpf(1, -14), 0)) == 0x0400, "f16 rounds up into normal");
    TU_CHECK(bg_f32_to_bf16(bg_f32_from_bits(0x00010000)) == 0x0001, "bf16 keeps subnormals");
    TU_CHECK(bg_f32_to_bf16(bg_f32_from_bits(0x00008000)) == 0x0000, "bf16 subnormal tie to even");
    TU_CHECK(bg_f32_to_bf16(bg_f32_from_bits(0x00018000)) == 0x0002, "bf16 subnormal tie to even up");
    TU_CHECK(bg_f32_to_bf16(1.0f) == 0x3f80 && bg_f32_to_f16(1.0f) == 0x3c00, "one");
}

#ifdef __FLT16_MAX__
// The compiler's own float -> _Float16 conversion is an independent correctly rounded
// implementation; compare on random bit patterns (all exponents, NaNs included).
static void test_f16_against_compiler(void) {
    tu_seed(7);
    for (int i = 0; i < (1 << 24); i++) {
        uint32_t u = (uint32_t)(tu_uniform() * 4294967296.0);
        float f = bg_f32_from_bits(u);
        _Float16 c = (_Float16)f;
        uint16_t want;
        memcpy(&want, &c, 2);
        uint16_t got = bg_f32_to_f16(f);
        if (isnan(f)) TU_CHECK((got & 0x7c00) == 0x7c00 && (got & 0x3ff), "NaN %08x", u);
        else TU_CHECK(got == want, "f16(%08x): got %04x, compiler %04x", u, got, want);
        if (tu_failures > 20) return;
    }
}
#endif

int main(void) {
    test_bf16_exhaustive();
    test_f16_exhaustive();
    test_special_values();
#ifdef __FLT16_MAX__
    test_f16_against_compiler();
#else
    printf("test_safetensors_convert: no _Float16, compiler cross-check skipped\n");
#endif
    return tu_finish("test_safetensors_convert");
}
