// Rounding GEMM operands to 16-bit floats for mixed precision (matmul.c, and the
// producers that write their outputs as operands), and the operand formats. Memory-bound streams, threaded
// above the size where starting the team pays (as elementwise.c), and not where
// bg_serial_here (inside the concurrent GEMMs' region, or with one thread).
#include "kernels/kernels.h"

#include "core/half.h"
#include "core/threads.h"

#define PRECISION_PARALLEL_MIN 32768

void cast_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
    if (n < PRECISION_PARALLEL_MIN || bg_serial_here()) {
        for (size_t i = 0; i < n; i++) out[i] = bg_f32_to_bf16(in[i]);
        return;
    }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = bg_f32_to_bf16(in[i]);
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
