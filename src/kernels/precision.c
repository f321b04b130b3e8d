// Rounding GEMM operands to 16-bit floats for mixed precision (matmul.c, and the
// producers that write their outputs as operands), and the operand formats. Memory-bound streams, threaded
// above the size where starting the team pays (as elementwise.c), and not where
// bg_serial_here (inside the concurrent GEMMs' region, or with one thread).
#include "kernels/kernels.h"

#include "core/half.h"
#include "core/threads.h"

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#define PRECISION_PARALLEL_MIN 32768

#if defined(__AVX512BF16__)
// vcvtneps2bf16 rounds to nearest even and quiets NaNs as bg_f32_to_bf16 does, but
// flushes subnormal inputs to zero where the reference rounds them: a vector holding
// one takes the reference, so the bits are the same on every CPU.
static void cast_range(uint16_t *out, const float *in, size_t n) {
    const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), exponent = _mm512_set1_epi32(0x7f800000);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(in + i);
        const __m512i u = _mm512_castps_si512(v);
        if (_mm512_test_epi32_mask(u, magnitude) & ~_mm512_test_epi32_mask(u, exponent)) {
            for (size_t j = i; j < i + 16; j++) out[j] = bg_f32_to_bf16(in[j]);
            continue;
        }
        _mm256_storeu_si256((__m256i *)(out + i), (__m256i)_mm512_cvtneps_pbh(v));
    }
    for (; i < n; i++) out[i] = bg_f32_to_bf16(in[i]);
}
#else
static void cast_range(uint16_t *out, const float *in, size_t n) {
    #pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = bg_f32_to_bf16(in[i]);
}
#endif

typedef struct {
    uint16_t *out;
    const float *in;
} cast_job;

static void cast_job_range(void *ctx, size_t i0, size_t i1) {
    const cast_job *j = ctx;
    cast_range(j->out + i0, j->in + i0, i1 - i0);
}

void cast_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
    if (n < PRECISION_PARALLEL_MIN) {
        cast_range(out, in, n);
        return;
    }
    bg_parallel_ranges(n, cast_job_range, &(cast_job){out, in});
}

void round_f32_to_f16(float *out, const float *in, size_t n) {
    if (n < PRECISION_PARALLEL_MIN || bg_serial_here()) {
        for (size_t i = 0; i < n; i++) out[i] = bg_round_f16(in[i]);
        return;
    }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = bg_round_f16(in[i]);
}

void round_f32_to_bf16(float *out, const float *in, size_t n) {
    if (n < PRECISION_PARALLEL_MIN || bg_serial_here()) {
        for (size_t i = 0; i < n; i++) out[i] = bg_bf16_to_f32(bg_f32_to_bf16(in[i]));
        return;
    }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = bg_bf16_to_f32(bg_f32_to_bf16(in[i]));
}

operand_format operand_format_of(bg_dtype precision, bf16_path path) {
    if (precision == BG_BF16) return path == BF16_PATH_FP32 ? OPERAND_BF16_IN_F32 : OPERAND_BF16;
    return precision == BG_FP16 ? OPERAND_F16_IN_F32 : OPERAND_F32;
}

size_t operand_format_bytes(operand_format f) {
    return f == OPERAND_BF16 ? sizeof(uint16_t) : sizeof(float);
}

void operand_store(void *out, size_t i0, const float *x, size_t n, operand_format p) {
    if (p == OPERAND_BF16) {
        uint16_t *o = (uint16_t *)out + i0;
        #pragma omp simd
        for (size_t i = 0; i < n; i++) o[i] = bg_f32_to_bf16(x[i]);
    } else if (p == OPERAND_F16_IN_F32) {
        float *o = (float *)out + i0;
        #pragma omp simd
        for (size_t i = 0; i < n; i++) o[i] = bg_round_f16(x[i]);
    } else if (p == OPERAND_BF16_IN_F32) {
        float *o = (float *)out + i0;
        #pragma omp simd
        for (size_t i = 0; i < n; i++) o[i] = bg_bf16_to_f32(bg_f32_to_bf16(x[i]));
    } else {
        float *o = (float *)out + i0;
        #pragma omp simd
        for (size_t i = 0; i < n; i++) o[i] = x[i];
    }
}
