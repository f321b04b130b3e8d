#include "core/error.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char bg_error_message[1024];

int bg_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bg_error_message, sizeof bg_error_message, fmt, ap);
    va_end(ap);
    return BG_ERR;
}

const char *bg_last_error(void) { return bg_error_message[0] ? bg_error_message : "unknown error"; }

void bg_clear_error(void) { bg_error_message[0] = '\0'; }

static void bg_out_of_memory(size_t bytes) {
    fprintf(stderr, "bagualu: out of memory allocating %zu bytes\n", bytes);
    exit(3);
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

void *bg_aligned_alloc(size_t bytes) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) bg_out_of_memory(bytes);
    return p;
}
