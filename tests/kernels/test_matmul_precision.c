// Mixed-precision GEMMs: operand rounding bit-exact against core/half's integer
// reference, and bf16/fp16 GEMMs (forward and both backward products) against a
// double-precision product of the rounded operands.
//
// Tolerances: with operands rounded the same way, the only difference left is fp32
// accumulation over K terms (relative ~K·2^-24 of Σ|a·b|), so atol/rtol 2e-5 at
// K = 200 holds with a wide margin. Against the unrounded fp32 product the result must
// differ by about the format's rounding (bf16 2^-9, fp16 2^-12 relative per operand):
// above a floor (rounding happened) and below a ceiling (it was not worse).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/gemm_f32.h"
#include "kernels/kernels.h"
#include "test_util.h"

// Bit patterns over the whole fp32 range (a prime stride through 2^32) plus the edges:
// zeros, infinities, NaNs, fp16's largest finite and its rounding boundary, subnormals.
static size_t patterns(float *x, size_t n) {
    static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                     0xffc00001u, 0x7f800001u, 0x00000001u, 0x807fffffu, 0x477fe000u,
                                     0x477ff000u, 0x477fefffu, 0x33800000u, 0x33000000u, 0x33000001u,
                                     0x387fc000u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x3f7fffffu};
    size_t k = 0;
    for (size_t i = 0; i < sizeof edges / sizeof edges[0] && k < n; i++) x[k++] = bg_f32_from_bits(edges[i]);
    for (uint64_t u = 12345; k < n; u += 4099) x[k++] = bg_f32_from_bits((uint32_t)(u * 1048573u));
    return k;
}

static void check_casts(void) {
    size_t n = 1 << 20;  // large enough for the threaded path
    float *x = malloc(n * sizeof *x), *r = malloc(n * sizeof *r);
    uint16_t *h = malloc(n * sizeof *h);
    patterns(x, n);
    cast_f32_to_bf16(h, x, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != bg_f32_to_bf16(x[i]);
    TU_CHECK(bad == 0, "cast_f32_to_bf16: %zu of %zu differ from the reference", bad, n);
    // The serial path, a length that is no multiple of 16, at an unaligned start.
    const size_t ns = 1001;
    cast_f32_to_bf16(h, x + 3, ns);
    bad = 0;
    for (size_t i = 0; i < ns; i++) bad += h[i] != bg_f32_to_bf16(x[3 + i]);
    TU_CHECK(bad == 0, "cast_f32_to_bf16 (serial, %zu): %zu differ from the reference", ns, bad);
    round_f32_to_f16(r, x, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = bg_f16_to_f32(bg_f32_to_f16(x[i]));
        if (isnan(want) ? !isnan(r[i]) : bg_f32_bits(r[i]) != bg_f32_bits(want)) bad++;
    }
    TU_CHECK(bad == 0, "round_f32_to_f16: %zu of %zu differ from the reference", bad, n);
    TU_CHECK(isinf(r[9]) == 0 && r[9] == 65504.0f, "65504 (fp16's largest) must survive, got %g", r[9]);
    TU_CHECK(isinf(r[10]), "65520 must round to inf in fp16, got %g", r[10]);
    printf("casts: %zu patterns, bf16 and fp16 rounding equal the integer reference\n", n);
    free(x), free(r), free(h);
}

static kernel_ctx *g_kc;  // the GEMMs', its precision set by each check

static float round_as(bg_dtype p, float x) {
    if (p == BG_BF16) return bg_bf16_to_f32(bg_f32_to_bf16(x));
    if (p == BG_FP16) return bg_f16_to_f32(bg_f32_to_f16(x));
    return x;
}

// C(M,N) = A(M,K)·B(N,K)ᵀ in double on operands rounded to p; B given (N,K) with stride.
static void ref_gemm(double *c, const float *a, int sa_m, int sa_k, const float *b, int sb_n, int sb_k,
                     int M, int K, int N, bg_dtype p) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)round_as(p, a[i * sa_m + k * sa_k]) * round_as(p, b[j * sb_n + k * sb_k]);
            c[i * N + j] = s;
        }
}

static double max_rel_gap(const float *got, const double *want, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(got[i] - want[i]));
    return worst / scale;
}

static void check_gemms(bg_dtype p, bf16_path path, const char *name, double floor_gap,
                        double ceil_gap) {
    kernel_ctx_set_bf16_path(g_kc, path);
    const int M = 37, K = 200, N = 29;
    float *a = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K);
    float *dout = malloc(sizeof(float) * M * N), *out = malloc(sizeof(float) * M * N);
    float *dinp = calloc((size_t)M * K, sizeof(float)), *dw = calloc((size_t)N * K, sizeof(float));
    double *ref = malloc(sizeof(double) * M * K * 4), *ref32 = malloc(sizeof(double) * M * N);
    tu_fill_normal(a, (size_t)M * K, 1.0);
    tu_fill_normal(w, (size_t)N * K, 0.5);
    tu_fill_normal(dout, (size_t)M * N, 1.0);
    kernel_ctx_set_precision(g_kc, p);
    matmul_weights_changed(g_kc);
    long prims = matmul_primitives_created(g_kc);
    matmul_forward(g_kc, out, a, w, M, K, N);
    ref_gemm(ref, a, K, 1, w, K, 1, M, K, N, p);
    tu_expect_close(name, out, ref, (size_t)M * N, 2e-5, 2e-5);
    ref_gemm(ref32, a, K, 1, w, K, 1, M, K, N, BG_FP32);
    double gap = max_rel_gap(out, ref32, (size_t)M * N);
    printf("%s forward: largest gap to the unrounded product %.2e of its largest value\n", name, gap);
    TU_CHECK(gap > floor_gap && gap < ceil_gap, "%s: gap %.2e to fp32 outside [%.0e, %.0e]", name, gap,
             floor_gap, ceil_gap);
    // dinp(M,K) = dout(M,N)·w(N,K): B read as (K,N) → element (k, j) at w[j*K + k]
    matmul_backward(g_kc, dinp, dw, dout, a, w, M, K, N);
    ref_gemm(ref, dout, N, 1, w, 1, K, M, N, K, p);
    tu_expect_close("dinp", dinp, ref, (size_t)M * K, 2e-5, 2e-5);
    // dw(N,K) = doutᵀ(N,M)·a(M,K)
    ref_gemm(ref, dout, 1, N, a, 1, K, N, M, K, p);
    tu_expect_close("dweight", dw, ref, (size_t)N * K, 2e-5, 2e-5);
    // The same shapes again: no new primitive, and a changed weight is seen once
    // matmul_weights_changed says so.
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = -w[i];
    matmul_weights_changed(g_kc);
    matmul_forward(g_kc, out, a, w, M, K, N);
    ref_gemm(ref, a, K, 1, w, K, 1, M, K, N, p);
    tu_expect_close("forward after a weight change", out, ref, (size_t)M * N, 2e-5, 2e-5);
    long again = matmul_primitives_created(g_kc);
    matmul_forward(g_kc, out, a, w, M - 5, K, N);  // another M: still no new primitive
    TU_CHECK(matmul_primitives_created(g_kc) == again, "%s: a primitive created for a new M", name);
    printf("%s: %ld primitives for forward + backward\n", name, again - prims);
    // The router's fp32 path ignores the precision set.
    float *o32 = malloc(sizeof(float) * M * N);
    matmul_forward_fp32(g_kc, o32, a, w, M, K, N);
    kernel_ctx_set_precision(g_kc, BG_FP32);
    matmul_forward(g_kc, out, a, w, M, K, N);
    TU_CHECK(memcmp(o32, out, sizeof(float) * M * N) == 0, "%s: matmul_forward_fp32 is not fp32", name);
    free(a), free(w), free(dout), free(out), free(dinp), free(dw), free(ref), free(ref32), free(o32);
}

// Value i of buf in operand format f, as a float.
static float operand_value(const void *buf, size_t i, operand_format f) {
    if (f == OPERAND_BF16) return bg_bf16_to_f32(((const uint16_t *)buf)[i]);
    return ((const float *)buf)[i];
}

// How many of n values in operand format f differ, bit for bit, from want rounded to p.
static size_t operand_mismatches(const void *got, const float *want, size_t n, bg_dtype p,
                                 operand_format f) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float g = operand_value(got, i, f), w = round_as(p, want[i]);
        bad += bg_f32_bits(g) != bg_f32_bits(w);
    }
    return bad;
}

// The producers that write GEMM operands directly (activations and their gradients)
// give the bits of computing in fp32 and rounding, and GEMMs that read such operands,
// or write their data product instead of adding it, give the bits of the float path.
static void check_operand_producers(bg_dtype p, bf16_path path, const char *name) {
    kernel_ctx_set_precision(g_kc, p);
    kernel_ctx_set_bf16_path(g_kc, path);
    const operand_format f = kernel_ctx_operand_format(g_kc);
    const int N = 3, F = 1100;  // rows of more than one 1024-value block
    const size_t n = (size_t)N * F, n2 = 2 * n;
    float *x = malloc(n2 * sizeof *x), *dy = malloc(n * sizeof *dy);
    float *ref = malloc(n2 * sizeof *ref), *got = malloc(n2 * sizeof *got);
    tu_fill_normal(x, n2, 3.0);
    tu_fill_normal(dy, n, 1.0);
    x[0] = 0.0f, x[1] = 30.0f, x[2] = -30.0f;  // GELU's saturated tails, SiLU's too

    gelu_forward(ref, OPERAND_F32, x, n);
    gelu_forward(got, f, x, n);
    size_t bad = operand_mismatches(got, ref, n, p, f);
    TU_CHECK(bad == 0, "%s gelu_forward: %zu of %zu values differ from fp32 then rounding", name, bad, n);
    gelu_backward(ref, OPERAND_F32, dy, x, n);
    gelu_backward(got, f, dy, x, n);
    bad = operand_mismatches(got, ref, n, p, f);
    TU_CHECK(bad == 0, "%s gelu_backward: %zu of %zu values differ", name, bad, n);
    swiglu_forward(ref, OPERAND_F32, x, N, F);
    swiglu_forward(got, f, x, N, F);
    bad = operand_mismatches(got, ref, n, p, f);
    TU_CHECK(bad == 0, "%s swiglu_forward: %zu of %zu values differ", name, bad, n);
    swiglu_backward(ref, OPERAND_F32, dy, x, N, F);
    swiglu_backward(got, f, dy, x, N, F);
    bad = operand_mismatches(got, ref, n2, p, f);
    TU_CHECK(bad == 0, "%s swiglu_backward: %zu of %zu values differ", name, bad, n2);

    // GEMMs: out (M,Nn) = a (M,K) · w (Nn,K)ᵀ with a given as floats or rounded.
    const int M = 20, K = 300, Nn = 29;  // M·K fits ref and got (2·N·F values)
    float *a = malloc((size_t)M * K * sizeof *a), *w = malloc((size_t)Nn * K * sizeof *w);
    float *d = malloc((size_t)M * Nn * sizeof *d), *ar = malloc((size_t)M * K * sizeof *ar);
    float *o1 = malloc((size_t)M * K * sizeof *o1), *o2 = malloc((size_t)M * K * sizeof *o2);
    float *dw1 = calloc((size_t)Nn * K, sizeof *dw1), *dw2 = calloc((size_t)Nn * K, sizeof *dw2);
    tu_fill_normal(a, (size_t)M * K, 1.0);
    tu_fill_normal(w, (size_t)Nn * K, 1.0);
    tu_fill_normal(d, (size_t)M * Nn, 1.0);
    kernel_ctx_set_precision(g_kc, p);
    matmul_weights_changed(g_kc);
    gelu_forward(ar, f, a, (size_t)M * K);  // a rounded operand, and its float twin in ref
    gelu_forward(ref, OPERAND_F32, a, (size_t)M * K);
    matmul_forward(g_kc, o1, ref, w, M, K, Nn);
    matmul_forward_op(g_kc, o2, matmul_rounded(ar), w, M, K, Nn);
    TU_CHECK(!memcmp(o1, o2, (size_t)M * Nn * sizeof *o1), "%s matmul_forward_op: a rounded operand "
             "gives other bits than its floats", name);
    // WRITE equals ADD into zeros, bit for bit; the weight product sees the rounded
    // inp like the floats.
    memset(o1, 0, (size_t)M * K * sizeof *o1);
    for (size_t i = 0; i < (size_t)M * K; i++) o2[i] = NAN;  // WRITE must not read it
    matmul_backward(g_kc, o1, dw1, d, ref, w, M, K, Nn);
    matmul_backward_op(g_kc, o2, MATMUL_WRITE, dw2, matmul_floats(d), matmul_rounded(ar), w, M, K,
                       Nn);
    TU_CHECK(!memcmp(o1, o2, (size_t)M * K * sizeof *o1), "%s matmul_backward_op: WRITE differs from "
             "adding into zeros", name);
    TU_CHECK(!memcmp(dw1, dw2, (size_t)Nn * K * sizeof *dw1), "%s matmul_backward_op: the weight "
             "product from a rounded inp differs", name);
    // The weights product written equals it added into zeros (dw1 was zeros before),
    // and a written empty sum (no rows) is zeros.
    for (size_t i = 0; i < (size_t)Nn * K; i++) dw2[i] = NAN;
    matmul_weights_grad_op(g_kc, dw2, MATMUL_WRITE, matmul_floats(d), matmul_rounded(ar), M, K, Nn);
    TU_CHECK(!memcmp(dw1, dw2, (size_t)Nn * K * sizeof *dw1), "%s matmul_weights_grad_op: WRITE "
             "differs from adding into zeros", name);
    for (size_t i = 0; i < (size_t)Nn * K; i++) dw2[i] = NAN;
    matmul_weights_grad_op(g_kc, dw2, MATMUL_WRITE, matmul_floats(d), matmul_rounded(ar), 0, K, Nn);
    int zeros = 1;
    for (size_t i = 0; i < (size_t)Nn * K; i++) zeros &= dw2[i] == 0.0f;
    TU_CHECK(zeros, "%s matmul_weights_grad_op: a written empty sum is not zeros", name);
    kernel_ctx_set_precision(g_kc, BG_FP32);
    printf("%s: activations write rounded operands bit-exactly; GEMMs read them as the floats\n", name);
    free(x), free(dy), free(ref), free(got), free(a), free(w), free(d), free(ar);
    free(o1), free(o2), free(dw1), free(dw2);
}

// fp16's range: a product beyond 65504 in an operand is inf, as loss scaling expects.
static void check_fp16_overflow(void) {
    float a[4] = {1e5f, 1, 1, 1}, w[4] = {1, 0, 0, 0}, out[1];
    kernel_ctx_set_precision(g_kc, BG_FP16);
    matmul_weights_changed(g_kc);
    matmul_forward(g_kc, out, a, w, 1, 4, 1);
    TU_CHECK(isinf(out[0]), "fp16: an operand of 1e5 gave %g, expected inf", out[0]);
    kernel_ctx_set_precision(g_kc, BG_BF16);
    kernel_ctx_set_bf16_path(g_kc, BF16_PATH_FP32);  // the rounding, on any CPU
    matmul_forward(g_kc, out, a, w, 1, 4, 1);
    TU_CHECK(fabsf(out[0] - 99840.0f) < 1, "bf16: 1e5 rounds to 99840, got %g", out[0]);
    kernel_ctx_set_precision(g_kc, BG_FP32);
}

// The native bf16 GEMMs (kernels/test_matmul_precision_native, this program with
// --native): a skip (77) where oneDNN has no bf16 GEMM on this CPU (AVX2 only).
static int main_native(void) {
    if (!matmul_bf16_native_usable()) {
        printf("kernels/test_matmul_precision --native: oneDNN has no bf16 GEMM on this CPU: skipped\n");
        return 77;
    }
    tu_seed(11);
    g_kc = kernel_ctx_create(BG_FP32);
    check_gemms(BG_BF16, BF16_PATH_NATIVE, "bf16 native", 1e-4, 1e-2);
    check_operand_producers(BG_BF16, BF16_PATH_NATIVE, "bf16 native");
    kernel_ctx_free(g_kc);
    return tu_finish("matmul_precision --native");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--native")) return main_native();
    tu_seed(11);
    g_kc = kernel_ctx_create(BG_FP32);
    check_casts();
    // bf16 on both paths (the native one under --native): each is within the same
    // tolerance of the rounded operands' exact product. fp16 always runs through the
    // fp32 kernels (BF16_PATH_NATIVE does not change that).
    check_gemms(BG_BF16, BF16_PATH_FP32, "bf16 via fp32", 1e-4, 1e-2);
    check_gemms(BG_FP16, BF16_PATH_NATIVE, "fp16", 1e-5, 2e-3);
    check_fp16_overflow();
    check_operand_producers(BG_BF16, BF16_PATH_FP32, "bf16 via fp32");
    check_operand_producers(BG_FP16, BF16_PATH_NATIVE, "fp16");
    check_operand_producers(BG_FP32, BF16_PATH_NATIVE, "fp32");
    // The written products on every f32 GEMM this CPU can run (the own kernel writes
    // them itself; oneDNN's are zeros + sum).
    static const gemm_f32_impl impls[] = {GEMM_F32_ONEDNN, GEMM_F32_ONEDNN_T, GEMM_F32_OWN, GEMM_F32_MIXED};
    for (int i = 0; i < 4; i++) {
        if ((impls[i] == GEMM_F32_OWN || impls[i] == GEMM_F32_MIXED) && !gemm_f32_supported()) continue;
        char name[48];
        snprintf(name, sizeof name, "fp32 (%s)", gemm_f32_impl_name(impls[i]));
        kernel_ctx_set_gemm_f32(g_kc, impls[i]);
        check_operand_producers(BG_FP32, BF16_PATH_NATIVE, name);
        snprintf(name, sizeof name, "bf16 via fp32 (%s)", gemm_f32_impl_name(impls[i]));
        check_operand_producers(BG_BF16, BF16_PATH_FP32, name);
    }
    kernel_ctx_free(g_kc);
    return tu_finish("matmul_precision");
}
