#ifndef BG_KERNELS_GEMM_F32_H
#define BG_KERNELS_GEMM_F32_H
// bagualu's own f32 GEMM: C(m,n) = or += A(m,k)·B(k,n) with A and B given by strides, so
// every transpose the model needs is a stride. Two micro-kernels behind one call: AVX-512
// (gemm_f32_avx512.c) and AVX2 with FMA (gemm_f32_avx2.c).
//
// Deterministic: each C element is summed over k in one fixed order (blocks of
// GEMM_F32_KC in order, each an FMA chain from zero, added onto C in order), whatever M,
// N, the tile the element falls in, the thread count and the vector width; so a row's
// values do not depend on the other rows of the call, split layouts reproduce unsplit
// ones, and the AVX2 and AVX-512 kernels give the same bits.
#include <stddef.h>

enum { GEMM_F32_KC = 256 };

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

// Whether this CPU runs one of the kernels (cpuid and the OS saving the vector state).
int gemm_f32_supported(void);
int gemm_f32_avx512_supported(void);
int gemm_f32_avx2_supported(void);

// Floats of one thread's packing scratch (32-float aligned), allocated by the caller
// once and kept: a call never allocates.
size_t gemm_f32_scratch_floats(void);
size_t gemm_f32_avx512_scratch_floats(void);
size_t gemm_f32_avx2_scratch_floats(void);

// Runs on the calling thread alone, or, with threads > 1 and outside a parallel region,
// on a team of that many threads: scratch[t] is thread t's scratch (threads of them).
// The result is bitwise the same for every thread count. gemm_f32 takes the AVX-512
// kernel where the CPU has it, else the AVX2 one (gemm_f32_supported() must hold).
void gemm_f32(const gemm_f32_args *g, float *const *scratch, int threads);
void gemm_f32_avx512(const gemm_f32_args *g, float *const *scratch, int threads);
void gemm_f32_avx2(const gemm_f32_args *g, float *const *scratch, int threads);
#endif
