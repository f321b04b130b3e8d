#ifndef BG_KERNELS_GEMM_F32_PACK_H
#define BG_KERNELS_GEMM_F32_PACK_H
// The own f32 GEMM's packing of an operand with neither stride 1, element by element,
// shared by its AVX-512 and AVX2 kernels (the layouts matmul.c passes all have a stride
// 1: this keeps gemm_f32.h's any-strides contract). Internal to kernels/.
#include <stddef.h>

// dst[k*width + i] = src[i*rs + k*cs] for i < n and k < kc; 0 for n <= i < width.
static inline void gemm_f32_pack_strided(float *dst, int width, const float *src, ptrdiff_t rs, ptrdiff_t cs,
                                         int n, int kc) {
    for (int k = 0; k < kc; k++)
        for (int i = 0; i < width; i++) dst[k * width + i] = i < n ? src[i * rs + k * cs] : 0.0f;
}
#endif
