// safetensors writer: builds the header (format in safetensors.h), then streams the header
// and every tensor through write(2), checking each call, and fsyncs. The XXH64 of the bytes
// is computed on the way so the caller can record it without reading the file back.
#include "core/half.h"
#include "io/safetensors.h"

#include "core/error.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t on the stack: no allocation to fail
#include <xxhash.h>

// Conversions go through a small staging buffer so exporting a large tensor at bf16 does
// not need a second full-size copy; 64 KiB is far above write(2)'s per-call overhead.
#define ST_STAGE_BYTES (64u * 1024u)
// Linux transfers at most 0x7ffff000 bytes per write(2); stay below it explicitly.
#define ST_MAX_WRITE ((size_t)1 << 30)

typedef struct {
    int fd;
    const char *name;
    XXH64_state_t hash;
} st_sink;

// Writes all n bytes, retrying short writes and EINTR; on failure records the errno text.
static int sink_write(st_sink *s, const void *buf, size_t n) {
    const uint8_t *p = buf;
    if (XXH64_update(&s->hash, p, n) != XXH_OK) return bg_error("%s: checksum update failed", s->name);
    while (n > 0) {
        size_t chunk = n < ST_MAX_WRITE ? n : ST_MAX_WRITE;
        ssize_t w = write(s->fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return bg_error("%s: write failed (%s)", s->name, strerror(errno));
        }
        if (w == 0) return bg_error("%s: write failed (no progress)", s->name);
        p += w;
        n -= (size_t)w;
    }
    return BG_OK;
}

// Appends a JSON integer printed exactly: cJSON prints numbers through doubles with 15
// significant digits and may choose exponent notation ("1e+15"), which readers that want
// an integer (the reference's serde) reject.
static void add_uint(cJSON *array, uint64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    cJSON_AddItemToArray(array, cJSON_CreateRaw(buf));
}

static int check_meta(const char *name, const st_meta *meta, int meta_count) {
    for (int i = 0; i < meta_count; i++) {
        if (!meta[i].key || !meta[i].value)
            return bg_error("%s: metadata entry %d has no key or value", name, i);
        size_t kl = strlen(meta[i].key), vl = strlen(meta[i].value);
        if (st_utf8_invalid_at((const uint8_t *)meta[i].key, kl, 1) != kl ||
            st_utf8_invalid_at((const uint8_t *)meta[i].value, vl, 1) != vl)
            return bg_error("%s: metadata '%s' is not valid UTF-8", name, meta[i].key);
        for (int j = 0; j < i; j++)
            if (strcmp(meta[j].key, meta[i].key) == 0)
                return bg_error("%s: metadata key '%s' given twice", name, meta[i].key);
    }
    return BG_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// Checks what the reader would check, so a file we write always reads back.
// need_data 0: only the header is wanted (st_file_prefix), data pointers are not read.
static int check_input(const char *name, const st_tensor_in *t, int count, int need_data, uint64_t *nbytes) {
    for (int i = 0; i < count; i++) {
        const st_tensor_in *x = &t[i];
        if (!x->name) return bg_error("%s: tensor %d has no name", name, i);
        size_t len = strlen(x->name);
        if (st_utf8_invalid_at((const uint8_t *)x->name, len, 1) != len)
            return bg_error("%s: tensor name '%s' is not valid UTF-8", name, x->name);
        if (strcmp(x->name, "__metadata__") == 0)
            return bg_error("%s: '__metadata__' cannot name a tensor", name);
        if (st_dtype_size(x->dtype) == 0)
            return bg_error("%s: tensor '%s': invalid dtype %d", name, x->name, (int)x->dtype);
        st_dtype src = x->src_dtype ? x->src_dtype : x->dtype;
        if (src != x->dtype && !(src == ST_F32 && (x->dtype == ST_BF16 || x->dtype == ST_F16)))
            return bg_error("%s: tensor '%s': cannot convert %s to %s (only F32 to BF16/F16)", name,
                            x->name, st_dtype_name(src), st_dtype_name(x->dtype));
        if (x->ndim < 0 || x->ndim > ST_MAX_DIMS)
            return bg_error("%s: tensor '%s': %d dimensions (0..%d supported)", name, x->name,
                            x->ndim, ST_MAX_DIMS);
        uint64_t numel = 1;
        for (int d = 0; d < x->ndim; d++) {
            // 2^53: the largest integer every JSON reader represents exactly.
            if (x->shape[d] < 0 || x->shape[d] >= ((int64_t)1 << 53))
                return bg_error("%s: tensor '%s': shape[%d] = %lld is out of range", name, x->name,
                                d, (long long)x->shape[d]);
            if (__builtin_mul_overflow(numel, (uint64_t)x->shape[d], &numel))
                return bg_error("%s: tensor '%s': element count overflows", name, x->name);
        }
        if (__builtin_mul_overflow(numel, (uint64_t)st_dtype_size(x->dtype), &nbytes[i]))
            return bg_error("%s: tensor '%s': byte size overflows", name, x->name);
        if (need_data && nbytes[i] && !x->data) return bg_error("%s: tensor '%s': no data", name, x->name);
    }
    // Duplicates through sorting: a large MoE checkpoint has tens of thousands of tensors.
    const char **names = bg_malloc(sizeof(char *) * (size_t)(count ? count : 1));
    for (int i = 0; i < count; i++) names[i] = t[i].name;
    qsort(names, (size_t)count, sizeof *names, cmp_str);
    int rc = BG_OK;
    for (int i = 1; i < count && rc == BG_OK; i++)
        if (strcmp(names[i], names[i - 1]) == 0)
            rc = bg_error("%s: tensor '%s' given twice", name, names[i]);
    free(names);
    return rc;
}

// The header as the reference writes it: __metadata__ first, then the tensors in data order,
// keys in the order dtype, shape, data_offsets; compact JSON padded with spaces to 8 bytes.
static char *build_header(const char *name, const st_tensor_in *t, int count, const uint64_t *nbytes,
                          const st_meta *meta, int meta_count, size_t *len) {
    cJSON *root = cJSON_CreateObject();
    if (meta_count > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < meta_count; i++) cJSON_AddStringToObject(m, meta[i].key, meta[i].value);
    }
    uint64_t pos = 0;
    for (int i = 0; i < count; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(t[i].dtype));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; d++)
            add_uint(shape, (uint64_t)t[i].shape[d]);
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        add_uint(offs, pos);
        pos += nbytes[i];
        add_uint(offs, pos);
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) {
        bg_error("%s: out of memory building the header", name);
        return NULL;
    }
    size_t n = strlen(json), padded = (n + 7) & ~(size_t)7;
    char *h = bg_malloc(padded);
    memcpy(h, json, n);
    memset(h + n, ' ', padded - n);
    free(json);
    *len = padded;
    return h;
}

// Converts F32 to BF16/F16 through the staging buffer and writes it.
static int write_converted(st_sink *s, const st_tensor_in *x, uint64_t nbytes) {
    uint16_t stage[ST_STAGE_BYTES / 2];
    const float *src = x->data;
    size_t n = (size_t)(nbytes / 2);
    for (size_t i = 0; i < n;) {
        size_t k = n - i < ST_STAGE_BYTES / 2 ? n - i : ST_STAGE_BYTES / 2;
        for (size_t j = 0; j < k; j++)
            stage[j] = x->dtype == ST_BF16 ? bg_f32_to_bf16(src[i + j]) : bg_f32_to_f16(src[i + j]);
        if (sink_write(s, stage, k * 2) != BG_OK) return BG_ERR;
        i += k;
    }
    return BG_OK;
}

// The file's first bytes (length + header) and the data size: what st_write_fd and
// st_file_prefix share.
static int make_prefix(const char *name, const st_tensor_in *t, int count, const st_meta *meta,
                       int meta_count, int need_data, char **prefix, size_t *prefix_len, uint64_t *nbytes) {
    if (count < 0 || meta_count < 0) return bg_error("%s: negative tensor or metadata count", name);
    if (check_meta(name, meta, meta_count) != BG_OK) return BG_ERR;
    if (check_input(name, t, count, need_data, nbytes) != BG_OK) return BG_ERR;
    size_t hlen;
    char *header = build_header(name, t, count, nbytes, meta, meta_count, &hlen);
    if (!header) return BG_ERR;
    if (hlen > ST_MAX_HEADER_BYTES) {
        free(header);
        return bg_error("%s: header of %zu bytes exceeds the %llu-byte limit readers enforce", name, hlen,
                        ST_MAX_HEADER_BYTES);
    }
    char *out = bg_malloc(8 + hlen);
    for (int i = 0; i < 8; i++) out[i] = (char)(uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(out + 8, header, hlen);
    free(header);
    *prefix = out;
    *prefix_len = 8 + hlen;
    return BG_OK;
}

int st_file_prefix(const char *name, const st_tensor_in *t, int count, const st_meta *meta, int meta_count,
                   char **prefix, size_t *prefix_len, uint64_t *data_bytes) {
    uint64_t *nbytes = bg_malloc(sizeof(uint64_t) * (size_t)(count > 0 ? count : 1));
    int rc = make_prefix(name, t, count, meta, meta_count, 0, prefix, prefix_len, nbytes);
    uint64_t sum = 0;
    for (int i = 0; i < count && rc == BG_OK; i++) sum += nbytes[i];
    if (rc == BG_OK) *data_bytes = sum;
    free(nbytes);
    return rc;
}

int st_write_fd(int fd, const char *name, const st_tensor_in *t, int count, const st_meta *meta,
                int meta_count, uint64_t *checksum) {
    uint64_t *nbytes = bg_malloc(sizeof(uint64_t) * (size_t)(count > 0 ? count : 1));
    char *prefix = NULL;
    size_t plen = 0;
    int rc = make_prefix(name, t, count, meta, meta_count, 1, &prefix, &plen, nbytes);
    st_sink s = {.fd = fd, .name = name};
    XXH64_reset(&s.hash, 0);
    if (rc == BG_OK) rc = sink_write(&s, prefix, plen);
    for (int i = 0; i < count && rc == BG_OK; i++) {
        st_dtype src = t[i].src_dtype ? t[i].src_dtype : t[i].dtype;
        if (nbytes[i] == 0) continue;
        rc = src == t[i].dtype ? sink_write(&s, t[i].data, (size_t)nbytes[i])
                               : write_converted(&s, &t[i], nbytes[i]);
    }
    // fsync makes "written" mean "on disk" before the caller renames the file into place.
    // EINVAL: fd is a pipe or a device that cannot sync, where there is nothing to flush.
    if (rc == BG_OK && fsync(fd) != 0 && errno != EINVAL)
        rc = bg_error("%s: fsync failed (%s)", name, strerror(errno));
    if (rc == BG_OK && checksum) *checksum = XXH64_digest(&s.hash);
    free(prefix);
    free(nbytes);
    return rc;
}

int st_write_file(const char *path, const st_tensor_in *t, int count, const st_meta *meta,
                  int meta_count, uint64_t *checksum) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return bg_error("%s: cannot create (%s)", path, strerror(errno));
    int rc = st_write_fd(fd, path, t, count, meta, meta_count, checksum);
    // close can report a deferred write error (NFS); it counts as a failed save.
    if (close(fd) != 0 && rc == BG_OK) rc = bg_error("%s: close failed (%s)", path, strerror(errno));
    if (rc != BG_OK) unlink(path);
    return rc;
}
