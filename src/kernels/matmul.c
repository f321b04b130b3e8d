// TEMPORARY naive matmul so other layers compile; replaced by the oneDNN version.
#include "kernels/kernels.h"

void matmul_forward(float *out, const float *inp, const float *weight, int M, int K, int N) {
    #pragma omp parallel for
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float s = 0;
            for (int k = 0; k < K; k++) s += inp[(size_t)m * K + k] * weight[(size_t)n * K + k];
            out[(size_t)m * N + n] = s;
        }
}

void matmul_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                     const float *weight, int M, int K, int N) {
    if (dinp) {
        #pragma omp parallel for
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++)
                    dinp[(size_t)m * K + k] += dout[(size_t)m * N + n] * weight[(size_t)n * K + k];
    }
    if (dweight) {
        #pragma omp parallel for
        for (int n = 0; n < N; n++)
            for (int m = 0; m < M; m++)
                for (int k = 0; k < K; k++)
                    dweight[(size_t)n * K + k] += dout[(size_t)m * N + n] * inp[(size_t)m * K + k];
    }
}

void matmul_cache_clear(void) {}
