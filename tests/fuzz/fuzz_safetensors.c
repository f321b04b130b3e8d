// libFuzzer target for the safetensors reader (and, on what it accepts, the writer).
// Built and run by `make fuzz-safetensors` (fuzz.mk) under ASan + UBSan.
//
// Each input is tried two ways:
//   1. as a whole file, length prefix included;
//   2. as "header text, NUL, data": the harness adds the matching length prefix, so that
//      mutations inside the JSON do not just break the prefix and stop at the first check.
// Invariants on files the reader accepts (a violation aborts = a reported crash):
//   - every tensor lies inside the buffer and st_find returns it by name;
//   - reads at the file's own dtype and shape succeed; float dtypes convert;
//   - F16/BF16 values survive a widen-narrow round trip (NaN stays NaN);
//   - writing the table back out and reading that gives the same tensors, bytes and metadata.
#include "core/error.h"
#include "core/half.h"
#include "io/safetensors.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_CHECK(cond)                                                               \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz invariant failed: %s (line %d); last error: %s\n", #cond, \
                    __LINE__, bg_last_error());                                        \
            abort();                                                                   \
        }                                                                              \
    } while (0)

static int memfd = -1;  // reused across inputs: one anonymous file for the write-back

static void check_tensor(const st_file *f, const st_tensor *t) {
    FUZZ_CHECK(t->begin <= t->end && t->end <= f->data_size);
    FUZZ_CHECK(f->data + t->end <= f->bytes + f->size);
    FUZZ_CHECK(st_find(f, t->name) == t);
    size_t nbytes = (size_t)(t->end - t->begin);
    void *raw = malloc(nbytes ? nbytes : 1);
    FUZZ_CHECK(st_read_raw(f, t->name, t->dtype, raw, t->ndim, t->shape) == BG_OK);
    FUZZ_CHECK(nbytes == 0 || memcmp(raw, st_tensor_data(f, t), nbytes) == 0);
    if (t->dtype == ST_F32 || t->dtype == ST_BF16 || t->dtype == ST_F16) {
        // numel <= bytes in the buffer, so this allocation is bounded by the input size.
        float *x = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
        FUZZ_CHECK(st_read_f32(f, t->name, x, t->ndim, t->shape) == BG_OK);
        for (size_t i = 0; t->dtype != ST_F32 && i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, (const uint8_t *)raw + 2 * i, 2);
            uint16_t back = t->dtype == ST_BF16 ? bg_f32_to_bf16(x[i]) : bg_f32_to_f16(x[i]);
            // NaN payloads may gain the quiet bit; anything else comes back bit for bit.
            uint16_t exp_mask = t->dtype == ST_BF16 ? 0x7f80 : 0x7c00;
            if (isnan(x[i])) FUZZ_CHECK((back & exp_mask) == exp_mask && (back & ~exp_mask & 0x7fff));
            else FUZZ_CHECK(back == h);
        }
        const float *v = st_view_f32(f, t->name, t->ndim, t->shape);
        FUZZ_CHECK(t->dtype != ST_F32 || v || ((uintptr_t)st_tensor_data(f, t) & 3));
        free(x);
    }
    free(raw);
    // A wrong expected shape is refused, never read.
    int64_t wrong[ST_MAX_DIMS + 1] = {0};
    memcpy(wrong, t->shape, sizeof t->shape);
    wrong[t->ndim] = 7;
    float dummy[1];
    FUZZ_CHECK(st_read_f32(f, t->name, dummy, t->ndim + 1, wrong) == BG_ERR);
}

// Writes f's tensors and metadata back out and checks the result reads the same.
static void check_write_back(const st_file *f) {
    if (memfd < 0) memfd = memfd_create("fuzz_safetensors", 0);
    FUZZ_CHECK(memfd >= 0);
    FUZZ_CHECK(ftruncate(memfd, 0) == 0 && lseek(memfd, 0, SEEK_SET) == 0);
    st_tensor_in *in = calloc((size_t)f->count + 1, sizeof *in);
    for (int i = 0; i < f->count; i++) {
        const st_tensor *t = &f->tensors[i];
        in[i] = (st_tensor_in){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = st_tensor_data(f, t)};
        memcpy(in[i].shape, t->shape, sizeof t->shape);
    }
    st_meta *meta = calloc((size_t)f->meta_count + 1, sizeof *meta);
    for (int i = 0; i < f->meta_count; i++) meta[i] = (st_meta){f->meta_keys[i], f->meta_values[i]};
    uint64_t sum = 0;
    FUZZ_CHECK(st_write_fd(memfd, "memfd", in, f->count, meta, f->meta_count, &sum) == BG_OK);
    off_t size = lseek(memfd, 0, SEEK_END);
    FUZZ_CHECK(size >= 16);
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, memfd, 0);
    FUZZ_CHECK(map != MAP_FAILED);
    st_file g;
    FUZZ_CHECK(st_open_memory(&g, map, (size_t)size, "written-back") == BG_OK);
    FUZZ_CHECK(st_checksum(&g) == sum);
    FUZZ_CHECK(g.count == f->count && g.meta_count == f->meta_count);
    for (int i = 0; i < f->count; i++) {
        const st_tensor *a = &f->tensors[i], *b = &g.tensors[i];
        FUZZ_CHECK(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->ndim == b->ndim);
        FUZZ_CHECK(memcmp(a->shape, b->shape, sizeof a->shape) == 0);
        FUZZ_CHECK(a->end - a->begin == b->end - b->begin);
        FUZZ_CHECK(a->end == a->begin ||
                   memcmp(st_tensor_data(f, a), st_tensor_data(&g, b), (size_t)(a->end - a->begin)) == 0);
    }
    for (int i = 0; i < f->meta_count; i++) {
        const char *v = st_metadata(&g, f->meta_keys[i]);
        FUZZ_CHECK(v && strcmp(v, f->meta_values[i]) == 0);
    }
    st_close(&g);
    munmap(map, (size_t)size);
    free(meta);
    free(in);
}

static void fuzz_file(const uint8_t *bytes, size_t size) {
    st_file f;
    bg_clear_error();
    if (st_open_memory(&f, bytes, size, "fuzz") != BG_OK) {
        FUZZ_CHECK(strncmp(bg_last_error(), "fuzz: ", 6) == 0);  // every message names the file
        FUZZ_CHECK(f.count == 0 && f.tensors == NULL && f.path == NULL);
        return;
    }
    for (int i = 0; i < f.count; i++) check_tensor(&f, &f.tensors[i]);
    for (int i = 0; i < f.meta_count; i++) FUZZ_CHECK(st_metadata(&f, f.meta_keys[i]) != NULL);
    FUZZ_CHECK(st_find(&f, "\xff not a name") == NULL);
    (void)st_checksum(&f);
    check_write_back(&f);
    st_close(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // Exact-size copies, so ASan sees any read past the end of the "file".
    uint8_t *whole = calloc(1, size ? size : 1);
    if (size) memcpy(whole, data, size);
    fuzz_file(whole, size);
    free(whole);

    const uint8_t *nul = memchr(data, 0, size);
    size_t hlen = nul ? (size_t)(nul - data) : size;
    size_t dlen = nul ? size - hlen - 1 : 0;
    uint8_t *framed = malloc(8 + hlen + dlen);
    for (int i = 0; i < 8; i++) framed[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    if (hlen) memcpy(framed + 8, data, hlen);
    if (dlen) memcpy(framed + 8 + hlen, nul + 1, dlen);
    fuzz_file(framed, 8 + hlen + dlen);
    free(framed);
    return 0;
}
