#ifndef BG_TESTS_GEMM_F32_TEST_UTIL_H
#define BG_TESTS_GEMM_F32_TEST_UTIL_H
// Shared by the own f32 GEMM's tests (test_gemm_f32.c, test_gemm_f32_avx512_simde.c):
// a product's spec, its operands' layout, random operands, C by the documented
// summation order done one fmaf at a time, and a kernel checked against it.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/gemm_f32.h"
#include "test_util.h"

typedef struct {
    int M, N, K;
    int a_trans, b_trans;  // 1: the operand is stored transposed (column-major)
    int pad;               // extra floats at the end of each stored row
    int accumulate;
} spec;

// Operand storage: A (M,K), row-major with leading dimension K+pad or column-major with
// M+pad; B (K,N) likewise. Returns the strides through g.
static inline void layout(const spec *s, gemm_f32_args *g, float *a, float *b, float *c) {
    g->M = s->M, g->N = s->N, g->K = s->K;
    g->a = a, g->b = b, g->c = c, g->ldc = s->N + s->pad, g->accumulate = s->accumulate;
    if (s->a_trans) g->a_rs = 1, g->a_cs = s->M + s->pad;
    else g->a_rs = s->K + s->pad, g->a_cs = 1;
    if (s->b_trans) g->b_rs = 1, g->b_cs = s->K + s->pad;
    else g->b_rs = s->N + s->pad, g->b_cs = 1;
}

static inline float *random_floats(size_t n) {
    float *x = bg_aligned_alloc((n ? n : 1) * sizeof(float));
    tu_fill_normal(x, n, 1.0);
    return x;
}

// C by gemm_f32.h's order, scalar: per element, blocks of GEMM_F32_KC in order, each an
// fmaf chain from zero, added onto C (or, first and not accumulating, written).
static inline void fixed_order_reference(const gemm_f32_args *g, float *c) {
    for (int i = 0; i < g->M; i++)
        for (int j = 0; j < g->N; j++) {
            float acc = c[i * g->ldc + j];
            for (int p0 = 0; p0 < g->K; p0 += GEMM_F32_KC) {
                float s = 0.0f;
                for (int k = p0; k < g->K && k < p0 + GEMM_F32_KC; k++)
                    s = fmaf(g->a[i * g->a_rs + k * g->a_cs], g->b[k * g->b_rs + j * g->b_cs], s);
                acc = p0 == 0 && !g->accumulate ? s : acc + s;
            }
            c[i * g->ldc + j] = acc;
        }
}

// A spec's operands: A, B and the C to start from (c0) random, two results of cn floats,
// and the args of a product into the first.
typedef struct {
    float *a, *b, *c0, *out[2];
    size_t cn;
    gemm_f32_args g;
} spec_operands;

static inline spec_operands spec_operands_make(const spec *s) {
    const size_t an = (size_t)(s->M + s->pad) * (s->K + s->pad), bn = (size_t)(s->K + s->pad) * (s->N + s->pad);
    spec_operands o = {random_floats(an), random_floats(bn), NULL, {NULL, NULL}, (size_t)s->M * (s->N + s->pad), {0}};
    o.c0 = random_floats(o.cn);
    for (int i = 0; i < 2; i++) o.out[i] = bg_aligned_alloc(o.cn * sizeof(float));
    layout(s, &o.g, o.a, o.b, o.out[0]);
    return o;
}

static inline void spec_operands_free(spec_operands *o) { free(o->a), free(o->b), free(o->c0), free(o->out[0]), free(o->out[1]); }

typedef void (*gemm_f32_fn)(const gemm_f32_args *, float *const *, int);

// The first row of C that `kernel` on `threads` threads does not give bit for bit as
// fixed_order_reference does, or -1 (the reference in o->out[0], the kernel's in out[1]).
static inline int fixed_order_first_bad_row(spec_operands *o, gemm_f32_fn kernel, float *const *scratch,
                                            int threads) {
    gemm_f32_args g = o->g;
    memcpy(o->out[0], o->c0, o->cn * sizeof(float));
    g.c = o->out[0];
    fixed_order_reference(&g, o->out[0]);
    memcpy(o->out[1], o->c0, o->cn * sizeof(float));
    g.c = o->out[1];
    kernel(&g, scratch, threads);
    for (int i = 0; i < g.M; i++)
        if (memcmp(o->out[1] + (size_t)i * g.ldc, o->out[0] + (size_t)i * g.ldc, sizeof(float) * g.N)) return i;
    return -1;
}

#endif
