// GELU with GPT-2's tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
// Outputs go out in the GEMM operand format (kernels.h): each thread computes a block
// of values in fp32 on its stack, then stores it rounded, so no fp32 copy of the
// activation or its gradient is written to memory and read back for rounding.
#include "kernels/kernels.h"

#include "core/threads.h"
#include "kernels/vecmath.h"

#define GELU_SCALE 0.7978845608028654f  // √(2/π)
#define GELU_CUBIC 0.044715f

// Values per block: 4 KiB of floats, in L1 between the compute and the store.
enum { GELU_BLOCK = 1024 };

#if defined(VF_LANES)
// The same formulas on whole vectors (vf_tanh: no division). Values agree with the
// scalar loops, which finish a block's last values, to about 3e-7.
static inline vf gelu_u(vf x) {
    const vf x3c = vf_mul(vf_mul(vf_set1(GELU_CUBIC), x), vf_mul(x, x));
    return vf_mul(vf_set1(GELU_SCALE), vf_add(x, x3c));
}

static size_t gelu_forward_vf(float *y, const float *in, size_t m) {
    size_t i = 0;
    const vf half = vf_set1(0.5f), one = vf_set1(1.0f);
    for (; i + VF_LANES <= m; i += VF_LANES) {
        const vf x = vf_load(in + i);
        const vf t = vf_tanh(gelu_u(x));
        vf_store(y + i, vf_mul(vf_mul(half, x), vf_add(one, t)));
    }
    return i;
}

static size_t gelu_backward_vf(float *g, const float *in, const float *dy, size_t m) {
    size_t i = 0;
    const vf half = vf_set1(0.5f), one = vf_set1(1.0f);
    const vf c3 = vf_set1(3.0f * GELU_CUBIC), sc = vf_set1(GELU_SCALE);
    for (; i + VF_LANES <= m; i += VF_LANES) {
        const vf x = vf_load(in + i);
        const vf t = vf_tanh(gelu_u(x));
        const vf du_dx = vf_mul(sc, vf_fma(vf_mul(c3, x), x, one));
        const vf sech2 = vf_fnma(t, t, one);  // 1 - t²
        const vf grad = vf_fma(vf_mul(vf_mul(half, x), sech2), du_dx, vf_mul(half, vf_add(one, t)));
        vf_store(g + i, vf_mul(grad, vf_load(dy + i)));
    }
    return i;
}
#endif

// The arguments of a call, for its blocks' ranges (bg_parallel_ranges).
typedef struct {
    void *out;
    operand_format p;
    const float *inp, *dout;
    size_t n;
} gelu_call;

// Blocks b0..b1-1 of the forward.
static void gelu_forward_blocks(void *ctx, size_t b0, size_t b1) {
    const gelu_call *c = ctx;
    void *out = c->out;
    const operand_format p = c->p;
    const float *inp = c->inp;
    const size_t n = c->n;
    for (size_t b = b0; b < b1; b++) {
        const size_t i0 = b * GELU_BLOCK, m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
        const float *in = inp + i0;
        float y[GELU_BLOCK];
        size_t i0v = 0;
#if defined(VF_LANES)
        i0v = gelu_forward_vf(y, in, m);
#endif
        #pragma omp simd
        for (size_t i = i0v; i < m; i++) {
            const float x = in[i];
            const float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
            y[i] = 0.5f * x * (1.0f + bg_tanhf(u));
        }
        operand_store(out, i0, y, m, p);
    }
}

// Blocks b0..b1-1 of the backward.
static void gelu_backward_blocks(void *ctx, size_t b0, size_t b1) {
    const gelu_call *c = ctx;
    void *dinp = c->out;
    const operand_format p = c->p;
    const float *inp = c->inp, *dout = c->dout;
    const size_t n = c->n;
    for (size_t b = b0; b < b1; b++) {
        const size_t i0 = b * GELU_BLOCK, m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;
        const float *in = inp + i0, *dy = dout + i0;
        float g[GELU_BLOCK];
        size_t i0v = 0;
#if defined(VF_LANES)
        i0v = gelu_backward_vf(g, in, dy, m);
#endif
        #pragma omp simd
        for (size_t i = i0v; i < m; i++) {
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

// inp (n) floats; out (n) rounded, writes
void gelu_forward(void *out, operand_format p, const float *inp, size_t n) {
    gelu_call c = {out, p, inp, NULL, n};
    bg_parallel_ranges((n + GELU_BLOCK - 1) / GELU_BLOCK, gelu_forward_blocks, &c);
}

// dout, inp (n) floats; dinp (n) rounded, WRITES
void gelu_backward(void *dinp, operand_format p, const float *dout, const float *inp, size_t n) {
    gelu_call c = {dinp, p, inp, dout, n};
    bg_parallel_ranges((n + GELU_BLOCK - 1) / GELU_BLOCK, gelu_backward_blocks, &c);
}
