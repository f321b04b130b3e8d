// SwiGLU gate of Llama/Mixtral FFNs: out = silu(gate) · up, silu(g) = g·σ(g).
// Outputs go out in the GEMM operand format (kernels.h), a block of each row at a
// time computed in fp32 on the stack and stored rounded, as in gelu.c.
#include "kernels/kernels.h"

#include <omp.h>

#include "kernels/vecmath.h"

enum { SWIGLU_BLOCK = 1024 };  // columns per block: 4 KiB of floats, in L1

static inline int imin(int a, int b) { return a < b ? a : b; }

// Rows n0..n1-1 of the forward.
static void swiglu_forward_rows(void *out, matmul_precision p, const float *inp, int F, int n0,
                                int n1) {
    for (int n = n0; n < n1; n++) {
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
static void swiglu_backward_rows(void *dinp, matmul_precision p, const float *dout,
                                 const float *inp, int F, int n0, int n1) {
    for (int n = n0; n < n1; n++) {
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

// Inside a parallel region (a concurrent expert) on the calling thread alone: a nested
// team gains nothing and libgomp allocates every one.

// inp (N,2F) rows [gate | up] floats; out (N,F) rounded, writes
void swiglu_forward(void *out, matmul_precision p, const float *inp, int N, int F) {
    if (omp_in_parallel()) {
        swiglu_forward_rows(out, p, inp, F, 0, N);
        return;
    }
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) swiglu_forward_rows(out, p, inp, F, n, n + 1);
}

// dout (N,F), inp (N,2F) floats; dinp (N,2F) rounded, WRITES
void swiglu_backward(void *dinp, matmul_precision p, const float *dout, const float *inp, int N,
                     int F) {
    if (omp_in_parallel()) {
        swiglu_backward_rows(dinp, p, dout, inp, F, 0, N);
        return;
    }
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) swiglu_backward_rows(dinp, p, dout, inp, F, n, n + 1);
}
