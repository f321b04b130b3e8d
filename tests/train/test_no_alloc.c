// A steady-state training step performs no heap allocation of its own:
// activations live in the arena, GEMM primitives are cached, the optimizer state
// is allocated once. malloc and friends are interposed by this executable
// (symbols defined here win over libc's for every library, oneDNN and libgomp
// included) and counted while steps run, after two warm-up steps.
// oneDNN 2.6 itself allocates a few small blocks inside every primitive execution
// (its execution context); no API avoids that. The GEMM entry points are wrapped
// at link time (-Wl,--wrap) so those allocations are counted apart and reported:
// everything outside them must be zero, and no GEMM primitive may be created
// during the steady state (expert GEMMs change their row count every step).
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test_util.h"
#include "train_fixture.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static volatile int counting = 0;
static volatile long allocations = 0, in_gemm_allocations = 0, gemm_calls = 0;
// Global, not thread-local: oneDNN allocates on its worker threads too, and no
// other code of ours runs while a GEMM call is in progress.
static volatile int in_gemm = 0;

#define COUNT()                                                                        \
    do {                                                                               \
        if (counting) {                                                                \
            if (in_gemm) __atomic_add_fetch(&in_gemm_allocations, 1, __ATOMIC_RELAXED); \
            else __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);                 \
        }                                                                              \
    } while (0)

void __real_matmul_forward(float *, const float *, const float *, int, int, int);
void __real_matmul_backward(float *, float *, const float *, const float *, const float *, int,
                            int, int);

void __wrap_matmul_forward(float *out, const float *inp, const float *w, int M, int K, int N) {
    in_gemm = 1;
    if (counting) gemm_calls++;
    __real_matmul_forward(out, inp, w, M, K, N);
    in_gemm = 0;
}

void __wrap_matmul_backward(float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, int M, int K, int N) {
    in_gemm = 1;
    if (counting) gemm_calls++;
    __real_matmul_backward(dinp, dw, dout, inp, w, M, K, N);
    in_gemm = 0;
}

// The router's GEMMs (always fp32) enter through their own names.
void __real_matmul_forward_fp32(float *, const float *, const float *, int, int, int);
void __real_matmul_backward_fp32(float *, float *, const float *, const float *, const float *, int,
                                 int, int);

void __wrap_matmul_forward_fp32(float *out, const float *inp, const float *w, int M, int K, int N) {
    in_gemm = 1;
    if (counting) gemm_calls++;
    __real_matmul_forward_fp32(out, inp, w, M, K, N);
    in_gemm = 0;
}

void __wrap_matmul_backward_fp32(float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, int M, int K, int N) {
    in_gemm = 1;
    if (counting) gemm_calls++;
    __real_matmul_backward_fp32(dinp, dw, dout, inp, w, M, K, N);
    in_gemm = 0;
}

void *malloc(size_t n) {
    COUNT();
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t s) {
    COUNT();
    return __libc_calloc(n, s);
}
void *realloc(void *p, size_t n) {
    COUNT();
    return __libc_realloc(p, n);
}
int posix_memalign(void **p, size_t a, size_t n) {
    COUNT();
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12;
}
void *aligned_alloc(size_t a, size_t n) {
    COUNT();
    return __libc_memalign(a, n);
}
void *memalign(size_t a, size_t n) {
    COUNT();
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
    long primitives = matmul_primitives_created();
    counting = 1;
    for (int i = 0; i < 5; i++) trainer_step(&tr);
    counting = 0;
    primitives = matmul_primitives_created() - primitives;
    printf("5 steady-state steps: %ld heap allocations outside GEMMs; %ld inside oneDNN over %ld GEMM calls;"
           " %ld primitives created\n", allocations, in_gemm_allocations, gemm_calls, primitives);
    TU_CHECK(gemm_calls > 0, "the GEMM wrappers were not linked in");
    TU_CHECK(allocations == 0, "%ld allocations outside GEMMs in steady-state steps", allocations);
    TU_CHECK(primitives == 0, "%ld GEMM primitives created in steady-state steps", primitives);
    trainer_free(&tr);
    fixture_remove(&f);
    return tu_finish("no_alloc");
}
