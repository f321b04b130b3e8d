#ifndef BG_KERNELS_AVX2_TRANSPOSE_H
#define BG_KERNELS_AVX2_TRANSPOSE_H
// The 8 x 8 float transpose in ymm registers, shared by the AVX2 GEMM's packing (built
// with a target attribute, whatever -march says) and vec16.h's AVX2 vectors. Internal
// to kernels/.
#include <immintrin.h>

// out[c] = column c of the 8 x 8 block in[0..7] (rows): unpack floats, then pairs, then
// 128-bit lanes. Data movement only: exact.
__attribute__((target("avx2"))) static inline void avx2_transpose8(const __m256 in[8], __m256 out[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(in[i], in[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(in[i], in[i + 1]);
    }
    for (int g = 0; g < 8; g += 4) {
        u[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
        u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xee);
        u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xee);
    }
    for (int q = 0; q < 4; q++) {
        out[q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x20);
        out[4 + q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x31);
    }
}
#endif
