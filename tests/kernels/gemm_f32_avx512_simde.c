// The own AVX-512 GEMM (src/kernels/gemm_f32_avx512.c) compiled through SIMDe's portable
// AVX-512, whose 512-bit operations run as pairs of AVX2 ones, under other names: its
// packing, edges, masks and blocking run on CPUs without AVX-512, and must give the bits
// of the documented summation order as the real one does
// (test_gemm_f32_avx512_simde.c). Built with AVX2 and FMA so that each emulated FMA is
// a fused one.
#if !defined(__AVX2__) || !defined(__FMA__)
#error "built with -mavx2 -mfma: SIMDe's FMA must be a fused one"
#endif
#include <immintrin.h>  // GCC's own declarations first: the aliases below rename later uses
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <stdint.h>

// SIMDe 0.7.4 lacks these two; lane by lane, so a masked-off lane is never touched (the
// kernel relies on that at the ends of rows, as AVX-512's fault suppression allows).
static inline simde__m512 simde_maskz_loadu_ps(uint16_t k, const void *p) {
    simde__m512_private r;
    for (int i = 0; i < 16; i++) r.f32[i] = (k >> i) & 1 ? ((const float *)p)[i] : 0.0f;
    return simde__m512_from_private(r);
}
static inline void simde_mask_storeu_ps(void *p, uint16_t k, simde__m512 v) {
    const simde__m512_private r = simde__m512_to_private(v);
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) ((float *)p)[i] = r.f32[i];
}
#define _mm512_maskz_loadu_ps simde_maskz_loadu_ps
#define _mm512_mask_storeu_ps simde_mask_storeu_ps
#define _mm512_shuffle_f32x4 simde_mm512_shuffle_f32x4

#define GEMM_F32_AVX512_TARGET
#define gemm_f32_avx512 gemm_f32_avx512_simde
#define gemm_f32_avx512_scratch_floats gemm_f32_avx512_simde_scratch_floats
#define gemm_f32_avx512_supported gemm_f32_avx512_simde_supported
#include "../../src/kernels/gemm_f32_avx512.c"
