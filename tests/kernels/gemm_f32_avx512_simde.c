// The own AVX-512 GEMM (src/kernels/gemm_f32_avx512.c) compiled through SIMDe's portable
// AVX-512 (tests/simde_avx512.h) under other names: its packing, edges, masks and
// blocking run on CPUs without AVX-512, and must give the bits of the documented
// summation order as the real one does (test_gemm_f32_avx512_simde.c). Built with AVX2
// and FMA so that each emulated FMA is a fused one.
#if !defined(__AVX2__) || !defined(__FMA__)
#error "built with -mavx2 -mfma: SIMDe's FMA must be a fused one"
#endif
#include "simde_avx512.h"

#define TARGET  // no vector target: SIMDe's code runs on AVX2
#define gemm_f32_avx512 gemm_f32_avx512_simde
#define gemm_f32_avx512_scratch_floats gemm_f32_avx512_simde_scratch_floats
#define gemm_f32_avx512_supported gemm_f32_avx512_simde_supported
#include "../../src/kernels/gemm_f32_avx512.c"
