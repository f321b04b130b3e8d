#ifndef BG_CORE_ARENA_H
#define BG_CORE_ARENA_H
// A bump allocator over one block: activations are laid out once from
// (batch, sequence, config), so a steady-state step never calls malloc.
#include <stddef.h>

typedef struct {
    char *base;
    size_t capacity;
    size_t used;
} bg_arena;

// capacity 0 gives a measuring arena: allocations return NULL but `used` grows,
// which is how callers size the real one with the same layout code.
void bg_arena_init(bg_arena *a, size_t capacity);
void bg_arena_free(bg_arena *a);
// 64-byte aligned; aborts if the arena is too small (a sizing bug, not user input).
void *bg_arena_alloc(bg_arena *a, size_t bytes);
#define BG_ARENA_NEW(a, type, count) ((type *)bg_arena_alloc((a), sizeof(type) * (size_t)(count)))

#endif
