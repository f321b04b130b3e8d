#ifndef BG_CORE_ERROR_H
#define BG_CORE_ERROR_H
// Errors on user input: a function that can fail returns BG_ERR (or NULL) after
// bg_error() recorded one line naming the problem; only cli/ turns it into an exit code.
#include <stdio.h>
#include <stdlib.h>

enum { BG_OK = 0, BG_ERR = -1 };

// Records the message (printf format) and returns BG_ERR so callers can `return bg_error(...)`.
int bg_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *bg_last_error(void);
void bg_clear_error(void);

// Internal invariants: stay on in release builds (they are cheap where used).
#define BG_ASSERT(cond)                                                              \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "bagualu: internal error: %s (%s:%d)\n", #cond, __FILE__, \
                    __LINE__);                                                       \
            abort();                                                                 \
        }                                                                            \
    } while (0)

// Allocation that never returns NULL: running out of memory is not a user error.
void *bg_malloc(size_t bytes);
void *bg_calloc(size_t n, size_t size);
void *bg_realloc(void *p, size_t bytes);
// 64-byte aligned (cache line, AVX-512 vector); free with free().
void *bg_aligned_alloc(size_t bytes);

#endif
