// Which f32 GEMM the matmul runs: bagualu's own kernel (gemm_f32.h) on Intel CPUs with
// AVX-512F and on CPUs with AVX2 and FMA but not AVX-512 (AMD Zen 3), where it beats
// oneDNN 2.6's f32 GEMM at the model's shapes (BENCHMARKS.md, issue 19); on AMD Zen 5
// the own kernel for the forward and weights products and oneDNN for the data products,
// each the faster there over GPT-2's and M1's steps; oneDNN elsewhere (AMD Zen 4: M1's
// step ran fastest on it, ahead of mixed and own), with the weights products on a
// transposed dout where the CPU has neither AVX-512 nor AVX2 (matmul.c).
// Decided from the CPU's identity alone, never by timing, so a run and its resume sum
// in the same order; BAGUALU_GEMM=own|mixed|onednn|onednn-t forces one for tests and benchmarks.
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/gemm_f32.h"
#include "kernels/kernels.h"

const char *gemm_f32_impl_name(gemm_f32_impl g) {
    return g == GEMM_F32_OWN        ? "own"
           : g == GEMM_F32_MIXED    ? "mixed"
           : g == GEMM_F32_ONEDNN_T ? "onednn-t"
                                    : "onednn";
}

static int gemm_f32_impl_parse(const char *name, gemm_f32_impl *out) {
    if (!strcmp(name, "own")) *out = GEMM_F32_OWN;
    else if (!strcmp(name, "onednn")) *out = GEMM_F32_ONEDNN;
    else if (!strcmp(name, "mixed")) *out = GEMM_F32_MIXED;
    else if (!strcmp(name, "onednn-t")) *out = GEMM_F32_ONEDNN_T;
    else return -1;
    return 0;
}

gemm_f32_impl gemm_f32_impl_for(const cpu_identity *id) {
    if (!id->avx512f) return id->avx2_fma ? GEMM_F32_OWN : GEMM_F32_ONEDNN_T;
    if (!strcmp(id->vendor, "GenuineIntel")) return GEMM_F32_OWN;
    if (!strcmp(id->vendor, "AuthenticAMD") && id->family == 26) return GEMM_F32_MIXED;
    return GEMM_F32_ONEDNN;
}

static gemm_f32_impl cpu_choice(void) {
    cpu_identity id;
    cpu_identity_detect(&id);
    id.avx512f = gemm_f32_avx512_supported();  // the cpuid bit and the OS saving the zmm state
    return gemm_f32_impl_for(&id);
}

int gemm_f32_impl_forced(const char *env, int own_usable, gemm_f32_impl *out) {
    if (gemm_f32_impl_parse(env, out) != 0)
        return bg_error("BAGUALU_GEMM must be own, mixed, onednn or onednn-t, not \"%s\"", env);
    if ((*out == GEMM_F32_OWN || *out == GEMM_F32_MIXED) && !own_usable)
        return bg_error("BAGUALU_GEMM=%s needs a CPU with AVX-512F or AVX2 and FMA", env);
    return BG_OK;
}

int gemm_f32_impl_select(gemm_f32_impl *out) {
    const char *env = getenv("BAGUALU_GEMM");
    if (env && *env) return gemm_f32_impl_forced(env, gemm_f32_supported(), out);
    *out = cpu_choice();
    return BG_OK;
}

gemm_f32_impl gemm_f32_impl_default(void) {
    gemm_f32_impl g = GEMM_F32_ONEDNN;
    // A bad variable falls back to the CPU's choice here; trainer_init reports it.
    if (gemm_f32_impl_select(&g) != BG_OK) g = cpu_choice();
    return g;
}
