// The LM head (vocabulary projection) fused with softmax cross-entropy, over chunks
// of rows, so that the (N,V) logits never exist at once: for M1 (N = 2048 tokens,
// V = 50257) they are 411 MB, against 206 MB for one 1024-row chunk.
//
// Per chunk of rows, in one pass (training):
//   logits = x·Wᵀ                                  (matmul_forward)
//   losses, lse; E = exp(logits - rowmax) over the logits (xent_rows)
//   dx = k ∘ (E·W),  dW (+)= Eᵀ·(k ∘ x)             (matmul_backward_op, matmul_weights_grad_op)
// with k = scale / Σ_v E per row, and the target's entry of E lowered by that sum, so
// that k ∘ E is scale·(softmax - onehot), the gradient of the logits. The same three
// GEMMs as the unfused path, so no FLOPs are added. Both gradients are written, never
// read first: each chunk's dx rows are its own, and the first chunk writes dW, the others
// add to it (no zeroing pass over V·C floats). The chunk only has to be tall
// enough for the GEMMs to stay efficient (the chunk's rows are the reduction dimension
// of the dW product, which rereads and rewrites all of dW, V·C floats, once per chunk).
#include "kernels/kernels.h"

#include <math.h>

#include "core/error.h"
#include "core/half.h"
#include "kernels/vecmath.h"

enum { XENT_CHUNK = 1024 };

size_t lmhead_workspace_floats(int chunk_rows, int C, int V) {
    return (size_t)chunk_rows * ((size_t)V + (size_t)C + 1);
}

// crossentropy_forward and the unnormalised gradient in two sweeps over each row of
// V: the max, then the exponentials, summed (float over chunks of XENT_CHUNK, chunks
// added in double, as crossentropy.c) and stored in the GEMMs' operand format, over the
// logits or into dl16 (bf16). The normalisation k = scale/sum is known only after the
// second sweep; applying it to the GEMMs' small operand and result (rows × C) instead of
// the rows × V values saves a third sweep over them. rowk (rows) writes k. The
// exponentials are most of the time (perf: pipelining the next row's max sweep behind
// them, with prefetches, changed nothing measurable).
static void xent_rows(float *losses, float *lse, float *rowk, float *logits, uint16_t *dl16,
                      operand_format p, const int *targets, float scale, int rows, int V) {
    void *out = p == OPERAND_BF16 ? (void *)dl16 : (void *)logits;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < rows; n++) {
        const size_t row0 = (size_t)n * V;
        float *x = logits + row0;
        const int target = targets[n];
        BG_ASSERT(target >= 0 && target < V);
        const float maxv = bg_max_f32(x, V);
        const float x_target = x[target];
        double sum = 0.0;
        for (int v0 = 0; v0 < V; v0 += XENT_CHUNK) {
            const int m = V - v0 < XENT_CHUNK ? V - v0 : XENT_CHUNK;
            if (p == OPERAND_BF16) {
                sum += bg_exp_shifted_sum_bf16(dl16 + row0 + v0, x + v0, maxv, m);
                continue;
            }
            if (p == OPERAND_F32) {  // in place: each value is read before it is written
                sum += bg_exp_shifted_sum(x + v0, x + v0, maxv, m);
                continue;
            }
            float e[XENT_CHUNK];
            sum += bg_exp_shifted_sum(e, x + v0, maxv, m);
            operand_store(out, row0 + (size_t)v0, e, (size_t)m, p);  // over x: read already
        }
        const float l = maxv + (float)log(sum);
        lse[n] = l;
        losses[n] = l - x_target;
        rowk[n] = (float)(scale / sum);
        // k·(e_t - sum) = scale·(p_t - 1): the one-hot term, in E's units.
        const float e_target = (float)((double)bg_expf(x_target - maxv) - sum);
        operand_store(out, row0 + (size_t)target, &e_target, 1, p);
    }
}

// y (rows, C) = k ∘ x per row; y may be x.
static void scale_rows(float *y, const float *k, const float *x, int rows, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < rows; n++) {
        const float kn = k[n];
        float *yr = y + (size_t)n * C;
        const float *xr = x + (size_t)n * C;
        #pragma omp simd
        for (int c = 0; c < C; c++) yr[c] = kn * xr[c];
    }
}

// x (N,C), W (V,C), targets (N); losses, lse (N), dx (N,C), dW (V,C) write (either
// gradient may be NULL); work (lmhead_workspace_floats) workspace.
void lmhead_xent_fused(kernel_ctx *kc, float *losses, float *lse, float *dx, float *dW,
                       const float *x, const float *W, const int *targets, float scale, int N,
                       int C, int V, float *work, int chunk_rows) {
    BG_ASSERT(chunk_rows > 0);
    const operand_format p = kernel_ctx_operand_format(kc);
    float *logits = work, *xk = logits + (size_t)chunk_rows * V, *rowk = xk + (size_t)chunk_rows * C;
    for (int n0 = 0; n0 < N; n0 += chunk_rows) {
        const int rows = N - n0 < chunk_rows ? N - n0 : chunk_rows;
        const float *xc = x + (size_t)n0 * C;
        matmul_forward(kc, logits, xc, W, rows, C, V);
        uint16_t *dl16 = matmul_bf16_dout_buffer(kc, (size_t)rows * V);  // NULL unless native bf16
        xent_rows(losses + n0, lse + n0, rowk, logits, dl16, p, targets + n0, scale, rows, V);
        const matmul_operand E = matmul_rounded(dl16 ? (const void *)dl16 : logits);
        if (dx) {  // the chunk's rows of dx are its own: written, then scaled in place
            float *dxc = dx + (size_t)n0 * C;
            matmul_backward_op(kc, dxc, MATMUL_WRITE, NULL, E, matmul_floats(xc), W, rows, C, V);
            scale_rows(dxc, rowk, dxc, rows, C);
        }
        if (dW) {
            scale_rows(xk, rowk, xc, rows, C);
            matmul_weights_grad_op(kc, dW, n0 == 0 ? MATMUL_WRITE : MATMUL_ADD, E, matmul_floats(xk),
                                   rows, C, V);
        }
    }
}

// The forward alone (evaluation): losses and lse (N) write.
void lmhead_xent_forward(kernel_ctx *kc, float *losses, float *lse, const float *x,
                         const float *W, const int *targets, int N, int C, int V, float *work,
                         int chunk_rows) {
    BG_ASSERT(chunk_rows > 0);
    for (int n0 = 0; n0 < N; n0 += chunk_rows) {
        const int rows = N - n0 < chunk_rows ? N - n0 : chunk_rows;
        matmul_forward(kc, work, x + (size_t)n0 * C, W, rows, C, V);
        crossentropy_forward(losses + n0, lse + n0, work, targets + n0, rows, V);
    }
}
