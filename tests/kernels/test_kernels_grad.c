// Every kernel against a double-precision reference written here: the float forward
// against the reference forward, and the float backward against centred finite
// differences of the reference, for every input and weight gradient.
//
// The loss is L = Σ w·out with random w, and w is what the backward gets as dout.
// Inputs are drawn as floats and copied exactly into doubles, so the reference sees
// the very numbers the kernel sees and any difference is the kernel's rounding.
// Finite differences use h = 1e-5 in double: truncation error ~h²·|f'''| ~ 1e-10
// and cancellation error ~1e-16·|L|/h ~ 1e-10, far below the float tolerances,
// so the reference gradient is exact for our purposes.
//
// Gradients are pre-filled with random values G0 before the backward call and
// compared with G0 + reference: this checks the "+=" contract at the same time.
// Shapes are small and odd (C=12, T=5, K=7, hs=5) so vector tails run.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test_util.h"

#define FD_H 1e-5

// ---- helpers ------------------------------------------------------------------

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

// Random floats and their exact double copies.
static void fill_pair(float *f, double *d, size_t n, double std) {
    tu_fill_normal(f, n, std);
    for (size_t i = 0; i < n; i++) d[i] = f[i];
}

// The loss of the reference at the current double inputs; ctx holds everything.
typedef double (*loss_fn)(void *ctx);

// dL/dx by centred differences, x being one of the inputs loss() reads.
static void fd_grad(double *grad, double *x, size_t n, loss_fn loss, void *ctx) {
    for (size_t i = 0; i < n; i++) {
        const double x0 = x[i];
        x[i] = x0 + FD_H;
        const double lp = loss(ctx);
        x[i] = x0 - FD_H;
        const double lm = loss(ctx);
        x[i] = x0;
        grad[i] = (lp - lm) / (2 * FD_H);
    }
}

static double weighted_sum(const double *w, const double *y, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += w[i] * y[i];
    return s;
}

// got (accumulated onto g0) against g0 + want.
static void expect_accumulated(const char *what, const float *got, const float *g0,
                               const double *want, size_t n, double atol, double rtol) {
    double *sum = dalloc(n);
    for (size_t i = 0; i < n; i++) sum[i] = (double)g0[i] + want[i];
    tu_expect_close(what, got, sum, n, atol, rtol);
    free(sum);
}

static void expect_equal(const char *what, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            TU_CHECK(0, "%s: element %zu differs: %.9g vs %.9g", what, i, (double)a[i],
                     (double)b[i]);
            return;
        }
}

// A gradient buffer: random G0 kept aside, a working copy handed to the kernel.
typedef struct {
    float *g, *g0;
    size_t n;
} grad_buf;

static grad_buf grad_new(size_t n) {
    grad_buf b = {falloc(n), falloc(n), n};
    tu_fill_normal(b.g0, n, 1.0);
    memcpy(b.g, b.g0, n * sizeof(float));
    return b;
}

static void grad_reset(grad_buf *b) { memcpy(b->g, b->g0, b->n * sizeof(float)); }
static void grad_free(grad_buf *b) { free(b->g), free(b->g0); }

// ---- matmul ---------------------------------------------------------------------

typedef struct {
    int M, K, N;
    double *inp, *weight, *w, *out;
} matmul_ctx;

static void matmul_ref(double *out, const double *inp, const double *weight, int M, int K, int N) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += inp[(size_t)m * K + k] * weight[(size_t)n * K + k];
            out[(size_t)m * N + n] = s;
        }
}

static double matmul_loss(void *p) {
    matmul_ctx *c = p;
    matmul_ref(c->out, c->inp, c->weight, c->M, c->K, c->N);
    return weighted_sum(c->w, c->out, (size_t)c->M * c->N);
}

static kernel_ctx *g_kc;  // fp32 GEMMs

static void test_matmul(int M, int K, int N) {
    const size_t ni = (size_t)M * K, nw = (size_t)N * K, no = (size_t)M * N;
    float *inp = falloc(ni), *weight = falloc(nw), *out = falloc(no), *w = falloc(no);
    matmul_ctx c = {M, K, N, dalloc(ni), dalloc(nw), dalloc(no), dalloc(no)};
    fill_pair(inp, c.inp, ni, 1.0);
    fill_pair(weight, c.weight, nw, 1.0);
    fill_pair(w, c.w, no, 1.0);
    char what[96];

    // Forward: each output is a K-term dot product of O(1) values, |sum| up to
    // ~√K·3; float rounding adds at most K·6e-8 relative to Σ|terms| (≤ 40·6e-8·
    // 40 ≈ 1e-4 worst case, typically 100x less). atol 1e-5 + rtol 1e-5 covers the
    // typical case with margin; a wrong index or transposition errs by O(1).
    matmul_forward(g_kc, out, inp, weight, M, K, N);
    matmul_loss(&c);
    snprintf(what, sizeof what, "matmul fwd M=%d K=%d N=%d", M, K, N);
    tu_expect_close(what, out, c.out, no, 1e-5, 1e-5);

    // Backward: dinp sums N terms, dweight sums M terms, of the same size; same
    // reasoning and tolerance.
    double *gi = dalloc(ni), *gw = dalloc(nw);
    fd_grad(gi, c.inp, ni, matmul_loss, &c);
    fd_grad(gw, c.weight, nw, matmul_loss, &c);
    grad_buf di = grad_new(ni), dw = grad_new(nw);
    matmul_backward(g_kc, di.g, dw.g, w, inp, weight, M, K, N);
    snprintf(what, sizeof what, "matmul dinp M=%d K=%d N=%d", M, K, N);
    expect_accumulated(what, di.g, di.g0, gi, ni, 1e-5, 1e-5);
    snprintf(what, sizeof what, "matmul dweight M=%d K=%d N=%d", M, K, N);
    expect_accumulated(what, dw.g, dw.g0, gw, nw, 1e-5, 1e-5);

    // NULL gradients are skipped, and the other gradient is the very same.
    float *full_di = falloc(ni), *full_dw = falloc(nw);
    memcpy(full_di, di.g, ni * sizeof(float));
    memcpy(full_dw, dw.g, nw * sizeof(float));
    grad_reset(&di), grad_reset(&dw);
    matmul_backward(g_kc, di.g, NULL, w, inp, weight, M, K, N);
    matmul_backward(g_kc, NULL, dw.g, w, inp, weight, M, K, N);
    matmul_backward(g_kc, NULL, NULL, w, inp, weight, M, K, N);
    expect_equal("matmul dinp alone", di.g, full_di, ni);
    expect_equal("matmul dweight alone", dw.g, full_dw, nw);

    free(full_di), free(full_dw), free(gi), free(gw);
    grad_free(&di), grad_free(&dw);
    free(inp), free(weight), free(out), free(w);
    free(c.inp), free(c.weight), free(c.w), free(c.out);
}

// ---- embedding ------------------------------------------------------------------

typedef struct {
    int N, T, C;
    const int *tokens;
    double *wte, *wpe, *w, *out;  // wpe may be NULL
} embedding_ctx;

static double embedding_loss(void *p) {
    embedding_ctx *c = p;
    for (int n = 0; n < c->N; n++)
        for (int ch = 0; ch < c->C; ch++)
            c->out[(size_t)n * c->C + ch] = c->wte[(size_t)c->tokens[n] * c->C + ch] +
                (c->wpe ? c->wpe[(size_t)(n % c->T) * c->C + ch] : 0.0);
    return weighted_sum(c->w, c->out, (size_t)c->N * c->C);
}

static void test_embedding(int use_wpe) {
    const int B = 3, T = 5, C = 12, V = 7, maxT = T + 2, N = B * T;
    int tokens[3 * 5];
    for (int n = 0; n < N; n++) tokens[n] = (int)(tu_uniform() * V);  // 15 draws of 7: repeats
    const size_t nte = (size_t)V * C, npe = (size_t)maxT * C, no = (size_t)N * C;
    float *wte = falloc(nte), *wpe = falloc(npe), *out = falloc(no), *w = falloc(no);
    embedding_ctx c = {N, T, C, tokens, dalloc(nte), use_wpe ? dalloc(npe) : NULL, dalloc(no),
                       dalloc(no)};
    fill_pair(wte, c.wte, nte, 1.0);
    if (use_wpe) fill_pair(wpe, c.wpe, npe, 1.0);
    fill_pair(w, c.w, no, 1.0);

    // Forward is one float addition (or a copy): within half an ulp, 1e-7 relative.
    embedding_forward(out, tokens, wte, use_wpe ? wpe : NULL, N, T, C);
    embedding_loss(&c);
    tu_expect_close(use_wpe ? "embedding fwd" : "embedding fwd (no wpe)", out, c.out, no, 1e-7,
                    2e-7);

    // Backward sums at most N=15 O(1) terms per element: error ≤ 15·6e-8·Σ|terms|
    // ≈ 4e-6 worst case; tolerance 1e-5.
    double *gte = dalloc(nte), *gpe = dalloc(npe);
    fd_grad(gte, c.wte, nte, embedding_loss, &c);
    if (use_wpe) fd_grad(gpe, c.wpe, npe, embedding_loss, &c);  // rows >= T stay 0
    grad_buf dte = grad_new(nte), dpe = grad_new(npe);
    embedding_backward(dte.g, use_wpe ? dpe.g : NULL, w, tokens, N, T, C);
    expect_accumulated("embedding dwte", dte.g, dte.g0, gte, nte, 1e-5, 1e-5);
    if (use_wpe) {
        expect_accumulated("embedding dwpe", dpe.g, dpe.g0, gpe, npe, 1e-5, 1e-5);
        float *full = falloc(nte);
        memcpy(full, dte.g, nte * sizeof(float));
        grad_reset(&dte);
        embedding_backward(NULL, dpe.g, w, tokens, N, T, C);  // dwte skipped, dwpe added again
        expect_equal("embedding dwte untouched when NULL", dte.g, dte.g0, nte);
        embedding_backward(dte.g, NULL, w, tokens, N, T, C);
        expect_equal("embedding dwte alone", dte.g, full, nte);
        free(full);
    } else {
        expect_equal("embedding dwpe untouched when NULL", dpe.g, dpe.g0, npe);
    }

    free(gte), free(gpe);
    grad_free(&dte), grad_free(&dpe);
    free(wte), free(wpe), free(out), free(w);
    free(c.wte), free(c.wpe), free(c.w), free(c.out);
}

// ---- layernorm ------------------------------------------------------------------

typedef struct {
    int N, C;
    double eps;
    double *inp, *weight, *bias, *w, *out;  // bias may be NULL
} norm_ctx;

static double layernorm_loss(void *p) {
    norm_ctx *c = p;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->inp + (size_t)n * c->C;
        double m = 0, v = 0;
        for (int i = 0; i < c->C; i++) m += x[i];
        m /= c->C;
        for (int i = 0; i < c->C; i++) v += (x[i] - m) * (x[i] - m);
        const double r = 1.0 / sqrt(v / c->C + c->eps);
        for (int i = 0; i < c->C; i++)
            c->out[(size_t)n * c->C + i] =
                (x[i] - m) * r * c->weight[i] + (c->bias ? c->bias[i] : 0.0);
    }
    return weighted_sum(c->w, c->out, (size_t)c->N * c->C);
}

static void test_layernorm(int N, int C, int use_bias) {
    const float eps = 1e-5f;
    const size_t nx = (size_t)N * C;
    float *inp = falloc(nx), *weight = falloc(C), *bias = falloc(C), *out = falloc(nx),
          *w = falloc(nx), *mean = falloc(N), *rstd = falloc(N);
    norm_ctx c = {N, C, eps, dalloc(nx), dalloc(C), use_bias ? dalloc(C) : NULL, dalloc(nx),
                  dalloc(nx)};
    fill_pair(inp, c.inp, nx, 1.0);
    for (size_t i = 0; i < nx; i++)  // rows with different means
        inp[i] += 0.5f * (float)(i / C), c.inp[i] = inp[i];
    fill_pair(weight, c.weight, C, 1.0);
    if (use_bias) fill_pair(bias, c.bias, C, 1.0);
    fill_pair(w, c.w, nx, 1.0);
    char what[96];

    // Forward: mean and variance are C-term sums (C ≤ 40: ≤ 40·6e-8 relative worst
    // case), then a few roundings per output of size O(3): 1e-5 is ample; a missing
    // bias or a wrong normalisation errs by O(1).
    layernorm_forward(out, mean, rstd, inp, weight, use_bias ? bias : NULL, N, C, eps);
    layernorm_loss(&c);
    snprintf(what, sizeof what, "layernorm fwd N=%d C=%d bias=%d", N, C, use_bias);
    tu_expect_close(what, out, c.out, nx, 1e-5, 1e-5);

    // Backward: dinp combines two C-term sums, each output gradient of size O(1..10);
    // dweight/dbias sum N terms. Accumulated error ≤ ~(C+N)·6e-8 relative to the
    // terms; 2e-5 leaves a margin over the worst case seen and still fails any
    // wrong term (which errs by O(0.1) or more).
    double *gx = dalloc(nx), *gw = dalloc(C), *gb = dalloc(C);
    fd_grad(gx, c.inp, nx, layernorm_loss, &c);
    fd_grad(gw, c.weight, C, layernorm_loss, &c);
    if (use_bias) fd_grad(gb, c.bias, C, layernorm_loss, &c);
    grad_buf dx = grad_new(nx), dw = grad_new(C), db = grad_new(C);
    layernorm_backward(dx.g, dw.g, use_bias ? db.g : NULL, w, inp, weight, mean, rstd, N, C);
    snprintf(what, sizeof what, "layernorm dinp N=%d C=%d", N, C);
    expect_accumulated(what, dx.g, dx.g0, gx, nx, 2e-5, 2e-5);
    snprintf(what, sizeof what, "layernorm dweight N=%d C=%d", N, C);
    expect_accumulated(what, dw.g, dw.g0, gw, C, 2e-5, 2e-5);
    if (use_bias) {
        snprintf(what, sizeof what, "layernorm dbias N=%d C=%d", N, C);
        expect_accumulated(what, db.g, db.g0, gb, C, 2e-5, 2e-5);
    } else {
        expect_equal("layernorm dbias untouched when NULL", db.g, db.g0, C);
    }

    // Each NULL subset leaves its buffer alone and the rest identical.
    float *full_dx = falloc(nx), *full_dw = falloc(C);
    memcpy(full_dx, dx.g, nx * sizeof(float));
    memcpy(full_dw, dw.g, C * sizeof(float));
    grad_reset(&dx), grad_reset(&dw), grad_reset(&db);
    layernorm_backward(dx.g, NULL, NULL, w, inp, weight, mean, rstd, N, C);
    expect_equal("layernorm dinp alone", dx.g, full_dx, nx);
    expect_equal("layernorm dweight untouched when NULL", dw.g, dw.g0, C);
    layernorm_backward(NULL, dw.g, NULL, w, inp, weight, mean, rstd, N, C);
    expect_equal("layernorm dweight alone", dw.g, full_dw, C);
    expect_equal("layernorm dbias untouched when NULL", db.g, db.g0, C);

    free(full_dx), free(full_dw), free(gx), free(gw), free(gb);
    grad_free(&dx), grad_free(&dw), grad_free(&db);
    free(inp), free(weight), free(bias), free(out), free(w), free(mean), free(rstd);
    free(c.inp), free(c.weight), free(c.bias), free(c.w), free(c.out);
}

// ---- rmsnorm --------------------------------------------------------------------

static double rmsnorm_loss(void *p) {
    norm_ctx *c = p;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->inp + (size_t)n * c->C;
        double ss = 0;
        for (int i = 0; i < c->C; i++) ss += x[i] * x[i];
        const double r = 1.0 / sqrt(ss / c->C + c->eps);
        for (int i = 0; i < c->C; i++) c->out[(size_t)n * c->C + i] = x[i] * r * c->weight[i];
    }
    return weighted_sum(c->w, c->out, (size_t)c->N * c->C);
}

static void test_rmsnorm(int N, int C) {
    const float eps = 1e-6f;
    const size_t nx = (size_t)N * C;
    float *inp = falloc(nx), *weight = falloc(C), *out = falloc(nx), *w = falloc(nx),
          *rstd = falloc(N);
    norm_ctx c = {N, C, eps, dalloc(nx), dalloc(C), NULL, dalloc(nx), dalloc(nx)};
    fill_pair(inp, c.inp, nx, 1.0);
    fill_pair(weight, c.weight, C, 1.0);
    fill_pair(w, c.w, nx, 1.0);
    char what[96];

    // Same sums as layernorm without the mean; same tolerances and reasons.
    rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
    rmsnorm_loss(&c);
    snprintf(what, sizeof what, "rmsnorm fwd N=%d C=%d", N, C);
    tu_expect_close(what, out, c.out, nx, 1e-5, 1e-5);

    double *gx = dalloc(nx), *gw = dalloc(C);
    fd_grad(gx, c.inp, nx, rmsnorm_loss, &c);
    fd_grad(gw, c.weight, C, rmsnorm_loss, &c);
    grad_buf dx = grad_new(nx), dw = grad_new(C);
    rmsnorm_backward(dx.g, dw.g, w, inp, weight, rstd, N, C);
    snprintf(what, sizeof what, "rmsnorm dinp N=%d C=%d", N, C);
    expect_accumulated(what, dx.g, dx.g0, gx, nx, 2e-5, 2e-5);
    snprintf(what, sizeof what, "rmsnorm dweight N=%d C=%d", N, C);
    expect_accumulated(what, dw.g, dw.g0, gw, C, 2e-5, 2e-5);

    float *full_dx = falloc(nx), *full_dw = falloc(C);
    memcpy(full_dx, dx.g, nx * sizeof(float));
    memcpy(full_dw, dw.g, C * sizeof(float));
    grad_reset(&dx), grad_reset(&dw);
    rmsnorm_backward(dx.g, NULL, w, inp, weight, rstd, N, C);
    expect_equal("rmsnorm dinp alone", dx.g, full_dx, nx);
    expect_equal("rmsnorm dweight untouched when NULL", dw.g, dw.g0, C);
    rmsnorm_backward(NULL, dw.g, w, inp, weight, rstd, N, C);
    expect_equal("rmsnorm dweight alone", dw.g, full_dw, C);

    free(full_dx), free(full_dw), free(gx), free(gw);
    grad_free(&dx), grad_free(&dw);
    free(inp), free(weight), free(out), free(w), free(rstd);
    free(c.inp), free(c.weight), free(c.w), free(c.out);
}

// ---- GELU -----------------------------------------------------------------------

typedef struct {
    size_t n;
    double *inp, *w, *out;
} pointwise_ctx;

static double gelu_loss(void *p) {
    pointwise_ctx *c = p;
    for (size_t i = 0; i < c->n; i++) {
        const double x = c->inp[i];
        c->out[i] = 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    }
    return weighted_sum(c->w, c->out, c->n);
}

static void test_gelu(void) {
    const size_t n = 203;  // not a multiple of any vector width
    float *inp = falloc(n), *out = falloc(n), *w = falloc(n);
    pointwise_ctx c = {n, dalloc(n), dalloc(n), dalloc(n)};
    fill_pair(inp, c.inp, n, 2.0);  // reaches the saturated tails (|x| > 4)
    inp[0] = 0.0f, c.inp[0] = 0.0;
    inp[1] = 12.0f, c.inp[1] = 12.0;
    inp[2] = -12.0f, c.inp[2] = -12.0;
    fill_pair(w, c.w, n, 1.0);

    // The kernel's tanh has absolute error ≤ 2e-7, so gelu errs by ≤ 0.5·|x|·2e-7
    // plus a few roundings: atol 2e-6 covers |x| up to 12; rtol 1e-6.
    gelu_forward(out, OPERAND_F32, inp, n);
    gelu_loss(&c);
    tu_expect_close("gelu fwd", out, c.out, n, 2e-6, 1e-6);

    // The derivative formula evaluated with that tanh: ≈ |x|·(1+3·0.0447x²)·2e-7 at
    // worst, ≤ 2e-6 where the derivative is not saturated; atol 5e-6.
    double *gx = dalloc(n);
    fd_grad(gx, c.inp, n, gelu_loss, &c);
    float *dx = falloc(n);
    gelu_backward(dx, OPERAND_F32, w, inp, n);  // writes
    tu_expect_close("gelu dinp", dx, gx, n, 5e-6, 1e-5);

    free(gx), free(dx);
    free(inp), free(out), free(w);
    free(c.inp), free(c.w), free(c.out);
}

// ---- SwiGLU ---------------------------------------------------------------------

typedef struct {
    int N, F;
    double *inp, *w, *out;
} swiglu_ctx;

static double swiglu_loss(void *p) {
    swiglu_ctx *c = p;
    for (int n = 0; n < c->N; n++)
        for (int f = 0; f < c->F; f++) {
            const double g = c->inp[(size_t)n * 2 * c->F + f];
            const double u = c->inp[(size_t)n * 2 * c->F + c->F + f];
            c->out[(size_t)n * c->F + f] = g / (1.0 + exp(-g)) * u;
        }
    return weighted_sum(c->w, c->out, (size_t)c->N * c->F);
}

static void test_swiglu(int N, int F) {
    const size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
    float *inp = falloc(ni), *out = falloc(no), *w = falloc(no);
    swiglu_ctx c = {N, F, dalloc(ni), dalloc(no), dalloc(no)};
    fill_pair(inp, c.inp, ni, 2.0);
    fill_pair(w, c.w, no, 1.0);

    // A handful of roundings per element plus exp's 1e-7 relative error: 1e-6.
    swiglu_forward(out, OPERAND_F32, inp, N, F);
    swiglu_loss(&c);
    tu_expect_close("swiglu fwd", out, c.out, no, 1e-6, 1e-6);

    // The gate derivative has ~8 roundings on values up to ~|g·u| ~ 20: atol 5e-6.
    double *gx = dalloc(ni);
    fd_grad(gx, c.inp, ni, swiglu_loss, &c);
    float *dx = falloc(ni);
    swiglu_backward(dx, OPERAND_F32, w, inp, N, F);  // writes
    tu_expect_close("swiglu dinp", dx, gx, ni, 5e-6, 5e-6);

    free(gx), free(dx);
    free(inp), free(out), free(w);
    free(c.inp), free(c.w), free(c.out);
}

// ---- RoPE -----------------------------------------------------------------------

// qkv rows of C + 2·NKV·hs floats: q of NH heads, k and v of NKV (grouped-query
// attention when NKV < NH).
static size_t qkv_width(int C, int NH, int NKV) { return (size_t)C + 2 * (size_t)NKV * (C / NH); }

typedef struct {
    int B, T, C, NH, NKV;
    double theta;
    double *qkv, *w, *out;
} rope_ctx;

// Hugging Face's formula, literally: q·cos + rotate_half(q)·sin with
// rotate_half(x) = [-x2, x1] and cos/sin of t·θ^(-2i/hs) repeated for both halves.
static double rope_loss(void *p) {
    rope_ctx *c = p;
    const int hs = c->C / c->NH, half = hs / 2;
    const size_t W = qkv_width(c->C, c->NH, c->NKV), n = (size_t)c->B * c->T * W;
    memcpy(c->out, c->qkv, n * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int part = 0; part < 2; part++)
                for (int h = 0; h < (part ? c->NKV : c->NH); h++) {
                    const double *x = c->qkv + ((size_t)b * c->T + t) * W +
                                      (size_t)part * c->C + (size_t)h * hs;
                    double *y = c->out + (x - c->qkv);
                    for (int d = 0; d < hs; d++) {
                        const int i = d % half;
                        const double ang = t * pow(c->theta, -2.0 * i / hs);
                        const double rot = d < half ? -x[d + half] : x[d - half];
                        y[d] = x[d] * cos(ang) + rot * sin(ang);
                    }
                }
    return weighted_sum(c->w, c->out, n);
}

static void test_rope(int B, int T, int C, int NH, int NKV) {
    const int hs = C / NH, half = hs / 2;
    const float theta = 10000.0f;
    const size_t W = qkv_width(C, NH, NKV), n = (size_t)B * T * W;
    float *qkv = falloc(n), *w = falloc(n);
    float *cos_t = falloc((size_t)T * half), *sin_t = falloc((size_t)T * half);
    rope_ctx c = {B, T, C, NH, NKV, theta, dalloc(n), dalloc(n), dalloc(n)};
    fill_pair(qkv, c.qkv, n, 1.0);
    fill_pair(w, c.w, n, 1.0);
    char what[96];

    // Two products and a sum of O(1) values, with cos/sin rounded to float: ≤ ~4
    // half-ulps, 1e-6 absolute; v must come out bit-identical.
    rope_tables(cos_t, sin_t, T, hs, theta);
    rope_forward(qkv, cos_t, sin_t, B, T, C, NH, NKV);
    rope_loss(&c);
    snprintf(what, sizeof what, "rope fwd T=%d C=%d NH=%d/%d", T, C, NH, NKV);
    tu_expect_close(what, qkv, c.out, n, 1e-6, 1e-6);
    for (size_t i = 0; i < n; i++)
        if (i % W >= (W + C) / 2 && qkv[i] != (float)c.qkv[i]) {
            TU_CHECK(0, "rope fwd changed v at %zu", i);
            break;
        }

    // Backward is an in-place transform of dout (not an accumulation): the inverse
    // rotation of w. Same rounding as the forward.
    double *g = dalloc(n);
    fd_grad(g, c.qkv, n, rope_loss, &c);
    float *d = falloc(n);
    memcpy(d, w, n * sizeof(float));
    rope_backward(d, cos_t, sin_t, B, T, C, NH, NKV);
    snprintf(what, sizeof what, "rope dqkv T=%d C=%d NH=%d/%d", T, C, NH, NKV);
    tu_expect_close(what, d, g, n, 1e-6, 1e-6);

    free(g), free(d), free(qkv), free(w), free(cos_t), free(sin_t);
    free(c.qkv), free(c.w), free(c.out);
}

// ---- attention ------------------------------------------------------------------

typedef struct {
    int B, T, C, NH, NKV;
    double *qkv, *w, *out, *att;
} attention_ctx;

// Query head h reads key/value head h / (NH/NKV), as transformers' repeat_kv.
static double attention_loss(void *p) {
    attention_ctx *c = p;
    const int B = c->B, T = c->T, C = c->C, NH = c->NH, hs = C / NH, G = NH / c->NKV;
    const size_t W = qkv_width(C, NH, c->NKV), KV = (size_t)c->NKV * hs;
    const double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = c->qkv + ((size_t)b * T + t) * W + (size_t)h * hs;
                double *a = c->att + (((size_t)b * NH + h) * T + t) * T;
                double maxv = -INFINITY, sum = 0;
                for (int t2 = 0; t2 < T; t2++) {
                    if (t2 > t) { a[t2] = 0; continue; }
                    const double *k = c->qkv + ((size_t)b * T + t2) * W + C + (size_t)(h / G) * hs;
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    a[t2] = s * scale;
                    if (a[t2] > maxv) maxv = a[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) sum += (a[t2] = exp(a[t2] - maxv));
                for (int t2 = 0; t2 <= t; t2++) a[t2] /= sum;
                double *o = c->out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++) {
                    double s = 0;
                    for (int t2 = 0; t2 <= t; t2++)
                        s += a[t2] *
                             c->qkv[((size_t)b * T + t2) * W + C + KV + (size_t)(h / G) * hs + i];
                    o[i] = s;
                }
            }
    return weighted_sum(c->w, c->out, (size_t)B * T * C);
}

static void test_attention(int B, int T, int C, int NH, int NKV) {
    const size_t nqkv = (size_t)B * T * qkv_width(C, NH, NKV), no = (size_t)B * T * C,
                 natt = (size_t)B * NH * T * T;
    float *qkv = falloc(nqkv), *out = falloc(no), *w = falloc(no), *att = falloc(natt),
          *scratch = falloc(natt);
    attention_ctx c = {B, T, C, NH, NKV, dalloc(nqkv), dalloc(no), dalloc(no), dalloc(natt)};
    fill_pair(qkv, c.qkv, nqkv, 1.0);
    fill_pair(w, c.w, no, 1.0);
    tu_fill_normal(att, natt, 100.0);      // stale values must be overwritten,
    tu_fill_normal(scratch, natt, 100.0);  // and scratch need not be clean
    char what[96];

    // Forward: scores are hs-term dots, softmax adds exp's 1e-7 and a T-term sum,
    // out is a T-term convex combination of O(1) values. All ≤ ~20 roundings of
    // O(1) numbers: 1e-5 absolute/relative with margin. att above the diagonal is
    // compared too (the reference holds exact zeros there).
    attention_forward(out, att, qkv, B, T, C, NH, NKV);
    attention_loss(&c);
    snprintf(what, sizeof what, "attention fwd T=%d C=%d NH=%d/%d", T, C, NH, NKV);
    tu_expect_close(what, out, c.out, no, 1e-5, 1e-5);
    snprintf(what, sizeof what, "attention att T=%d C=%d NH=%d/%d", T, C, NH, NKV);
    tu_expect_close(what, att, c.att, natt, 1e-6, 1e-5);

    // Backward chains the two passes (dots, softmax backward, T-term sums): about
    // twice the forward's roundings, on gradients of size O(1): still within 1e-5.
    double *g = dalloc(nqkv);
    fd_grad(g, c.qkv, nqkv, attention_loss, &c);
    grad_buf d = grad_new(nqkv);
    attention_backward(d.g, scratch, w, qkv, att, B, T, C, NH, NKV);
    snprintf(what, sizeof what, "attention dqkv T=%d C=%d NH=%d/%d", T, C, NH, NKV);
    expect_accumulated(what, d.g, d.g0, g, nqkv, 1e-5, 1e-5);

    free(g);
    grad_free(&d);
    free(qkv), free(out), free(w), free(att), free(scratch);
    free(c.qkv), free(c.w), free(c.out), free(c.att);
}

// ---- cross-entropy --------------------------------------------------------------

typedef struct {
    int N, V;
    double scale;
    const int *targets;
    double *logits, *losses;
} xent_ctx;

// L = scale · Σ losses: the backward's `scale` plays the role of dout.
static double xent_loss(void *p) {
    xent_ctx *c = p;
    double total = 0;
    for (int n = 0; n < c->N; n++) {
        const double *x = c->logits + (size_t)n * c->V;
        double maxv = -INFINITY, sum = 0;
        for (int v = 0; v < c->V; v++) maxv = x[v] > maxv ? x[v] : maxv;
        for (int v = 0; v < c->V; v++) sum += exp(x[v] - maxv);
        c->losses[n] = maxv + log(sum) - x[c->targets[n]];
        total += c->losses[n];
    }
    return c->scale * total;
}

static void test_crossentropy(int N, int V) {
    const size_t nl = (size_t)N * V;
    int *targets = malloc(N * sizeof(int));
    for (int n = 0; n < N; n++) targets[n] = (int)(tu_uniform() * V);
    float *logits = falloc(nl), *losses = falloc(N), *lse = falloc(N), *dl = falloc(nl);
    xent_ctx c = {N, V, 0.37, targets, dalloc(nl), dalloc(N)};
    fill_pair(logits, c.logits, nl, 3.0);
    // Row 0 far up and row 1 far down: e^{±200} overflows or vanishes in float
    // unless the max is subtracted.
    for (int v = 0; v < V; v++) {
        logits[v] += 200.0f, c.logits[v] = logits[v];
        if (N > 1) logits[V + v] -= 200.0f, c.logits[V + v] = logits[V + v];
    }
    char what[96];

    // lse ≈ 200 in float carries ulp(200)/2 = 8e-6 of representation error; the
    // loss is a difference of two such numbers: atol 3e-5, rtol 1e-5.
    crossentropy_forward(losses, lse, logits, targets, N, V);
    xent_loss(&c);
    snprintf(what, sizeof what, "crossentropy loss N=%d V=%d", N, V);
    tu_expect_close(what, losses, c.losses, N, 3e-5, 1e-5);

    // dlogits = scale·(p - onehot): exp of a difference that carries the lse's
    // 8e-6 error: relative error ≤ 1e-5 of p, so atol 1e-6 on |scale·p| ≤ 0.37.
    double *g = dalloc(nl);
    fd_grad(g, c.logits, nl, xent_loss, &c);
    tu_fill_normal(dl, nl, 100.0);  // WRITES: stale contents must vanish
    crossentropy_backward(dl, logits, lse, targets, (float)c.scale, N, V);
    snprintf(what, sizeof what, "crossentropy dlogits N=%d V=%d", N, V);
    tu_expect_close(what, dl, g, nl, 1e-6, 1e-5);

    // In place, as the model calls it: bit-identical to the out-of-place result.
    float *inplace = falloc(nl);
    memcpy(inplace, logits, nl * sizeof(float));
    crossentropy_backward(inplace, inplace, lse, targets, (float)c.scale, N, V);
    expect_equal("crossentropy in place", inplace, dl, nl);

    free(g), free(inplace), free(targets);
    free(logits), free(losses), free(lse), free(dl);
    free(c.logits), free(c.losses);
}

// ---- residual and vector ops ----------------------------------------------------

typedef struct {
    size_t n;
    double *a, *b, *w, *out;
} residual_ctx;

static double residual_loss(void *p) {
    residual_ctx *c = p;
    for (size_t i = 0; i < c->n; i++) c->out[i] = c->a[i] + c->b[i];
    return weighted_sum(c->w, c->out, c->n);
}

static void test_residual(void) {
    const size_t n = 77;
    float *a = falloc(n), *b = falloc(n), *out = falloc(n), *w = falloc(n);
    residual_ctx c = {n, dalloc(n), dalloc(n), dalloc(n), dalloc(n)};
    fill_pair(a, c.a, n, 1.0);
    fill_pair(b, c.b, n, 1.0);
    fill_pair(w, c.w, n, 1.0);

    // One rounding: half an ulp, 6e-8 relative; atol for a+b cancelling to ~0.
    residual_forward(out, a, b, n);
    residual_loss(&c);
    tu_expect_close("residual fwd", out, c.out, n, 1e-7, 1.2e-7);

    // The residual's backward is vec_add of dout into both input gradients.
    double *ga = dalloc(n), *gb = dalloc(n);
    fd_grad(ga, c.a, n, residual_loss, &c);
    fd_grad(gb, c.b, n, residual_loss, &c);
    grad_buf da = grad_new(n), db = grad_new(n);
    vec_add(da.g, w, n);
    vec_add(db.g, w, n);
    expect_accumulated("residual da (vec_add)", da.g, da.g0, ga, n, 1e-7, 1.2e-7);
    expect_accumulated("residual db (vec_add)", db.g, db.g0, gb, n, 1e-7, 1.2e-7);

    // In place (out == a), as a residual stream update is written.
    residual_forward(a, a, b, n);
    expect_equal("residual in place", a, out, n);

    vec_zero(da.g, n);
    for (size_t i = 0; i < n; i++)
        TU_CHECK(da.g[i] == 0.0f, "vec_zero left %g at %zu", (double)da.g[i], i);

    // Large enough to take the threaded path.
    const size_t big = 100003;
    float *x = falloc(big), *y = falloc(big), *z = falloc(big);
    tu_fill_normal(x, big, 1.0);
    tu_fill_normal(y, big, 1.0);
    residual_forward(z, x, y, big);
    vec_add(y, x, big);
    expect_equal("residual_forward vs vec_add (large)", z, y, big);
    vec_zero(z, big);
    for (size_t i = 0; i < big; i++)
        if (z[i] != 0.0f) {
            TU_CHECK(0, "vec_zero (large) left %g at %zu", (double)z[i], i);
            break;
        }

    free(x), free(y), free(z), free(ga), free(gb);
    grad_free(&da), grad_free(&db);
    free(a), free(b), free(out), free(w);
    free(c.a), free(c.b), free(c.w), free(c.out);
}

int main(void) {
    tu_seed(20240520);
    g_kc = kernel_ctx_create(BG_FP32);
    test_matmul(5, 7, 3);
    test_matmul(13, 33, 17);
    test_matmul(1, 1, 1);
    test_matmul(40, 19, 24);
    test_embedding(1);
    test_embedding(0);
    test_layernorm(6, 12, 1);
    test_layernorm(5, 37, 0);
    test_layernorm(3, 1, 1);  // C=1: x̂ = 0, only the bias passes
    test_rmsnorm(6, 12);
    test_rmsnorm(4, 37);
    test_gelu();
    test_swiglu(5, 7);
    test_swiglu(3, 33);
    test_rope(2, 5, 12, 3, 3);   // hs 4
    test_rope(1, 7, 20, 2, 2);   // hs 10: half 5, odd
    test_rope(2, 5, 16, 4, 2);   // grouped-query: k has 2 heads
    test_attention(2, 5, 12, 3, 3);  // hs 4
    test_attention(1, 7, 15, 3, 3);  // hs 5, odd
    test_attention(2, 1, 8, 2, 2);   // T=1: one key, att = 1
    test_attention(2, 5, 16, 4, 2);  // grouped-query: dK, dV sum over 2 query heads
    test_attention(1, 6, 12, 3, 1);  // multi-query
    test_crossentropy(6, 37);
    test_crossentropy(2, 1);  // V=1: loss 0, gradient 0
    test_residual();
    kernel_ctx_free(g_kc);
    return tu_finish("kernels/test_kernels_grad");
}
