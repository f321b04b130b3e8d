// Rounding GEMM operands to 16-bit floats for mixed precision (matmul.c). Memory-bound
// streams, threaded above the size where starting the team pays (as elementwise.c).
#include "kernels/kernels.h"

#include "core/half.h"

#define PRECISION_PARALLEL_MIN 32768

void cast_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
    if (n < PRECISION_PARALLEL_MIN) {
        for (size_t i = 0; i < n; i++) out[i] = bg_f32_to_bf16(in[i]);
        return;
    }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = bg_f32_to_bf16(in[i]);
}

void round_f32_to_f16(float *out, const float *in, size_t n) {
    if (n < PRECISION_PARALLEL_MIN) {
        for (size_t i = 0; i < n; i++) out[i] = bg_round_f16(in[i]);
        return;
    }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = bg_round_f16(in[i]);
}
