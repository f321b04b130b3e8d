// One FFN (dense layer, routed expert or shared expert): out = act(inp · w_inᵀ) · w_outᵀ.
// The activation a and the pre-activation's gradient dh are consumed by GEMMs only,
// so they are kept in the GEMMs' operand format (bf16 under native bf16): the activation
// kernels write them rounded, and the GEMMs read them without a rounding pass. The
// results are the bits the fp32-then-round path gives.
#include "moe/ffn.h"

#include "core/half.h"
#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>

// inp (M,C), w_in (U,C), w_out (C,F); h (M,U), a (M,F), out (M,C) writes.
void ffn_bias_forward(float *out, const float *b, int M, int N) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) out[(size_t)i * N + j] += b[j];
}

void ffn_bias_backward(float *db, const float *dout, int M, int N) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) db[j] += dout[(size_t)i * N + j];
}

void ffn_forward(kernel_ctx *kc, float *out, float *h, void *a, const float *inp,
                 const float *w_in, const float *w_out, int M, int C, int F, ffn_act act) {
    ffn_forward_bias(kc, out, h, a, inp, w_in, NULL, w_out, NULL, M, C, F, act);
}

void ffn_forward_bias(kernel_ctx *kc, float *out, float *h, void *a, const float *inp,
                      const float *w_in, const float *b_in, const float *w_out, const float *b_out,
                      int M, int C, int F, ffn_act act) {
    if (M == 0) return;
    const operand_format p = kernel_ctx_operand_format(kc);
    const int U = ffn_in_rows(act, F);
    matmul_forward(kc, h, inp, w_in, M, C, U);  // SwiGLU: one GEMM gives [gate | up] per row
    if (b_in) ffn_bias_forward(h, b_in, M, U);
    if (act == FFN_SWIGLU)
        swiglu_forward(a, p, h, M, F);
    else
        gelu_forward(a, p, h, (size_t)M * F);
    matmul_forward_op(kc, out, matmul_rounded(a), w_out, M, F, C);
    if (b_out) ffn_bias_forward(out, b_out, M, C);
}

// dinp (M,C) +=, dw_in (U,C) +=, dw_out (C,F) +=; da (M,F), dh (M,U) are workspace that
// this function overwrites.
void ffn_backward(kernel_ctx *kc, float *dinp, float *dw_in, float *dw_out, float *da, void *dh,
                  const float *dout, const float *inp, const float *h, const void *a,
                  const float *w_in, const float *w_out, int M, int C, int F, ffn_act act) {
    ffn_backward_bias(kc, dinp, dw_in, NULL, dw_out, NULL, da, dh, dout, inp, h, a, w_in, w_out, M,
                      C, F, act);
}

void ffn_backward_bias(kernel_ctx *kc, float *dinp, float *dw_in, float *db_in, float *dw_out,
                       float *db_out, float *da, void *dh, const float *dout, const float *inp,
                       const float *h, const void *a, const float *w_in, const float *w_out, int M,
                       int C, int F, ffn_act act) {
    if (M == 0) return;
    const operand_format p = kernel_ctx_operand_format(kc);
    const int U = ffn_in_rows(act, F);
    matmul_backward_op(kc, da, MATMUL_WRITE, dw_out, matmul_floats(dout), matmul_rounded(a), w_out,
                       M, F, C);
    if (act == FFN_SWIGLU)
        swiglu_backward(dh, p, da, h, M, F);
    else
        gelu_backward(dh, p, da, h, (size_t)M * F);
    if (db_out) ffn_bias_backward(db_out, dout, M, C);
    // The pre-activation's gradient is kept in the operand format (bf16 bits under bf16,
    // floats otherwise): the bias sums the values the weight gradient sees.
    if (db_in) {
        if (p != OPERAND_BF16) ffn_bias_backward(db_in, (const float *)dh, M, U);
        else
            for (int i = 0; i < M; i++)
                for (int j = 0; j < U; j++) db_in[j] += bg_bf16_to_f32(((const uint16_t *)dh)[(size_t)i * U + j]);
    }
    matmul_backward_op(kc, dinp, MATMUL_ADD, dw_in, matmul_rounded(dh), matmul_floats(inp), w_in, M,
                       C, U);
}
