// SwiGLU gate of Llama/Mixtral FFNs: out = silu(gate) · up, silu(g) = g·σ(g).
// Outputs go out in the GEMM operand format (kernels.h), a block of each row at a
// time computed in fp32 on the stack and stored rounded, as in gelu.c.
#include "kernels/kernels.h"

#include "core/threads.h"
#include "kernels/vecmath.h"

enum { SWIGLU_BLOCK = 1024 };  // columns per block: 4 KiB of floats, in L1

static inline int imin(int a, int b) { return a < b ? a : b; }

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
            #pragma omp simd
            for (int f = 0; f < m; f++) y[f] = gate[f0 + f] * bg_sigmoidf(gate[f0 + f]) * up[f0 + f];
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
            #pragma omp simd
            for (int f = 0; f < m; f++) {
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
