// One FFN (dense layer, routed expert or shared expert): out = act(inp · w_inᵀ) · w_outᵀ.
#include "moe/ffn.h"

#include "kernels/kernels.h"

#include <stddef.h>

// inp (M,C), w_in (U,C), w_out (C,F); h (M,U), a (M,F), out (M,C) writes.
void ffn_forward(float *out, float *h, float *a, const float *inp, const float *w_in,
                 const float *w_out, int M, int C, int F, ffn_act act) {
    if (M == 0) return;
    int U = ffn_in_rows(act, F);
    matmul_forward(h, inp, w_in, M, C, U);  // SwiGLU: one GEMM gives [gate | up] per row
    if (act == FFN_SWIGLU)
        swiglu_forward(a, h, M, F);
    else
        gelu_forward(a, h, (size_t)M * F);
    matmul_forward(out, a, w_out, M, F, C);
}

// dinp (M,C) +=, dw_in (U,C) +=, dw_out (C,F) +=; da (M,F), dh (M,U) are workspace that
// this function overwrites (zeroed here because the kernels' backward accumulates).
void ffn_backward(float *dinp, float *dw_in, float *dw_out, float *da, float *dh,
                  const float *dout, const float *inp, const float *h, const float *a,
                  const float *w_in, const float *w_out, int M, int C, int F, ffn_act act) {
    if (M == 0) return;
    int U = ffn_in_rows(act, F);
    vec_zero(da, (size_t)M * F);
    matmul_backward(da, dw_out, dout, a, w_out, M, F, C);
    vec_zero(dh, (size_t)M * U);
    if (act == FFN_SWIGLU)
        swiglu_backward(dh, da, h, M, F);
    else
        gelu_backward(dh, da, h, (size_t)M * F);
    matmul_backward(dinp, dw_in, dh, inp, w_in, M, C, U);
}
