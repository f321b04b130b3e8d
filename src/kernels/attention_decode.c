// Causal attention of one query against a key/value cache: generation's decode step.
// Written per head in attention_forward's order of operations so that its output is
// that kernel's row for the query's position up to float rounding.
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>

// Head h of the one query q (C) over keys/values (T,KV) at positions 0..t, of which it
// reads head kh: attention_forward's row for position t, in the same order of
// operations (scores, max-subtracted exp, normalize, weighted sum of values). out (C)
// writes the head's hs values; a (t+1) is workspace.
static void attend_head(float *out, float *a, const float *q, const float *kc, const float *vc, int t,
                        int KV, int hs, int h, int kh) {
    const float scale = 1.0f / sqrtf((float)hs);
    const float *qh = q + (size_t)h * hs;
    float maxv = -FLT_MAX;
    for (int t2 = 0; t2 <= t; t2++) {
        const float *k = kc + (size_t)t2 * KV + (size_t)kh * hs;
        float s = 0.0f;
        #pragma omp simd reduction(+ : s)
        for (int i = 0; i < hs; i++) s += qh[i] * k[i];
        a[t2] = s * scale;
        maxv = a[t2] > maxv ? a[t2] : maxv;
    }
    float sum = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        a[t2] = expf(a[t2] - maxv);
        sum += a[t2];
    }
    const float inv = 1.0f / sum;
    float *o = out + (size_t)h * hs;
    for (int i = 0; i < hs; i++) o[i] = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) {
        const float *v = vc + (size_t)t2 * KV + (size_t)kh * hs;
        const float p = a[t2] * inv;
        #pragma omp simd
        for (int i = 0; i < hs; i++) o[i] += p * v[i];
    }
}

// Heads are independent, so long contexts split them over threads. Short ones stay on
// this thread: a branch rather than an OpenMP `if` clause, because libgomp allocates a
// team for every serialized region.
void attention_decode_forward(float *out, float *scores, const float *q, const float *k_cache,
                              const float *v_cache, int t, int T_max, int C, int NH, int NKV) {
    const int hs = C / NH, G = NH / NKV, KV = NKV * hs;
    if ((size_t)(t + 1) * C < 16384) {
        for (int h = 0; h < NH; h++)
            attend_head(out, scores + (size_t)h * T_max, q, k_cache, v_cache, t, KV, hs, h, h / G);
        return;
    }
    #pragma omp parallel for schedule(static)
    for (int h = 0; h < NH; h++)
        attend_head(out, scores + (size_t)h * T_max, q, k_cache, v_cache, t, KV, hs, h, h / G);
}
