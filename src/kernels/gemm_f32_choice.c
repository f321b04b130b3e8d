// Which f32 GEMM the matmul runs: bagualu's own AVX-512 kernel (gemm_f32_avx512.c) on
// Intel CPUs with AVX-512F, where it beats oneDNN 2.6's f32 GEMM at the model's shapes
// (BENCHMARKS.md, issue 19); oneDNN elsewhere, AMD's Zen 4/5 included, where oneDNN
// was measured near the FMA peak and the own kernel, faster on some forward products and
// slower on the data gradients, was no faster over whole steps on Zen 5. Decided from
// the CPU flags alone, never by timing, so a run and its resume sum in the same order;
// BAGUALU_GEMM=own|onednn forces one for tests and benchmarks.
#include <cpuid.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/gemm_f32.h"
#include "kernels/kernels.h"

const char *gemm_f32_impl_name(gemm_f32_impl g) { return g == GEMM_F32_OWN ? "own" : "onednn"; }

static int gemm_f32_impl_parse(const char *name, gemm_f32_impl *out) {
    if (!strcmp(name, "own")) *out = GEMM_F32_OWN;
    else if (!strcmp(name, "onednn")) *out = GEMM_F32_ONEDNN;
    else return -1;
    return 0;
}

gemm_f32_impl gemm_f32_impl_for(const char *vendor, int avx512f) {
    return avx512f && !strcmp(vendor, "GenuineIntel") ? GEMM_F32_OWN : GEMM_F32_ONEDNN;
}

static gemm_f32_impl cpu_choice(void) {
    char vendor[13] = {0};
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
    return gemm_f32_impl_for(vendor, gemm_f32_supported());
}

int gemm_f32_impl_select(gemm_f32_impl *out) {
    const char *env = getenv("BAGUALU_GEMM");
    if (env && *env) {
        if (gemm_f32_impl_parse(env, out) != 0)
            return bg_error("BAGUALU_GEMM must be own or onednn, not \"%s\"", env);
        if (*out == GEMM_F32_OWN && !gemm_f32_supported())
            return bg_error("BAGUALU_GEMM=own needs a CPU with AVX-512F");
        return BG_OK;
    }
    *out = cpu_choice();
    return BG_OK;
}

gemm_f32_impl gemm_f32_impl_default(void) {
    gemm_f32_impl g;
    // A bad variable falls back to the CPU's choice here; trainer_init reports it.
    if (gemm_f32_impl_select(&g) != BG_OK) g = cpu_choice();
    return g;
}
