// Routed experts as a loop of per-expert GEMM pairs over contiguous rows. The GEMMs
// thread internally; the matmul kernel caches primitives by (K,N) with M a runtime
// dimension, so every expert and every step reuses the same two primitives.
#include "moe/experts.h"

#include <stddef.h>

#include "kernels/kernels.h"

// Row r of an (R, width) buffer in the GEMM operand format.
static void *operand_row(const void *base, size_t r, int width) {
    return (char *)base + matmul_operand_bytes(r * (size_t)width);
}

void moe_experts_forward(float *y_perm, float *h, void *a, const float *x_perm,
                         const float *w_in, const float *w_out, const int *offsets, int E,
                         int C, int F, ffn_act act) {
    int U = ffn_in_rows(act, F);
    for (int e = 0; e < E; e++) {
        size_t r = (size_t)offsets[e];
        int M = offsets[e + 1] - offsets[e];
        if (M == 0) continue;
        ffn_forward(y_perm + r * C, h + r * U, operand_row(a, r, F), x_perm + r * C,
                    w_in + (size_t)e * U * C, w_out + (size_t)e * C * F, M, C, F, act);
    }
}

void moe_experts_backward(float *dx_perm, float *dw_in, float *dw_out, float *da, void *dh,
                          const float *dy_perm, const float *x_perm, const float *h,
                          const void *a, const float *w_in, const float *w_out,
                          const int *offsets, int E, int C, int F, ffn_act act) {
    int U = ffn_in_rows(act, F);
    for (int e = 0; e < E; e++) {
        size_t r = (size_t)offsets[e];
        int M = offsets[e + 1] - offsets[e];
        if (M == 0) continue;  // no tokens: exactly zero gradient for this expert
        ffn_backward(dx_perm + r * C, dw_in + (size_t)e * U * C, dw_out + (size_t)e * C * F,
                     da + r * F, operand_row(dh, r, U), dy_perm + r * C, x_perm + r * C,
                     h + r * U, operand_row(a, r, F), w_in + (size_t)e * U * C,
                     w_out + (size_t)e * C * F, M, C, F, act);
    }
}
