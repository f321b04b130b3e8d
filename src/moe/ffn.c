// One FFN (dense layer, routed expert or shared expert): out = act(inp · w_inᵀ) · w_outᵀ.
// The activation a and the pre-activation's gradient dh are consumed by GEMMs only,
// so they are kept in the GEMMs' operand format (bf16 under native bf16): the activation
// kernels write them rounded, and the GEMMs read them without a rounding pass. The
// results are the bits the fp32-then-round path gives.
#include "moe/ffn.h"

#include "kernels/kernels.h"

#include <stddef.h>

// inp (M,C), w_in (U,C), w_out (C,F); h (M,U), a (M,F), out (M,C) writes.
void ffn_forward(kernel_ctx *kc, float *out, float *h, void *a, const float *inp,
                 const float *w_in, const float *w_out, int M, int C, int F, ffn_act act) {
    if (M == 0) return;
    const operand_format p = kernel_ctx_operand_format(kc);
    const int U = ffn_in_rows(act, F);
    matmul_forward(kc, h, inp, w_in, M, C, U);  // SwiGLU: one GEMM gives [gate | up] per row
    if (act == FFN_SWIGLU)
        swiglu_forward(a, p, h, M, F);
    else
        gelu_forward(a, p, h, (size_t)M * F);
    matmul_forward_op(kc, out, matmul_rounded(a), w_out, M, F, C);
}

// dinp (M,C) +=, dw_in (U,C) +=, dw_out (C,F) +=; da (M,F), dh (M,U) are workspace that
// this function overwrites.
void ffn_backward(kernel_ctx *kc, float *dinp, float *dw_in, float *dw_out, float *da, void *dh,
                  const float *dout, const float *inp, const float *h, const void *a,
                  const float *w_in, const float *w_out, int M, int C, int F, ffn_act act) {
    if (M == 0) return;
    const operand_format p = kernel_ctx_operand_format(kc);
    const int U = ffn_in_rows(act, F);
    matmul_backward_op(kc, da, MATMUL_WRITE, dw_out, matmul_floats(dout), matmul_rounded(a), w_out,
                       M, F, C);
    if (act == FFN_SWIGLU)
        swiglu_backward(dh, p, da, h, M, F);
    else
        gelu_backward(dh, p, da, h, (size_t)M * F);
    matmul_backward_op(kc, dinp, MATMUL_ADD, dw_in, matmul_rounded(dh), matmul_floats(inp), w_in, M,
                       C, U);
}
