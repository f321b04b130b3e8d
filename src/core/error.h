#ifndef BG_CORE_ERROR_H
#define BG_CORE_ERROR_H
// Errors on user input: a function that can fail returns BG_ERR (or NULL) after
// bg_error() recorded one line naming the problem; only cli/ turns it into an exit code.
#include <stdio.h>
#include <stdlib.h>

enum { BG_OK = 0, BG_ERR = -1 };

// Records the message (printf format) and returns BG_ERR so callers can `return bg_error(...)`.
int bg_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// The same for running out of memory, marked as such: the CLI exits 3 for it, not 1 or 2.
int bg_error_out_of_memory(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *bg_last_error(void);
int bg_last_error_is_out_of_memory(void);
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

// Allocation whose size user input chooses (a text's tokens, a tokenizer's tables):
// NULL after recording "out of memory allocating N bytes" (bg_error_out_of_memory),
// so that the caller returns BG_ERR and the host decides.
void *bg_try_malloc(size_t bytes);
void *bg_try_calloc(size_t n, size_t size);
void *bg_try_realloc(void *p, size_t bytes);

// Allocation that never returns NULL, for workspaces the program sized itself (model,
// optimizer, scratch), whose callers could not go on without them. On failure they
// call the host's handler (bagualu's CLI prints one line and exits 3). A library never
// exits its host, so with no handler, or one that returns, they print that line and
// abort() as a failed BG_ASSERT does: a NULL would crash later, far from the cause.
void *bg_malloc(size_t bytes);
void *bg_calloc(size_t n, size_t size);
void *bg_realloc(void *p, size_t bytes);
// 64-byte aligned (cache line, AVX-512 vector); free with free().
void *bg_aligned_alloc(size_t bytes);
// 64-byte aligned pages of the block's own, returned to the system by bg_mapped_free:
// for buffers that grow during a run (dropless expert parallelism's rows), whose
// earlier sizes would otherwise stay resident in malloc's heap.
void *bg_mapped_alloc(size_t bytes);
void bg_mapped_free(void *p);

// The handler gets the size that failed; it may exit or jump out, or return to abort.
// Install it once, before anything allocates (it is read without a lock).
typedef void (*bg_out_of_memory_handler)(size_t bytes);
void bg_set_out_of_memory_handler(bg_out_of_memory_handler handler);

#endif
