// ffn_forward / ffn_backward (GELU and SwiGLU) against a double-precision reference,
// gradients against centered finite differences of that reference.
#include "kernels/kernels.h"
#include "moe/ffn.h"
#include "moe_ref.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Forward: fp32 sums of C = 12 and F = 5 products of O(1) values carry relative error
// ~1e-7 per operation; atol 1e-5 / rtol 1e-4 leave a wide margin for any GEMM
// summation order (oneDNN blocks differently from the naive loop) and still catch any
// real bug, which shows up at O(1e-1).
#define FWD_ATOL 1e-5
#define FWD_RTOL 1e-4
// Backward vs finite differences of the double reference (eps 1e-5: truncation
// ~1e-10, cancellation ~1e-11, so the FD gradient is exact to far below float): the
// error is the float backward's own rounding over two GEMMs and the activation
// derivative, ~1e-6 on O(1) gradients. Same tolerances, for the same reasons.
#define BWD_ATOL 1e-5
#define BWD_RTOL 1e-4
#define FD_EPS 1e-5

typedef struct {
    double *inp, *w_in, *w_out, *g;
    int M, C, F;
    ffn_act act;
    double *out;
} ffn_ctx;

static double ffn_loss(void *vctx) {  // L = Σ g · ffn(inp)
    ffn_ctx *c = vctx;
    ref_ffn(c->out, c->inp, c->w_in, c->w_out, c->M, c->C, c->F, c->act);
    double L = 0;
    for (size_t i = 0; i < (size_t)c->M * c->C; i++) L += c->g[i] * c->out[i];
    return L;
}

static kernel_ctx *g_kc;  // fp32 GEMMs

static void check_ffn(ffn_act act, int M, int C, int F, uint64_t seed) {
    const char *name = act == FFN_SWIGLU ? "swiglu" : "gelu";
    printf("ffn %s M=%d C=%d F=%d\n", name, M, C, F);
    int U = ffn_in_rows(act, F);
    size_t nx = (size_t)M * C, nwi = (size_t)U * C, nwo = (size_t)C * F;
    tu_seed(seed);
    float *inp = malloc(sizeof(float) * nx), *w_in = malloc(sizeof(float) * nwi);
    float *w_out = malloc(sizeof(float) * nwo), *dout = malloc(sizeof(float) * nx);
    tu_fill_normal(inp, nx, 1.0);
    // Weights at the usual 1/sqrt(fan_in) scale keep every activation and gradient O(1)
    // at any size, so one absolute tolerance fits all the shapes below.
    tu_fill_normal(w_in, nwi, 1.0 / sqrt(C));
    tu_fill_normal(w_out, nwo, 1.0 / sqrt(F));
    tu_fill_normal(dout, nx, 1.0);

    float *out = malloc(sizeof(float) * nx), *h = malloc(sizeof(float) * (size_t)M * U);
    float *a = malloc(sizeof(float) * (size_t)M * F);
    ffn_forward(g_kc, out, h, a, inp, w_in, w_out, M, C, F, act);

    ffn_ctx ctx = {ref_from_float(inp, nx), ref_from_float(w_in, nwi), ref_from_float(w_out, nwo),
                   ref_from_float(dout, nx), M, C, F, act, malloc(sizeof(double) * nx)};
    ref_ffn(ctx.out, ctx.inp, ctx.w_in, ctx.w_out, M, C, F, act);
    ref_expect("ffn out", out, ctx.out, nx, FWD_ATOL, FWD_RTOL);

    // Gradients start from random values: backward must ADD to them.
    float *dinp = malloc(sizeof(float) * nx), *dw_in = malloc(sizeof(float) * nwi);
    float *dw_out = malloc(sizeof(float) * nwo);
    tu_fill_normal(dinp, nx, 1.0);
    tu_fill_normal(dw_in, nwi, 1.0);
    tu_fill_normal(dw_out, nwo, 1.0);
    double *want_inp = ref_from_float(dinp, nx), *want_in = ref_from_float(dw_in, nwi);
    double *want_out = ref_from_float(dw_out, nwo);
    float *da = malloc(sizeof(float) * (size_t)M * F), *dh = malloc(sizeof(float) * (size_t)M * U);
    // Workspace starts dirty: the function must not rely on it being zero.
    for (size_t i = 0; i < (size_t)M * F; i++) da[i] = 1e3f;
    for (size_t i = 0; i < (size_t)M * U; i++) dh[i] = -1e3f;
    ffn_backward(g_kc, dinp, dw_in, dw_out, da, dh, dout, inp, h, a, w_in, w_out, M, C, F, act);

    double *fd = malloc(sizeof(double) * (nwi > nx ? (nwi > nwo ? nwi : nwo) : (nx > nwo ? nx : nwo)));
    ref_fd_grad(fd, ctx.inp, nx, FD_EPS, ffn_loss, &ctx);
    for (size_t i = 0; i < nx; i++) want_inp[i] += fd[i];
    ref_fd_grad(fd, ctx.w_in, nwi, FD_EPS, ffn_loss, &ctx);
    for (size_t i = 0; i < nwi; i++) want_in[i] += fd[i];
    ref_fd_grad(fd, ctx.w_out, nwo, FD_EPS, ffn_loss, &ctx);
    for (size_t i = 0; i < nwo; i++) want_out[i] += fd[i];
    ref_expect("ffn dinp", dinp, want_inp, nx, BWD_ATOL, BWD_RTOL);
    ref_expect("ffn dw_in", dw_in, want_in, nwi, BWD_ATOL, BWD_RTOL);
    ref_expect("ffn dw_out", dw_out, want_out, nwo, BWD_ATOL, BWD_RTOL);

    // Determinism: a second run gives the same bits.
    float *out2 = malloc(sizeof(float) * nx), *h2 = malloc(sizeof(float) * (size_t)M * U);
    float *a2 = malloc(sizeof(float) * (size_t)M * F);
    ffn_forward(g_kc, out2, h2, a2, inp, w_in, w_out, M, C, F, act);
    TU_CHECK(!memcmp(out, out2, sizeof(float) * nx), "%s: forward not bitwise repeatable", name);
    float *dinp2 = calloc(nx, sizeof(float)), *dinp3 = calloc(nx, sizeof(float));
    float *dwi2 = calloc(nwi, sizeof(float)), *dwi3 = calloc(nwi, sizeof(float));
    float *dwo2 = calloc(nwo, sizeof(float)), *dwo3 = calloc(nwo, sizeof(float));
    ffn_backward(g_kc, dinp2, dwi2, dwo2, da, dh, dout, inp, h, a, w_in, w_out, M, C, F, act);
    ffn_backward(g_kc, dinp3, dwi3, dwo3, da, dh, dout, inp, h, a, w_in, w_out, M, C, F, act);
    TU_CHECK(!memcmp(dinp2, dinp3, sizeof(float) * nx) && !memcmp(dwi2, dwi3, sizeof(float) * nwi) &&
                 !memcmp(dwo2, dwo3, sizeof(float) * nwo),
             "%s: backward not bitwise repeatable", name);

    free(inp); free(w_in); free(w_out); free(dout); free(out); free(h); free(a);
    free(ctx.inp); free(ctx.w_in); free(ctx.w_out); free(ctx.g); free(ctx.out);
    free(dinp); free(dw_in); free(dw_out); free(want_inp); free(want_in); free(want_out);
    free(da); free(dh); free(fd); free(out2); free(h2); free(a2);
    free(dinp2); free(dinp3); free(dwi2); free(dwi3); free(dwo2); free(dwo3);
}

// M == 0 (an expert with no tokens) must touch nothing, not even its outputs.
static void check_empty(ffn_act act) {
    int C = 12, F = 5, U = ffn_in_rows(act, F);
    float w_in[2 * 5 * 12], w_out[12 * 5], dwi[2 * 5 * 12], dwo[12 * 5];
    float sentinel = 7.0f, out = sentinel, h = sentinel, a = sentinel, dinp = sentinel;
    float da = sentinel, dh = sentinel, dout = 1.0f, inp = 1.0f;
    tu_fill_normal(w_in, (size_t)U * C, 1.0);
    tu_fill_normal(w_out, (size_t)C * F, 1.0);
    for (int i = 0; i < U * C; i++) dwi[i] = sentinel;
    for (int i = 0; i < C * F; i++) dwo[i] = sentinel;
    ffn_forward(g_kc, &out, &h, &a, &inp, w_in, w_out, 0, C, F, act);
    ffn_backward(g_kc, &dinp, dwi, dwo, &da, &dh, &dout, &inp, &h, &a, w_in, w_out, 0, C, F, act);
    int untouched = out == sentinel && h == sentinel && a == sentinel && dinp == sentinel &&
                    da == sentinel && dh == sentinel;
    for (int i = 0; i < U * C; i++) untouched &= dwi[i] == sentinel;
    for (int i = 0; i < C * F; i++) untouched &= dwo[i] == sentinel;
    TU_CHECK(untouched, "ffn with M == 0 wrote memory");
}

int main(void) {
    g_kc = kernel_ctx_create(BG_FP32);
    check_ffn(FFN_GELU, 7, 12, 5, 1);
    check_ffn(FFN_SWIGLU, 7, 12, 5, 2);
    check_ffn(FFN_GELU, 1, 3, 1, 3);
    check_ffn(FFN_SWIGLU, 33, 16, 24, 4);
    check_empty(FFN_GELU);
    check_empty(FFN_SWIGLU);
    kernel_ctx_free(g_kc);
    return tu_finish("moe/test_ffn");
}
