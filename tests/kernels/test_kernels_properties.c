// Properties of the kernels that a value-by-value comparison does not show:
// attention is causal in both directions, every non-GEMM kernel gives bitwise the
// same result at any thread count, cross-entropy holds up at a GPT-2 sized
// vocabulary, and RoPE's backward undoes its forward.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test_util.h"

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static float *random_floats(size_t n, double std) {
    float *x = falloc(n);
    tu_fill_normal(x, n, std);
    return x;
}

static float *copy_floats(const float *x, size_t n) {
    float *y = falloc(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}

static int same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

// Changing token t0's q, k and v leaves every output and probability of earlier
// queries bit-identical; and a gradient arriving only at query t reaches q, k, v
// of positions <= t only.
static void test_attention_causal(void) {
    const int B = 2, T = 6, C = 12, NH = 3, t0 = 3;
    const size_t nqkv = (size_t)B * T * 3 * C, no = (size_t)B * T * C,
                 natt = (size_t)B * NH * T * T;
    float *qkv = random_floats(nqkv, 1.0), *out1 = falloc(no), *out2 = falloc(no);
    float *att1 = falloc(natt), *att2 = falloc(natt);
    attention_forward(out1, att1, qkv, B, T, C, NH, NH);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < 3 * C; i++) qkv[((size_t)b * T + t0) * 3 * C + i] += 1.0f;
    attention_forward(out2, att2, qkv, B, T, C, NH, NH);
    for (int b = 0; b < B; b++) {
        const size_t row = (size_t)b * T * C;
        TU_CHECK(same_bits(out1 + row, out2 + row, (size_t)t0 * C),
                 "attention: a change at t=%d moved an earlier output (b=%d)", t0, b);
        TU_CHECK(!same_bits(out1 + row + (size_t)t0 * C, out2 + row + (size_t)t0 * C, C),
                 "attention: the change at t=%d did not reach its own output", t0);
        for (int h = 0; h < NH; h++) {
            const size_t a = ((size_t)b * NH + h) * T * T;
            TU_CHECK(same_bits(att1 + a, att2 + a, (size_t)t0 * T),
                     "attention: a change at t=%d moved earlier probabilities", t0);
            for (int t = 0; t < T; t++) {
                double sum = 0;
                for (int t2 = 0; t2 < T; t2++) {
                    const float p = att2[a + (size_t)t * T + t2];
                    if (t2 > t) TU_CHECK(p == 0.0f, "attention: att above the diagonal");
                    sum += p;
                }
                // T terms each within a few ulps: 1e-6.
                TU_CHECK(fabs(sum - 1.0) < 1e-6, "attention: row sums to %.9g", sum);
            }
        }
    }

    // Backward: dout only at query t = 2 of batch 1.
    const int tq = 2;
    float *dout = falloc(no), *dqkv = falloc(nqkv), *scratch = random_floats(natt, 1.0);
    for (int i = 0; i < C; i++) dout[((size_t)1 * T + tq) * C + i] = (float)tu_normal();
    attention_backward(dqkv, scratch, dout, qkv, att2, B, T, C, NH, NH);
    for (size_t i = 0; i < nqkv; i++) {
        const int b = (int)(i / ((size_t)T * 3 * C)), t = (int)(i / (3 * C) % T);
        if (b == 0 || t > tq) {
            if (dqkv[i] != 0.0f) {
                TU_CHECK(0, "attention backward: gradient leaked to b=%d t=%d", b, t);
                break;
            }
        }
    }
    free(qkv), free(out1), free(out2), free(att1), free(att2);
    free(dout), free(dqkv), free(scratch);
}

// Runs one kernel call with a given thread count.
typedef void (*kernel_call)(void *ctx);

static void with_threads(int n, kernel_call f, void *ctx) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(n);
    f(ctx);
    omp_set_num_threads(saved);
}

typedef struct {
    int B, T, C, NH, V, N;
    const int *tokens;
    const float *x, *w, *dy, *qkv, *att, *logits, *mean, *rstd, *lse;
    float *out, *g1, *g2, *g3, *scratch;
    size_t n1, n2, n3;
} det_ctx;

static void run_embedding_bwd(void *p) {
    det_ctx *c = p;
    embedding_backward(c->g1, c->g2, c->dy, c->tokens, c->N, c->T, c->C);
}
static void run_layernorm_fwd(void *p) {
    det_ctx *c = p;
    layernorm_forward(c->out, c->g2, c->g3, c->x, c->w, c->w, c->N, c->C, 1e-5f);
}
static void run_layernorm_bwd(void *p) {
    det_ctx *c = p;
    layernorm_backward(c->g1, c->g2, c->g3, c->dy, c->x, c->w, c->mean, c->rstd, c->N, c->C);
}
static void run_rmsnorm_bwd(void *p) {
    det_ctx *c = p;
    rmsnorm_backward(c->g1, c->g2, c->dy, c->x, c->w, c->rstd, c->N, c->C);
}
static void run_attention_fwd(void *p) {
    det_ctx *c = p;
    attention_forward(c->out, c->g2, c->qkv, c->B, c->T, c->C, c->NH, c->NH);
}
static void run_attention_bwd(void *p) {
    det_ctx *c = p;
    attention_backward(c->g1, c->scratch, c->dy, c->qkv, c->att, c->B, c->T, c->C, c->NH, c->NH);
}
static void run_crossentropy(void *p) {
    det_ctx *c = p;
    crossentropy_forward(c->g2, c->g3, c->logits, c->tokens, c->N, c->V);
    crossentropy_backward(c->g1, c->logits, c->lse, c->tokens, 0.5f, c->N, c->V);
}
static void run_swiglu_bwd(void *p) {
    det_ctx *c = p;
    swiglu_backward(c->g1, OPERAND_F32, c->dy, c->x, c->N, c->C / 2);
}
static void run_gelu_bwd(void *p) {
    det_ctx *c = p;
    gelu_backward(c->g1, OPERAND_F32, c->dy, c->x, c->n1);
}

// The result buffers g1..g3 (and out) start from the same values for each thread
// count; all must come out bitwise equal.
static void expect_thread_invariant(const char *what, kernel_call f, det_ctx *c, size_t nout) {
    float *g1 = copy_floats(c->g1, c->n1), *g2 = copy_floats(c->g2, c->n2),
          *g3 = copy_floats(c->g3, c->n3), *out = copy_floats(c->out, nout);
    with_threads(1, f, c);
    float *r1 = copy_floats(c->g1, c->n1), *r2 = copy_floats(c->g2, c->n2),
          *r3 = copy_floats(c->g3, c->n3), *ro = copy_floats(c->out, nout);
    const int counts[] = {2, 3, 7};
    for (int k = 0; k < 3; k++) {
        memcpy(c->g1, g1, c->n1 * sizeof(float));
        memcpy(c->g2, g2, c->n2 * sizeof(float));
        memcpy(c->g3, g3, c->n3 * sizeof(float));
        memcpy(c->out, out, nout * sizeof(float));
        with_threads(counts[k], f, c);
        TU_CHECK(same_bits(r1, c->g1, c->n1) && same_bits(r2, c->g2, c->n2) &&
                     same_bits(r3, c->g3, c->n3) && same_bits(ro, c->out, nout),
                 "%s: %d threads differ from 1 thread", what, counts[k]);
    }
    free(g1), free(g2), free(g3), free(out), free(r1), free(r2), free(r3), free(ro);
}

static void test_thread_invariance(void) {
    // Big enough that every thread gets rows and channel blocks; C=100 is not a
    // multiple of the 16-channel block.
    const int B = 3, T = 33, C = 100, NH = 4, V = 50, N = B * T;
    const size_t nx = (size_t)N * C, nqkv = (size_t)N * 3 * C, natt = (size_t)B * NH * T * T;
    int *tokens = malloc(N * sizeof(int));
    for (int n = 0; n < N; n++) tokens[n] = (int)(tu_uniform() * V) % 13;  // many repeats
    float *x = random_floats(nx, 1.0), *w = random_floats(C, 1.0), *dy = random_floats(nx, 1.0);
    float *qkv = random_floats(nqkv, 1.0), *logits = random_floats((size_t)N * V, 2.0);
    float *mean = falloc(N), *rstd = falloc(N), *att = falloc(natt), *lse = falloc(N);
    float *tmp = falloc(nx), *losses = falloc(N);
    layernorm_forward(tmp, mean, rstd, x, w, w, N, C, 1e-5f);
    attention_forward(tmp, att, qkv, B, T, C, NH, NH);
    crossentropy_forward(losses, lse, logits, tokens, N, V);

    det_ctx c = {B, T, C, NH, V, N, tokens, x, w, dy, qkv, att, logits, mean, rstd, lse,
                 falloc(nx), NULL, NULL, NULL, falloc(natt), 0, 0, 0};
    // embedding: g1 = dwte (V,C), g2 = dwpe (T,C)
    c.g1 = random_floats((size_t)V * C, 1.0), c.n1 = (size_t)V * C;
    c.g2 = random_floats((size_t)T * C, 1.0), c.n2 = (size_t)T * C;
    c.g3 = falloc(1), c.n3 = 1;
    expect_thread_invariant("embedding_backward", run_embedding_bwd, &c, 0);
    free(c.g1), free(c.g2), free(c.g3);

    c.g1 = random_floats(nx, 1.0), c.n1 = nx;
    c.g2 = random_floats(C > N ? C : N, 1.0), c.n2 = C > N ? C : N;
    c.g3 = random_floats(C > N ? C : N, 1.0), c.n3 = C > N ? C : N;
    expect_thread_invariant("layernorm_forward", run_layernorm_fwd, &c, nx);
    expect_thread_invariant("layernorm_backward", run_layernorm_bwd, &c, 0);
    expect_thread_invariant("rmsnorm_backward", run_rmsnorm_bwd, &c, 0);
    expect_thread_invariant("swiglu_backward", run_swiglu_bwd, &c, 0);
    expect_thread_invariant("gelu_backward", run_gelu_bwd, &c, 0);
    free(c.g1), free(c.g2), free(c.g3);

    c.g1 = random_floats(nqkv, 1.0), c.n1 = nqkv;
    c.g2 = falloc(natt), c.n2 = natt;
    c.g3 = falloc(1), c.n3 = 1;
    expect_thread_invariant("attention_forward", run_attention_fwd, &c, nx);
    expect_thread_invariant("attention_backward", run_attention_bwd, &c, 0);
    free(c.g1), free(c.g2), free(c.g3);

    c.g1 = falloc((size_t)N * V), c.n1 = (size_t)N * V;
    c.g2 = falloc(N), c.n2 = N;
    c.g3 = falloc(N), c.n3 = N;
    expect_thread_invariant("crossentropy", run_crossentropy, &c, 0);
    free(c.g1), free(c.g2), free(c.g3);

    free(c.out), free(c.scratch), free(tokens), free(x), free(w), free(dy), free(qkv);
    free(logits), free(mean), free(rstd), free(att), free(lse), free(tmp), free(losses);
}

// GPT-2's vocabulary: 50257 logits a row, long vector loops with a tail. Loss and
// probabilities against double precision.
static void test_crossentropy_large_vocab(void) {
    const int N = 3, V = 50257;
    float *logits = random_floats((size_t)N * V, 4.0), *losses = falloc(N), *lse = falloc(N);
    int targets[3] = {0, V - 1, 12345};
    crossentropy_forward(losses, lse, logits, targets, N, V);
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        double maxv = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) maxv = x[v] > maxv ? x[v] : maxv;
        for (int v = 0; v < V; v++) sum += exp(x[v] - maxv);
        const double want_lse = maxv + log(sum);
        const double want = want_lse - x[targets[n]];
        // exp errs by ≤ 1e-7 relative per term and the sum is in double, so the
        // log-sum-exp is good to ~1e-7 relative of values ~20; then one float
        // rounding of ~20 (1e-6) and a subtraction: 5e-6 absolute.
        TU_CHECK(fabs(losses[n] - want) < 5e-6, "crossentropy V=%d row %d: loss %.9g want %.9g",
                 V, n, (double)losses[n], want);
        TU_CHECK(fabs(lse[n] - want_lse) < 5e-6, "crossentropy V=%d row %d: lse %.9g want %.9g",
                 V, n, (double)lse[n], want_lse);
    }
    float *d = copy_floats(logits, (size_t)N * V);
    crossentropy_backward(d, d, lse, targets, 1.0f, N, V);  // in place, as the model does
    for (int n = 0; n < N; n++) {
        double sum = 0;
        for (int v = 0; v < V; v++) sum += d[(size_t)n * V + v];
        // Σ(p - onehot) = 0; p carries ~5e-6 relative error from the float lse:
        // 1e-5 absolute.
        TU_CHECK(fabs(sum) < 1e-5, "crossentropy V=%d row %d: gradient sums to %.3g", V, n, sum);
    }
    free(logits), free(losses), free(lse), free(d);
}

// The backward applies the transpose of the forward rotation; on a vector that
// is its inverse, so forward then backward gives the input back.
static void test_rope_roundtrip(void) {
    const int B = 2, T = 64, C = 48, NH = 4, hs = C / NH;
    const size_t n = (size_t)B * T * 3 * C;
    float *cos_t = falloc((size_t)T * hs / 2), *sin_t = falloc((size_t)T * hs / 2);
    rope_tables(cos_t, sin_t, T, hs, 500000.0f);
    float *x = random_floats(n, 1.0), *y = copy_floats(x, n);
    rope_forward(y, cos_t, sin_t, B, T, C, NH, NH);
    rope_backward(y, cos_t, sin_t, B, T, C, NH, NH);
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)y[i] - x[i]));
    // Two rotations of O(1) values, each a few roundings, and cos²+sin² = 1 only
    // to float precision: 1e-6.
    TU_CHECK(worst < 1e-6, "rope: backward(forward(x)) differs from x by %.3g", worst);
    // Position 0 is the identity rotation.
    TU_CHECK(cos_t[0] == 1.0f && sin_t[0] == 0.0f, "rope: position 0 is not the identity");
    free(cos_t), free(sin_t), free(x), free(y);
}

int main(void) {
    tu_seed(11);
    test_attention_causal();
    test_thread_invariance();
    test_crossentropy_large_vocab();
    test_rope_roundtrip();
    return tu_finish("kernels/test_kernels_properties");
}
