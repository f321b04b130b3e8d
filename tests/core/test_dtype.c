// bg_dtype's one name table: every name parses back to its dtype, the short spellings
// export --dtype has always taken ("f32", "f16") parse too, unknown names are refused
// and leave the output alone; and the safetensors dtype of each.
#include <string.h>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "test_util.h"

int main(void) {
    for (int i = 0; i < BG_DTYPE_COUNT; i++) {
        bg_dtype d = (bg_dtype)-1;
        TU_CHECK(bg_dtype_parse(bg_dtype_name((bg_dtype)i), &d) == 0 && d == (bg_dtype)i,
                 "%s does not parse back", bg_dtype_name((bg_dtype)i));
    }
    // trainer.json stores these names: they are part of the file format.
    TU_CHECK(!strcmp(bg_dtype_name(BG_FP32), "fp32") && !strcmp(bg_dtype_name(BG_BF16), "bf16") &&
                 !strcmp(bg_dtype_name(BG_FP16), "fp16"),
             "the dtype names changed");
    TU_CHECK(!strcmp(bg_dtype_name((bg_dtype)BG_DTYPE_COUNT), "?"), "an invalid dtype has a name");
    const struct {
        const char *name;
        bg_dtype d;
    } spellings[] = {{"f32", BG_FP32}, {"fp32", BG_FP32}, {"bf16", BG_BF16},
                     {"f16", BG_FP16}, {"fp16", BG_FP16}};
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        bg_dtype d = (bg_dtype)-1;
        TU_CHECK(bg_dtype_parse(spellings[i].name, &d) == 0 && d == spellings[i].d,
                 "\"%s\" does not parse as %s", spellings[i].name, bg_dtype_name(spellings[i].d));
    }
    const char *unknown[] = {"fp8", "F32", "", "bf", "fp32 "};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        bg_dtype d = BG_BF16;
        TU_CHECK(bg_dtype_parse(unknown[i], &d) == -1 && d == BG_BF16, "\"%s\" parsed", unknown[i]);
    }
    TU_CHECK(st_dtype_from_bg(BG_FP32) == ST_F32 && st_dtype_from_bg(BG_BF16) == ST_BF16 &&
                 st_dtype_from_bg(BG_FP16) == ST_F16,
             "bg_dtype -> safetensors dtype");
    TU_CHECK(st_dtype_from_bg((bg_dtype)BG_DTYPE_COUNT) == ST_DTYPE_NONE,
             "an invalid dtype maps to a file dtype");
    return tu_finish("core/test_dtype");
}
