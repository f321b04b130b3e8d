// The own f32 GEMM's entry: the widest kernel the CPU runs (gemm_f32.h).
#include "kernels/gemm_f32.h"

#include "core/error.h"

// cpuid once (a VM exit each time on a virtual machine, and every GEMM asks): the
// answers cannot change while the process runs.
static int has(int *known, int (*probe)(void)) {
    if (*known < 0) *known = probe();
    return *known;
}
static int has_avx512(void) {
    static int known = -1;
    return has(&known, gemm_f32_avx512_supported);
}
static int has_avx2(void) {
    static int known = -1;
    return has(&known, gemm_f32_avx2_supported);
}

int gemm_f32_supported(void) { return has_avx512() || has_avx2(); }

size_t gemm_f32_scratch_floats(void) {
    const size_t a = gemm_f32_avx512_scratch_floats(), b = gemm_f32_avx2_scratch_floats();
    return a > b ? a : b;
}

void gemm_f32(const gemm_f32_args *g, float *const *scratch, int threads) {
    if (has_avx512()) {
        gemm_f32_avx512(g, scratch, threads);
    } else {
        BG_ASSERT(has_avx2());
        gemm_f32_avx2(g, scratch, threads);
    }
}
