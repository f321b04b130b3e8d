#include "core/arena.h"
#include "core/error.h"

#include <string.h>

void bg_arena_init(bg_arena *a, size_t capacity) {
    a->base = capacity ? bg_aligned_alloc(capacity) : NULL;
    if (a->base) memset(a->base, 0, capacity);  // touch pages once, outside the step
    a->capacity = capacity;
    a->used = 0;
}

void bg_arena_free(bg_arena *a) {
    free(a->base);
    a->base = NULL;
    a->capacity = a->used = 0;
}

void *bg_arena_alloc(bg_arena *a, size_t bytes) {
    size_t start = (a->used + 63) & ~(size_t)63;
    a->used = start + bytes;
    if (!a->base) return NULL;
    BG_ASSERT(a->used <= a->capacity);
    return a->base + start;
}
