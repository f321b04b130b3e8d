// The bf16 path table (kernels/bf16_path.c): each family met maps to the path its
// measurements chose, a CPU without bf16 dot products to fp32, a family not met with
// them to native; BAGUALU_BF16_PATH forces a path, and any other value is an error
// naming the variable. New kernel contexts take the process's path.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/flash_attention_amx.h"
#include "kernels/kernels.h"
#include "test_util.h"

static bf16_path path_of_amx(const char *vendor, int family, int model, int bf16, int amx) {
    cpu_identity id;
    memset(&id, 0, sizeof id);
    snprintf(id.vendor, sizeof id.vendor, "%s", vendor);
    id.family = family, id.model = model, id.avx512f = 1, id.avx512_bf16 = bf16, id.amx_bf16 = amx;
    return bf16_path_for(&id);
}

static bf16_path path_of(const char *vendor, int family, int model, int bf16) {
    return path_of_amx(vendor, family, model, bf16, 0);
}

int main(void) {
    TU_CHECK(path_of("AuthenticAMD", 25, 17, 1) == BF16_PATH_NATIVE, "Zen 4 must run native bf16");
    TU_CHECK(path_of("AuthenticAMD", 26, 2, 1) == BF16_PATH_NATIVE, "Zen 5 must run native bf16");
    TU_CHECK(path_of("GenuineIntel", 6, 207, 1) == BF16_PATH_FP32, "Intel 6/207 must take the fp32 path");
    TU_CHECK(path_of("GenuineIntel", 6, 167, 1) == BF16_PATH_FP32, "Intel 6/167 must take the fp32 path");
    TU_CHECK(path_of_amx("GenuineIntel", 6, 207, 1, 1) == BF16_PATH_AMX, "Intel 6/207 with AMX: amx");
    TU_CHECK(path_of_amx("GenuineIntel", 6, 167, 1, 1) == BF16_PATH_AMX, "Intel 6/167 with AMX: amx");
    TU_CHECK(path_of("GenuineIntel", 6, 143, 1) == BF16_PATH_NATIVE, "a family not met with bf16: native");
    TU_CHECK(path_of("AuthenticAMD", 25, 1, 0) == BF16_PATH_FP32, "no avx512_bf16: the fp32 path");
    TU_CHECK(path_of("GenuineIntel", 6, 85, 0) == BF16_PATH_FP32, "no avx512_bf16: the fp32 path");
    TU_CHECK(path_of("", 0, 0, 0) == BF16_PATH_FP32, "an unknown CPU without bf16: fp32");

    bf16_path p;
    TU_CHECK(bf16_path_parse("native", &p) == 0 && p == BF16_PATH_NATIVE, "parse native");
    TU_CHECK(bf16_path_parse("fp32", &p) == 0 && p == BF16_PATH_FP32, "parse fp32");
    TU_CHECK(bf16_path_parse("native-gemm", &p) == 0 && p == BF16_PATH_NATIVE_GEMM, "parse native-gemm");
    TU_CHECK(bf16_path_parse("amx", &p) == 0 && p == BF16_PATH_AMX, "parse amx");
    TU_CHECK(!strcmp(bf16_path_name(BF16_PATH_AMX), "amx"), "name amx");
    TU_CHECK(bf16_path_parse("bf16", &p) == -1, "parse must refuse other names");
    TU_CHECK(!strcmp(bf16_path_name(BF16_PATH_FP32), "fp32") && !strcmp(bf16_path_name(BF16_PATH_NATIVE), "native"),
             "names");

    cpu_identity id;
    cpu_identity_detect(&id);
    unsetenv("BAGUALU_BF16_PATH");
    TU_CHECK(bf16_path_select(&p) == BG_OK && p == bf16_path_for(&id), "unset: the table's path");
    printf("this CPU: %s family %d model %d avx512f %d avx512_bf16 %d amx_bf16 %d -> %s\n", id.vendor,
           id.family, id.model, id.avx512f, id.avx512_bf16, id.amx_bf16, bf16_path_name(p));
    // oneDNN 2.6's bf16 GEMM is there exactly where AVX-512BW is (its avx512_core).
    const int native = matmul_bf16_native_usable();
    printf("oneDNN bf16 GEMMs on this CPU: %s\n", native ? "yes" : "no");
    TU_CHECK(native == (id.avx512f && __builtin_cpu_supports("avx512bw")),
             "oneDNN's bf16 GEMM (%d) must follow AVX-512BW", native);
    // native and amx are forced only where usable; elsewhere forcing them is an error.
    const int paths = fa_amx_usable() ? 4 : 3;
    for (int i = 0; i < paths; i++) {
        if (i && i < 3 && !native) continue;
        const bf16_path want = i == 3 ? BF16_PATH_AMX : i == 2 ? BF16_PATH_NATIVE_GEMM : i ? BF16_PATH_NATIVE : BF16_PATH_FP32;
        setenv("BAGUALU_BF16_PATH", bf16_path_name(want), 1);
        TU_CHECK(bf16_path_select(&p) == BG_OK && p == want, "forced %s", bf16_path_name(want));
        TU_CHECK(bf16_path_default() == want, "default follows the variable");
        kernel_ctx *kc = kernel_ctx_create(BG_BF16);
        TU_CHECK(kernel_ctx_bf16_path(kc) == want, "a new context takes the forced path");
        TU_CHECK(kernel_ctx_operand_format(kc) == (i ? OPERAND_BF16 : OPERAND_BF16_IN_F32), "operand format");
        TU_CHECK(!strcmp(bf16_path_name(want), getenv("BAGUALU_BF16_PATH")), "name round trip");
        kernel_ctx_free(kc);
    }
    // amx forced: an error naming AMX where the tiles are not usable, on every CPU through
    // the rule itself; the process's own answer where they are.
    TU_CHECK(bf16_path_forced("native", 0, 1, &p) == BG_ERR && strstr(bg_last_error(), "BAGUALU_BF16_PATH=native") &&
                 strstr(bg_last_error(), "oneDNN has bf16 GEMMs"),
             "native forced without oneDNN's bf16 GEMMs must be an error naming it: %s", bg_last_error());
    TU_CHECK(bf16_path_forced("native-gemm", 0, 1, &p) == BG_ERR, "native-gemm forced without bf16 GEMMs");
    TU_CHECK(bf16_path_forced("native", 1, 0, &p) == BG_OK && p == BF16_PATH_NATIVE, "native forced with them");
    TU_CHECK(bf16_path_forced("fp32", 0, 0, &p) == BG_OK && p == BF16_PATH_FP32, "fp32 forced anywhere");
    setenv("BAGUALU_BF16_PATH", "native", 1);
    TU_CHECK((bf16_path_select(&p) == BG_OK) == (native != 0), "native forced follows oneDNN's answer");
    TU_CHECK(bf16_path_default() == (native ? BF16_PATH_NATIVE : bf16_path_for(&id)),
             "default: native where usable, else the table");
    TU_CHECK(bf16_path_forced("amx", 1, 0, &p) == BG_ERR && strstr(bg_last_error(), "BAGUALU_BF16_PATH=amx") &&
                 strstr(bg_last_error(), "AMX tiles"),
             "amx forced without usable tiles must be an error naming it: %s", bg_last_error());
    TU_CHECK(bf16_path_forced("amx", 1, 1, &p) == BG_OK && p == BF16_PATH_AMX, "amx forced with usable tiles");
    TU_CHECK(bf16_path_forced("fast", 1, 1, &p) == BG_ERR && strstr(bg_last_error(), "native, native-gemm, amx or fp32"),
             "a bad name lists the paths: %s", bg_last_error());
    setenv("BAGUALU_BF16_PATH", "amx", 1);
    TU_CHECK((bf16_path_select(&p) == BG_OK) == (fa_amx_usable() != 0), "amx forced follows fa_amx_usable");
    setenv("BAGUALU_BF16_PATH", "fast", 1);
    TU_CHECK(bf16_path_select(&p) == BG_ERR && strstr(bg_last_error(), "BAGUALU_BF16_PATH"),
             "a bad value must be an error naming the variable");
    TU_CHECK(bf16_path_default() == bf16_path_for(&id), "default falls back to the table");
    unsetenv("BAGUALU_BF16_PATH");
    return tu_finish("kernels/test_bf16_path");
}
