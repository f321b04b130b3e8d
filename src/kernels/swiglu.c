// SwiGLU gate of Llama/Mixtral FFNs: out = silu(gate) · up, silu(g) = g·σ(g).
// Outputs go out in the GEMM operand format (kernels.h), a block of each row at a
// time computed in fp32 on the stack and stored rounded, as in gelu.c.
#include "kernels/kernels.h"

#include "core/threads.h"
#include "kernels/vecmath.h"

enum { SWIGLU_BLOCK = 1024 };  // columns per block: 4 KiB of floats, in L1

static inline int imin(int a, int b) { return a < b ? a : b; }

#if defined(VF_LANES)
// y[f] = silu(gate[f])·up[f] for the whole vectors of f < m; returns how many were done.
static int swiglu_forward_vf(float *y, const float *gate, const float *up, int m) {
    int f = 0;
    for (; f + VF_LANES <= m; f += VF_LANES) {
        const vf g = vf_load(gate + f);
        vf_store(y + f, vf_mul(vf_mul(g, vf_sigmoid(g)), vf_load(up + f)));
    }
    return f;
}

// The backward's dg and du for the whole vectors of f < m, as the scalar loop.
static int swiglu_backward_vf(float *dg, float *du, const float *gate, const float *up,
                              const float *dy, int m) {
    int f = 0;
    const vf one = vf_set1(1.0f);
    for (; f + VF_LANES <= m; f += VF_LANES) {
        const vf g = vf_load(gate + f), s = vf_sigmoid(g), d = vf_load(dy + f);
        const vf ds = vf_mul(vf_mul(d, vf_load(up + f)), s);
        vf_store(dg + f, vf_mul(ds, vf_fma(g, vf_sub(one, s), one)));
        vf_store(du + f, vf_mul(vf_mul(d, g), s));
    }
    return f;
}
#endif

// The arguments of a call, for its rows' ranges (bg_parallel_ranges).
typedef struct {
    void *out;
    operand_format p;
    const float *inp, *dout;
    int F;
} swiglu_call;

// Rows n0..n1-1 of the forward.
static void swiglu_forward_rows(void *ctx, size_t n0, size_t n1) {
    const swiglu_call *c = ctx;
    void *out = c->out;
    const operand_format p = c->p;
    const float *inp = c->inp;
    const int F = c->F;
    for (size_t n = n0; n < n1; n++) {
        const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        for (int f0 = 0; f0 < F; f0 += SWIGLU_BLOCK) {
            const int m = imin(SWIGLU_BLOCK, F - f0);
            float y[SWIGLU_BLOCK];
            int v = 0;
#if defined(VF_LANES)
            v = swiglu_forward_vf(y, gate + f0, up + f0, m);
#endif
            #pragma omp simd
            for (int f = v; f < m; f++) y[f] = gate[f0 + f] * bg_sigmoidf(gate[f0 + f]) * up[f0 + f];
            operand_store(out, (size_t)n * F + f0, y, (size_t)m, p);
        }
    }
}

// Rows n0..n1-1 of the backward.
static void swiglu_backward_rows(void *ctx, size_t n0, size_t n1) {
    const swiglu_call *c = ctx;
    void *dinp = c->out;
    const operand_format p = c->p;
    const float *inp = c->inp, *dout = c->dout;
    const int F = c->F;
    for (size_t n = n0; n < n1; n++) {
        const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        const float *dy = dout + (size_t)n * F;
        for (int f0 = 0; f0 < F; f0 += SWIGLU_BLOCK) {
            const int m = imin(SWIGLU_BLOCK, F - f0);
            float dg[SWIGLU_BLOCK], du[SWIGLU_BLOCK];
            int v = 0;
#if defined(VF_LANES)
            v = swiglu_backward_vf(dg, du, gate + f0, up + f0, dy + f0, m);
#endif
            #pragma omp simd
            for (int f = v; f < m; f++) {
                const float g = gate[f0 + f], s = bg_sigmoidf(g);
                // d silu/dg = σ + g·σ·(1-σ)
                dg[f] = dy[f0 + f] * up[f0 + f] * s * (1.0f + g * (1.0f - s));
                du[f] = dy[f0 + f] * g * s;
            }
            operand_store(dinp, (size_t)n * 2 * F + f0, dg, (size_t)m, p);
            operand_store(dinp, (size_t)n * 2 * F + F + f0, du, (size_t)m, p);
        }
    }
}

// inp (N,2F) rows [gate | up] floats; out (N,F) rounded, writes
void swiglu_forward(void *out, operand_format p, const float *inp, int N, int F) {
    swiglu_call c = {out, p, inp, NULL, F};
    bg_parallel_ranges((size_t)N, swiglu_forward_rows, &c);
}

// dout (N,F), inp (N,2F) floats; dinp (N,2F) rounded, WRITES
void swiglu_backward(void *dinp, operand_format p, const float *dout, const float *inp, int N,
                     int F) {
    swiglu_call c = {dinp, p, inp, dout, F};
    bg_parallel_ranges((size_t)N, swiglu_backward_rows, &c);
}
