#ifndef BG_MOE_FFN_H
#define BG_MOE_FFN_H
// One feed-forward network: a dense layer's FFN, one expert, or one shared expert.
// w_in (U,C) with U = F for GELU, U = 2F for SwiGLU ([w1 gate ; w3 up] stacked, so
// both projections run as one GEMM); w_out (C,F).
#include "kernels/kernels.h"

typedef enum { FFN_GELU = 0, FFN_SWIGLU = 1 } ffn_act;

static inline int ffn_in_rows(ffn_act act, int F) { return act == FFN_SWIGLU ? 2 * F : F; }

// inp (M,C); h (M,U) caches the pre-activation (floats), a (M,F) the activation in the
// GEMM operand format of kc's precision (kernels.h; room for M·F floats holds it
// whatever the precision); out (M,C) WRITES.
void ffn_forward(kernel_ctx *kc, float *out, float *h, void *a, const float *inp, const float *w_in,
                 const float *w_out, int M, int C, int F, ffn_act act);
// The same with biases b_in (U) on the pre-activation and b_out (C) on the output
// (a dense layer with mlp_bias); NULL biases: ffn_forward.
void ffn_forward_bias(kernel_ctx *kc, float *out, float *h, void *a, const float *inp,
                      const float *w_in, const float *b_in, const float *w_out, const float *b_out,
                      int M, int C, int F, ffn_act act);
// dinp (M,C) +=, dw_in (U,C) +=, dw_out (C,F) +=; da (M,F) floats and dh (M,U) in the
// operand format are workspace.
void ffn_backward(kernel_ctx *kc, float *dinp, float *dw_in, float *dw_out, float *da, void *dh,
                  const float *dout, const float *inp, const float *h, const void *a,
                  const float *w_in, const float *w_out, int M, int C, int F, ffn_act act);
// With biases: db_in (U) +=, db_out (C) += (NULL: none).
void ffn_backward_bias(kernel_ctx *kc, float *dinp, float *dw_in, float *db_in, float *dw_out,
                       float *db_out, float *da, void *dh, const float *dout, const float *inp,
                       const float *h, const void *a, const float *w_in, const float *w_out, int M,
                       int C, int F, ffn_act act);
// Bias helpers shared with the attention block: out (M,N) += b per row; db (N) += the
// column sums of dout (M,N), rows in order (deterministic).
void ffn_bias_forward(float *out, const float *b, int M, int N);
void ffn_bias_backward(float *db, const float *dout, int M, int N);
#endif
