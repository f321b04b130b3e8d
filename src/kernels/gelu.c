// GELU with GPT-2's tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
#include "kernels/kernels.h"

#include "kernels/vecmath.h"

#define GELU_SCALE 0.7978845608028654f  // √(2/π)
#define GELU_CUBIC 0.044715f

// inp/out (n)
void gelu_forward(float *out, const float *inp, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i];
        const float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        out[i] = 0.5f * x * (1.0f + bg_tanhf(u));
    }
}

// dout/inp (n); dinp (n) +=
void gelu_backward(float *dinp, const float *dout, const float *inp, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float x = inp[i];
        const float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        const float t = bg_tanhf(u);
        const float du_dx = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        const float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
        dinp[i] += grad * dout[i];
    }
}
