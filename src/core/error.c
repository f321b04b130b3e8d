#include "core/error.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

static _Thread_local char bg_error_message[1024];
static _Thread_local int bg_error_nomem;  // the message says we ran out of memory

static int record(int nomem, const char *fmt, va_list ap) {
    vsnprintf(bg_error_message, sizeof bg_error_message, fmt, ap);
    bg_error_nomem = nomem;
    return BG_ERR;
}

int bg_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = record(0, fmt, ap);
    va_end(ap);
    return rc;
}

int bg_error_out_of_memory(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = record(1, fmt, ap);
    va_end(ap);
    return rc;
}

const char *bg_last_error(void) { return bg_error_message[0] ? bg_error_message : "unknown error"; }

int bg_last_error_is_out_of_memory(void) { return bg_error_nomem; }

void bg_clear_error(void) {
    bg_error_message[0] = '\0';
    bg_error_nomem = 0;
}

void *bg_try_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) bg_error_out_of_memory("out of memory allocating %zu bytes", bytes);
    return p;
}

void *bg_try_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) bg_error_out_of_memory("out of memory allocating %zu bytes", n * size);
    return p;
}

void *bg_try_realloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) bg_error_out_of_memory("out of memory allocating %zu bytes", bytes);
    return q;
}

static bg_out_of_memory_handler oom_handler;

void bg_set_out_of_memory_handler(bg_out_of_memory_handler handler) { oom_handler = handler; }

_Noreturn static void bg_out_of_memory(size_t bytes) {
    if (oom_handler) oom_handler(bytes);
    fprintf(stderr, "bagualu: out of memory allocating %zu bytes\n", bytes);
    abort();
}

void *bg_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) bg_out_of_memory(bytes);
    return p;
}

void *bg_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) bg_out_of_memory(n * size);
    return p;
}

void *bg_realloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) bg_out_of_memory(bytes);
    return q;
}

// Blocks of at least this size start on a 2 MiB boundary and ask for transparent huge
// pages (MADV_HUGEPAGE: machines whose THP policy is "madvise" give them only on
// request). The streaming kernels (AdamW, the cross-entropy over the logits, the
// roundings) walk tens to hundreds of MB, a TLB entry per 4 KiB with small pages
// (the gain is in BENCHMARKS.md).
#define BG_HUGE_BLOCK ((size_t)4 << 20)
#define BG_HUGE_PAGE ((size_t)2 << 20)

void *bg_aligned_alloc(size_t bytes) {
    const int huge = bytes >= BG_HUGE_BLOCK;
    const size_t align = huge ? BG_HUGE_PAGE : 64;
    const size_t rounded = bytes ? (bytes + align - 1) & ~(align - 1) : align;
    void *p = aligned_alloc(align, rounded);
    if (!p) bg_out_of_memory(bytes);
#if defined(MADV_HUGEPAGE)
    if (huge) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: no huge pages is no error
#endif
    return p;
}

// glibc maps a large block of its own, but once one is freed it raises its mapping
// threshold to that size, so a buffer regrown by an eighth comes from the heap and each
// size it had stays resident (BENCHMARKS.md, issue 17, Zen 4). Under AddressSanitizer,
// malloc's, so that it checks these blocks too.
#if defined(__SANITIZE_ADDRESS__)
void *bg_mapped_alloc(size_t bytes) { return bg_aligned_alloc(bytes); }
void bg_mapped_free(void *p) { free(p); }
#else
enum { BG_MAPPED_HEAD = 64 };  // the mapping's length, and the block stays 64-byte aligned

void *bg_mapped_alloc(size_t bytes) {
    if (bytes > SIZE_MAX - BG_MAPPED_HEAD) bg_out_of_memory(bytes);  // the length would wrap
    const size_t len = bytes + BG_MAPPED_HEAD;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) bg_out_of_memory(bytes);
    *(size_t *)m = len;
    return (char *)m + BG_MAPPED_HEAD;
}

void bg_mapped_free(void *p) {
    if (!p) return;
    char *m = (char *)p - BG_MAPPED_HEAD;
    munmap(m, *(size_t *)m);
}
#endif
