// Rotary position embedding, Hugging Face (Llama/Mixtral) layout: in each head,
// dimension i and i + hs/2 form a pair rotated by angle t·θ^(-2i/hs).
#include "kernels/kernels.h"

#include <math.h>

#include "core/error.h"

// cos_t/sin_t (T, hs/2)
void rope_tables(float *cos_t, float *sin_t, int T, int hs, float theta) {
    BG_ASSERT(hs % 2 == 0);
    const int half = hs / 2;
    // In double: angles reach T (thousands of radians), where a float angle is
    // already ~1e-4 off, and that error would go straight into cos and sin.
    for (int i = 0; i < half; i++) {
        const double freq = pow((double)theta, -2.0 * i / hs);
        for (int t = 0; t < T; t++) {
            const double angle = t * freq;
            cos_t[(size_t)t * half + i] = (float)cos(angle);
            sin_t[(size_t)t * half + i] = (float)sin(angle);
        }
    }
}

// Rotates every head of the q and k parts of one token by +angle (sign 1) or by
// -angle (sign -1: the transpose, which is what the gradient needs).
static void rope_rotate(float *qkv, const float *cos_t, const float *sin_t, int B, int T,
                        int C, int NH, int NKV, float sign) {
    BG_ASSERT(C % NH == 0 && (C / NH) % 2 == 0 && NH % NKV == 0);
    const int hs = C / NH, half = hs / 2;
    const size_t W = (size_t)C + 2 * (size_t)NKV * hs;  // a token's q, k, v
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *cs = cos_t + (size_t)t * half, *sn = sin_t + (size_t)t * half;
            float *tok = qkv + ((size_t)b * T + t) * W;
            // q's NH heads then k's NKV heads open the token, contiguous.
            for (int h = 0; h < NH + NKV; h++) {
                float *x1 = tok + (size_t)h * hs, *x2 = x1 + half;
                #pragma omp simd
                for (int i = 0; i < half; i++) {
                    const float a = x1[i], c = x2[i], s = sign * sn[i];
                    x1[i] = a * cs[i] - c * s;
                    x2[i] = c * cs[i] + a * s;
                }
            }
        }
}

// qkv (B,T,C+2·NKV·hs), in place
void rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int C,
                  int NH, int NKV) {
    rope_rotate(qkv, cos_t, sin_t, B, T, C, NH, NKV, 1.0f);
}

// dqkv (B,T,3C), in place: a rotation's Jacobian is the rotation, so its transpose
// (the inverse rotation) maps output gradients to input gradients.
void rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int C,
                   int NH, int NKV) {
    rope_rotate(dqkv, cos_t, sin_t, B, T, C, NH, NKV, -1.0f);
}
