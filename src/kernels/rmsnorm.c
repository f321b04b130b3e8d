// RMSNorm (Llama/Mixtral): out = inp * rstd * weight, rstd = 1/sqrt(mean(inp²) + eps).
#include "kernels/kernels.h"

#include <math.h>

#include "kernels/channel_blocks.h"

// inp/out (N,C), rstd (N), weight (C)
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                     int N, int C, float eps) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float ss = 0.0f;
        #pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        const float r = 1.0f / sqrtf(ss / C + eps);
        #pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] * r * weight[c];
        rstd[n] = r;
    }
}

// dout (N,C); dinp (N,C), dweight (C) +=
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                      const float *weight, const float *rstd, int N, int C) {
    #pragma omp parallel
    {
        if (dinp) {
            // dx = rstd·w·dy - x · rstd³ · mean(w·dy·x)
            // nowait: the weight sums below read only inputs.
            #pragma omp for schedule(static) nowait
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
                float *dx = dinp + (size_t)n * C;
                const float r = rstd[n];
                float sum_gx = 0.0f;
                #pragma omp simd reduction(+ : sum_gx)
                for (int c = 0; c < C; c++) sum_gx += weight[c] * dy[c] * x[c];
                const float k = r * r * r * sum_gx / C;
                #pragma omp simd
                for (int c = 0; c < C; c++) dx[c] += r * weight[c] * dy[c] - k * x[c];
            }
        }
        if (dweight) {
            // Sums over rows: threads own channel blocks (see channel_blocks.h).
            const int nblocks = channel_block_count(C);
            #pragma omp for schedule(static)
            for (int blk = 0; blk < nblocks; blk++) {
                const int c0 = blk * CHANNEL_BLOCK, c1 = channel_block_end(blk, C);
                float acc[CHANNEL_BLOCK] = {0};
                for (int n = 0; n < N; n++) {
                    const float *x = inp + (size_t)n * C + c0, *dy = dout + (size_t)n * C + c0;
                    const float r = rstd[n];
                    #pragma omp simd
                    for (int j = 0; j < c1 - c0; j++) acc[j] += dy[j] * x[j] * r;
                }
                for (int j = 0; j < c1 - c0; j++) dweight[c0 + j] += acc[j];
            }
        }
    }
}
