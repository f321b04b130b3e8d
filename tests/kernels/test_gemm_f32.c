// The own f32 GEMM (kernels/gemm_f32.h: AVX-512 and AVX2) and the choice between it and oneDNN:
// - direct calls over many odd shapes (1..~300), every operand layout (row- or
//   column-major, padded strides), C written and added, against a double-precision
//   reference with test_matmul.c's bound;
// - determinism: a row (a column) of C is bitwise the same whether computed with the
//   rest of C or alone, and for 1, 2 and 3 threads; each kernel the CPU runs (AVX-512,
//   AVX2) gives bitwise the sums of the documented order, done one fmaf at a time;
// - the three matmul kinds through matmul.c with each implementation forced;
// - the choice rule and BAGUALU_GEMM's parsing.
// The own kernel's parts run under --own (kernels/test_gemm_f32_own), a skip (77)
// without AVX-512F or AVX2 with FMA; the rest (the rule, oneDNN and onednn-t) everywhere.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/gemm_f32.h"
#include "kernels/kernels.h"
#include "test_util.h"
#include "kernels/gemm_f32_test_util.h"

#define UNIT_ROUNDOFF 5.9604644775390625e-8  // 2^-24
enum { THREADS = 3 };

static float *g_scratch[THREADS];

// Every element of C within the bound of g0 + Σ A·B (test_matmul.c explains the bound).
static int check_against_reference(const char *what, const gemm_f32_args *g, const float *c0) {
    double worst = 0;
    int wi = 0, wj = 0;
    for (int i = 0; i < g->M; i++)
        for (int j = 0; j < g->N; j++) {
            const double g0 = g->accumulate ? c0[i * g->ldc + j] : 0.0;
            double s = g0, terms = 0;
            for (int k = 0; k < g->K; k++) {
                const double t = (double)g->a[i * g->a_rs + k * g->a_cs] * g->b[k * g->b_rs + j * g->b_cs];
                s += t, terms += fabs(t);
            }
            const double bound = ((sqrt((double)g->K) + 2) * terms + 2 * fabs(g0)) * UNIT_ROUNDOFF + 1e-30;
            const double r = fabs(g->c[i * g->ldc + j] - s) / bound;
            if (!(r <= worst)) worst = r, wi = i, wj = j;
        }
    TU_CHECK(worst <= 1.0, "%s: (%d,%d) off by %.1fx the bound", what, wi, wj, worst);
    return worst <= 1.0;
}

// One spec: the product checked, and the same bits for 1, 2 and 3 threads.
static void check_spec(const spec *s) {
    spec_operands o = spec_operands_make(s);
    float *c = o.out[0], *c1 = o.out[1], *c0 = o.c0;
    const size_t cn = o.cn;
    gemm_f32_args g = o.g;
    char what[96];
    snprintf(what, sizeof what, "M %d N %d K %d A%s B%s pad %d %s", s->M, s->N, s->K, s->a_trans ? "ᵀ" : "",
             s->b_trans ? "ᵀ" : "", s->pad, s->accumulate ? "+=" : "=");
    for (int threads = 1; threads <= THREADS; threads++) {
        memcpy(c, c0, cn * sizeof(float));
        gemm_f32(&g, g_scratch, threads);
        if (threads == 1) {
            check_against_reference(what, &g, c0);
            memcpy(c1, c, cn * sizeof(float));
        } else {
            TU_CHECK(!memcmp(c, c1, cn * sizeof(float)), "%s: %d threads differ from one", what, threads);
        }
    }
    spec_operands_free(&o);
}

static void test_shapes(void) {
    static const int sizes[] = {1, 2, 13, 14, 15, 17, 31, 33, 47, 97, 255, 257, 301};
    const int ns = sizeof sizes / sizeof sizes[0];
    int n = 0;
    for (int layout_id = 0; layout_id < 16; layout_id++)
        for (int r = 0; r < 6; r++, n++) {
            spec s = {sizes[(n * 7 + r) % ns], sizes[(n * 5 + 3 * r + 1) % ns], sizes[(n * 3 + r + 2) % ns],
                      layout_id & 1, (layout_id >> 1) & 1, (layout_id >> 2) & 1 ? 3 : 0, (layout_id >> 3) & 1};
            if ((double)s.M * s.N * s.K > 3e6) s.K = 33;  // keeps the reference quick
            check_spec(&s);
        }
    // More than one block of every size: K past KC (C added to between blocks), N past
    // NC, M past MC.
    check_spec(&(spec){29, 45, 3 * GEMM_F32_KC + 5, 0, 1, 0, 1});
    check_spec(&(spec){31, 2100, 40, 1, 0, 0, 0});  // past NC of both kernels (1536, 2048)
    check_spec(&(spec){700, 20, 19, 0, 0, 1, 1});
    // A read transposed past MC (packed k by k across a block's panels), with padding.
    check_spec(&(spec){700, 37, 300, 1, 0, 1, 1});
}

// Each kernel this CPU runs, bit for bit the scalar order: so the AVX-512 and the AVX2
// kernels agree with each other, whichever machine a run resumes on.
static void test_fixed_order(void) {
    static const spec specs[] = {{23, 37, 2 * GEMM_F32_KC + 19, 0, 0, 0, 0}, {9, 70, 300, 1, 1, 3, 1},
                                 {40, 5, 257, 0, 1, 0, 1}, {130, 33, 64, 1, 0, 3, 0}};
    const gemm_f32_fn kernels[2] = {gemm_f32_avx512, gemm_f32_avx2};
    const int runs[2] = {gemm_f32_avx512_supported(), gemm_f32_avx2_supported()};
    for (int q = 0; q < 4; q++) {
        const spec *s = &specs[q];
        spec_operands o = spec_operands_make(s);
        for (int v = 0; v < 2; v++) {
            if (!runs[v]) continue;
            const int row = fixed_order_first_bad_row(&o, kernels[v], g_scratch, 2);
            TU_CHECK(row < 0, "%s kernel, spec %d, row %d: not the documented summation order", v ? "AVX2" : "AVX-512",
                     q, row);
        }
        spec_operands_free(&o);
    }
}

// Rows [r0,r1) and columns [c0,c1) of C computed alone equal those of the whole C,
// bitwise: no element's sum depends on M, N or the tile it falls in.
static void test_rows_independent(void) {
    const int M = 157, N = 75, K = 2 * GEMM_F32_KC + 37;
    float *a = random_floats((size_t)M * K), *b = random_floats((size_t)K * N);
    float *c = bg_aligned_alloc(sizeof(float) * M * N), *part = bg_aligned_alloc(sizeof(float) * M * N);
    for (int trans = 0; trans < 2; trans++) {
        gemm_f32_args g = {M, N, K, a, trans ? 1 : K, trans ? M : 1, b, N, 1, c, N, 0};
        gemm_f32(&g, g_scratch, 1);
        static const int cuts[][2] = {{0, 1}, {5, 6}, {3, 20}, {13, 41}, {100, 157}};
        for (int q = 0; q < 5; q++) {
            const int r0 = cuts[q][0], r1 = cuts[q][1];
            gemm_f32_args rows = g;
            rows.M = r1 - r0, rows.a = a + (size_t)r0 * g.a_rs, rows.c = part;
            gemm_f32(&rows, g_scratch, 2);
            TU_CHECK(!memcmp(part, c + (size_t)r0 * N, sizeof(float) * (r1 - r0) * N),
                     "rows %d..%d alone differ from the whole product (A%s)", r0, r1, trans ? "ᵀ" : "");
            const int c0 = r0 % N, c1 = r1 % N > c0 ? r1 % N : N;
            gemm_f32_args cols = g;
            cols.N = c1 - c0, cols.b = b + c0, cols.c = part, cols.ldc = c1 - c0;
            gemm_f32(&cols, g_scratch, 1);
            for (int i = 0; i < M; i++)
                TU_CHECK(!memcmp(part + (size_t)i * (c1 - c0), c + (size_t)i * N + c0, sizeof(float) * (c1 - c0)),
                         "columns %d..%d alone differ in row %d", c0, c1, i);
        }
    }
    free(a), free(b), free(c), free(part);
}

// The three kinds through matmul.c, each implementation forced.
static void test_matmul_kinds(gemm_f32_impl impl) {
    kernel_ctx *kc = kernel_ctx_create(BG_FP32);
    kernel_ctx_set_gemm_f32(kc, impl);
    // 37 and 101 rows on one (K, N): one primitive, two run-time strides under onednn-t;
    // 1024 x 1100: a dout past onednn-t's transposing limit (1 M floats).
    static const int shapes[][3] = {{1, 1, 1}, {37, 19, 45}, {101, 19, 45}, {128, 64, 96}, {3, 300, 17}, {1024, 8, 1100}};
    for (int q = 0; q < 6; q++) {
        const int M = shapes[q][0], K = shapes[q][1], N = shapes[q][2];
        float *x = random_floats((size_t)M * K), *w = random_floats((size_t)N * K), *dy = random_floats((size_t)M * N);
        float *y = bg_aligned_alloc(sizeof(float) * M * N), *dx = random_floats((size_t)M * K);
        float *dw = random_floats((size_t)N * K), *dx0 = random_floats((size_t)M * K), *dw0 = random_floats((size_t)N * K);
        memcpy(dx0, dx, sizeof(float) * M * K), memcpy(dw0, dw, sizeof(float) * N * K);
        matmul_forward(kc, y, x, w, M, K, N);
        matmul_backward(kc, dx, dw, dy, x, w, M, K, N);
        char what[64];
        snprintf(what, sizeof what, "%s fwd %dx%dx%d", gemm_f32_impl_name(impl), M, K, N);
        check_against_reference(what, &(gemm_f32_args){M, N, K, x, K, 1, w, 1, K, y, N, 0}, NULL);
        snprintf(what, sizeof what, "%s data %dx%dx%d", gemm_f32_impl_name(impl), M, K, N);
        check_against_reference(what, &(gemm_f32_args){M, K, N, dy, N, 1, w, K, 1, dx, K, 1}, dx0);
        snprintf(what, sizeof what, "%s weights %dx%dx%d", gemm_f32_impl_name(impl), M, K, N);
        check_against_reference(what, &(gemm_f32_args){N, K, M, dy, 1, N, x, K, 1, dw, K, 1}, dw0);
        free(x), free(w), free(dy), free(y), free(dx), free(dw), free(dx0), free(dw0);
    }
    kernel_ctx_free(kc);
}

// The three products of one 300 x 300 x 300 matmul under each of n implementations.
enum { ROUTE_N = 300 };
typedef struct {
    float *x, *w, *dy, *y[3], *dx[3], *dw[3];
} route_products;

static void route_products_run(route_products *r, const gemm_f32_impl *impls, int n) {
    const int M = ROUTE_N, K = ROUTE_N, N = ROUTE_N;
    r->x = random_floats((size_t)M * K), r->w = random_floats((size_t)N * K), r->dy = random_floats((size_t)M * N);
    for (int i = 0; i < n; i++) {
        kernel_ctx *kc = kernel_ctx_create(BG_FP32);
        kernel_ctx_set_gemm_f32(kc, impls[i]);
        r->y[i] = bg_aligned_alloc(sizeof(float) * M * N);
        r->dx[i] = bg_aligned_alloc(sizeof(float) * M * K), r->dw[i] = bg_aligned_alloc(sizeof(float) * N * K);
        memset(r->dx[i], 0, sizeof(float) * M * K), memset(r->dw[i], 0, sizeof(float) * N * K);
        matmul_forward(kc, r->y[i], r->x, r->w, M, K, N);
        matmul_backward(kc, r->dx[i], r->dw[i], r->dy, r->x, r->w, M, K, N);
        kernel_ctx_free(kc);
    }
}

static void route_products_free(route_products *r, int n) {
    for (int i = 0; i < n; i++) free(r->y[i]), free(r->dx[i]), free(r->dw[i]);
    free(r->x), free(r->w), free(r->dy);
}

// mixed: the forward and weights products bit for bit the own kernel's, the data
// product oneDNN's (sums of 300 terms: the two add in different orders, so a wrong
// route shows).
static void test_mixed_routes(void) {
    const gemm_f32_impl impls[3] = {GEMM_F32_OWN, GEMM_F32_ONEDNN, GEMM_F32_MIXED};
    route_products r;
    route_products_run(&r, impls, 3);
    const size_t b = sizeof(float) * ROUTE_N * ROUTE_N;
    TU_CHECK(memcmp(r.y[0], r.y[1], b) && memcmp(r.dx[0], r.dx[1], b) && memcmp(r.dw[0], r.dw[1], b),
             "own and oneDNN differ in every kind (else the routes cannot be told apart)");
    TU_CHECK(!memcmp(r.y[2], r.y[0], b), "mixed: the forward is the own kernel's");
    TU_CHECK(!memcmp(r.dx[2], r.dx[1], b), "mixed: the data product is oneDNN's");
    TU_CHECK(!memcmp(r.dw[2], r.dw[0], b), "mixed: the weights product is the own kernel's");
    route_products_free(&r, 3);
}

// onednn-t: the forward and data products bit for bit oneDNN's; the weights product
// checked against the reference by test_matmul_kinds.
static void test_onednn_t_routes(void) {
    const gemm_f32_impl impls[2] = {GEMM_F32_ONEDNN, GEMM_F32_ONEDNN_T};
    route_products r;
    route_products_run(&r, impls, 2);
    const size_t b = sizeof(float) * ROUTE_N * ROUTE_N;
    TU_CHECK(!memcmp(r.y[0], r.y[1], b), "onednn-t: the forward is oneDNN's");
    TU_CHECK(!memcmp(r.dx[0], r.dx[1], b), "onednn-t: the data product is oneDNN's");
    route_products_free(&r, 2);
}

static void test_choice(void) {
    const cpu_identity intel = {"GenuineIntel", 6, 207, 1, 1, 0, 1}, intel_avx2 = {"GenuineIntel", 6, 85, 0, 0, 0, 1};
    const cpu_identity zen4 = {"AuthenticAMD", 25, 17, 1, 1, 0, 1}, zen5 = {"AuthenticAMD", 26, 2, 1, 1, 0, 1};
    const cpu_identity zen5_no512 = {"AuthenticAMD", 26, 2, 0, 0, 0, 1};
    const cpu_identity zen3 = {"AuthenticAMD", 25, 1, 0, 0, 0, 1}, no_avx2 = {"GenuineIntel", 6, 58, 0, 0, 0, 0};
    TU_CHECK(gemm_f32_impl_for(&intel) == GEMM_F32_OWN && gemm_f32_impl_for(&intel_avx2) == GEMM_F32_OWN &&
                 gemm_f32_impl_for(&zen4) == GEMM_F32_ONEDNN && gemm_f32_impl_for(&zen5) == GEMM_F32_MIXED &&
                 gemm_f32_impl_for(&zen5_no512) == GEMM_F32_OWN && gemm_f32_impl_for(&zen3) == GEMM_F32_OWN &&
                 gemm_f32_impl_for(&no_avx2) == GEMM_F32_ONEDNN_T,
             "the rule: own on Intel with AVX-512F and with AVX2 alone, mixed on Zen 5, oneDNN on Zen 4, "
             "onednn-t without AVX2");
    gemm_f32_impl g;
    setenv("BAGUALU_GEMM", "onednn", 1);
    TU_CHECK(gemm_f32_impl_select(&g) == BG_OK && g == GEMM_F32_ONEDNN, "BAGUALU_GEMM=onednn");
    kernel_ctx *kc = kernel_ctx_create(BG_FP32);
    TU_CHECK(kernel_ctx_gemm_f32(kc) == GEMM_F32_ONEDNN, "a context takes BAGUALU_GEMM");
    kernel_ctx_free(kc);
    setenv("BAGUALU_GEMM", "onednn-t", 1);
    TU_CHECK(gemm_f32_impl_select(&g) == BG_OK && g == GEMM_F32_ONEDNN_T, "BAGUALU_GEMM=onednn-t, on any CPU");
    TU_CHECK(!strcmp(gemm_f32_impl_name(GEMM_F32_ONEDNN_T), "onednn-t"), "onednn-t's name");
    setenv("BAGUALU_GEMM", "blas", 1);
    TU_CHECK(gemm_f32_impl_select(&g) == BG_ERR && strstr(bg_last_error(), "BAGUALU_GEMM"),
             "a bad BAGUALU_GEMM is an error naming it");
    setenv("BAGUALU_GEMM", "own", 1);
    TU_CHECK((gemm_f32_impl_select(&g) == BG_OK) == gemm_f32_supported(), "BAGUALU_GEMM=own needs AVX-512F or AVX2");
    setenv("BAGUALU_GEMM", "mixed", 1);
    TU_CHECK((gemm_f32_impl_select(&g) == BG_OK) == gemm_f32_supported() &&
                 (!gemm_f32_supported() || g == GEMM_F32_MIXED),
             "BAGUALU_GEMM=mixed needs AVX-512F or AVX2");
    unsetenv("BAGUALU_GEMM");
    TU_CHECK(gemm_f32_impl_select(&g) == BG_OK && g == gemm_f32_impl_default(), "unset: the CPU's choice");
    // On a CPU without the own GEMM (whichever this one is): own and mixed refused by name.
    TU_CHECK(gemm_f32_impl_forced("own", 0, &g) == BG_ERR &&
                 !strcmp(bg_last_error(), "BAGUALU_GEMM=own needs a CPU with AVX-512F or AVX2 and FMA"),
             "own without the own GEMM: %s", bg_last_error());
    TU_CHECK(gemm_f32_impl_forced("mixed", 0, &g) == BG_ERR && strstr(bg_last_error(), "BAGUALU_GEMM=mixed needs"),
             "mixed without the own GEMM");
    TU_CHECK(gemm_f32_impl_forced("onednn-t", 0, &g) == BG_OK && g == GEMM_F32_ONEDNN_T,
             "onednn-t needs no own GEMM");
    TU_CHECK(gemm_f32_impl_forced("own", 1, &g) == BG_OK && g == GEMM_F32_OWN, "own where it runs");
}

int main(int argc, char **argv) {
    tu_seed(19);
    if (argc < 2 || strcmp(argv[1], "--own")) {
        test_choice();
        test_matmul_kinds(GEMM_F32_ONEDNN);
        test_matmul_kinds(GEMM_F32_ONEDNN_T);
        test_onednn_t_routes();
        return tu_finish("kernels/test_gemm_f32");
    }
    if (!gemm_f32_supported()) {
        printf("kernels/test_gemm_f32 --own: neither AVX-512F nor AVX2 with FMA here: the own GEMM is not tested\n");
        return 77;
    }
    for (int t = 0; t < THREADS; t++) g_scratch[t] = bg_aligned_alloc(gemm_f32_scratch_floats() * sizeof(float));
    test_matmul_kinds(GEMM_F32_OWN);
    test_matmul_kinds(GEMM_F32_MIXED);
    test_mixed_routes();
    test_shapes();
    test_rows_independent();
    test_fixed_order();
    for (int t = 0; t < THREADS; t++) free(g_scratch[t]);
    return tu_finish("kernels/test_gemm_f32 --own");
}
