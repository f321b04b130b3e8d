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
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test_util.h"
#include "train/routing_health.h"
#include "train_fixture.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static volatile int counting = 0;
static volatile long allocations = 0, in_gemm_allocations = 0, gemm_calls = 0;
// A GEMM called outside a parallel region runs on the whole OpenMP team, and oneDNN
// allocates on its worker threads too: while one runs (serial_gemms > 0), every
// allocation is oneDNN's, as no other code of ours runs then. GEMMs called from the
// threads of a parallel region (concurrent experts) run on their thread alone, while
// other threads run other code: there the calling thread's flag decides.
static volatile int serial_gemms = 0;
static _Thread_local int in_gemm_here = 0;
#define in_gemm (serial_gemms > 0 || in_gemm_here)

static void gemm_enter(void) {
    if (omp_in_parallel()) in_gemm_here = 1;
    else serial_gemms = 1;
}
static void gemm_leave(void) {
    if (omp_in_parallel()) in_gemm_here = 0;
    else serial_gemms = 0;
}

#define COUNT()                                                                        \
    do {                                                                               \
        if (counting) {                                                                \
            if (in_gemm) __atomic_add_fetch(&in_gemm_allocations, 1, __ATOMIC_RELAXED); \
            else __atomic_add_fetch(&allocations, 1, __ATOMIC_RELAXED);                 \
        }                                                                              \
    } while (0)

// Every GEMM entry point of kernels.h, wrapped at link time (tests/CMakeLists.txt):
// while one runs, allocations count as oneDNN's.
#define WRAP_FORWARD(name)                                                                 \
    void __real_##name(kernel_ctx *, float *, const float *, const float *, int, int, int); \
    void __wrap_##name(kernel_ctx *kc, float *out, const float *inp, const float *w, int M,  \
                       int K, int N) {                                                     \
        gemm_enter();                                                                      \
        if (counting) __atomic_add_fetch(&gemm_calls, 1, __ATOMIC_RELAXED);                \
        __real_##name(kc, out, inp, w, M, K, N);                                           \
        gemm_leave();                                                                      \
    }
#define WRAP_BACKWARD(name, dout_type)                                                     \
    void __real_##name(kernel_ctx *, float *, float *, dout_type, const float *,           \
                       const float *, int, int, int);                                      \
    void __wrap_##name(kernel_ctx *kc, float *dinp, float *dw, dout_type dout,             \
                       const float *inp, const float *w, int M, int K, int N) {            \
        gemm_enter();                                                                      \
        if (counting) __atomic_add_fetch(&gemm_calls, 1, __ATOMIC_RELAXED);                \
        __real_##name(kc, dinp, dw, dout, inp, w, M, K, N);                                \
        gemm_leave();                                                                      \
    }
WRAP_FORWARD(matmul_forward)
WRAP_FORWARD(matmul_forward_fp32)  // the router's GEMMs, always fp32
WRAP_BACKWARD(matmul_backward, const float *)
WRAP_BACKWARD(matmul_backward_fp32, const float *)
// The operand forms, which the FFN and the fused LM head call directly.
void __real_matmul_forward_op(kernel_ctx *, float *, matmul_operand, const float *, int, int, int);
void __wrap_matmul_forward_op(kernel_ctx *kc, float *out, matmul_operand inp, const float *w, int M,
                              int K, int N) {
    gemm_enter();
    if (counting) __atomic_add_fetch(&gemm_calls, 1, __ATOMIC_RELAXED);
    __real_matmul_forward_op(kc, out, inp, w, M, K, N);
    gemm_leave();
}
void __real_matmul_backward_op(kernel_ctx *, float *, matmul_store, float *, matmul_operand,
                               matmul_operand, const float *, int, int, int);
void __wrap_matmul_backward_op(kernel_ctx *kc, float *dinp, matmul_store st, float *dw,
                               matmul_operand dout, matmul_operand inp, const float *w, int M,
                               int K, int N) {
    gemm_enter();
    if (counting) __atomic_add_fetch(&gemm_calls, 1, __ATOMIC_RELAXED);
    __real_matmul_backward_op(kc, dinp, st, dw, dout, inp, w, M, K, N);
    gemm_leave();
}
void __real_matmul_weights_grad_op(kernel_ctx *, float *, matmul_store, matmul_operand, matmul_operand,
                                   int, int, int);
void __wrap_matmul_weights_grad_op(kernel_ctx *kc, float *dw, matmul_store st, matmul_operand dout,
                                   matmul_operand inp, int M, int K, int N) {
    gemm_enter();
    if (counting) __atomic_add_fetch(&gemm_calls, 1, __ATOMIC_RELAXED);
    __real_matmul_weights_grad_op(kc, dw, st, dout, inp, M, K, N);
    gemm_leave();
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

// Two warm-up steps, then five counted ones (each with its routing health). batch 40 x 32 = 1280 tokens runs the
// fused LM head (chunks of 1024 + 256 rows); 8 x 32 the unfused one. Under ctest's
// OMP_NUM_THREADS=2 the fixture's 4 experts run one per thread; ctest's
// train/test_no_alloc_threads runs this again with 3 threads, under which they run one
// after the other.
static void check_rc(const train_fixture *f, int batch, bg_dtype dtype, model_recompute rc,
                     const char *name) {
    train_options o;
    fixture_options(&o, f);
    o.recompute = rc;
    o.steps = 10;
    o.batch_size = batch;
    o.dtype = dtype;
    trainer tr;
    TU_CHECK(trainer_init(&tr, &o) == BG_OK, "init: %s", bg_last_error());
    // The routing health the trainer gathers after every step allocates only here.
    routing_health health;
    TU_CHECK(routing_health_init(&health, &tr.m, NULL, 100, 0) == BG_OK, "health: %s", bg_last_error());
    fixture_step(&tr);
    fixture_step(&tr);
    long primitives = matmul_primitives_created(tr.m.kernels);
    allocations = in_gemm_allocations = gemm_calls = 0;
    counting = 1;
    for (int i = 0; i < 5; i++) {
        fixture_step(&tr);
        routing_health_update(&health, &tr.m, NULL, tr.step);
    }
    counting = 0;
    routing_health_free(&health);
    primitives = matmul_primitives_created(tr.m.kernels) - primitives;
    printf("%s: 5 steady-state steps: %ld heap allocations outside GEMMs; %ld inside oneDNN over %ld GEMM "
           "calls; %ld primitives created\n",
           name, allocations, in_gemm_allocations, gemm_calls, primitives);
    TU_CHECK(gemm_calls > 0, "%s: the GEMM wrappers were not linked in", name);
    TU_CHECK(allocations == 0, "%s: %ld allocations outside GEMMs in steady-state steps", name, allocations);
    TU_CHECK(primitives == 0, "%s: %ld GEMM primitives created in steady-state steps", name, primitives);
    // The own f32 GEMM packs into scratch kept from the first call: no allocation at all.
    if (dtype == BG_FP32 && kernel_ctx_gemm_f32(tr.m.kernels) == GEMM_F32_OWN)
        TU_CHECK(in_gemm_allocations == 0, "%s: %ld allocations inside the own GEMM", name, in_gemm_allocations);
    trainer_free(&tr);
}

static void check(const train_fixture *f, int batch, bg_dtype dtype, const char *name) {
    check_rc(f, batch, dtype, MODEL_RECOMPUTE_NONE, name);
}

// Adds routing keys to the fixture's model config, before its closing brace.
static void with_routing(const train_fixture *f, const char *keys) {
    char text[4096];
    FILE *c = fopen(f->config, "r");
    size_t n = c ? fread(text, 1, sizeof text - 1, c) : 0;
    if (c) fclose(c);
    text[n] = '\0';
    char *end = strrchr(text, '}');
    TU_CHECK(end != NULL, "no closing brace in %s", f->config);
    if (!end) return;
    *end = '\0';
    c = fopen(f->config, "w");
    TU_CHECK(c != NULL, "cannot rewrite %s", f->config);
    if (!c) return;
    fprintf(c, "%s, %s}\n", text, keys);
    fclose(c);
}

int main(void) {
    train_fixture f;
    fixture_make(&f, 8);
    check(&f, 8, BG_FP32, "fp32");
    check(&f, 40, BG_FP32, "fp32, fused LM head");
    check(&f, 40, BG_BF16, "bf16, fused LM head");
    check(&f, 40, BG_FP16, "fp16, fused LM head");
    check_rc(&f, 40, BG_BF16, MODEL_RECOMPUTE_BLOCK, "bf16, fused LM head, recompute block");
    // Capacity with the probability policy sorts each routing group's assignments: one
    // group of 256 tokens (4 KiB of keys, past what glibc's qsort sorts without a
    // buffer), and gshard's random second experts on top.
    with_routing(&f, "\"router_type\": \"gshard\", \"capacity_factor\": 1.0, "
                     "\"routing_group_tokens\": 256");
    check(&f, 8, BG_FP32, "gshard, capacity 1, probability policy");
    check_rc(&f, 8, BG_FP32, MODEL_RECOMPUTE_BLOCK, "gshard, capacity 1, recompute block");
    fixture_remove(&f);
    return tu_finish("no_alloc");
}
