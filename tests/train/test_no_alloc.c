// A steady-state training step performs no heap allocation: activations live in
// the arena, primitives are cached, the optimizer state is allocated once.
// malloc and friends are interposed by this executable (symbols defined here win
// over libc's for every library, oneDNN and libgomp included) and counted while
// steps run, after two warm-up steps have created every cached object.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "train_fixture.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static volatile int counting = 0;
static volatile long allocations = 0;

void *malloc(size_t n) {
    if (counting) __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t s) {
    if (counting) __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
    return __libc_calloc(n, s);
}
void *realloc(void *p, size_t n) {
    if (counting) __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
    return __libc_realloc(p, n);
}
int posix_memalign(void **p, size_t a, size_t n) {
    if (counting) __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12;
}
void *aligned_alloc(size_t a, size_t n) {
    if (counting) __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
    return __libc_memalign(a, n);
}
void *memalign(size_t a, size_t n) {
    if (counting) __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);
    return __libc_memalign(a, n);
}

int main(void) {
    train_fixture f;
    fixture_make(&f, 8);
    train_options o;
    fixture_options(&o, &f);
    o.steps = 10;
    trainer tr;
    TU_CHECK(trainer_init(&tr, &o) == BG_OK, "init: %s", bg_last_error());
    trainer_step(&tr);
    trainer_step(&tr);
    counting = 1;
    for (int i = 0; i < 5; i++) trainer_step(&tr);
    counting = 0;
    printf("heap allocations during 5 steady-state steps: %ld\n", allocations);
    TU_CHECK(allocations == 0, "%ld allocations in steady-state steps", allocations);
    trainer_free(&tr);
    fixture_remove(&f);
    return tu_finish("no_alloc");
}
