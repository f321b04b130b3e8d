#ifndef BG_TESTS_SIMDE_AVX512_H
#define BG_TESTS_SIMDE_AVX512_H
// AVX-512 on CPUs without it, for tests: SIMDe's portable AVX-512 (libsimde-dev, its
// 512-bit operations as pairs of AVX2 ones when built with -mavx2 -mfma, FMAs fused),
// under the intrinsics' own names, plus the few that SIMDe 0.7.4 lacks. Included first
// (gcc -include) by `make avx512-emulated`'s build, whose __AVX512F__ branches (vec16.h,
// vecmath.h) then run here; included by tests/kernels/gemm_f32_avx512_simde.c to run
// the own AVX-512 GEMM.
#include <immintrin.h>  // GCC's own declarations first: the aliases rename later uses
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#undef I  // <complex.h>, which SIMDe includes, defines these; the code names variables so
#undef complex
#include <stdint.h>

// Masked loads and stores lane by lane: a masked-off lane is never touched (kernels rely
// on it at the ends of rows, as AVX-512's fault suppression allows).
static inline simde__m512 bg_simde_maskz_loadu_ps(uint16_t k, const void *p) {
    simde__m512_private r;
    for (int i = 0; i < 16; i++) r.f32[i] = (k >> i) & 1 ? ((const float *)p)[i] : 0.0f;
    return simde__m512_from_private(r);
}
static inline void bg_simde_mask_storeu_ps(void *p, uint16_t k, simde__m512 v) {
    const simde__m512_private r = simde__m512_to_private(v);
    for (int i = 0; i < 16; i++)
        if ((k >> i) & 1) ((float *)p)[i] = r.f32[i];
}
// rcp14: the exact reciprocal (the instruction's is within 2^-14 of it, its bits a
// table's that no portable code reproduces: results that use it differ in the last bits).
static inline simde__m512 bg_simde_rcp14_ps(simde__m512 d) {
    simde__m512_private r = simde__m512_to_private(d);
    for (int i = 0; i < 16; i++) r.f32[i] = 1.0f / r.f32[i];
    return simde__m512_from_private(r);
}
// GCC's _mm512_reduce_{add,max}_ps order: the upper 256 bits onto the lower, the upper
// 128 onto the lower, lanes 2 and 3 onto 0 and 1, then lane 1 onto lane 0.
#define BG_SIMDE_REDUCE(name, OP)                                      \
    static inline float name(simde__m512 a) {                          \
        const simde__m512_private p = simde__m512_to_private(a);       \
        float t[8], u[4];                                              \
        for (int i = 0; i < 8; i++) t[i] = OP(p.f32[8 + i], p.f32[i]); \
        for (int i = 0; i < 4; i++) u[i] = OP(t[4 + i], t[i]);         \
        return OP(OP(u[0], u[2]), OP(u[1], u[3]));                     \
    }
#define BG_SIMDE_ADD(x, y) ((x) + (y))
#define BG_SIMDE_MAX(x, y) ((x) > (y) ? (x) : (y))  // maxps: the second operand if unordered
BG_SIMDE_REDUCE(bg_simde_reduce_add_ps, BG_SIMDE_ADD)
BG_SIMDE_REDUCE(bg_simde_reduce_max_ps, BG_SIMDE_MAX)

// GCC's header makes some of these macros (at -O0, those taking immediates).
#undef _mm512_maskz_loadu_ps
#undef _mm512_mask_storeu_ps
#undef _mm512_shuffle_f32x4
#undef _mm512_rcp14_ps
#undef _mm512_reduce_add_ps
#undef _mm512_reduce_max_ps
#define _mm512_maskz_loadu_ps bg_simde_maskz_loadu_ps
#define _mm512_mask_storeu_ps bg_simde_mask_storeu_ps
#define _mm512_shuffle_f32x4 simde_mm512_shuffle_f32x4
#define _mm512_rcp14_ps bg_simde_rcp14_ps
#define _mm512_reduce_add_ps bg_simde_reduce_add_ps
#define _mm512_reduce_max_ps bg_simde_reduce_max_ps

// The code's AVX-512 branches, compiled onto the above (vec16.h keeps no v16 in a
// register by asm: an emulated one is no register).
#define BG_AVX512_EMULATED 1
#ifndef __AVX512F__
#define __AVX512F__ 1
#endif
#endif
