// safetensors round trips: the writer's files read back bit for bit (every dtype, scalars,
// 0-element and 8-dimensional tensors, metadata, conversion on write), the header has the
// reference layout, and an independent Python reader/writer agrees with ours.
// Comparisons are exact: nothing here is computed, only stored and converted.
#include "core/error.h"
#include "core/half.h"
#include "io/safetensors.h"
#include "test_util.h"

#include <cjson/cJSON.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static char dir[256];

static void path_in_dir(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static unsigned char *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*size ? *size : 1);
    if (fread(b, 1, *size, f) != *size) *size = 0;
    fclose(f);
    return b;
}

// The tensors of the main round trip; sizes chosen so later tensors start misaligned.
enum { N_BIG = 100003 };  // > the writer's 32768-element staging buffer, odd
static float w_f32[12], w_conv[N_BIG], w_f16src[6], w_f64dummy[1];
static double w_f64[2] = {3.141592653589793, -1e300};
static int32_t w_i32[7] = {0, 1, -1, 2147483647, -2147483647 - 1, 42, -42};
static int64_t w_i64 = -1234567890123456789ll;
static uint8_t w_u8[3] = {0, 128, 255}, w_bool[2] = {1, 0};
static float w_8d[2] = {5.0f, -6.0f}, w_after_u8[3] = {7.0f, 8.0f, 9.0f};

#define N_TENSORS 11
static st_tensor_in tensors[N_TENSORS];
static const st_meta meta[] = {{"format", "pt"},
                               {"config", "{\n  \"d_model\": 64,\n  \"note\": \"\\u00fc \xc3\xbc\"\n}"}};

static void build_tensors(void) {
    tu_seed(1);
    tu_fill_normal(w_f32, 12, 1.0);
    tu_fill_normal(w_conv, N_BIG, 3.0);
    w_conv[0] = INFINITY, w_conv[1] = -INFINITY, w_conv[2] = 1e30f, w_conv[3] = -0.0f;
    tu_fill_normal(w_f16src, 6, 100.0);
    w_f16src[5] = 1e6f;  // beyond fp16 range: infinity
    (void)w_f64dummy;
    st_tensor_in t[N_TENSORS] = {
        {.name = "model.embed_tokens.weight", .dtype = ST_F32, .ndim = 2, .shape = {3, 4}, .data = w_f32},
        {.name = "bf16.converted", .dtype = ST_BF16, .src_dtype = ST_F32, .ndim = 1, .shape = {N_BIG}, .data = w_conv},
        {.name = "f16.converted", .dtype = ST_F16, .src_dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = w_f16src},
        {.name = "ints", .dtype = ST_I32, .ndim = 1, .shape = {7}, .data = w_i32},
        {.name = "step", .dtype = ST_I64, .ndim = 0, .data = &w_i64},
        {.name = "bytes", .dtype = ST_U8, .ndim = 1, .shape = {3}, .data = w_u8},
        {.name = "after_u8", .dtype = ST_F32, .ndim = 1, .shape = {3}, .data = w_after_u8},
        {.name = "empty", .dtype = ST_F32, .ndim = 2, .shape = {0, 5}, .data = NULL},
        {.name = "doubles", .dtype = ST_F64, .ndim = 1, .shape = {2}, .data = w_f64},
        {.name = "eight.dims", .dtype = ST_F32, .ndim = 8, .shape = {1, 1, 1, 1, 1, 1, 1, 2}, .data = w_8d},
        {.name = "flags \xe2\x9c\x93", .dtype = ST_BOOL, .ndim = 1, .shape = {2}, .data = w_bool},
    };
    memcpy(tensors, t, sizeof t);
}

static void test_round_trip(void) {
    char path[512];
    path_in_dir(path, sizeof path, "model.safetensors");
    uint64_t sum = 0;
    TU_CHECK(st_write_file(path, tensors, N_TENSORS, meta, 2, &sum) == BG_OK, "write: %s", bg_last_error());

    size_t size;
    unsigned char *raw = slurp(path, &size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | raw[i];
    TU_CHECK(hlen % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hlen);
    TU_CHECK(memcmp(raw + 8, "{\"__metadata__\":{\"format\":\"pt\"", 30) == 0,
             "header should start with the metadata, compact: %.40s", raw + 8);
    TU_CHECK(raw[8 + hlen - 1] == ' ' || raw[8 + hlen - 1] == '}', "header padding is spaces");
    TU_CHECK(XXH64(raw, size, 0) == sum, "writer's checksum is XXH64 of the file");

    st_file f;
    TU_CHECK(st_open(&f, path) == BG_OK, "open: %s", bg_last_error());
    TU_CHECK(f.count == N_TENSORS, "count %d", f.count);
    TU_CHECK(st_checksum(&f) == sum, "st_checksum agrees with the writer");
    TU_CHECK(st_verify_checksum(&f, sum) == BG_OK, "verify");
    TU_CHECK(f.data_size == size - 8 - hlen, "data size");
    uint64_t pos = 0;
    for (int i = 0; i < f.count && i < N_TENSORS; i++) {
        const st_tensor *t = &f.tensors[i];
        TU_CHECK(strcmp(t->name, tensors[i].name) == 0, "tensor %d stored in the given order: %s", i, t->name);
        TU_CHECK(t->dtype == tensors[i].dtype && t->ndim == tensors[i].ndim, "%s: dtype/ndim", t->name);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            TU_CHECK(t->shape[d] == tensors[i].shape[d], "%s: shape[%d]", t->name, d);
            numel *= (uint64_t)t->shape[d];
        }
        TU_CHECK(t->numel == numel, "%s: numel", t->name);
        TU_CHECK(t->begin == pos && t->end == pos + numel * st_dtype_size(t->dtype), "%s: offsets", t->name);
        pos = t->end;
        TU_CHECK(st_find(&f, t->name) == t, "find %s", t->name);
    }
    TU_CHECK(st_find(&f, "absent") == NULL && st_find(&f, "") == NULL, "find absent");
    TU_CHECK(st_metadata(&f, "format") && strcmp(st_metadata(&f, "format"), "pt") == 0, "metadata format");
    TU_CHECK(st_metadata(&f, "config") && strcmp(st_metadata(&f, "config"), meta[1].value) == 0,
             "metadata with newlines, quotes and UTF-8 survives");
    TU_CHECK(st_metadata(&f, "missing") == NULL, "metadata absent");

    float got[12];
    TU_CHECK(st_read_f32(&f, "model.embed_tokens.weight", got, 2, (int64_t[]){3, 4}) == BG_OK, "%s", bg_last_error());
    TU_CHECK(memcmp(got, w_f32, sizeof got) == 0, "F32 bitwise");
    float *conv = malloc(sizeof(float) * N_BIG);
    TU_CHECK(st_read_f32(&f, "bf16.converted", conv, 1, (int64_t[]){N_BIG}) == BG_OK, "%s", bg_last_error());
    int bad = 0;
    for (int i = 0; i < N_BIG; i++) bad += conv[i] != bg_bf16_to_f32(bg_f32_to_bf16(w_conv[i]));
    TU_CHECK(bad == 0 && isinf(conv[0]) && conv[0] > 0 && isinf(conv[1]) && conv[1] < 0 && signbit(conv[3]),
             "BF16 written and read back: %d mismatches", bad);
    TU_CHECK(st_read_f32(&f, "f16.converted", got, 2, (int64_t[]){2, 3}) == BG_OK, "%s", bg_last_error());
    for (int i = 0; i < 6; i++)
        TU_CHECK(got[i] == bg_f16_to_f32(bg_f32_to_f16(w_f16src[i])), "F16 element %d", i);
    TU_CHECK(isinf(got[5]), "F16 overflow gives inf");
    // Raw reads of the non-float dtypes.
    int32_t i32[7];
    int64_t i64 = 0;
    uint8_t u8[3], b[2];
    double f64[2];
    TU_CHECK(st_read_raw(&f, "ints", ST_I32, i32, 1, (int64_t[]){7}) == BG_OK && memcmp(i32, w_i32, sizeof i32) == 0, "I32");
    TU_CHECK(st_read_raw(&f, "step", ST_I64, &i64, 0, NULL) == BG_OK && i64 == w_i64, "I64 scalar");
    TU_CHECK(st_read_raw(&f, "bytes", ST_U8, u8, 1, (int64_t[]){3}) == BG_OK && memcmp(u8, w_u8, 3) == 0, "U8");
    TU_CHECK(st_read_raw(&f, "doubles", ST_F64, f64, 1, (int64_t[]){2}) == BG_OK && memcmp(f64, w_f64, 16) == 0, "F64");
    TU_CHECK(st_read_raw(&f, "flags \xe2\x9c\x93", ST_BOOL, b, 1, (int64_t[]){2}) == BG_OK && b[0] == 1 && b[1] == 0, "BOOL, UTF-8 name");
    TU_CHECK(st_read_f32(&f, "eight.dims", got, 8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 2}) == BG_OK &&
                 got[0] == 5.0f && got[1] == -6.0f, "8 dims");
    TU_CHECK(st_read_f32(&f, "empty", got, 2, (int64_t[]){0, 5}) == BG_OK, "0-element read: %s", bg_last_error());
    TU_CHECK(st_view_f32(&f, "empty", 2, (int64_t[]){0, 5}) != NULL, "0-element view");
    // Zero-copy: the first tensor sits at the 8-byte aligned start of the data section; the one
    // after the 3 U8 bytes is misaligned, so the view refuses and st_read_f32 still works.
    const float *v = st_view_f32(&f, "model.embed_tokens.weight", 2, (int64_t[]){3, 4});
    TU_CHECK(v && (const void *)v == (const void *)f.data && memcmp(v, w_f32, sizeof w_f32) == 0, "aligned view");
    bg_clear_error();
    TU_CHECK(st_view_f32(&f, "after_u8", 1, (int64_t[]){3}) == NULL && strstr(bg_last_error(), "aligned"),
             "misaligned view refused: %s", bg_last_error());
    TU_CHECK(st_read_f32(&f, "after_u8", got, 1, (int64_t[]){3}) == BG_OK && got[0] == 7.0f && got[2] == 9.0f,
             "misaligned read");
    TU_CHECK(st_view_f32(&f, "bf16.converted", 1, (int64_t[]){N_BIG}) == NULL, "view of BF16 refused");
    free(conv);
    st_close(&f);
    st_close(&f);  // closing twice is harmless (error paths rely on it)

    // Same input, same bytes: st_write_fd on an anonymous file matches st_write_file.
    int fd = memfd_create("st", 0);
    uint64_t sum2 = 0;
    TU_CHECK(fd >= 0 && st_write_fd(fd, "memfd", tensors, N_TENSORS, meta, 2, &sum2) == BG_OK, "write fd");
    TU_CHECK(sum2 == sum, "deterministic bytes (checksum %016llx vs %016llx)", (unsigned long long)sum2,
             (unsigned long long)sum);
    unsigned char *again = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    TU_CHECK(again != MAP_FAILED && lseek(fd, 0, SEEK_END) == (off_t)size && memcmp(again, raw, size) == 0,
             "memfd bytes equal file bytes");
    st_file m;
    TU_CHECK(st_open_memory(&m, again, size, "buffer") == BG_OK && m.count == N_TENSORS, "open from memory");
    st_close(&m);
    munmap(again, size);
    close(fd);
    free(raw);
}

static void test_empty_file(void) {
    char path[512];
    path_in_dir(path, sizeof path, "empty.safetensors");
    TU_CHECK(st_write_file(path, NULL, 0, NULL, 0, NULL) == BG_OK, "write empty: %s", bg_last_error());
    size_t size;
    unsigned char *raw = slurp(path, &size);
    TU_CHECK(size == 16 && memcmp(raw + 8, "{}      ", 8) == 0, "empty file is {} padded to 8 (%zu bytes)", size);
    free(raw);
    st_file f;
    TU_CHECK(st_open(&f, path) == BG_OK && f.count == 0 && f.meta_count == 0, "open empty: %s", bg_last_error());
    TU_CHECK(st_find(&f, "x") == NULL, "find in empty");
    st_close(&f);
}

// Bad writer input: an error naming the problem, and no file left behind.
static void expect_write_error(const st_tensor_in *t, int n, const st_meta *m, int nm, const char *what) {
    char path[512];
    path_in_dir(path, sizeof path, "bad.safetensors");
    bg_clear_error();
    TU_CHECK(st_write_file(path, t, n, m, nm, NULL) == BG_ERR, "writer accepted %s", what);
    TU_CHECK(strstr(bg_last_error(), what) != NULL, "message '%s' should mention '%s'", bg_last_error(), what);
    TU_CHECK(access(path, F_OK) != 0, "no file left after refused write (%s)", what);
}

static void test_writer_rejects(void) {
    float x[2] = {1, 2};
    st_tensor_in a = {.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = x};
    st_tensor_in dup[3] = {a, {.name = "b", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = x}, a};
    expect_write_error(dup, 3, NULL, 0, "'a' given twice");
    st_tensor_in t = a;
    t.name = "__metadata__";
    expect_write_error(&t, 1, NULL, 0, "__metadata__");
    t = a, t.shape[0] = -1;
    expect_write_error(&t, 1, NULL, 0, "out of range");
    t = a, t.ndim = ST_MAX_DIMS + 1;
    expect_write_error(&t, 1, NULL, 0, "dimensions");
    t = a, t.dtype = ST_F16, t.src_dtype = ST_BF16;
    expect_write_error(&t, 1, NULL, 0, "cannot convert BF16 to F16");
    t = a, t.dtype = (st_dtype)99;
    expect_write_error(&t, 1, NULL, 0, "invalid dtype");
    t = a, t.data = NULL;
    expect_write_error(&t, 1, NULL, 0, "no data");
    t = a, t.name = "bad\xff";
    expect_write_error(&t, 1, NULL, 0, "UTF-8");
    st_meta m2[2] = {{"k", "v"}, {"k", "w"}};
    expect_write_error(&a, 1, m2, 2, "'k' given twice");
    st_meta mbad = {"k", "\xc0\x80"};  // overlong NUL
    expect_write_error(&a, 1, &mbad, 1, "UTF-8");
}

// ---- the independent Python reader/writer ----

static int ref_script(char *out, size_t cap) {
    const char *src = __FILE__;
    const char *slash = strrchr(src, '/');
    if (!slash) return 0;
    snprintf(out, cap, "%.*s/test_safetensors_ref.py", (int)(slash - src), src);
    return access(out, R_OK) == 0 && access("/usr/bin/python3", X_OK) == 0;
}

static void test_python_reads_ours(const char *script) {
    char path[512], cmd[2200];
    path_in_dir(path, sizeof path, "model.safetensors");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' read '%s'", script, path);
    FILE *p = popen(cmd, "r");
    size_t cap = 1 << 24, n = 0;
    char *buf = malloc(cap);
    while (p && n < cap - 1) {
        size_t k = fread(buf + n, 1, cap - 1 - n, p);
        if (k == 0) break;
        n += k;
    }
    buf[n] = '\0';
    int status = p ? pclose(p) : -1;
    TU_CHECK(status == 0, "python reader rejected our file (status %d)", status);
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    TU_CHECK(root != NULL, "python reader output is not JSON");
    if (!root) return;
    const cJSON *ts = cJSON_GetObjectItem(root, "tensors");
    TU_CHECK(cJSON_GetArraySize(ts) == N_TENSORS, "python sees %d tensors", cJSON_GetArraySize(ts));
    const cJSON *cfg = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "metadata"), "config");
    TU_CHECK(cJSON_IsString(cfg) && strcmp(cfg->valuestring, meta[1].value) == 0, "python sees metadata");
    int i = 0;
    for (const cJSON *t = ts ? ts->child : NULL; t && i < N_TENSORS; t = t->next, i++) {
        const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
        TU_CHECK(strcmp(name, tensors[i].name) == 0, "python order %d: %s", i, name);
        TU_CHECK(strcmp(cJSON_GetObjectItem(t, "dtype")->valuestring, st_dtype_name(tensors[i].dtype)) == 0,
                 "python dtype of %s", name);
        const cJSON *vals = cJSON_GetObjectItem(t, "values");
        int k = 0, mismatches = 0;
        // Python decodes floats itself (struct 'e' for F16, shift for BF16): an independent check
        // of our narrowing on write. Its JSON floats are shortest round-trip, exact as doubles.
        for (const cJSON *v = vals->child; v; v = v->next, k++) {
            double want;
            switch (tensors[i].dtype) {
            case ST_F32: want = ((const float *)tensors[i].data)[k]; break;
            case ST_BF16: want = bg_bf16_to_f32(bg_f32_to_bf16(((const float *)tensors[i].data)[k])); break;
            case ST_F16: want = bg_f16_to_f32(bg_f32_to_f16(((const float *)tensors[i].data)[k])); break;
            case ST_F64: want = ((const double *)tensors[i].data)[k]; break;
            case ST_I32: want = ((const int32_t *)tensors[i].data)[k]; break;
            case ST_I64: want = (double)((const int64_t *)tensors[i].data)[k]; break;
            default: want = ((const uint8_t *)tensors[i].data)[k]; break;
            }
            if (cJSON_IsBool(v)) mismatches += cJSON_IsTrue(v) != (want != 0);
            else if (isinf(want))  // JSON has no infinity: the script sends "inf" / "-inf"
                mismatches += !cJSON_IsString(v) || strcmp(v->valuestring, want > 0 ? "inf" : "-inf") != 0;
            else mismatches += v->valuedouble != want;
        }
        TU_CHECK(mismatches == 0, "python values of %s: %d mismatches", name, mismatches);
    }
    cJSON_Delete(root);
}

static void test_we_read_python(const char *script) {
    char path[512], cmd[2200];
    path_in_dir(path, sizeof path, "python.safetensors");
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' write '%s'", script, path);
    TU_CHECK(system(cmd) == 0, "python writer failed");
    st_file f;
    TU_CHECK(st_open(&f, path) == BG_OK, "open python file: %s", bg_last_error());
    if (f.count == 0) return;
    TU_CHECK(f.count == 6, "python file tensors: %d", f.count);
    float w[4], h[3], b[2];
    TU_CHECK(st_read_f32(&f, "model.w", w, 2, (int64_t[]){2, 2}) == BG_OK && w[0] == 1.0f && w[1] == -2.5f &&
                 w[2] == 3.0e38f && w[3] == 1.0e-45f, "python F32");
    TU_CHECK(st_read_f32(&f, "half", h, 1, (int64_t[]){3}) == BG_OK && h[0] == 1.0f && h[1] == 65504.0f &&
                 h[2] == -6.103515625e-05f, "python F16");
    TU_CHECK(st_read_f32(&f, "brain", b, 1, (int64_t[]){2}) == BG_OK && b[0] == 1.0f && b[1] == -3.0f, "python BF16");
    int64_t step = 0;
    uint8_t u8[5];
    TU_CHECK(st_read_raw(&f, "step", ST_I64, &step, 0, NULL) == BG_OK && step == 123456789012ll, "python I64");
    TU_CHECK(st_read_raw(&f, "bytes", ST_U8, u8, 1, (int64_t[]){5}) == BG_OK && u8[3] == 254 && u8[4] == 255, "python U8");
    TU_CHECK(st_find(&f, "empty") && st_find(&f, "empty")->numel == 0, "python empty tensor");
    TU_CHECK(st_metadata(&f, "unicode") && strcmp(st_metadata(&f, "unicode"), "\xc3\xbcnic\xc3\xb8" "de \xe2\x9c\x93") == 0,
             "python metadata (written last, non-ASCII)");
    st_close(&f);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/bg_st_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    build_tensors();
    test_round_trip();
    test_empty_file();
    test_writer_rejects();
    char script[1024];
    if (ref_script(script, sizeof script)) {
        test_python_reads_ours(script);
        test_we_read_python(script);
    } else {
        printf("test_safetensors: python3 or %s not found, cross-check skipped\n", script);
    }
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tu_finish("test_safetensors");
}
