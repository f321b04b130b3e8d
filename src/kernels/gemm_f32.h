#ifndef BG_KERNELS_GEMM_F32_H
#define BG_KERNELS_GEMM_F32_H
// bagualu's own f32 GEMM for AVX-512 CPUs (gemm_f32_avx512.c): C(m,n) = or += A(m,k)·B(k,n)
// with A and B given by strides, so every transpose the model needs is a stride.
//
// Deterministic: each C element is summed over k in one fixed order (blocks of
// GEMM_F32_KC in order, each an FMA chain from zero, added onto C in order), whatever M,
// N, the tile the element falls in and the thread count; so a row's values do not
// depend on the other rows of the call, and split layouts reproduce unsplit ones.
#include <stddef.h>

enum { GEMM_F32_KC = 256 };

// Floats of one thread's packing scratch (32-float aligned), allocated by the caller
// once and kept: a call never allocates.
size_t gemm_f32_scratch_floats(void);

// Whether this CPU runs the AVX-512 kernel (avx512f by cpuid).
int gemm_f32_supported(void);

typedef struct {
    int M, N, K;
    const float *a;  // A(i,k) = a[i*a_rs + k*a_cs]
    ptrdiff_t a_rs, a_cs;
    const float *b;  // B(k,j) = b[k*b_rs + j*b_cs]
    ptrdiff_t b_rs, b_cs;
    float *c;  // C(i,j) = c[i*ldc + j]
    ptrdiff_t ldc;
    int accumulate;  // 1: C += A·B; 0: C = A·B (C not read)
} gemm_f32_args;

// Runs on the calling thread alone, or, with threads > 1 and outside a parallel region,
// on a team of that many threads: scratch[t] is thread t's scratch (threads of them).
// The result is bitwise the same for every thread count.
void gemm_f32_avx512(const gemm_f32_args *g, float *const *scratch, int threads);
#endif
