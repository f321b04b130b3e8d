// Writes the seed corpus for fuzz_safetensors into the directory argv[1]: small valid files
// from the writer (every dtype, scalars, empty and 8-dimensional tensors, metadata, converted
// floats) and a few hand-made ones the writer would not produce (unsorted header, pretty JSON,
// escapes). Mutating valid files reaches deeper checks than random bytes would.
#include "core/error.h"
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *out_dir;

static void put(const char *name, const st_tensor_in *t, int n, const st_meta *m, int nm) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    if (st_write_file(path, t, n, m, nm, NULL) != BG_OK) {
        fprintf(stderr, "make_seeds: %s\n", bg_last_error());
        exit(1);
    }
}

static void put_raw(const char *name, const char *header, const void *data, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    FILE *f = fopen(path, "wb");
    size_t h = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((unsigned long long)h >> (8 * i));
    if (!f || fwrite(len, 1, 8, f) != 8 || fwrite(header, 1, h, f) != h || (n && fwrite(data, 1, n, f) != n) ||
        fclose(f) != 0) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 2;
    }
    out_dir = argv[1];
    float f[6] = {1.0f, -2.0f, 0.5f, 1e-40f, 3e38f, -0.0f};
    uint16_t h[4] = {0x3c00, 0x7c00, 0x7e00, 0x0001};
    int64_t i64 = 42;
    int32_t i32[3] = {-1, 0, 1};
    uint8_t u8[5] = {0, 1, 2, 3, 255};
    double d = 2.5;
    st_meta meta[2] = {{"format", "pt"}, {"config", "{\"d_model\": 64}"}};

    put("empty.safetensors", NULL, 0, NULL, 0);
    put("meta_only.safetensors", NULL, 0, meta, 2);
    st_tensor_in all[] = {
        {.name = "w", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = f},
        {.name = "h", .dtype = ST_F16, .ndim = 1, .shape = {4}, .data = h},
        {.name = "b", .dtype = ST_BF16, .ndim = 2, .shape = {2, 2}, .data = h},
        {.name = "step", .dtype = ST_I64, .ndim = 0, .data = &i64},
        {.name = "i", .dtype = ST_I32, .ndim = 1, .shape = {3}, .data = i32},
        {.name = "u", .dtype = ST_U8, .ndim = 1, .shape = {5}, .data = u8},
        {.name = "none", .dtype = ST_F32, .ndim = 2, .shape = {0, 3}},
        {.name = "d", .dtype = ST_F64, .ndim = 0, .data = &d},
        {.name = "deep", .dtype = ST_I8, .ndim = 8, .shape = {1, 1, 1, 1, 1, 1, 1, 5}, .data = u8},
        {.name = "flags", .dtype = ST_BOOL, .ndim = 1, .shape = {2}, .data = u8},
    };
    put("all_dtypes.safetensors", all, (int)(sizeof all / sizeof all[0]), meta, 2);
    st_tensor_in conv[2] = {
        {.name = "model.layers.0.mlp.experts.3.w1.weight", .dtype = ST_BF16, .src_dtype = ST_F32, .ndim = 2,
         .shape = {2, 3}, .data = f},
        {.name = "lm_head.weight", .dtype = ST_F16, .src_dtype = ST_F32, .ndim = 1, .shape = {6}, .data = f},
    };
    put("converted.safetensors", conv, 2, NULL, 0);
    put_raw("unsorted_pretty.safetensors",
            "{\n \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]},\n"
            " \"__metadata__\": {\"k\": \"v\\n\\u00e9\"},\n"
            " \"a\\u00e9\": {\"shape\": [1], \"dtype\": \"F32\", \"data_offsets\": [0, 4], \"extra\": 1}\n}  ",
            f, 8);
    // The framed form the harness also tries: header text, NUL, data.
    char framed[128];
    const char *hdr = "{\"x\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[0,4]}}";
    size_t hl = strlen(hdr);
    memcpy(framed, hdr, hl);
    framed[hl] = '\0';
    memcpy(framed + hl + 1, u8, 4);
    char path[1024];
    snprintf(path, sizeof path, "%s/framed.bin", out_dir);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(framed, 1, hl + 5, fp) != hl + 5 || fclose(fp) != 0) return 1;
    return 0;
}
