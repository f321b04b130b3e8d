// The oneDNN matmul beyond the small gradient checks: realistic sizes, M == 0,
// the primitive cache under varying M (expert row counts), many shapes (eviction),
// and clearing the cache. Gradient formulas themselves are checked by finite
// differences in test_kernels_grad.c; here every result is compared with a
// double-precision product of the same float inputs.
//
// Tolerance, per element: |got - want| ≤ ((√K + 2)·Σ|aᵢbᵢ| + 2·|g0|)·u, with
// u = 2^-24 the float unit roundoff, K the reduction length and g0 the value
// accumulated onto (0 for the forward). A float dot product's rounding error
// behaves like a random walk of size about u·Σ|aᵢbᵢ|, so √K of that is a wide
// margin for any summation order oneDNN picks; the +2 covers the last roundings
// (a product and the final add onto g0), which dominate when K is 1 or 2. A wrong
// operand or a missed accumulation errs by about Σ|aᵢbᵢ|/√K, many orders of
// magnitude more for every K used here.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test_util.h"

#define UNIT_ROUNDOFF 5.9604644775390625e-8  // 2^-24

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static float *random_floats(size_t n) {
    float *x = falloc(n);
    tu_fill_normal(x, n, 1.0);
    return x;
}

// C(rows,cols) vs g0 + Σ_k A(i,k)·B(k,j), operands given by strides so one routine
// covers all three products; reports the worst element. Returns 1 if within bound.
static int check_product(const char *what, const float *got, const float *g0, int rows,
                         int cols, int K, const float *A, size_t a_row, size_t a_k,
                         const float *B, size_t b_k, size_t b_col) {
    double worst = 0;
    int wi = 0, wj = 0;
    double w_got = 0, w_want = 0;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double s = g0 ? g0[(size_t)i * cols + j] : 0.0;
            double mag = g0 ? fabs(s) : 0.0;
            double abs_terms = 0;
            for (int k = 0; k < K; k++) {
                const double t = (double)A[i * a_row + k * a_k] * B[k * b_k + j * b_col];
                s += t;
                abs_terms += fabs(t);
            }
            const double bound =
                ((sqrt((double)K) + 2) * abs_terms + 2 * mag) * UNIT_ROUNDOFF + 1e-30;
            const double g = got[(size_t)i * cols + j];
            const double r = fabs(g - s) / bound;
            if (!(r <= worst)) worst = r, wi = i, wj = j, w_got = g, w_want = s;
        }
    TU_CHECK(worst <= 1.0, "%s: (%d,%d) got %.9g want %.9g (%.1fx the bound)", what, wi, wj,
             w_got, w_want, worst);
    return worst <= 1.0;
}

static kernel_ctx *g_kc;  // fp32 GEMMs

// Forward and both gradients of one (M,K,N), accumulating onto random gradients.
static void check_matmul(int M, int K, int N) {
    float *inp = random_floats((size_t)M * K), *weight = random_floats((size_t)N * K);
    float *dout = random_floats((size_t)M * N), *out = random_floats((size_t)M * N);
    float *dinp = random_floats((size_t)M * K), *dweight = random_floats((size_t)N * K);
    float *dinp0 = falloc((size_t)M * K), *dweight0 = falloc((size_t)N * K);
    memcpy(dinp0, dinp, (size_t)M * K * sizeof(float));
    memcpy(dweight0, dweight, (size_t)N * K * sizeof(float));
    char what[80];

    matmul_forward(g_kc, out, inp, weight, M, K, N);
    snprintf(what, sizeof what, "fwd M=%d K=%d N=%d", M, K, N);
    check_product(what, out, NULL, M, N, K, inp, K, 1, weight, 1, K);  // inp · weightᵀ

    matmul_backward(g_kc, dinp, dweight, dout, inp, weight, M, K, N);
    snprintf(what, sizeof what, "dinp M=%d K=%d N=%d", M, K, N);
    check_product(what, dinp, dinp0, M, K, N, dout, N, 1, weight, K, 1);  // dout · weight
    snprintf(what, sizeof what, "dweight M=%d K=%d N=%d", M, K, N);
    check_product(what, dweight, dweight0, N, K, M, dout, 1, N, inp, K, 1);  // doutᵀ · inp

    free(inp), free(weight), free(dout), free(out), free(dinp), free(dweight);
    free(dinp0), free(dweight0);
}

// M == 0 touches nothing, even with NULL activation pointers (an expert with no tokens).
static void test_empty(void) {
    const int K = 7, N = 5;
    float *weight = random_floats((size_t)N * K), *dweight = random_floats((size_t)N * K);
    float *before = falloc((size_t)N * K);
    memcpy(before, dweight, (size_t)N * K * sizeof(float));
    matmul_forward(g_kc, NULL, NULL, weight, 0, K, N);
    matmul_backward(g_kc, NULL, dweight, NULL, NULL, weight, 0, K, N);
    TU_CHECK(memcmp(before, dweight, (size_t)N * K * sizeof(float)) == 0,
             "M=0 backward changed dweight");
    free(weight), free(dweight), free(before);
}

// Expert GEMMs: one (K,N), a new M nearly every call, M values recurring. Every
// result must be right whichever primitive and bound memory served it.
static void test_varying_m(void) {
    const int Ms[] = {1, 17, 5, 64, 3, 17, 100, 2, 33, 0, 7, 250, 17, 1, 64, 9};
    for (size_t i = 0; i < sizeof Ms / sizeof Ms[0]; i++) {
        check_matmul(Ms[i], 24, 40);  // expert up-projection shape
        check_matmul(Ms[i], 40, 24);  // and its down-projection
    }
}

// Shapes of a small GPT-2-like model, with odd sizes so oneDNN's tails run.
static void test_model_shapes(void) {
    check_matmul(64, 128, 384);   // qkv
    check_matmul(64, 128, 128);   // attention projection
    check_matmul(37, 256, 1031);  // LM head with an odd vocabulary
    check_matmul(129, 67, 3);     // router: few experts
    check_matmul(2, 768, 5);      // long reduction
    check_matmul(300, 5, 2);      // long M, short K
}

// More distinct shapes than the cache holds: the least recently used are evicted
// and re-created on return, and results stay right.
static void test_many_shapes(void) {
    for (int n = 1; n <= 220; n++) {
        float *inp = random_floats(2 * 3), *weight = random_floats((size_t)n * 3),
              *out = falloc((size_t)2 * n);
        matmul_forward(g_kc, out, inp, weight, 2, 3, n);
        char what[48];
        snprintf(what, sizeof what, "fwd shape %d of many", n);
        if (!check_product(what, out, NULL, 2, n, 3, inp, 3, 1, weight, 1, 3)) n = 1000;
        free(inp), free(weight), free(out);
    }
    check_matmul(5, 3, 1);  // long evicted: comes back
    check_matmul(9, 24, 40);
}

int main(void) {
    tu_seed(7);
    g_kc = kernel_ctx_create(BG_FP32);
    test_empty();
    test_varying_m();
    test_model_shapes();
    test_many_shapes();
    matmul_cache_clear(g_kc);
    check_matmul(11, 24, 40);  // usable again after a clear
    test_empty();
    matmul_cache_clear(g_kc);
    matmul_cache_clear(g_kc);  // clearing twice is harmless
    kernel_ctx_free(g_kc);
    return tu_finish("kernels/test_matmul");
}
