// The routed experts run one per thread when there are enough of them
// (matmul_concurrent): their outputs and gradients must equal the experts run one at a
// time with every GEMM threaded (one moe_experts_* call per expert), for GELU and
// SwiGLU, fp32 and bf16, including experts with no rows. Under ctest OMP_NUM_THREADS=2,
// so 8 experts take the concurrent path (checked).
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "moe/experts.h"
#include "test_util.h"

enum { E = 8, C = 32, F = 48 };

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static void expect_same(const char *what, const float *got, const float *want, size_t n,
                        double rtol) {
    double *w = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) w[i] = want[i];
    tu_expect_close(what, got, w, n, 1e-6, rtol);
    free(w);
}

static void run(ffn_act act, bg_dtype p) {
    const int U = ffn_in_rows(act, F);
    const int rows[E] = {37, 0, 101, 64, 5, 80, 0, 52};  // two experts without tokens
    int offsets[E + 1] = {0};
    for (int e = 0; e < E; e++) offsets[e + 1] = offsets[e] + rows[e];
    const int R = offsets[E];
    float *x = falloc((size_t)R * C), *dy = falloc((size_t)R * C);
    float *w_in = falloc((size_t)E * U * C), *w_out = falloc((size_t)E * C * F);
    tu_seed(3 + act + 10 * p);
    tu_fill_normal(x, (size_t)R * C, 1.0);
    tu_fill_normal(dy, (size_t)R * C, 1.0);
    tu_fill_normal(w_in, (size_t)E * U * C, 0.2);
    tu_fill_normal(w_out, (size_t)E * C * F, 0.2);
    kernel_ctx *kc = kernel_ctx_create(p);

    // [0]: all experts in one call (concurrent); [1]: one call per expert (sequential).
    float *y[2], *h[2], *a[2], *da[2], *dh[2], *dx[2], *dwi[2], *dwo[2];
    for (int k = 0; k < 2; k++) {
        y[k] = falloc((size_t)R * C), h[k] = falloc((size_t)R * U), a[k] = falloc((size_t)R * F);
        da[k] = falloc((size_t)R * F), dh[k] = falloc((size_t)R * U), dx[k] = falloc((size_t)R * C);
        dwi[k] = falloc((size_t)E * U * C), dwo[k] = falloc((size_t)E * C * F);
    }
    TU_CHECK(omp_get_max_threads() < 2 || matmul_concurrent(E),
             "8 experts on %d threads do not run concurrently", omp_get_max_threads());
    moe_experts_forward(kc, y[0], h[0], a[0], x, w_in, w_out, offsets, E, C, F, act);
    moe_experts_backward(kc, dx[0], dwi[0], dwo[0], da[0], dh[0], dy, x, h[0], a[0], w_in, w_out,
                         offsets, E, C, F, act);
    const size_t ob = matmul_operand_bytes(kc, 1);  // a and dh are in the operand format
    for (int e = 0; e < E; e++) {
        const int sub[2] = {0, rows[e]};
        const size_t r = (size_t)offsets[e];
        const float *wi = w_in + (size_t)e * U * C, *wo = w_out + (size_t)e * C * F;
        void *ae = (char *)a[1] + r * F * ob, *dhe = (char *)dh[1] + r * U * ob;
        moe_experts_forward(kc, y[1] + r * C, h[1] + r * U, ae, x + r * C, wi, wo, sub, 1, C, F,
                            act);
        moe_experts_backward(kc, dx[1] + r * C, dwi[1] + (size_t)e * U * C,
                             dwo[1] + (size_t)e * C * F, da[1] + r * F, dhe, dy + r * C, x + r * C,
                             h[1] + r * U, ae, wi, wo, sub, 1, C, F, act);
    }
    // The same GEMMs on the same rounded operands; only oneDNN's split of a GEMM between
    // threads may reorder sums: over up to 101 rows, K·2^-24 of the terms' magnitudes,
    // more of a result where they cancel (AVX2's kernels split differently from AVX-512's).
    const double rtol = 1e-4;
    char what[64];
    snprintf(what, sizeof what, "%s %s y", act == FFN_SWIGLU ? "swiglu" : "gelu", bg_dtype_name(p));
    expect_same(what, y[0], y[1], (size_t)R * C, rtol);
    snprintf(what, sizeof what, "%s %s dx", act == FFN_SWIGLU ? "swiglu" : "gelu", bg_dtype_name(p));
    expect_same(what, dx[0], dx[1], (size_t)R * C, rtol);
    snprintf(what, sizeof what, "%s %s dw_in", act == FFN_SWIGLU ? "swiglu" : "gelu", bg_dtype_name(p));
    expect_same(what, dwi[0], dwi[1], (size_t)E * U * C, rtol);
    snprintf(what, sizeof what, "%s %s dw_out", act == FFN_SWIGLU ? "swiglu" : "gelu", bg_dtype_name(p));
    expect_same(what, dwo[0], dwo[1], (size_t)E * C * F, rtol);
    // Experts without rows keep a zero gradient.
    TU_CHECK(dwi[0][(size_t)1 * U * C] == 0.0f && dwo[0][(size_t)6 * C * F] == 0.0f,
             "an expert without rows got a gradient");

    for (int k = 0; k < 2; k++) free(y[k]), free(h[k]), free(a[k]), free(da[k]), free(dh[k]),
                                free(dx[k]), free(dwi[k]), free(dwo[k]);
    free(x), free(dy), free(w_in), free(w_out);
    kernel_ctx_free(kc);
}

int main(void) {
    run(FFN_GELU, BG_FP32);
    run(FFN_SWIGLU, BG_FP32);
    run(FFN_GELU, BG_BF16);
    run(FFN_SWIGLU, BG_BF16);
    return tu_finish("moe/test_experts_concurrent");
}
