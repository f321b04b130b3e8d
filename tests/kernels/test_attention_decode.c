// attention_decode_forward (one query against a key/value cache, generation's step)
// against the naive attention_forward on the same q, k, v: for every position t of a
// sequence, the decode of query t over cache rows 0..t must equal attention_forward's
// row t (the last row of the sequence cut at t). Shapes: odd head sizes, one head,
// and a context long enough for the kernel's threaded path; the cache has spare rows
// past t (T_max > T) to check that only rows 0..t are read. Then the kernel under 1, 2
// and 3 threads: bitwise identical (each head is one thread's serial loop).
//
// Tolerance: |decode - naive| <= 1e-5 · max|v| elementwise. The two compute the same
// formula in float with different rounding: attention_forward's exponentials are
// bg_expf (a few ulp from expf) and its sums are vectorised reductions, the decode's
// serial; each softmax weight then differs by a few ulp plus the summation error of
// at most t+1 <= 300 positive terms, and the output, a convex combination of values,
// by about that relative error times max|v|: a few ulp of float (6e-8), the rounding
// errors of the sums growing like sqrt(t+1). 1e-5 covers that at the longest context
// here (300 positions) with a wide margin, while a wrong key, scale or normalisation
// would miss by orders of magnitude.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test_util.h"

static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

// NKV key/value heads: the cache rows hold KV = NKV·hs floats (grouped-query attention
// when NKV < NH).
static void check_shape(int T, int C, int NH, int NKV, int spare) {
    const int T_max = T + spare;
    const size_t KV = (size_t)NKV * (C / NH), C3 = (size_t)C + 2 * KV;
    float *qkv = falloc((size_t)T * C3), *out = falloc((size_t)T * C), *att = falloc((size_t)NH * T * T);
    float *kc = falloc((size_t)T_max * KV), *vc = falloc((size_t)T_max * KV);
    float *dec = falloc(C), *dec2 = falloc(C), *scores = falloc((size_t)NH * T_max);
    tu_fill_normal(qkv, (size_t)T * C3, 1.0);
    attention_forward(out, att, qkv, 1, T, C, NH, NKV);
    // Rows past t hold NaN: reading one would show in every output.
    for (size_t i = 0; i < (size_t)T_max * KV; i++) kc[i] = vc[i] = NAN;
    double vmax = 0, ratio = 0;
    int bitwise = 1;
    for (int t = 0; t < T; t++) {
        const float *q = qkv + (size_t)t * C3;
        memcpy(kc + (size_t)t * KV, q + C, sizeof(float) * KV);
        memcpy(vc + (size_t)t * KV, q + C + KV, sizeof(float) * KV);
        for (size_t i = 0; i < KV; i++) vmax = fmax(vmax, fabs(q[C + KV + i]));
        for (int i = 0; i < C; i++) dec[i] = NAN;  // the kernel writes every output
        attention_decode_forward(dec, scores, q, kc, vc, t, T_max, C, NH, NKV);
        for (int i = 0; i < C; i++) {
            double r = fabs((double)dec[i] - out[(size_t)t * C + i]) / (1e-5 * vmax);
            if (!isnan(ratio) && !(r <= ratio)) ratio = r;  // a NaN stays and fails the check
        }
        for (int n = 1; n <= 3; n++) {
            omp_set_num_threads(n);
            attention_decode_forward(dec2, scores, q, kc, vc, t, T_max, C, NH, NKV);
            if (memcmp(dec, dec2, sizeof(float) * C) != 0) bitwise = 0;
        }
        omp_set_num_threads(2);
    }
    printf("T=%d C=%d NH=%d/%d: max |decode - naive| = %.3g of 1e-5·max|v|\n", T, C, NH, NKV, ratio);
    TU_CHECK(ratio <= 1.0, "T=%d C=%d NH=%d/%d: decode differs from attention_forward by %.3g of the tolerance",
             T, C, NH, NKV, ratio);
    TU_CHECK(bitwise, "T=%d C=%d NH=%d/%d: results depend on the thread count", T, C, NH, NKV);
    free(qkv), free(out), free(att), free(kc), free(vc), free(dec), free(dec2), free(scores);
}

int main(void) {
    tu_seed(13);
    check_shape(1, 8, 2, 2, 0);      // the first token: one key
    check_shape(17, 12, 4, 4, 5);    // hs = 3
    check_shape(33, 20, 1, 1, 3);    // one head, hs = 20
    check_shape(21, 24, 6, 2, 4);    // grouped-query: 3 query heads per kv head
    check_shape(9, 16, 4, 1, 0);     // multi-query
    check_shape(40, 64, 4, 4, 0);    // hs = 16, a vector width
    check_shape(300, 64, 4, 4, 7);   // (t+1)·C past 16384: heads over threads
    return tu_finish("test_attention_decode");
}
