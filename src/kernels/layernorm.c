// LayerNorm: out = (inp - mean) * rstd * weight + bias over the last axis.
#include "kernels/kernels.h"

#include <math.h>

#include "kernels/channel_blocks.h"

// inp/out (N,C), mean/rstd (N), weight/bias (C)
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int N, int C, float eps) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float sum = 0.0f;
        #pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; c++) sum += x[c];
        const float m = sum / C;
        // Two passes: the variance of centred values does not cancel catastrophically
        // the way E[x²] - E[x]² does when |mean| >> std.
        float var = 0.0f;
        #pragma omp simd reduction(+ : var)
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        const float r = 1.0f / sqrtf(var / C + eps);
        if (bias) {
            #pragma omp simd
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * weight[c] + bias[c];
        } else {
            #pragma omp simd
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * weight[c];
        }
        mean[n] = m;
        rstd[n] = r;
    }
}

// dout (N,C); dinp (N,C), dweight/dbias (C) +=
void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int N, int C) {
    #pragma omp parallel
    {
        if (dinp) {
            // dx = rstd * (w·dy - mean(w·dy) - x̂ · mean(w·dy·x̂)), row by row.
            // nowait: the weight sums below read only inputs.
            #pragma omp for schedule(static) nowait
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
                float *dx = dinp + (size_t)n * C;
                const float m = mean[n], r = rstd[n];
                float sum_g = 0.0f, sum_gx = 0.0f;
                #pragma omp simd reduction(+ : sum_g, sum_gx)
                for (int c = 0; c < C; c++) {
                    const float g = weight[c] * dy[c];
                    sum_g += g;
                    sum_gx += g * (x[c] - m) * r;
                }
                const float mean_g = sum_g / C, mean_gx = sum_gx / C;
                #pragma omp simd
                for (int c = 0; c < C; c++) {
                    const float xhat = (x[c] - m) * r;
                    dx[c] += (weight[c] * dy[c] - mean_g - xhat * mean_gx) * r;
                }
            }
        }
        if (dweight || dbias) {
            // Sums over rows: threads own channel blocks (see channel_blocks.h).
            const int nblocks = channel_block_count(C);
            #pragma omp for schedule(static)
            for (int blk = 0; blk < nblocks; blk++) {
                const int c0 = blk * CHANNEL_BLOCK, c1 = channel_block_end(blk, C);
                float acc_w[CHANNEL_BLOCK] = {0}, acc_b[CHANNEL_BLOCK] = {0};
                for (int n = 0; n < N; n++) {
                    const float *x = inp + (size_t)n * C + c0, *dy = dout + (size_t)n * C + c0;
                    const float m = mean[n], r = rstd[n];
                    #pragma omp simd
                    for (int j = 0; j < c1 - c0; j++) {
                        acc_w[j] += dy[j] * (x[j] - m) * r;
                        acc_b[j] += dy[j];
                    }
                }
                for (int j = 0; j < c1 - c0; j++) {
                    if (dweight) dweight[c0 + j] += acc_w[j];
                    if (dbias) dbias[c0 + j] += acc_b[j];
                }
            }
        }
    }
}
