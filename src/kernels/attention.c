// Causal multi-head self-attention (llm.c style): the softmax probabilities are
// kept, (B,NH,T,T), so backward needs no recomputation.
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>

#include "core/error.h"
#include "kernels/vecmath.h"

static inline float dot(const float *restrict a, const float *restrict b, int n) {
    float s = 0.0f;
    #pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// qkv (B,T,C+2·KV) with KV = NKV·hs, out (B,T,C), att (B,NH,T,T)
void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                       int NKV) {
    BG_ASSERT(C % NH == 0 && NH % NKV == 0);
    const int hs = C / NH, G = NH / NKV;
    const size_t KV = (size_t)NKV * hs, C3 = (size_t)C + 2 * KV;
    const float scale = 1.0f / sqrtf((float)hs);
    // One (b,h,t) is one query row: it writes only its own att row and out slice.
    #pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
                const float *q = base + t * C3;
                // query head h reads key/value head h / G
                const float *kbase = qkv + (size_t)b * T * C3 + C + (size_t)(h / G) * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -FLT_MAX;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float s = dot(q, kbase + t2 * C3, hs) * scale;
                    a[t2] = s;
                    maxv = s > maxv ? s : maxv;
                }
                float sum = 0.0f;
                #pragma omp simd reduction(+ : sum)
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = bg_expf(a[t2] - maxv);
                    sum += a[t2];
                }
                const float inv = 1.0f / sum;
                #pragma omp simd
                for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;

                float *restrict o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                #pragma omp simd
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *restrict v = kbase + t2 * C3 + KV;
                    const float p = a[t2];
                    #pragma omp simd
                    for (int i = 0; i < hs; i++) o[i] += p * v[i];
                }
            }
}

// dout (B,T,C); dqkv (B,T,C+2·KV) +=; scratch (B,NH,T,T) receives dpreatt
void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                        const float *att, int B, int T, int C, int NH, int NKV) {
    BG_ASSERT(C % NH == 0 && NH % NKV == 0);
    const int hs = C / NH, G = NH / NKV;
    const size_t KV = (size_t)NKV * hs, C3 = (size_t)C + 2 * KV;
    const float scale = 1.0f / sqrtf((float)hs);
    // dk and dv of key t2 collect from every query t >= t2, so a loop over queries
    // would race on them. Two passes instead, each writing only its own rows:
    // queries first (dpreatt into scratch, and dq), then keys (dk, dv), reading
    // scratch and att down a column. A key/value head sums over its G query heads,
    // head by head. Every sum runs in a fixed order.
    #pragma omp parallel
    {
        #pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    const float *kbase = qkv + (size_t)b * T * C3 + C + (size_t)(h / G) * hs;
                    const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                    float *dpre = scratch + (((size_t)b * NH + h) * T + t) * T;
                    const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                    // datt[t2] = dy · v[t2]; softmax backward:
                    // dpreatt = att ⊙ (datt - Σ att·datt), with the 1/√hs folded in.
                    float s = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) {
                        dpre[t2] = dot(dy, kbase + t2 * C3 + KV, hs);
                        s += a[t2] * dpre[t2];
                    }
                    #pragma omp simd
                    for (int t2 = 0; t2 <= t; t2++) dpre[t2] = a[t2] * (dpre[t2] - s) * scale;
                    float *restrict dq = dqkv + ((size_t)b * T + t) * C3 + (size_t)h * hs;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float *restrict k = kbase + t2 * C3;
                        const float g = dpre[t2];
                        #pragma omp simd
                        for (int i = 0; i < hs; i++) dq[i] += g * k[i];
                    }
                }
        #pragma omp for collapse(3) schedule(static)
        for (int b = 0; b < B; b++)
            for (int kh = 0; kh < NKV; kh++)
                for (int t2 = 0; t2 < T; t2++) {
                    float *restrict dk = dqkv + ((size_t)b * T + t2) * C3 + C + (size_t)kh * hs;
                    float *restrict dv = dk + KV;
                    for (int h = kh * G; h < (kh + 1) * G; h++) {
                        const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
                        const size_t bh = ((size_t)b * NH + h) * T;
                        for (int t = t2; t < T; t++) {
                            const float g = scratch[(bh + t) * T + t2];
                            const float p = att[(bh + t) * T + t2];
                            const float *restrict q = base + t * C3;
                            const float *restrict dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                            #pragma omp simd
                            for (int i = 0; i < hs; i++) {
                                dk[i] += g * q[i];
                                dv[i] += p * dy[i];
                            }
                        }
                    }
                }
    }
}
