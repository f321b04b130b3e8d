#ifndef BG_MOE_EXPERTS_H
#define BG_MOE_EXPERTS_H
// The routed experts: one FFN (a GEMM pair) per expert over its contiguous rows
// [offsets[e], offsets[e+1]) of the permuted buffers. An expert with no rows costs
// nothing and leaves its gradient untouched.
#include "moe/ffn.h"

// x_perm (R,C) → y_perm (R,C) WRITES; caches h (R,U) and a (R,F), a in the GEMM operand
// format as ffn_forward keeps it; R = offsets[E]. w_in (E,U,C), w_out (E,C,F), expert-major.
void moe_experts_forward(kernel_ctx *kc, float *y_perm, float *h, void *a, const float *x_perm,
                         const float *w_in, const float *w_out, const int *offsets, int E, int C,
                         int F, ffn_act act);
// dx_perm (R,C) +=, dw_in (E,U,C) +=, dw_out (E,C,F) +=; da (R,F), dh (R,U) workspace.
void moe_experts_backward(kernel_ctx *kc, float *dx_perm, float *dw_in, float *dw_out, float *da,
                          void *dh, const float *dy_perm, const float *x_perm, const float *h,
                          const void *a, const float *w_in, const float *w_out, const int *offsets,
                          int E, int C, int F, ffn_act act);
#endif
