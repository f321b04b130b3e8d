// Flash attention (tiled, online softmax) against
//   1. a double-precision reference of causal attention, forward and analytic backward,
//      on shapes with odd head sizes and T not a multiple of the 64-query block;
//   2. the naive float kernels attention_forward/attention_backward on the same inputs;
//   3. centred finite differences of the double forward on tiny cases (the backward
//      is the derivative of the forward, not just equal to another implementation);
//   4. itself under 1 to 4 threads: results must be bitwise identical.
// Each with NKV key/value heads (NKV = NH, and grouped-query attention: NKV < NH, query
// head h reading key/value head h / (NH/NKV), dK and dV summed over the group).
// Gradients are pre-filled with random values G0 to check the "+=" contract, and
// outputs, lse and workspace with garbage to check that they are overwritten.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/flash_attention_amx.h"
#include "kernels/kernels.h"
#include "test_util.h"

// One kernel context per precision (the kernels read theirs from it).
static kernel_ctx *ctx[BG_DTYPE_COUNT];

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

static void to_double(double *d, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = f[i];
}

// ---- double reference ---------------------------------------------------------------

// Floats of one token's q, k, v.
static size_t qkv_width(int C, int NH, int NKV) { return (size_t)C + 2 * (size_t)NKV * (C / NH); }

// out (B,T,C), lse (B,NH,T); if dqkv: dqkv (B,T,W) = d(Σ dout·out)/d(qkv) (writes).
static void ref_attention(double *out, double *lse, double *dqkv, const double *dout,
                          const double *qkv, int B, int T, int C, int NH, int NKV) {
    const int hs = C / NH, G = NH / NKV;
    const size_t C3 = qkv_width(C, NH, NKV), KV = (size_t)NKV * hs;
    const double scale = 1.0 / sqrt((double)hs);
    double *p = dalloc(T), *dp = dalloc(T);
    if (dqkv) memset(dqkv, 0, sizeof(double) * B * T * C3);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
                const double *q = base + t * C3;
                // k of kv head h/G at kb[u·C3 + i], v at kb[u·C3 + KV + i]
                const double *kb = qkv + (size_t)b * T * C3 + C + (size_t)(h / G) * hs;
                double maxv = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += q[i] * kb[u * C3 + i];
                    p[u] = s * scale;
                    if (p[u] > maxv) maxv = p[u];
                }
                for (int u = 0; u <= t; u++) sum += (p[u] = exp(p[u] - maxv));
                for (int u = 0; u <= t; u++) p[u] /= sum;
                if (lse) lse[((size_t)b * NH + h) * T + t] = maxv + log(sum);
                double *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int i = 0; i < hs; i++) {
                    double s = 0;
                    for (int u = 0; u <= t; u++) s += p[u] * kb[u * C3 + KV + i];
                    o[i] = s;
                }
                if (!dqkv) continue;
                // softmax backward: dS = P ∘ (dP - Σ P·dP), S = scale·q·k
                const double *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                double D = 0;
                for (int u = 0; u <= t; u++) {
                    double s = 0;
                    for (int i = 0; i < hs; i++) s += dy[i] * kb[u * C3 + KV + i];
                    dp[u] = s;
                    D += p[u] * s;
                }
                double *dbase = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
                double *dkb = dqkv + (size_t)b * T * C3 + C + (size_t)(h / G) * hs;
                for (int u = 0; u <= t; u++) {
                    const double ds = p[u] * (dp[u] - D) * scale;
                    for (int i = 0; i < hs; i++) {
                        dbase[t * C3 + i] += ds * kb[u * C3 + i];
                        dkb[u * C3 + i] += ds * q[i];
                        dkb[u * C3 + KV + i] += p[u] * dy[i];
                    }
                }
            }
    free(p), free(dp);
}

// ---- inputs -------------------------------------------------------------------------

// Random qkv of standard deviation std. `growing`: key t is scaled by 1 + t/32, so a
// query's largest score keeps moving to later key blocks and the online softmax must
// rescale its running sums block after block.
static void fill_qkv(float *qkv, int B, int T, int C, int NH, int NKV, double std, int growing) {
    const size_t W = qkv_width(C, NH, NKV);
    tu_fill_normal(qkv, (size_t)B * T * W, std);
    if (!growing) return;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *k = qkv + ((size_t)b * T + t) * W + C;
            for (size_t i = 0; i < (W - C) / 2; i++) k[i] *= 1.0f + t / 32.0f;
        }
}

// ---- 1 and 2: against the double reference and the naive kernels --------------------

static void test_equal_to_reference(int B, int T, int C, int NH, int NKV, double std, int growing) {
    const size_t nqkv = (size_t)B * T * qkv_width(C, NH, NKV), no = (size_t)B * T * C,
                 nl = (size_t)B * NH * T, natt = (size_t)B * NH * T * T;
    float *qkv = falloc(nqkv), *out = falloc(no), *lse = falloc(nl), *dout = falloc(no),
          *delta = falloc(flash_attention_scratch_size(B, T, C, NH, NKV)), *g0 = falloc(nqkv),
          *dqkv = falloc(nqkv);
    tu_seed(1000 + T * 7 + C);
    fill_qkv(qkv, B, T, C, NH, NKV, std, growing);
    tu_fill_normal(dout, no, 1.0);
    tu_fill_normal(g0, nqkv, 1.0);
    tu_fill_normal(out, no, 100.0);      // stale outputs must be overwritten,
    tu_fill_normal(lse, nl, 100.0);
    tu_fill_normal(delta, flash_attention_scratch_size(B, T, C, NH, NKV), 100.0);  // need not be clean
    double *dq = dalloc(nqkv), *ddout = dalloc(no), *rout = dalloc(no), *rlse = dalloc(nl),
           *rd = dalloc(nqkv);
    to_double(dq, qkv, nqkv);
    to_double(ddout, dout, no);
    ref_attention(rout, rlse, rd, ddout, dq, B, T, C, NH, NKV);
    for (size_t i = 0; i < nqkv; i++) rd[i] += g0[i];

    flash_attention_forward(ctx[BG_FP32], out, lse, delta, qkv, B, T, C, NH, NKV);
    memcpy(dqkv, g0, nqkv * sizeof(float));
    flash_attention_backward(ctx[BG_FP32], dqkv, delta, dout, qkv, out, lse, B, T, C, NH, NKV);

    // Tolerances. out is a convex combination of O(std) values: float roundings of
    // the hs-term scores, exp (1e-7) and the T-term sums (the online rescaling adds
    // one multiply per key block) stay near 1e-6 relative; 2e-5 leaves margin for
    // T = 300 while a wrong mask or a missed rescale errs by O(1e-2) or more.
    // lse is a log of a sum of ≤ T terms near its max: absolute 1e-5 on values up
    // to ~100 (std 3), so 1e-5 + 1e-6 relative. Gradients chain two such passes on
    // O(1) numbers and sum up to T of them: 1e-4 absolute and relative (measured
    // errors are 10-100x smaller; an index or mask bug errs by O(0.1)).
    char what[128];
    snprintf(what, sizeof what, "flash fwd vs reference B=%d T=%d C=%d NH=%d/%d std=%g%s", B, T,
             C, NH, NKV, std, growing ? " growing" : "");
    tu_expect_close(what, out, rout, no, 2e-5 * std, 2e-5);
    snprintf(what, sizeof what, "flash lse vs reference B=%d T=%d C=%d NH=%d/%d std=%g%s", B, T,
             C, NH, NKV, std, growing ? " growing" : "");
    tu_expect_close(what, lse, rlse, nl, 1e-5, 1e-6);
    snprintf(what, sizeof what, "flash dqkv vs reference B=%d T=%d C=%d NH=%d/%d std=%g%s", B, T,
             C, NH, NKV, std, growing ? " growing" : "");
    tu_expect_close(what, dqkv, rd, nqkv, 1e-4, 1e-4);

    // The naive float kernels on the same inputs: the same two quantities computed
    // with different summation orders, so the same tolerances apply between them.
    float *nout = falloc(no), *att = falloc(natt), *scratch = falloc(natt), *nd = falloc(nqkv);
    attention_forward(nout, att, qkv, B, T, C, NH, NKV);
    memcpy(nd, g0, nqkv * sizeof(float));
    attention_backward(nd, scratch, dout, qkv, att, B, T, C, NH, NKV);
    double *want = dalloc(nqkv);
    to_double(want, nout, no);
    snprintf(what, sizeof what, "flash fwd vs naive B=%d T=%d C=%d NH=%d/%d", B, T, C, NH, NKV);
    tu_expect_close(what, out, want, no, 2e-5 * std, 2e-5);
    to_double(want, nd, nqkv);
    snprintf(what, sizeof what, "flash dqkv vs naive B=%d T=%d C=%d NH=%d/%d", B, T, C, NH, NKV);
    tu_expect_close(what, dqkv, want, nqkv, 1e-4, 1e-4);

    free(want), free(nout), free(att), free(scratch), free(nd);
    free(dq), free(ddout), free(rout), free(rlse), free(rd);
    free(qkv), free(out), free(lse), free(dout), free(delta), free(g0), free(dqkv);
}

// ---- 3: finite differences ------------------------------------------------------------

typedef struct {
    int B, T, C, NH, NKV;
    double *qkv, *w, *out;
} fd_ctx;

// L = Σ w·out, computed in double.
static double fd_loss(fd_ctx *c) {
    ref_attention(c->out, NULL, NULL, NULL, c->qkv, c->B, c->T, c->C, c->NH, c->NKV);
    double s = 0;
    for (size_t i = 0; i < (size_t)c->B * c->T * c->C; i++) s += c->w[i] * c->out[i];
    return s;
}

// h = 1e-5 in double: truncation ~h²·|f'''| and cancellation ~1e-16·|L|/h are both
// ~1e-10, so the difference quotient is exact at float tolerances.
static void test_finite_differences(int B, int T, int C, int NH, int NKV) {
    const size_t nqkv = (size_t)B * T * qkv_width(C, NH, NKV), no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = falloc(nqkv), *w = falloc(no), *out = falloc(no), *lse = falloc(nl),
          *delta = falloc(flash_attention_scratch_size(B, T, C, NH, NKV)), *g0 = falloc(nqkv),
          *dqkv = falloc(nqkv);
    tu_seed(77 + T);
    fill_qkv(qkv, B, T, C, NH, NKV, 1.0, 0);
    tu_fill_normal(w, no, 1.0);
    tu_fill_normal(g0, nqkv, 1.0);
    fd_ctx c = {B, T, C, NH, NKV, dalloc(nqkv), dalloc(no), dalloc(no)};
    to_double(c.qkv, qkv, nqkv);
    to_double(c.w, w, no);
    double *want = dalloc(nqkv);
    for (size_t i = 0; i < nqkv; i++) {
        const double x0 = c.qkv[i];
        c.qkv[i] = x0 + 1e-5;
        const double lp = fd_loss(&c);
        c.qkv[i] = x0 - 1e-5;
        const double lm = fd_loss(&c);
        c.qkv[i] = x0;
        want[i] = g0[i] + (lp - lm) / 2e-5;
    }
    flash_attention_forward(ctx[BG_FP32], out, lse, delta, qkv, B, T, C, NH, NKV);
    memcpy(dqkv, g0, nqkv * sizeof(float));
    flash_attention_backward(ctx[BG_FP32], dqkv, delta, w, qkv, out, lse, B, T, C, NH, NKV);
    // As for the naive kernel in test_kernels_grad.c: O(1) gradients after ~20
    // float roundings, 1e-5; these T are small enough to keep that bound.
    char what[96];
    snprintf(what, sizeof what, "flash dqkv vs finite differences B=%d T=%d C=%d NH=%d/%d", B, T,
             C, NH, NKV);
    tu_expect_close(what, dqkv, want, nqkv, 1e-5, 1e-5);
    free(want), free(c.qkv), free(c.w), free(c.out);
    free(qkv), free(w), free(out), free(lse), free(delta), free(g0), free(dqkv);
}

// ---- 4: thread-count independence ---------------------------------------------------------

// 1 to 4 threads. The backward runs one task per head when B·NH tasks keep the threads
// busy, else two passes over blocks: with B·NH = 2, one and two threads take the
// first schedule and three and four the second, so this also checks that the two
// schedules give bitwise the same gradients.

static void test_threads(int B, int T, int C, int NH, int NKV, bg_dtype p) {
    const size_t nqkv = (size_t)B * T * qkv_width(C, NH, NKV), no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = falloc(nqkv), *dout = falloc(no),
          *delta = falloc(flash_attention_scratch_size(B, T, C, NH, NKV));
    float *out[4], *lse[4], *dqkv[4];
    tu_seed(5);
    fill_qkv(qkv, B, T, C, NH, NKV, 1.0, 0);
    tu_fill_normal(dout, no, 1.0);
    const int saved = omp_get_max_threads();
    for (int k = 0; k < 4; k++) {
        out[k] = falloc(no), lse[k] = falloc(nl), dqkv[k] = falloc(nqkv);
        omp_set_num_threads(k + 1);
        flash_attention_forward(ctx[p], out[k], lse[k], delta, qkv, B, T, C, NH, NKV);
        flash_attention_backward(ctx[p], dqkv[k], delta, dout, qkv, out[k], lse[k], B, T, C,
                                 NH, NKV);
    }
    omp_set_num_threads(saved);
    for (int k = 1; k < 4; k++) {
        const char *pn = bg_dtype_name(p);
        TU_CHECK(!memcmp(out[0], out[k], no * sizeof(float)), "%s out differs, 1 vs %d threads", pn,
                 k + 1);
        TU_CHECK(!memcmp(lse[0], lse[k], nl * sizeof(float)), "%s lse differs, 1 vs %d threads", pn,
                 k + 1);
        TU_CHECK(!memcmp(dqkv[0], dqkv[k], nqkv * sizeof(float)), "%s dqkv differs, 1 vs %d threads",
                 pn, k + 1);
    }
    for (int k = 0; k < 4; k++) free(out[k]), free(lse[k]), free(dqkv[k]);
    free(qkv), free(dout), free(delta);
}

// bench_step --gemm-alone's attention products: every schedule's loops stay inside the
// buffers (the sanitizer build reads every row they touch) and give zeros on zeros.
static void test_products_alone(int B, int T, int C, int NH, int NKV, bg_dtype p) {
    float *qkv = falloc((size_t)B * T * qkv_width(C, NH, NKV)), *dout = falloc((size_t)B * T * C),
          *ws = falloc(flash_attention_scratch_size(B, T, C, NH, NKV));
    for (int backward = 0; backward < 2; backward++) {
        const float r = flash_attention_products_alone(ctx[p], ws, qkv, dout, B, T, C, NH, NKV, backward);
        TU_CHECK(r == 0.0f, "%s products alone (backward %d) gave %g on zeros", bg_dtype_name(p), backward, r);
    }
    free(qkv), free(dout), free(ws);
}

// ---- 5: bf16 tile products --------------------------------------------------------------

static float round_bf16(float x) { return bg_bf16_to_f32(bg_f32_to_bf16(x)); }

// The largest |a - b| over n values, relative to the largest |b|.
static double rel_max_err(const float *a, const double *b, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs(a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return m > 0 ? e / m : e;
}

// Under BG_BF16 the products read qkv and dout rounded to bf16, and P and dS
// rounded as operands. Against the double reference on the rounded inputs, what is
// left is the rounding of P and dS (2^-9 relative each) in sums of up to T terms:
// errors measured at 8e-4 to 2e-3 of the largest value, lse's at 2e-7 (its scores are
// exact products of the rounded inputs summed in fp32); the bounds are 1e-2 (out,
// dqkv) and 1e-5 (lse). A layout or pairing bug errs by O(1). Where the build has AVX512-BF16 and
// hs is even, the results must also differ from the fp32 tiles' (the path ran).
// Every bf16 path is held to these bounds (so each is within them of the others); the
// fp32 tiles on rounded copies (paths fp32 and native-gemm) must differ from plain fp32 for every hs, and
// give the same bits from unrounded inputs as from rounded ones (it rounds them itself).
static void test_bf16_path(int B, int T, int C, int NH, int NKV, double std, int growing, bf16_path path) {
    kernel_ctx_set_bf16_path(ctx[BG_BF16], path);
    const size_t nqkv = (size_t)B * T * qkv_width(C, NH, NKV), no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    const size_t nscr = flash_attention_scratch_size(B, T, C, NH, NKV);
    float *qkv = falloc(nqkv), *dout = falloc(no), *scr = falloc(nscr), *out = falloc(no),
          *lse = falloc(nl), *dqkv = falloc(nqkv), *out32 = falloc(no), *lse32 = falloc(nl),
          *dqkv32 = falloc(nqkv);
    tu_seed(3000 + T + C);
    fill_qkv(qkv, B, T, C, NH, NKV, std, growing);
    tu_fill_normal(dout, no, 1.0);
    for (size_t i = 0; i < nqkv; i++) qkv[i] = round_bf16(qkv[i]);
    for (size_t i = 0; i < no; i++) dout[i] = round_bf16(dout[i]);
    double *dq = dalloc(nqkv), *ddout = dalloc(no), *rout = dalloc(no), *rlse = dalloc(nl),
           *rd = dalloc(nqkv);
    to_double(dq, qkv, nqkv);
    to_double(ddout, dout, no);
    ref_attention(rout, rlse, rd, ddout, dq, B, T, C, NH, NKV);

    tu_fill_normal(scr, nscr, 100.0);
    flash_attention_forward(ctx[BG_BF16], out, lse, scr, qkv, B, T, C, NH, NKV);
    flash_attention_backward(ctx[BG_BF16], dqkv, scr, dout, qkv, out, lse, B, T, C, NH, NKV);
    flash_attention_forward(ctx[BG_FP32], out32, lse32, scr, qkv, B, T, C, NH, NKV);
    flash_attention_backward(ctx[BG_FP32], dqkv32, scr, dout, qkv, out32, lse32, B, T, C, NH, NKV);

    const double eo = rel_max_err(out, rout, no), el = rel_max_err(lse, rlse, nl),
                 ed = rel_max_err(dqkv, rd, nqkv);
    printf("  bf16 (%s path) B=%d T=%d C=%d NH=%d: max error / max value: out %.2e, lse %.2e, "
           "dqkv %.2e\n", bf16_path_name(path), B, T, C, NH, eo, el, ed);
    TU_CHECK(eo < 1e-2, "bf16 out vs reference T=%d C=%d NH=%d: %.3g", T, C, NH, eo);
    TU_CHECK(el < 1e-5, "bf16 lse vs reference T=%d C=%d NH=%d: %.3g", T, C, NH, el);
    TU_CHECK(ed < 1e-2, "bf16 dqkv vs reference T=%d C=%d NH=%d: %.3g", T, C, NH, ed);
    if (path == BF16_PATH_FP32 || path == BF16_PATH_NATIVE_GEMM) {
        TU_CHECK(memcmp(out, out32, no * sizeof(float)), "bf16 (fp32 path) out equals fp32's");
        TU_CHECK(memcmp(dqkv, dqkv32, nqkv * sizeof(float)), "bf16 (fp32 path) dqkv equals fp32's");
        // Unrounded inputs: the path's own rounding gives the same bits.
        float *q2 = falloc(nqkv), *d2 = falloc(no), *o2 = falloc(no), *l2 = falloc(nl), *g2 = falloc(nqkv);
        tu_seed(3000 + T + C);
        fill_qkv(q2, B, T, C, NH, NKV, std, growing);
        tu_fill_normal(d2, no, 1.0);
        flash_attention_forward(ctx[BG_BF16], o2, l2, scr, q2, B, T, C, NH, NKV);
        flash_attention_backward(ctx[BG_BF16], g2, scr, d2, q2, o2, l2, B, T, C, NH, NKV);
        TU_CHECK(!memcmp(o2, out, no * sizeof(float)), "bf16 (fp32 path): inputs not rounded (out)");
        free(q2), free(d2), free(o2), free(l2), free(g2);
    }
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    // amx: its own tiles where hs is a multiple of 32, else the fp32 ones on rounded copies.
    if (path == BF16_PATH_AMX && (C / NH) % 32 == 0) {
        kernel_ctx_set_bf16_path(ctx[BG_BF16], BF16_PATH_NATIVE);
        float *on = falloc(no), *ln = falloc(nl), *gn = falloc(nqkv);
        flash_attention_forward(ctx[BG_BF16], on, ln, scr, qkv, B, T, C, NH, NKV);
        flash_attention_backward(ctx[BG_BF16], gn, scr, dout, qkv, on, ln, B, T, C, NH, NKV);
        TU_CHECK(memcmp(out, out32, no * sizeof(float)) && memcmp(out, on, no * sizeof(float)),
                 "amx out equals fp32's or native's: path not taken");
        TU_CHECK(memcmp(dqkv, dqkv32, nqkv * sizeof(float)) && memcmp(dqkv, gn, nqkv * sizeof(float)),
                 "amx dqkv equals fp32's or native's: path not taken");
        free(on), free(ln), free(gn);
        kernel_ctx_set_bf16_path(ctx[BG_BF16], path);
    }
    if (path == BF16_PATH_NATIVE && (C / NH) % 2 == 0) {
        TU_CHECK(memcmp(out, out32, no * sizeof(float)), "bf16 out equals fp32's: path not taken");
        TU_CHECK(memcmp(dqkv, dqkv32, nqkv * sizeof(float)), "bf16 dqkv equals fp32's: path not taken");
    }
#endif
    free(dq), free(ddout), free(rout), free(rlse), free(rd);
    free(qkv), free(dout), free(scr), free(out), free(lse), free(dqkv), free(out32), free(lse32),
        free(dqkv32);
}

static void test_bf16(int B, int T, int C, int NH, int NKV, double std, int growing) {
    test_bf16_path(B, T, C, NH, NKV, std, growing, BF16_PATH_NATIVE);
    test_bf16_path(B, T, C, NH, NKV, std, growing, BF16_PATH_FP32);
    test_bf16_path(B, T, C, NH, NKV, std, growing, BF16_PATH_NATIVE_GEMM);  // fp32 tiles too
    kernel_ctx_set_bf16_path(ctx[BG_BF16], bf16_path_default());
}

// The amx path's own tiles (hs a multiple of 32), run as their own CTest
// (kernels/test_flash_attention_amx, this program with --amx): a skip (77) where this
// process may not use AMX tiles. Partial row groups (T = 5, 17, 130, 300), every hs
// the tiles take, GQA, growing scores; the other hs of the path take the fp32 tiles.
static int test_amx(void) {
    if (!fa_amx_usable()) {
        printf("kernels/test_flash_attention --amx: this CPU or OS gives no AMX tiles: skipped\n");
        return 77;
    }
    test_bf16_path(2, 5, 64, 2, 2, 1.0, 0, BF16_PATH_AMX);      // hs 32, 5 rows: one partial group
    test_bf16_path(1, 17, 64, 1, 1, 1.0, 0, BF16_PATH_AMX);     // one full group and one row
    test_bf16_path(2, 130, 64, 2, 2, 1.0, 0, BF16_PATH_AMX);    // hs 32, three blocks
    test_bf16_path(1, 300, 256, 4, 4, 1.0, 0, BF16_PATH_AMX);   // M1's hs 64
    test_bf16_path(1, 200, 128, 1, 1, 1.5, 1, BF16_PATH_AMX);   // hs 128, growing scores
    test_bf16_path(1, 129, 256, 1, 1, 1.0, 1, BF16_PATH_AMX);   // hs 256, the largest
    test_bf16_path(1, 130, 256, 4, 2, 1.0, 0, BF16_PATH_AMX);   // GQA, hs 64
    test_bf16_path(1, 67, 20, 2, 2, 1.0, 0, BF16_PATH_AMX);     // hs 10: fp32 tiles
    kernel_ctx_set_bf16_path(ctx[BG_BF16], BF16_PATH_AMX);
    test_threads(2, 150, 64, 2, 2, BG_BF16);   // hs 32
    test_threads(1, 151, 256, 4, 2, BG_BF16);  // GQA, odd T
    kernel_ctx_set_bf16_path(ctx[BG_BF16], bf16_path_default());
    return tu_finish("kernels/test_flash_attention --amx");
}

int main(int argc, char **argv) {
    for (int p = 0; p < BG_DTYPE_COUNT; p++) ctx[p] = kernel_ctx_create((bg_dtype)p);
    if (argc > 1 && !strcmp(argv[1], "--amx")) {
        const int rc = test_amx();
        for (int p = 0; p < BG_DTYPE_COUNT; p++) kernel_ctx_free(ctx[p]);
        return rc;
    }
    // Odd head sizes (4, 5, 7, 9, 22) run every remainder path of the 4-wide register
    // blocks; T = 1, 5, 67, 130, 300 give one partial block, one block plus 3, two
    // plus 2, four plus 44.
    test_equal_to_reference(2, 5, 12, 3, 3, 1.0, 0);     // hs 4
    test_equal_to_reference(1, 7, 15, 3, 3, 1.0, 0);     // hs 5
    test_equal_to_reference(2, 1, 8, 2, 2, 1.0, 0);      // T = 1: one key, P = 1
    test_equal_to_reference(2, 64, 32, 2, 2, 1.0, 0);    // exactly one block, hs 16
    test_equal_to_reference(1, 67, 10, 2, 2, 1.0, 0);    // hs 5
    test_equal_to_reference(2, 130, 36, 4, 4, 1.0, 0);   // hs 9
    test_equal_to_reference(1, 129, 7, 1, 1, 1.0, 0);    // hs 7, one head
    test_equal_to_reference(1, 200, 66, 3, 3, 1.5, 1);   // hs 22, large and growing scores
    test_equal_to_reference(1, 300, 256, 4, 4, 1.0, 0);  // M1's hs 64
    test_equal_to_reference(1, 70, 256, 1, 1, 1.0, 1);   // hs 256, the largest supported
    // Grouped-query attention: groups of 2, 3 and 4 query heads per key/value head,
    // and one key/value head for all (multi-query).
    test_equal_to_reference(2, 5, 12, 6, 3, 1.0, 0);    // hs 2, G 2
    test_equal_to_reference(2, 130, 36, 4, 2, 1.0, 0);  // hs 9, G 2, blocks
    test_equal_to_reference(1, 200, 66, 6, 2, 1.5, 1);  // hs 11, G 3, growing
    test_equal_to_reference(1, 67, 32, 4, 1, 1.0, 0);   // multi-query
    test_finite_differences(2, 5, 12, 3, 3);
    test_finite_differences(2, 5, 12, 4, 2);
    test_finite_differences(1, 67, 12, 3, 1);  // multi-query across a block boundary
    test_finite_differences(1, 67, 10, 2, 2);  // crosses a block boundary
    test_threads(2, 150, 24, 3, 3, BG_FP32);  // B·NH = 6
    test_threads(1, 150, 24, 2, 2, BG_FP32);  // B·NH = 2
    test_threads(2, 150, 24, 3, 3, BG_BF16);
    test_threads(1, 151, 24, 2, 2, BG_BF16);  // odd T: the last token pair has one token
    test_threads(2, 150, 24, 4, 2, BG_FP32);  // GQA: B·NKV = 4, both schedules
    test_threads(1, 150, 24, 4, 2, BG_BF16);
    test_products_alone(2, 150, 24, 3, 3, BG_FP32);  // B·NH = 6
    test_products_alone(1, 151, 24, 4, 2, BG_FP32);  // GQA
    test_products_alone(1, 150, 24, 2, 2, BG_BF16);
    test_products_alone(2, 67, 24, 4, 2, BG_BF16);
    for (int i = 0; i < 2; i++) {  // the same on the other bf16 path
        const bf16_path other = bf16_path_default() == BF16_PATH_FP32 ? BF16_PATH_NATIVE : BF16_PATH_FP32;
        kernel_ctx_set_bf16_path(ctx[BG_BF16], i ? bf16_path_default() : other);
        if (!i) test_threads(2, 150, 24, 3, 3, BG_BF16);
    }
    // bf16 needs an even hs (odd ones take the fp32 tiles); odd T and partial blocks
    // exercise the padded pairs.
    test_bf16(2, 5, 12, 3, 3, 1.0, 0);     // hs 4
    test_bf16(1, 67, 20, 2, 2, 1.0, 0);    // hs 10: a 2-pair remainder of the 4-wide blocks
    test_bf16(2, 130, 36, 3, 3, 1.0, 0);   // hs 12
    test_bf16(1, 200, 66, 3, 3, 1.5, 1);   // hs 22, growing scores
    test_bf16(1, 300, 256, 4, 4, 1.0, 0);  // M1's hs 64
    test_bf16(1, 129, 256, 1, 1, 1.0, 1);  // hs 256
    test_bf16(1, 77, 15, 3, 3, 1.0, 0);    // hs 5: the fp32 tiles under bf16
    test_bf16(1, 130, 48, 4, 2, 1.0, 0);   // GQA, hs 12
    for (int p = 0; p < BG_DTYPE_COUNT; p++) kernel_ctx_free(ctx[p]);
    return tu_finish("kernels/test_flash_attention");
}
