// GELU with GPT-2's tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
// Outputs go out in the GEMM operand format (kernels.h): each thread computes a block
// of values in fp32 on its stack, then stores it rounded, so no fp32 copy of the
// activation or its gradient is written to memory and read back for rounding.
#include "kernels/kernels.h"

#include "kernels/vecmath.h"

#define GELU_SCALE 0.7978845608028654f  // √(2/π)
#define GELU_CUBIC 0.044715f

// Values per block: 4 KiB of floats, in L1 between the compute and the store.
enum { GELU_BLOCK = 1024 };

// inp (n) floats; out (n) rounded, writes
void gelu_forward(void *out, matmul_precision p, const float *inp, size_t n) {
    const size_t blocks = (n + GELU_BLOCK - 1) / GELU_BLOCK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        const size_t i0 = b * GELU_BLOCK, m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
        const float *in = inp + i0;
        float y[GELU_BLOCK];
        #pragma omp simd
        for (size_t i = 0; i < m; i++) {
            const float x = in[i];
            const float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
            y[i] = 0.5f * x * (1.0f + bg_tanhf(u));
        }
        operand_store(out, i0, y, m, p);
    }
}

// dout, inp (n) floats; dinp (n) rounded, WRITES
void gelu_backward(void *dinp, matmul_precision p, const float *dout, const float *inp, size_t n) {
    const size_t blocks = (n + GELU_BLOCK - 1) / GELU_BLOCK;
    #pragma omp parallel for schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        const size_t i0 = b * GELU_BLOCK, m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
        const float *in = inp + i0, *dy = dout + i0;
        float g[GELU_BLOCK];
        #pragma omp simd
        for (size_t i = 0; i < m; i++) {
            const float x = in[i];
            const float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
            const float t = bg_tanhf(u);
            const float du_dx = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
            const float grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
            g[i] = grad * dy[i];
        }
        operand_store(dinp, i0, g, m, p);
    }
}
