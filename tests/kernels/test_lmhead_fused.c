// The fused LM head + cross-entropy (lmhead_xent_fused, lmhead_xent_forward) against
// the unfused path: matmul_forward to whole (N,V) logits, crossentropy_forward and
// _backward, matmul_backward. Chunk sizes that divide N, that do not (a short last
// chunk), of one row, and larger than N (one chunk). The fused dx and dW are pre-filled
// with garbage to check that they are written, never read; losses and lse too.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test_util.h"

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

// ‖(got - base) - (want - base)‖ / ‖want - base‖ below 8 units of p's rounding.
static void expect_increment_close(const char *what, const float *got, const float *want,
                                   const float *base, size_t n, bg_dtype p) {
    const double u = p == BG_BF16 ? 0x1p-9 : 0x1p-12;
    double gap = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        const double w = (double)want[i] - base[i], g = (double)got[i] - base[i];
        gap += (g - w) * (g - w);
        norm += w * w;
    }
    const double rel = sqrt(gap / (norm > 0 ? norm : 1));
    TU_CHECK(norm > 0, "%s: the reference increment is zero", what);
    TU_CHECK(rel < 8 * u, "%s: increments differ by %.3g relative (limit %.3g)", what, rel, 8 * u);
}

static void expect_close_f(const char *what, const float *got, const float *want, size_t n,
                           double atol, double rtol) {
    double *w = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) w[i] = want[i];
    tu_expect_close(what, got, w, n, atol, rtol);
    free(w);
}

// A loss is lse - logit, two values of a few units whose small difference keeps their
// rounding: within 1e-6 of lse's size, not of its own (a -O0 build, which fuses no
// multiply-adds, put one 4 ulps of lse, 4.4e-6 of the loss, from the unfused path).
static void expect_losses_close(const char *what, const float *got, const float *want, const float *lse,
                                int n) {
    int worst = 0;
    double excess = 0;
    for (int i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]) - (1e-6 + 1e-6 * fabs(lse[i]));
        if (!(e <= excess)) excess = e, worst = i;
    }
    TU_CHECK(excess <= 0, "%s: element %d got %.9g want %.9g (lse %.9g)", what, worst, got[worst], want[worst],
             lse[worst]);
}

static void test_fused(int N, int C, int V, int chunk, bg_dtype p) {
    const size_t nx = (size_t)N * C, nw = (size_t)V * C, nl = (size_t)N * V;
    float *x = falloc(nx), *W = falloc(nw), *dx0 = falloc(nx), *dW0 = falloc(nw);
    int *targets = malloc(sizeof(int) * N);
    tu_seed(100 + N + C + V + chunk);
    tu_fill_normal(x, nx, 1.0);
    tu_fill_normal(W, nw, 0.3);  // logits of std ~0.3·√C: a few units, as in training
    tu_fill_normal(dx0, nx, 1.0);
    tu_fill_normal(dW0, nw, 1.0);
    for (int n = 0; n < N; n++) targets[n] = (int)(tu_uniform() * V);
    const float scale = 1.0f / N;
    kernel_ctx *kc = kernel_ctx_create(p);

    // unfused
    float *logits = falloc(nl), *losses = falloc(N), *lse = falloc(N), *dx = falloc(nx),
          *dW = falloc(nw);
    memcpy(dx, dx0, nx * sizeof(float));
    memcpy(dW, dW0, nw * sizeof(float));
    matmul_forward(kc, logits, x, W, N, C, V);
    crossentropy_forward(losses, lse, logits, targets, N, V);
    crossentropy_backward(logits, logits, lse, targets, scale, N, V);
    matmul_backward(kc, dx, dW, logits, x, W, N, C, V);

    // fused
    float *buf = falloc(lmhead_workspace_floats(chunk, C, V)), *flosses = falloc(N), *flse = falloc(N),
          *fdx = falloc(nx), *fdW = falloc(nw);
    tu_fill_normal(flosses, N, 100.0);
    tu_fill_normal(flse, N, 100.0);
    // The fused head writes its gradients: garbage before must not show in them, so
    // the unfused sums (dx0 + increment) are compared as increments over dx0.
    tu_fill_normal(fdx, nx, 100.0);
    tu_fill_normal(fdW, nw, 100.0);
    lmhead_xent_fused(kc, flosses, flse, fdx, fdW, x, W, targets, scale, N, C, V, buf, chunk);
    for (size_t i = 0; i < nx; i++) fdx[i] += dx0[i];
    for (size_t i = 0; i < nw; i++) fdW[i] += dW0[i];

    // Tolerances. The losses and lse come from the same row-wise kernels on logits
    // that are C-term dots in both paths (GEMM blocking over rows may change their
    // rounding by an ulp or two: 1e-6 of values of a few units). dx sums V terms per
    // element exactly as before (one GEMM per chunk of rows, rows independent). dW
    // sums N terms, in per-chunk partial sums added in turn instead of one GEMM:
    // rounding of N terms of size scale·|x| ~ 1/N, far below 1e-6 absolute on values
    // near the random G0 ~ 1. A chunk skipped, repeated or misaligned errs by ~1/N.
    // Under bf16/fp16 the two paths round different operands: the unfused one the
    // gradient scale·(softmax - onehot) and x, the fused one the unnormalised
    // exponentials and k·x (k = scale/Σexp). Each rounding errs by at most u = 2^-9
    // (bf16) or 2^-12 (fp16) relative, independently per element, so the gradients'
    // increments (dx - dx0, dW - dW0) differ by about u relative, as a whole: checked as
    // a relative L2 gap below 8u. A chunk skipped, repeated or misaligned, or a wrong
    // normalisation, gives a gap of order 1.
    char what[96];
    snprintf(what, sizeof what, "fused losses N=%d C=%d V=%d chunk=%d", N, C, V, chunk);
    expect_losses_close(what, flosses, losses, lse, N);
    snprintf(what, sizeof what, "fused lse N=%d C=%d V=%d chunk=%d", N, C, V, chunk);
    expect_close_f(what, flse, lse, N, 1e-6, 1e-6);
    snprintf(what, sizeof what, "fused dx N=%d C=%d V=%d chunk=%d", N, C, V, chunk);
    if (p == BG_FP32) expect_close_f(what, fdx, dx, nx, 1e-6, 1e-6);
    else expect_increment_close(what, fdx, dx, dx0, nx, p);
    snprintf(what, sizeof what, "fused dW N=%d C=%d V=%d chunk=%d", N, C, V, chunk);
    if (p == BG_FP32) expect_close_f(what, fdW, dW, nw, 1e-6, 1e-6);
    else expect_increment_close(what, fdW, dW, dW0, nw, p);

    // NULL gradients are skipped: the losses are still right.
    tu_fill_normal(flosses, N, 100.0);
    lmhead_xent_fused(kc, flosses, flse, NULL, NULL, x, W, targets, scale, N, C, V, buf, chunk);
    snprintf(what, sizeof what, "fused losses (no grads) N=%d chunk=%d", N, chunk);
    expect_losses_close(what, flosses, losses, lse, N);

    // Forward only.
    tu_fill_normal(flosses, N, 100.0);
    tu_fill_normal(flse, N, 100.0);
    lmhead_xent_forward(kc, flosses, flse, x, W, targets, N, C, V, buf, chunk);
    snprintf(what, sizeof what, "forward-only losses N=%d C=%d V=%d chunk=%d", N, C, V, chunk);
    expect_losses_close(what, flosses, losses, lse, N);
    snprintf(what, sizeof what, "forward-only lse N=%d C=%d V=%d chunk=%d", N, C, V, chunk);
    expect_close_f(what, flse, lse, N, 1e-6, 1e-6);

    free(x), free(W), free(dx0), free(dW0), free(targets);
    free(logits), free(losses), free(lse), free(dx), free(dW);
    free(buf), free(flosses), free(flse), free(fdx), free(fdW);
    kernel_ctx_free(kc);
}

int main(void) {
    test_fused(64, 16, 101, 16, BG_FP32);    // chunks divide N
    test_fused(67, 16, 101, 16, BG_FP32);    // a last chunk of 3 rows
    test_fused(37, 9, 50, 1, BG_FP32);       // one row at a time
    test_fused(20, 12, 33, 64, BG_FP32);     // one chunk larger than N
    test_fused(600, 64, 1000, 256, BG_FP32);  // the model's default chunk, 600 = 2·256 + 88
    // Mixed precision: the fused head writes the rounded dlogits itself.
    test_fused(67, 16, 101, 16, BG_BF16);
    test_fused(600, 64, 1000, 256, BG_BF16);
    test_fused(67, 16, 101, 16, BG_FP16);
    test_fused(600, 64, 1000, 256, BG_FP16);
    return tu_finish("kernels/test_lmhead_fused");
}
