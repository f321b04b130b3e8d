#ifndef BG_TRAIN_SAFETENSORS_H
#define BG_TRAIN_SAFETENSORS_H
// safetensors files: the checkpoint and export format, readable by PyTorch / Hugging Face.
//
// Layout (https://github.com/huggingface/safetensors, format as of 0.4):
//   bytes [0, 8)        n, the header length: uint64 little-endian
//   bytes [8, 8+n)      header: a UTF-8 JSON object
//                         { "__metadata__": { "key": "value", ... },        (optional, strings only)
//                           "name": { "dtype": "F32", "shape": [2, 3],
//                                     "data_offsets": [begin, end] }, ... }
//                       padded with trailing spaces so that n is a multiple of 8 (the reference
//                       writer does this so that the data section starts 8-byte aligned)
//   bytes [8+n, EOF)    data section: every tensor's elements, row-major, little-endian;
//                       [begin, end) are byte offsets relative to the start of this section.
//   A scalar has shape []; a tensor with a 0 in its shape has begin == end.
//
// What the reader accepts (st_open checks all of it before any tensor is read, so that a
// corrupt file fails once, at open, with one message naming the file and the tensor):
//   - 8 <= file size; n <= ST_MAX_HEADER_BYTES (100,000,000, the reference's limit);
//     8 + n <= file size
//   - the header is valid UTF-8, starts with '{', is one JSON object followed only by
//     whitespace; keys are unique (tensor names and keys inside each entry)
//   - every tensor has a known dtype, a shape of at most ST_MAX_DIMS non-negative integers,
//     data_offsets of two integers with begin <= end, and end - begin == numel * dtype size
//     (products overflow-checked; JSON numbers must be integers below 2^53, the largest
//     a JSON parser that stores numbers as doubles represents exactly)
//   - tensors tile the data section exactly, like the reference requires: sorted by offset,
//     each begins where the previous ended (no overlap, no gap), and the last ends at EOF
//     (so a truncated file or trailing garbage is caught)
//   - __metadata__ values are strings
// The checksum (st_checksum) is XXH64, seed 0, of the whole file — header included, so a
// flipped bit anywhere is caught; it equals what `xxhsum -H1 FILE` prints.
//
// Host byte order is assumed little-endian (x86-64, AArch64, Sunway): tensors are stored in
// memory order. Open files from one thread at a time (cJSON records parse errors in a
// global); an open st_file is read-only and may be shared by threads.
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER_BYTES 100000000ull

// ST_DTYPE_NONE is 0 so that a zero-initialised st_tensor_in.src_dtype means "as stored".
typedef enum {
    ST_DTYPE_NONE = 0,
    ST_BOOL, ST_U8, ST_I8, ST_F8_E5M2, ST_F8_E4M3,
    ST_I16, ST_U16, ST_F16, ST_BF16,
    ST_I32, ST_U32, ST_F32,
    ST_I64, ST_U64, ST_F64,
    ST_DTYPE_COUNT
} st_dtype;

const char *st_dtype_name(st_dtype d);           // "F32"; "?" for an invalid value
st_dtype st_dtype_from_name(const char *name);   // ST_DTYPE_NONE if unknown
size_t st_dtype_size(st_dtype d);                // bytes per element; 0 if invalid
st_dtype st_dtype_from_bg(bg_dtype d);           // ST_F32, ST_BF16, ST_F16; NONE if invalid

// (bf16/fp16 <-> fp32 conversions: core/half.h.)

// Offset of the first byte of s[0..n) that is not valid UTF-8 (RFC 3629: no overlong forms,
// surrogates, or code points above U+10FFFF), or n if all are valid. Unless allow_control,
// raw control bytes other than tab/newline/return count as invalid: JSON text allows none
// (the reader applies this to the raw header; the writer, whose JSON library escapes
// them, to names and metadata strings).
size_t st_utf8_invalid_at(const uint8_t *s, size_t n, int allow_control);

// ---- reading ----

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;                    // 0 for a scalar
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel;              // 1 for a scalar, 0 when a dimension is 0
    uint64_t begin, end;         // bytes, relative to the data section
} st_tensor;

typedef struct {
    char *path;                  // for messages ("<memory>" style names for buffers)
    st_tensor *tensors;          // sorted by data offset (= storage order)
    int count;
    char **meta_keys, **meta_values;  // __metadata__, in header order
    int meta_count;
    const uint8_t *bytes;        // the whole file (mmap, or the caller's buffer)
    size_t size;
    const uint8_t *data;         // bytes + 8 + header length
    uint64_t data_size;
    int *by_name;                // indices into tensors, sorted by name (binary search)
    void *map;                   // mmap base to unmap; NULL for st_open_memory
} st_file;

// Maps and validates a file; on error the st_file is left empty (st_close is still safe).
// The mapping is read-only; truncating the file while it is open makes later reads fault,
// as with any mmap.
int st_open(st_file *f, const char *path);
// Same checks on a buffer the caller keeps alive until st_close (used by the fuzzer).
int st_open_memory(st_file *f, const void *bytes, size_t size, const char *name);
void st_close(st_file *f);

const st_tensor *st_find(const st_file *f, const char *name);  // NULL if absent
const char *st_metadata(const st_file *f, const char *key);    // NULL if absent

// Copies a tensor into `out` (numel floats), converting BF16/F16 to F32. Fails, naming the
// file and tensor, if it is missing, its dtype is not F32/BF16/F16, or its shape is not
// exactly shape[0..ndim) (ndim 0 = scalar).
int st_read_f32(const st_file *f, const char *name, float *out, int ndim, const int64_t *shape);
// Copies the raw elements (numel * st_dtype_size(dtype) bytes) of a tensor whose dtype must
// be exactly `dtype` and shape exactly shape[0..ndim).
int st_read_raw(const st_file *f, const char *name, st_dtype dtype, void *out, int ndim,
                const int64_t *shape);
// Zero-copy: a pointer to the tensor's bytes inside the file (valid until st_close).
// Not necessarily aligned to the element size: tensors are packed back to back.
const void *st_tensor_data(const st_file *f, const st_tensor *t);
// Zero-copy F32 view with the same checks as st_read_f32, plus 4-byte alignment (NULL with
// an error otherwise; fall back to st_read_f32). A 0-element tensor gives a non-NULL pointer.
const float *st_view_f32(const st_file *f, const char *name, int ndim, const int64_t *shape);

// XXH64 (seed 0) of the whole file.
uint64_t st_checksum(const st_file *f);
// BG_ERR with "PATH: checksum mismatch ..." if st_checksum(f) != expected.
int st_verify_checksum(const st_file *f, uint64_t expected);

// ---- writing ----

typedef struct {
    const char *name;            // UTF-8, unique, not "__metadata__"
    st_dtype dtype;              // as stored in the file
    // Element type of `data`: ST_DTYPE_NONE (= dtype), or ST_F32 with dtype ST_BF16 / ST_F16
    // to convert on write (round to nearest even; for export).
    st_dtype src_dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;            // numel elements of src_dtype; may be NULL if numel is 0
} st_tensor_in;

typedef struct {
    const char *key, *value;     // both UTF-8 strings
} st_meta;

// Writes a complete file to `fd` from its current position: header, then tensors in the
// given order, each write checked (short writes retried), then fsync. `name` is used in
// messages. Returns BG_ERR with the errno text on any failure (disk full, I/O error).
// If checksum is non-NULL it receives st_checksum of the bytes written.
int st_write_fd(int fd, const char *name, const st_tensor_in *t, int count,
                const st_meta *meta, int meta_count, uint64_t *checksum);
// Creates or truncates `path` (mode 0644), st_write_fd, closes (checked). On failure the
// partial file is removed, so no half-written file is left under `path`. Renaming into a
// final place and fsyncing the directory is the caller's part.
int st_write_file(const char *path, const st_tensor_in *t, int count, const st_meta *meta,
                  int meta_count, uint64_t *checksum);
// The first bytes st_write_fd would write for these tensors (the 8-byte length and the
// header), in *prefix (the caller frees it), and the data section's size: a file is then
// the prefix followed by every tensor's bytes in the given order (data is not read), so
// a caller can lay out a whole file image in memory (the asynchronous save's snapshot).
int st_file_prefix(const char *name, const st_tensor_in *t, int count, const st_meta *meta, int meta_count,
                   char **prefix, size_t *prefix_len, uint64_t *data_bytes);

#endif
