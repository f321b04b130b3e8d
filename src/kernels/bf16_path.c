// Which kernels run bf16 GEMMs and flash-attention tiles: the CPU's bf16 dot products
// ("native") or the fp32 kernels on bf16-rounded operands ("fp32"). A bf16 product
// with fp32 accumulation equals an fp32 product of the rounded operands (each product
// is exact in fp32), so both give bf16's numerics up to summation order; which is
// faster depends on the CPU. The choice comes from the CPU's identity through a fixed
// table, never from a timing probe: a run and its resume must take the same path on
// the same machine.
#include "kernels/kernels.h"

#include <cpuid.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/flash_attention_amx.h"
#include "kernels/gemm_f32.h"

// One row per family met, from BENCHMARKS.md's measurements: the path without and with
// usable AMX. model -1: any model.
typedef struct {
    const char *vendor;
    int family, model;
    bf16_path path, path_amx;
} bf16_path_row;

static const bf16_path_row BF16_PATH_TABLE[] = {
    // AMD Zen 4 and Zen 5: vdpbf16ps at twice the FMA rate; bf16 steps are faster.
    {"AuthenticAMD", 25, -1, BF16_PATH_NATIVE, BF16_PATH_NATIVE},
    {"AuthenticAMD", 26, -1, BF16_PATH_NATIVE, BF16_PATH_NATIVE},
    // Intel Xeons met (models 207 and 167 as the VMs report them): vdpbf16ps at half
    // the FMA rate, and without AMX oneDNN 2.6's bf16 GEMM is slower than its f32 one
    // too, so both go through fp32; with AMX the GEMMs (oneDNN's runtime-M bf16 GEMM)
    // and flash attention's tiles (flash_attention_amx.c) run on the tiles.
    {"GenuineIntel", 6, 207, BF16_PATH_FP32, BF16_PATH_AMX},
    {"GenuineIntel", 6, 167, BF16_PATH_FP32, BF16_PATH_AMX},
};

bf16_path bf16_path_for(const cpu_identity *id) {
    // Without bf16 dot products oneDNN emulates them: the fp32 kernels are faster.
    if (!id->avx512_bf16 && !id->amx_bf16) return BF16_PATH_FP32;
    for (size_t i = 0; i < sizeof BF16_PATH_TABLE / sizeof BF16_PATH_TABLE[0]; i++) {
        const bf16_path_row *r = &BF16_PATH_TABLE[i];
        if (!strcmp(r->vendor, id->vendor) && r->family == id->family &&
            (r->model < 0 || r->model == id->model))
            return id->amx_bf16 ? r->path_amx : r->path;
    }
    return BF16_PATH_NATIVE;  // a family not met: the CPU's own bf16 instructions
}

void cpu_identity_detect(cpu_identity *id) {
    memset(id, 0, sizeof *id);
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    const unsigned max_leaf = a;
    memcpy(id->vendor, &b, 4), memcpy(id->vendor + 4, &d, 4), memcpy(id->vendor + 8, &c, 4);
    __get_cpuid(1, &a, &b, &c, &d);
    const int base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
    id->family = base_family == 0xf ? base_family + (int)((a >> 20) & 0xff) : base_family;
    id->model = base_family == 0x6 || base_family == 0xf ? base_model + (int)(((a >> 16) & 0xf) << 4)
                                                          : base_model;
    const int osxsave = (c >> 27) & 1;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        id->avx512f = (b >> 16) & 1;
        // AMX is usable when the OS enables its tile state too (XCR0 bits 17 and 18); a
        // VM may show the cpuid bits without it.
        unsigned xcr0 = 0;
        if (osxsave) __asm__("xgetbv" : "=a"(xcr0) : "c"(0) : "edx");
        id->amx_bf16 = ((d >> 22) & 1) && ((d >> 24) & 1) && (xcr0 & 0x60000u) == 0x60000u;
        __cpuid_count(7, 1, a, b, c, d);
        id->avx512_bf16 = (a >> 5) & 1;
    }
    id->avx2_fma = gemm_f32_avx2_supported();  // the own GEMM's test, cpuid and the OS's ymm state
}

const char *bf16_path_name(bf16_path p) {
    return p == BF16_PATH_FP32          ? "fp32"
           : p == BF16_PATH_NATIVE_GEMM ? "native-gemm"
           : p == BF16_PATH_AMX         ? "amx"
                                        : "native";
}

int bf16_path_parse(const char *name, bf16_path *out) {
    if (!strcmp(name, "native")) *out = BF16_PATH_NATIVE;
    else if (!strcmp(name, "fp32")) *out = BF16_PATH_FP32;
    else if (!strcmp(name, "native-gemm")) *out = BF16_PATH_NATIVE_GEMM;
    else if (!strcmp(name, "amx")) *out = BF16_PATH_AMX;
    else return -1;
    return 0;
}

static bf16_path bf16_path_of_cpu(void) {
    cpu_identity id;
    cpu_identity_detect(&id);
    return bf16_path_for(&id);
}

int bf16_path_forced(const char *env, int native_usable, int amx_usable, bf16_path *out) {
    if (bf16_path_parse(env, out) != 0)
        return bg_error("BAGUALU_BF16_PATH must be native, native-gemm, amx or fp32, not \"%s\"", env);
    if ((*out == BF16_PATH_NATIVE || *out == BF16_PATH_NATIVE_GEMM) && !native_usable)
        return bg_error("BAGUALU_BF16_PATH=%s needs a CPU on which oneDNN has bf16 GEMMs (AVX-512); "
                        "this one takes fp32", env);
    if (*out == BF16_PATH_AMX && !amx_usable)
        return bg_error("BAGUALU_BF16_PATH=amx needs a CPU whose AMX tiles this process may use");
    return BG_OK;
}

int bf16_path_select(bf16_path *out) {
    const char *env = getenv("BAGUALU_BF16_PATH");
    if (env && *env) return bf16_path_forced(env, matmul_bf16_native_usable(), fa_amx_usable(), out);
    *out = bf16_path_of_cpu();
    return BG_OK;
}

bf16_path bf16_path_default(void) {
    const char *env = getenv("BAGUALU_BF16_PATH");
    bf16_path p;
    // A bad or unusable value falls back to the table here; trainer_init reports it.
    if (env && *env && bf16_path_forced(env, matmul_bf16_native_usable(), fa_amx_usable(), &p) == BG_OK)
        return p;
    return bf16_path_of_cpu();
}
