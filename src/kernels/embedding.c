// Token (and learned position) embeddings.
#include "kernels/kernels.h"

#include "kernels/channel_blocks.h"

// tokens (N), wte (V,C), wpe (maxT,C) or NULL, out (N,C)
void embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                       int N, int T, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        const float *e = wte + (size_t)tokens[n] * C;
        if (wpe) {
            const float *p = wpe + (size_t)(n % T) * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        } else {
            #pragma omp simd
            for (int c = 0; c < C; c++) o[c] = e[c];
        }
    }
}

// dout (N,C); dwte (V,C), dwpe (maxT,C) +=
void embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                        int N, int T, int C) {
    if (!dwte && !dwpe) return;
    // A token may repeat, so rows of dwte cannot be split between threads without
    // atomics. Threads own channel blocks instead and walk the rows in order: each
    // gradient element is summed in the same order whatever the thread count.
    const int nblocks = channel_block_count(C);
    #pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        const int c0 = blk * CHANNEL_BLOCK, c1 = channel_block_end(blk, C);
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * C;
            if (dwte) {
                float *g = dwte + (size_t)tokens[n] * C;
                #pragma omp simd
                for (int c = c0; c < c1; c++) g[c] += d[c];
            }
            if (dwpe) {
                float *g = dwpe + (size_t)(n % T) * C;
                #pragma omp simd
                for (int c = c0; c < c1; c++) g[c] += d[c];
            }
        }
    }
}
