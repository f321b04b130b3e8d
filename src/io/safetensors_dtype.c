// safetensors dtypes: names and sizes (the fp32 <-> bf16/fp16 conversions used on read
// and write are core/half.h's).
#include "io/safetensors.h"

#include <string.h>

// Tensors are stored in memory order; a big-endian port would byte-swap here.
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes little-endian");

static const struct {
    const char *name;
    size_t size;
} st_dtypes[ST_DTYPE_COUNT] = {
    [ST_DTYPE_NONE] = {"?", 0},
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},           [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},         [ST_F16] = {"F16", 2},         [ST_BF16] = {"BF16", 2},
    [ST_I32] = {"I32", 4},         [ST_U32] = {"U32", 4},         [ST_F32] = {"F32", 4},
    [ST_I64] = {"I64", 8},         [ST_U64] = {"U64", 8},         [ST_F64] = {"F64", 8},
};

const char *st_dtype_name(st_dtype d) {
    return (unsigned)d < ST_DTYPE_COUNT ? st_dtypes[d].name : "?";
}

size_t st_dtype_size(st_dtype d) { return (unsigned)d < ST_DTYPE_COUNT ? st_dtypes[d].size : 0; }

st_dtype st_dtype_from_bg(bg_dtype d) {
    static const st_dtype of_bg[BG_DTYPE_COUNT] = {[BG_FP32] = ST_F32, [BG_BF16] = ST_BF16,
                                                   [BG_FP16] = ST_F16};
    return (unsigned)d < BG_DTYPE_COUNT ? of_bg[d] : ST_DTYPE_NONE;
}

st_dtype st_dtype_from_name(const char *name) {
    for (int d = 1; d < ST_DTYPE_COUNT; d++)
        if (strcmp(name, st_dtypes[d].name) == 0) return (st_dtype)d;
    return ST_DTYPE_NONE;
}
