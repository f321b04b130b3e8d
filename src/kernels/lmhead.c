// The LM head (vocabulary projection) fused with softmax cross-entropy, over chunks
// of rows, so that the (N,V) logits never exist at once: for M1 (N = 2048 tokens,
// V = 50257) they are 411 MB, against 206 MB for one 1024-row chunk.
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

#include <float.h>
#include <math.h>

#include "core/error.h"
#include "core/half.h"
#include "kernels/vecmath.h"

enum { XENT_CHUNK = 1024 };

// crossentropy_forward and crossentropy_backward in one sweep over each row: the
// exponentials are stored in place and scaled, instead of computed once for the sum
// and again for the gradient (with V = 50257 the exps are most of the loss's time).
// Same arithmetic as crossentropy.c: max subtracted, float sums over chunks of
// XENT_CHUNK added in double. The gradient scale·(softmax - onehot) is written in the
// GEMMs' operand format, rounded as matmul would round it: over the logits (fp32,
// fp16), or into dl16 (bf16), so the backward GEMMs need no pass of their own over it.
static void xent_rows(float *losses, float *lse, float *logits, uint16_t *dl16,
                      matmul_precision p, const int *targets, float scale, int rows, int V) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < rows; n++) {
        float *x = logits + (size_t)n * V;
        const int target = targets[n];
        BG_ASSERT(target >= 0 && target < V);
        float maxv = -FLT_MAX;
        #pragma omp simd reduction(max : maxv)
        for (int v = 0; v < V; v++) maxv = x[v] > maxv ? x[v] : maxv;
        const float x_target = x[target];
        double sum = 0.0;
        for (int v0 = 0; v0 < V; v0 += XENT_CHUNK) {
            const int v1 = v0 + XENT_CHUNK < V ? v0 + XENT_CHUNK : V;
            float part = 0.0f;
            #pragma omp simd reduction(+ : part)
            for (int v = v0; v < v1; v++) {
                x[v] = bg_expf(x[v] - maxv);
                part += x[v];
            }
            sum += part;
        }
        const float l = maxv + (float)log(sum);
        lse[n] = l;
        losses[n] = l - x_target;
        const float k = (float)(scale / sum);
        const float d_target = x[target] * k - scale;
        if (p == MATMUL_BF16) {
            uint16_t *d = dl16 + (size_t)n * V;
            #pragma omp simd
            for (int v = 0; v < V; v++) d[v] = bg_f32_to_bf16(x[v] * k);
            d[target] = bg_f32_to_bf16(d_target);
        } else if (p == MATMUL_FP16) {
            #pragma omp simd
            for (int v = 0; v < V; v++) x[v] = bg_round_f16(x[v] * k);
            x[target] = bg_round_f16(d_target);
        } else {
            #pragma omp simd
            for (int v = 0; v < V; v++) x[v] *= k;
            x[target] = d_target;
        }
    }
}

// x (N,C), W (V,C), targets (N); losses, lse (N) write; dx (N,C) +=, dW (V,C) +=
// (either may be NULL); chunk_buf (chunk_rows, V) workspace.
void lmhead_xent_fused(float *losses, float *lse, float *dx, float *dW, const float *x,
                       const float *W, const int *targets, float scale, int N, int C, int V,
                       float *chunk_buf, int chunk_rows) {
    BG_ASSERT(chunk_rows > 0);
    const matmul_precision p = matmul_get_precision();
    for (int n0 = 0; n0 < N; n0 += chunk_rows) {
        const int rows = N - n0 < chunk_rows ? N - n0 : chunk_rows;
        const float *xc = x + (size_t)n0 * C;
        matmul_forward(chunk_buf, xc, W, rows, C, V);
        uint16_t *dl16 = matmul_bf16_dout_buffer((size_t)rows * V);  // NULL unless bf16
        xent_rows(losses + n0, lse + n0, chunk_buf, dl16, p, targets + n0, scale, rows, V);
        matmul_backward_op(dx ? dx + (size_t)n0 * C : NULL, MATMUL_ADD, dW,
                           matmul_rounded(dl16 ? (const void *)dl16 : chunk_buf), matmul_floats(xc),
                           W, rows, C, V);
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
