// safetensors reader: maps a file, validates the whole header against the file (see the
// format and the list of checks in safetensors.h), then serves tensors by name.
#include "core/half.h"
#include "io/safetensors.h"

#include "core/error.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

// JSON parsers that keep numbers as doubles (cJSON, JavaScript) are exact below 2^53.
#define ST_MAX_JSON_INT 9007199254740992.0

static char *st_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = bg_malloc(n);
    memcpy(d, s, n);
    return d;
}

void st_close(st_file *f) {
    for (int i = 0; i < f->count; i++) free(f->tensors[i].name);
    for (int i = 0; i < f->meta_count; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->tensors);
    free(f->meta_keys);
    free(f->meta_values);
    free(f->by_name);
    if (f->map) munmap(f->map, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

// A JSON number that is an integer in [0, 2^53).
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d < ST_MAX_JSON_INT) || d != (double)(uint64_t)d) return 0;
    *out = (uint64_t)d;
    return 1;
}

// Sorting (name, index) pairs gives duplicate detection in O(n log n) — a hostile header
// can hold millions of keys — and, for tensors, the index that st_find searches.
typedef struct {
    const char *name;
    int index;
} name_key;

static int cmp_name_key(const void *pa, const void *pb) {
    const name_key *a = pa, *b = pb;
    int c = strcmp(a->name, b->name);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

// Sorts keys by name; returns a name that appears twice, or NULL.
static const char *sort_find_duplicate(name_key *keys, int n) {
    qsort(keys, (size_t)n, sizeof *keys, cmp_name_key);
    for (int i = 1; i < n; i++)
        if (strcmp(keys[i].name, keys[i - 1].name) == 0) return keys[i].name;
    return NULL;
}

static int parse_metadata(st_file *f, const cJSON *m) {
    if (!cJSON_IsObject(m))
        return bg_error("%s: __metadata__ is not a JSON object of strings", f->path);
    int n = cJSON_GetArraySize(m);
    f->meta_keys = bg_calloc((size_t)n, sizeof(char *));
    f->meta_values = bg_calloc((size_t)n, sizeof(char *));
    for (const cJSON *kv = m->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv))
            return bg_error("%s: __metadata__ entry '%s' is not a string", f->path, kv->string);
        f->meta_keys[f->meta_count] = st_strdup(kv->string);
        f->meta_values[f->meta_count] = st_strdup(kv->valuestring);
        f->meta_count++;
    }
    name_key *keys = bg_malloc(sizeof(name_key) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) keys[i] = (name_key){f->meta_keys[i], i};
    const char *dup = sort_find_duplicate(keys, n);
    int rc = dup ? bg_error("%s: __metadata__ key '%s' appears twice", f->path, dup) : BG_OK;
    free(keys);
    return rc;
}

// Fills t from one header entry; checks everything that concerns this tensor alone.
static int parse_tensor(st_file *f, const cJSON *e, st_tensor *t) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return bg_error("%s: tensor '%s': entry is not a JSON object", f->path, name);
    // Unknown keys are ignored, as the reference reader does; a known key given twice is an
    // error (cJSON keeps both, and readers that take the first or the last would disagree).
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *k = e->child; k; k = k->next) {
        const cJSON **slot = strcmp(k->string, "dtype") == 0          ? &dtype
                             : strcmp(k->string, "shape") == 0        ? &shape
                             : strcmp(k->string, "data_offsets") == 0 ? &offs
                                                                      : NULL;
        if (!slot) continue;
        if (*slot) return bg_error("%s: tensor '%s': key '%s' appears twice", f->path, name, k->string);
        *slot = k;
    }
    if (!cJSON_IsString(dtype)) return bg_error("%s: tensor '%s': missing dtype (or not a string)", f->path, name);
    t->dtype = st_dtype_from_name(dtype->valuestring);
    if (t->dtype == ST_DTYPE_NONE)
        return bg_error("%s: tensor '%s': unknown dtype \"%s\"", f->path, name, dtype->valuestring);
    if (!cJSON_IsArray(shape)) return bg_error("%s: tensor '%s': missing shape (or not an array)", f->path, name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > ST_MAX_DIMS)
        return bg_error("%s: tensor '%s': %d dimensions (at most %d supported)", f->path, name,
                        ndim, ST_MAX_DIMS);
    t->ndim = ndim;
    t->numel = 1;
    int d = 0;
    for (const cJSON *v = shape->child; v; v = v->next, d++) {
        uint64_t dim;
        if (!json_uint(v, &dim))
            return bg_error("%s: tensor '%s': shape[%d] is not a non-negative integer below 2^53",
                            f->path, name, d);
        t->shape[d] = (int64_t)dim;
        if (__builtin_mul_overflow(t->numel, dim, &t->numel))
            return bg_error("%s: tensor '%s': element count overflows 64 bits", f->path, name);
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(t->numel, (uint64_t)st_dtype_size(t->dtype), &nbytes))
        return bg_error("%s: tensor '%s': byte size overflows 64 bits", f->path, name);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_uint(offs->child, &t->begin) || !json_uint(offs->child->next, &t->end))
        return bg_error("%s: tensor '%s': data_offsets must be [begin, end], integers below 2^53",
                        f->path, name);
    if (t->begin > t->end)
        return bg_error("%s: tensor '%s': data_offsets begin %llu > end %llu", f->path, name,
                        (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != nbytes)
        return bg_error("%s: tensor '%s': shape and dtype %s need %llu bytes but data_offsets "
                        "[%llu, %llu] hold %llu",
                        f->path, name, st_dtype_name(t->dtype), (unsigned long long)nbytes,
                        (unsigned long long)t->begin, (unsigned long long)t->end,
                        (unsigned long long)(t->end - t->begin));
    if (t->end > f->data_size)
        return bg_error("%s: tensor '%s': data ends at byte %llu of the data section, which has "
                        "only %llu bytes (file truncated?)",
                        f->path, name, (unsigned long long)t->end,
                        (unsigned long long)f->data_size);
    t->name = st_strdup(name);
    return BG_OK;
}

// qsort has no context argument: sorting by offset uses the index as the tie-break so the
// order (and hence messages) is deterministic for 0-byte tensors sharing an offset.
typedef struct {
    uint64_t begin, end;
    int index;
} offset_key;

static int cmp_offset(const void *pa, const void *pb) {
    const offset_key *a = pa, *b = pb;
    if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end) return a->end < b->end ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

// Checks names are unique, puts tensors in storage order, checks that they tile the data
// section exactly, and builds the name index.
static int check_layout(st_file *f) {
    int n = f->count;
    size_t cap = (size_t)(n ? n : 1);
    name_key *by_name = bg_malloc(sizeof(name_key) * cap);
    for (int i = 0; i < n; i++) by_name[i] = (name_key){f->tensors[i].name, i};
    const char *dup = sort_find_duplicate(by_name, n);
    if (dup) {
        int rc = bg_error("%s: tensor '%s' appears twice in the header", f->path, dup);
        free(by_name);
        return rc;
    }

    offset_key *by_offset = bg_malloc(sizeof(offset_key) * cap);
    for (int i = 0; i < n; i++) by_offset[i] = (offset_key){f->tensors[i].begin, f->tensors[i].end, i};
    qsort(by_offset, (size_t)n, sizeof *by_offset, cmp_offset);
    st_tensor *sorted = bg_malloc(sizeof(st_tensor) * cap);
    int *new_pos = bg_malloc(sizeof(int) * cap);
    for (int i = 0; i < n; i++) {
        sorted[i] = f->tensors[by_offset[i].index];
        new_pos[by_offset[i].index] = i;
    }
    free(by_offset);
    free(f->tensors);
    f->tensors = sorted;
    f->by_name = bg_malloc(sizeof(int) * cap);
    for (int i = 0; i < n; i++) f->by_name[i] = new_pos[by_name[i].index];
    free(new_pos);
    free(by_name);

    uint64_t pos = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &f->tensors[i];
        if (t->begin < pos)
            return bg_error("%s: tensor '%s' (bytes %llu..%llu) overlaps tensor '%s' (ends at %llu)",
                            f->path, t->name, (unsigned long long)t->begin,
                            (unsigned long long)t->end, f->tensors[i - 1].name,
                            (unsigned long long)pos);
        if (t->begin > pos)
            return bg_error("%s: tensor '%s' starts at byte %llu but the tensors before it end at "
                            "%llu (tensors must be packed back to back)",
                            f->path, t->name, (unsigned long long)t->begin,
                            (unsigned long long)pos);
        pos = t->end;
    }
    if (pos != f->data_size)
        return bg_error("%s: %llu bytes after the last tensor are not described by the header",
                        f->path, (unsigned long long)(f->data_size - pos));
    return BG_OK;
}

static int parse_header(st_file *f) {
    const uint8_t *b = f->bytes;
    if (f->size < 8)
        return bg_error("%s: file too short (%zu bytes) to be a safetensors file", f->path, f->size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | b[i];
    if (n > ST_MAX_HEADER_BYTES)
        return bg_error("%s: header length %llu exceeds the %llu-byte limit (corrupt, or not a "
                        "safetensors file)",
                        f->path, (unsigned long long)n, ST_MAX_HEADER_BYTES);
    if (n > f->size - 8)
        return bg_error("%s: header length %llu runs past the end of the file (%zu bytes; "
                        "truncated?)",
                        f->path, (unsigned long long)n, f->size);
    const uint8_t *h = b + 8;
    if (n < 2 || h[0] != '{') return bg_error("%s: header does not start with '{'", f->path);
    // Raw control bytes are rejected too: JSON allows none outside whitespace, and this keeps
    // NUL out of the parser and out of tensor names.
    size_t bad = st_utf8_invalid_at(h, (size_t)n, 0);
    if (bad != n)
        return bg_error("%s: header byte %zu (0x%02x) is not valid UTF-8 JSON text", f->path, bad,
                        h[bad]);
    f->data = h + n;
    f->data_size = f->size - 8 - n;

    // A NUL-terminated copy: the parser must never look past the header, whatever it holds.
    char *text = bg_malloc((size_t)n + 1);
    memcpy(text, h, (size_t)n);
    text[n] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)n, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - text) : 0;
        free(text);
        return bg_error("%s: header is not valid JSON (error near byte %zu)", f->path, at);
    }
    // The reference pads with spaces; allow any JSON whitespace, nothing else.
    for (const char *p = end; p < text + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            size_t at = (size_t)(p - text);
            free(text);
            cJSON_Delete(root);
            return bg_error("%s: unexpected text after the header's JSON object (byte %zu)",
                            f->path, at);
        }
    free(text);

    int rc = BG_OK;
    if (!cJSON_IsObject(root)) rc = bg_error("%s: header is not a JSON object", f->path);
    int n_items = rc == BG_OK ? cJSON_GetArraySize(root) : 0;
    f->tensors = bg_calloc((size_t)(n_items ? n_items : 1), sizeof(st_tensor));
    int seen_meta = 0;
    for (const cJSON *e = rc == BG_OK ? root->child : NULL; e && rc == BG_OK; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta++) rc = bg_error("%s: __metadata__ appears twice", f->path);
            else rc = parse_metadata(f, e);
            continue;
        }
        rc = parse_tensor(f, e, &f->tensors[f->count]);
        if (rc == BG_OK) f->count++;
    }
    cJSON_Delete(root);
    if (rc == BG_OK) rc = check_layout(f);
    return rc;
}

int st_open_memory(st_file *f, const void *bytes, size_t size, const char *name) {
    memset(f, 0, sizeof *f);
    f->path = st_strdup(name);
    f->bytes = bytes;
    f->size = size;
    if (parse_header(f) != BG_OK) {
        st_close(f);
        return BG_ERR;
    }
    return BG_OK;
}

int st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bg_error("%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return bg_error("%s: cannot stat (%s)", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return bg_error("%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {  // also avoids mmap of length 0, which fails
        close(fd);
        return bg_error("%s: file too short (%zu bytes) to be a safetensors file", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);  // the mapping keeps the file alive
    if (map == MAP_FAILED) return bg_error("%s: cannot map (%s)", path, strerror(err));
    if (st_open_memory(f, map, size, path) != BG_OK) {
        munmap(map, size);
        return BG_ERR;
    }
    f->map = map;
    return BG_OK;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    int lo = 0, hi = f->count - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *st_metadata(const st_file *f, const char *key) {
    for (int i = 0; i < f->meta_count; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

const void *st_tensor_data(const st_file *f, const st_tensor *t) { return f->data + t->begin; }

// "[3, 4]" into buf (for messages).
static const char *shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

// Finds `name` and checks its shape; the message names file, tensor, both shapes.
static const st_tensor *find_checked(const st_file *f, const char *name, int ndim,
                                     const int64_t *shape) {
    const st_tensor *t = st_find(f, name);
    if (!t) {
        bg_error("%s: tensor '%s' is missing", f->path, name);
        return NULL;
    }
    int same = ndim == t->ndim;
    for (int d = 0; same && d < ndim; d++) same = shape[d] == t->shape[d];
    if (!same) {
        char want[256], got[256];
        bg_error("%s: tensor '%s': expected shape %s, file has %s", f->path, name,
                 shape_str(want, sizeof want, ndim, shape),
                 shape_str(got, sizeof got, t->ndim, t->shape));
        return NULL;
    }
    return t;
}

int st_read_f32(const st_file *f, const char *name, float *out, int ndim, const int64_t *shape) {
    const st_tensor *t = find_checked(f, name, ndim, shape);
    if (!t) return BG_ERR;
    const uint8_t *p = st_tensor_data(f, t);
    size_t n = (size_t)t->numel;
    // memcpy per element: tensors in the file need not be aligned to their element size.
    switch (t->dtype) {
    case ST_F32:
        if (n) memcpy(out, p, n * 4);
        return BG_OK;
    case ST_BF16:
    case ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = t->dtype == ST_BF16 ? bg_bf16_to_f32(h) : bg_f16_to_f32(h);
        }
        return BG_OK;
    default:
        return bg_error("%s: tensor '%s': dtype %s cannot be read as floats (expected F32, BF16 "
                        "or F16)",
                        f->path, name, st_dtype_name(t->dtype));
    }
}

int st_read_raw(const st_file *f, const char *name, st_dtype dtype, void *out, int ndim,
                const int64_t *shape) {
    const st_tensor *t = find_checked(f, name, ndim, shape);
    if (!t) return BG_ERR;
    if (t->dtype != dtype)
        return bg_error("%s: tensor '%s': expected dtype %s, file has %s", f->path, name,
                        st_dtype_name(dtype), st_dtype_name(t->dtype));
    if (t->end > t->begin) memcpy(out, st_tensor_data(f, t), (size_t)(t->end - t->begin));
    return BG_OK;
}

const float *st_view_f32(const st_file *f, const char *name, int ndim, const int64_t *shape) {
    const st_tensor *t = find_checked(f, name, ndim, shape);
    if (!t) return NULL;
    if (t->dtype != ST_F32) {
        bg_error("%s: tensor '%s': expected dtype F32, file has %s", f->path, name,
                 st_dtype_name(t->dtype));
        return NULL;
    }
    // No element to point at: any aligned non-NULL pointer will do, and a misaligned float
    // pointer would be undefined behaviour even unused.
    static const float no_elements[1];
    if (t->numel == 0) return no_elements;
    const void *p = st_tensor_data(f, t);
    if ((uintptr_t)p % _Alignof(float)) {
        bg_error("%s: tensor '%s' is not 4-byte aligned in the file (read it with st_read_f32)",
                 f->path, name);
        return NULL;
    }
    return p;
}

uint64_t st_checksum(const st_file *f) { return XXH64(f->bytes, f->size, 0); }

int st_verify_checksum(const st_file *f, uint64_t expected) {
    uint64_t got = st_checksum(f);
    if (got != expected)
        return bg_error("%s: checksum mismatch (xxh64 %016llx, expected %016llx): the file is "
                        "corrupt",
                        f->path, (unsigned long long)got, (unsigned long long)expected);
    return BG_OK;
}
