// The names of bg_dtype: one table for the command line, trainer.json and messages.
#include "core/dtype.h"

#include <string.h>

static const struct {
    const char *name, *short_name;
} dtype_names[BG_DTYPE_COUNT] = {
    [BG_FP32] = {"fp32", "f32"},
    [BG_BF16] = {"bf16", "bf16"},
    [BG_FP16] = {"fp16", "f16"},
};

const char *bg_dtype_name(bg_dtype d) {
    return (unsigned)d < BG_DTYPE_COUNT ? dtype_names[d].name : "?";
}

int bg_dtype_parse(const char *name, bg_dtype *d) {
    for (int i = 0; i < BG_DTYPE_COUNT; i++)
        if (!strcmp(name, dtype_names[i].name) || !strcmp(name, dtype_names[i].short_name)) {
            *d = (bg_dtype)i;
            return 0;
        }
    return -1;
}
