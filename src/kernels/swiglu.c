// SwiGLU gate of Llama/Mixtral FFNs: out = silu(gate) · up, silu(g) = g·σ(g).
#include "kernels/kernels.h"

#include "kernels/vecmath.h"

// inp (N,2F) rows [gate | up], out (N,F)
void swiglu_forward(float *out, const float *inp, int N, int F) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        float *o = out + (size_t)n * F;
        #pragma omp simd
        for (int f = 0; f < F; f++) o[f] = gate[f] * bg_sigmoidf(gate[f]) * up[f];
    }
}

// dout (N,F); dinp (N,2F) +=
void swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        const float *dy = dout + (size_t)n * F;
        float *dgate = dinp + (size_t)n * 2 * F, *dup = dgate + F;
        #pragma omp simd
        for (int f = 0; f < F; f++) {
            const float g = gate[f], s = bg_sigmoidf(g);
            // d silu/dg = σ + g·σ·(1-σ)
            dgate[f] += dy[f] * up[f] * s * (1.0f + g * (1.0f - s));
            dup[f] += dy[f] * g * s;
        }
    }
}
