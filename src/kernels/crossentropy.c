// Softmax cross-entropy over the vocabulary, fused so probabilities never need
// their own (N,V) buffer.
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>

#include "core/error.h"
#include "kernels/vecmath.h"

enum { XENT_CHUNK = 1024 };

// logits (N,V), targets (N); losses (N) and lse (N) write
void crossentropy_forward(float *losses, float *lse, const float *logits, const int *targets,
                          int N, int V) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        BG_ASSERT(targets[n] >= 0 && targets[n] < V);
        float maxv = -FLT_MAX;
        #pragma omp simd reduction(max : maxv)
        for (int v = 0; v < V; v++) maxv = x[v] > maxv ? x[v] : maxv;
        // Subtracting the max keeps exp in range. The sum runs in float vector
        // lanes over chunks (64 terms a lane: relative error ≤ 64·2^-24 ≈ 4e-6 of
        // positive terms) and adds the chunks in double, so ~50k terms lose no more
        // than one chunk does. (A double accumulator directly defeats vectorisation.)
        double sum = 0.0;
        for (int v0 = 0; v0 < V; v0 += XENT_CHUNK) {
            const int v1 = v0 + XENT_CHUNK < V ? v0 + XENT_CHUNK : V;
            float part = 0.0f;
            #pragma omp simd reduction(+ : part)
            for (int v = v0; v < v1; v++) part += bg_expf(x[v] - maxv);
            sum += part;
        }
        const float l = maxv + (float)log(sum);
        lse[n] = l;
        losses[n] = l - x[targets[n]];
    }
}

// dlogits (N,V) WRITES scale·(softmax - onehot); dlogits may be logits
void crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                           const int *targets, float scale, int N, int V) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        const float l = lse[n];
        const int target = targets[n];
        BG_ASSERT(target >= 0 && target < V);
        // Each element is read before it is written at the same index, so running
        // in place is safe; `omp simd` says so to the compiler, which would
        // otherwise fall back to scalar code when the pointers are equal.
        #pragma omp simd
        for (int v = 0; v < V; v++) d[v] = scale * bg_expf(x[v] - l);
        d[target] -= scale;
    }
}
