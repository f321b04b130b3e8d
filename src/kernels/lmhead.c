// The LM head (vocabulary projection) fused with softmax cross-entropy, over chunks
// of rows, so that the (N,V) logits never exist at once: for M1 (N = 2048 tokens,
// V = 50257) they are 411 MB, against 51 MB for one 256-row chunk.
//
// Per chunk of rows, in one pass (training):
//   logits = x·Wᵀ                                  (matmul_forward)
//   losses, lse; dlogits = scale·(softmax - onehot) in place over the logits
//   dx += dlogits·W,  dW += dlogitsᵀ·x             (matmul_backward)
// The same three GEMMs as the unfused path, so no FLOPs are added; the chunk only
// has to be tall enough for the GEMMs to stay efficient (the chunk's rows are the
// reduction dimension of the dW product, which rereads and rewrites all of dW, V·C
// floats, once per chunk).
#include "kernels/kernels.h"

#include "core/error.h"

// x (N,C), W (V,C), targets (N); losses, lse (N) write; dx (N,C) +=, dW (V,C) +=
// (either may be NULL); chunk_buf (chunk_rows, V) workspace.
void lmhead_xent_fused(float *losses, float *lse, float *dx, float *dW, const float *x,
                       const float *W, const int *targets, float scale, int N, int C, int V,
                       float *chunk_buf, int chunk_rows) {
    BG_ASSERT(chunk_rows > 0);
    for (int n0 = 0; n0 < N; n0 += chunk_rows) {
        const int rows = N - n0 < chunk_rows ? N - n0 : chunk_rows;
        const float *xc = x + (size_t)n0 * C;
        matmul_forward(chunk_buf, xc, W, rows, C, V);
        crossentropy_forward(losses + n0, lse + n0, chunk_buf, targets + n0, rows, V);
        crossentropy_backward(chunk_buf, chunk_buf, lse + n0, targets + n0, scale, rows, V);
        matmul_backward(dx ? dx + (size_t)n0 * C : NULL, dW, chunk_buf, xc, W, rows, C, V);
    }
}

// The forward alone (evaluation): losses and lse (N) write.
void lmhead_xent_forward(float *losses, float *lse, const float *x, const float *W,
                         const int *targets, int N, int C, int V, float *chunk_buf,
                         int chunk_rows) {
    BG_ASSERT(chunk_rows > 0);
    for (int n0 = 0; n0 < N; n0 += chunk_rows) {
        const int rows = N - n0 < chunk_rows ? N - n0 : chunk_rows;
        matmul_forward(chunk_buf, x + (size_t)n0 * C, W, rows, C, V);
        crossentropy_forward(losses + n0, lse + n0, chunk_buf, targets + n0, rows, V);
    }
}
