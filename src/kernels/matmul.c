// Matmul forward and backward: f32 products through bagualu's own AVX-512 GEMM
// (gemm_f32.h) where the CPU has AVX-512F (gemm_f32_choice.c), everything else through
// oneDNN, with a small cache of primitives.
//
// Every GEMM of the model is one of three kinds over (M,K,N), with M the row count
// of the activations (tokens, or an expert's share of them):
//   FWD          out(M,N)      = inp(M,K)   · weight(N,K)ᵀ
//   BWD_DATA     dinp(M,K)    += dout(M,N)  · weight(N,K)
//   BWD_WEIGHTS  dweight(N,K) += dout(M,N)ᵀ · inp(M,K)
// (and BWD_DATA_SET, BWD_WEIGHTS_SET: the product written instead of added).
// Transposed operands are described by strides, never copied; "+=" is oneDNN's sum
// post-op (beta = 1), so no temporary is needed either.
//
// Creating a primitive costs milliseconds (JIT), so primitives are cached by
// (kind,K,N). M changes every step for expert GEMMs, so the cached primitive takes
// M at run time (DNNL_RUNTIME_DIM_VAL): the number of primitives is bounded by the
// number of shapes, never by the number of calls. oneDNN 2.6 serves runtime M with
// its JIT sgemm; measured against fixed-M primitives (its brgemm kernels) on
// AVX-512 the two are within noise of each other for the model's shapes, the
// runtime one faster on the largest (the LM head), so there is no fixed-M path.
//
// Concurrent calls: GEMMs may also be issued from the threads of a parallel region,
// each then running on its own thread (oneDNN runs single-threaded inside one): the
// routed experts do, one expert per thread, which beats threading each small GEMM
// (matmul_concurrent). Everything a call binds (memory objects, stream, rounded
// operands) is per thread; the shared tables change under one lock.
//
// All of it lives in a kernel_ctx (kernels.h), defined here: the caches are the
// GEMMs', and the other kernels read only its precision.
//
// Mixed precision (the context's operand format: its precision and bf16 path; bf16 on
// the fp32 path is floats holding bf16 values, run by the f32 GEMM): operands are rounded into buffers kept
// between calls (never allocated in the steady state), the output stays fp32. A weight
// is rounded once per pass, not once per GEMM that reads it: the forward, the backward
// and every chunk of the fused LM head share its copy until matmul_weights_changed.
#include "kernels/kernels.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timer.h"
#include "kernels/gemm_f32.h"
#include "kernels/vec16.h"

// A failing oneDNN call means a bug here or a broken install, not bad user input.
#define DNNL_CHECK(call)                                                               \
    do {                                                                               \
        dnnl_status_t st_ = (call);                                                    \
        if (st_ != dnnl_success) {                                                     \
            fprintf(stderr, "bagualu: internal error: oneDNN %s: %s (%s:%d)\n", #call, \
                    dnnl_status2str(st_), __FILE__, __LINE__);                         \
            abort();                                                                   \
        }                                                                              \
    } while (0)

// GEMM_BWD_WEIGHTS_T: the weights product on a transposed copy of dout (gemm_run).
enum gemm_kind { GEMM_FWD, GEMM_BWD_DATA, GEMM_BWD_WEIGHTS, GEMM_BWD_DATA_SET, GEMM_BWD_WEIGHTS_SET,
                 GEMM_BWD_WEIGHTS_T };

// A model has a handful of (K,N) per kind; room to spare (a context may serve more).
enum { GEMM_CACHE_SIZE = 64 };
// Threads that may call at once (matmul_concurrent).
enum { GEMM_MAX_THREADS = MATMUL_MAX_CONCURRENT };

// Memory objects carry concrete dims, so they are remade only when M changes; a steady
// M (every dense layer) runs without any allocation. One set per calling thread.
typedef struct {
    dnnl_memory_t a, b, c;
    int64_t mem_M;
} gemm_binding;

typedef struct {
    int used;
    int kind, K, N;
    dnnl_data_type_t dt;  // of both inputs; the output is always f32
    dnnl_primitive_t prim;
    gemm_binding bind[GEMM_MAX_THREADS];
    uint64_t last_use;
    // matmul_profile: time and work of this entry's calls
    long calls;
    double seconds, flops;
} gemm_entry;

// A grow-only buffer; contents need not survive growth.
typedef struct {
    void *data;
    size_t bytes;
} grow_buf;

static void *grow_buf_get(grow_buf *g, size_t bytes) {
    if (bytes > g->bytes) {
        free(g->data);
        g->data = bg_aligned_alloc(bytes);
        g->bytes = bytes;
    }
    return g->data;
}

// Activations: one buffer per operand role of a call, and dout transposed.
enum { OPERAND_A, OPERAND_B, OPERAND_T, OPERAND_COUNT };

// Weights: rounded copies by source address, valid until matmul_weights_changed.
typedef struct {
    const float *src;
    size_t n;
    operand_format p;
    int valid;
    grow_buf buf;
} weight_copy;

struct kernel_ctx {
    bg_dtype precision;
    bf16_path bf16_path;
    gemm_f32_impl gemm_f32;
    float *own_scratch[GEMM_MAX_THREADS];  // the own GEMM's packing space, per thread slot
    dnnl_engine_t engine;
    dnnl_stream_t streams[GEMM_MAX_THREADS];
    gemm_entry cache[GEMM_CACHE_SIZE];
    uint64_t clock;
    long primitives_created;
    int profiling;
    matmul_call *trace;  // matmul_trace: where calls are recorded, and how many
    int trace_cap, trace_n;
    grow_buf operands[GEMM_MAX_THREADS][OPERAND_COUNT];
    weight_copy *weights;
    int n_weights, cap_weights;
};

kernel_ctx *kernel_ctx_create(bg_dtype precision) {
    BG_ASSERT((unsigned)precision < BG_DTYPE_COUNT);
    kernel_ctx *kc = bg_calloc(1, sizeof *kc);
    kc->precision = precision;
    kc->bf16_path = bf16_path_default();
    kc->gemm_f32 = gemm_f32_impl_default();
    return kc;
}

gemm_f32_impl kernel_ctx_gemm_f32(const kernel_ctx *kc) { return kc->gemm_f32; }

void kernel_ctx_set_gemm_f32(kernel_ctx *kc, gemm_f32_impl g) {
    BG_ASSERT(g == GEMM_F32_ONEDNN || g == GEMM_F32_ONEDNN_T || gemm_f32_supported());
    kc->gemm_f32 = g;
}

bg_dtype kernel_ctx_precision(const kernel_ctx *kc) { return kc->precision; }

bf16_path kernel_ctx_bf16_path(const kernel_ctx *kc) { return kc->bf16_path; }

void kernel_ctx_set_bf16_path(kernel_ctx *kc, bf16_path path) { kc->bf16_path = path; }

operand_format kernel_ctx_operand_format(const kernel_ctx *kc) {
    return operand_format_of(kc->precision, kc->bf16_path);
}

void kernel_ctx_set_precision(kernel_ctx *kc, bg_dtype precision) {
    BG_ASSERT((unsigned)precision < BG_DTYPE_COUNT);
    kc->precision = precision;
}

// The calling thread's slot: its number in a parallel region, else 0.
static int gemm_thread(void) {
    const int t = omp_in_parallel() ? omp_get_thread_num() : 0;
    BG_ASSERT(t < GEMM_MAX_THREADS);
    return t;
}

int matmul_concurrent_for(int tasks, double threads) { return threads >= 2 && tasks >= 2 * threads; }

int matmul_concurrent(int tasks) {
    const int t = omp_get_max_threads();
    return !omp_in_parallel() && t <= GEMM_MAX_THREADS && matmul_concurrent_for(tasks, t);
}

// Shapes and strides of the operands A(m,k) · B(k,n) → C(m,n) of one kind.
// M (possibly DNNL_RUNTIME_DIM_VAL) enters a stride only in GEMM_BWD_WEIGHTS_T's A (a
// run-time stride there), so one primitive serves every M.
typedef struct {
    dnnl_dims_t a_dims, a_strides, b_dims, b_strides, c_dims, c_strides;
    float beta;
} gemm_layout;

static gemm_layout gemm_layout_of(int kind, int64_t M, int64_t K, int64_t N) {
    gemm_layout l;
    memset(&l, 0, sizeof l);
    switch (kind) {
    case GEMM_FWD:  // inp(M,K) · [weight(N,K) read as (K,N) with strides (1,K)]
        l.a_dims[0] = M, l.a_dims[1] = K, l.a_strides[0] = K, l.a_strides[1] = 1;
        l.b_dims[0] = K, l.b_dims[1] = N, l.b_strides[0] = 1, l.b_strides[1] = K;
        l.c_dims[0] = M, l.c_dims[1] = N, l.c_strides[0] = N, l.c_strides[1] = 1;
        l.beta = 0.0f;
        break;
    case GEMM_BWD_DATA:  // dout(M,N) · weight(N,K)
    case GEMM_BWD_DATA_SET:
        l.a_dims[0] = M, l.a_dims[1] = N, l.a_strides[0] = N, l.a_strides[1] = 1;
        l.b_dims[0] = N, l.b_dims[1] = K, l.b_strides[0] = K, l.b_strides[1] = 1;
        l.c_dims[0] = M, l.c_dims[1] = K, l.c_strides[0] = K, l.c_strides[1] = 1;
        l.beta = kind == GEMM_BWD_DATA ? 1.0f : 0.0f;
        break;
    case GEMM_BWD_WEIGHTS_T:  // doutᵀ(N,M) · inp(M,K): M enters a stride, at run time
        l.a_dims[0] = N, l.a_dims[1] = M, l.a_strides[0] = M, l.a_strides[1] = 1;
        l.b_dims[0] = M, l.b_dims[1] = K, l.b_strides[0] = K, l.b_strides[1] = 1;
        l.c_dims[0] = N, l.c_dims[1] = K, l.c_strides[0] = K, l.c_strides[1] = 1;
        l.beta = 1.0f;
        break;
    default:  // [dout(M,N) read as (N,M) with strides (1,N)] · inp(M,K); BWD_WEIGHTS_SET
              // reaches oneDNN as zeros + this sum (gemm_run)
        l.a_dims[0] = N, l.a_dims[1] = M, l.a_strides[0] = 1, l.a_strides[1] = N;
        l.b_dims[0] = M, l.b_dims[1] = K, l.b_strides[0] = K, l.b_strides[1] = 1;
        l.c_dims[0] = N, l.c_dims[1] = K, l.c_strides[0] = K, l.c_strides[1] = 1;
        l.beta = 1.0f;
        break;
    }
    return l;
}

// Under the lock.
static dnnl_stream_t gemm_stream(kernel_ctx *kc, int t) {
    if (!kc->engine) DNNL_CHECK(dnnl_engine_create(&kc->engine, dnnl_cpu, 0));
    if (!kc->streams[t])
        DNNL_CHECK(dnnl_stream_create(&kc->streams[t], kc->engine, dnnl_stream_default_flags));
    return kc->streams[t];
}

long matmul_primitives_created(const kernel_ctx *kc) { return kc->primitives_created; }

static dnnl_primitive_t gemm_primitive_create(kernel_ctx *kc, int kind, dnnl_data_type_t dt, int K,
                                              int N) {
    kc->primitives_created++;
    gemm_layout l = gemm_layout_of(kind, DNNL_RUNTIME_DIM_VAL, K, N);
    dnnl_memory_desc_t a_md, b_md, c_md;
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&a_md, 2, l.a_dims, dt, l.a_strides));
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&b_md, 2, l.b_dims, dt, l.b_strides));
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&c_md, 2, l.c_dims, dnnl_f32, l.c_strides));
    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md));

    dnnl_primitive_attr_t attr;
    DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    dnnl_post_ops_t ops = NULL;
    if (l.beta != 0.0f) {
        DNNL_CHECK(dnnl_post_ops_create(&ops));
        DNNL_CHECK(dnnl_post_ops_append_sum(ops, l.beta));
        DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, ops));
    }
    dnnl_primitive_desc_t pd;
    DNNL_CHECK(dnnl_primitive_desc_create(&pd, &desc, attr, kc->engine, NULL));
    dnnl_primitive_t prim;
    DNNL_CHECK(dnnl_primitive_create(&prim, pd));
    DNNL_CHECK(dnnl_primitive_desc_destroy(pd));
    if (ops) DNNL_CHECK(dnnl_post_ops_destroy(ops));
    DNNL_CHECK(dnnl_primitive_attr_destroy(attr));
    return prim;
}

// Whether oneDNN has a bf16 GEMM on this CPU (2.6 needs AVX-512: on an AVX2-only CPU
// its matmul answers "unimplemented"). Asked once, of a 16 x 16 product: the library's
// own answer, so it follows the library's version, not a flag table of ours.
int matmul_bf16_native_usable(void) {
    static int answer = -1;
    #pragma omp critical(bg_bf16_native_usable)
    if (answer < 0) {
        dnnl_engine_t engine;
        DNNL_CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
        const dnnl_dims_t dims = {16, 16};
        dnnl_memory_desc_t a_md, b_md, c_md;
        DNNL_CHECK(dnnl_memory_desc_init_by_tag(&a_md, 2, dims, dnnl_bf16, dnnl_ab));
        DNNL_CHECK(dnnl_memory_desc_init_by_tag(&b_md, 2, dims, dnnl_bf16, dnnl_ab));
        DNNL_CHECK(dnnl_memory_desc_init_by_tag(&c_md, 2, dims, dnnl_f32, dnnl_ab));
        dnnl_matmul_desc_t desc;
        DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md));
        dnnl_primitive_desc_t pd = NULL;
        answer = dnnl_primitive_desc_create(&pd, &desc, NULL, engine, NULL) == dnnl_success;
        if (pd) DNNL_CHECK(dnnl_primitive_desc_destroy(pd));
        DNNL_CHECK(dnnl_engine_destroy(engine));
    }
    return answer;
}

static void gemm_binding_free(gemm_binding *g) {
    if (g->a) DNNL_CHECK(dnnl_memory_destroy(g->a));
    if (g->b) DNNL_CHECK(dnnl_memory_destroy(g->b));
    if (g->c) DNNL_CHECK(dnnl_memory_destroy(g->c));
    g->a = g->b = g->c = NULL;
    g->mem_M = -1;
}

static void gemm_entry_free(gemm_entry *e) {
    for (int t = 0; t < GEMM_MAX_THREADS; t++) gemm_binding_free(&e->bind[t]);
    if (e->prim) DNNL_CHECK(dnnl_primitive_destroy(e->prim));
    memset(e, 0, sizeof *e);
}

static gemm_binding *gemm_entry_bind_memory(const kernel_ctx *kc, gemm_entry *e, int t, int64_t M) {
    gemm_binding *g = &e->bind[t];
    if (g->mem_M == M) return g;
    gemm_binding_free(g);
    gemm_layout l = gemm_layout_of(e->kind, M, e->K, e->N);
    dnnl_memory_desc_t a_md, b_md, c_md;
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&a_md, 2, l.a_dims, e->dt, l.a_strides));
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&b_md, 2, l.b_dims, e->dt, l.b_strides));
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(&c_md, 2, l.c_dims, dnnl_f32, l.c_strides));
    DNNL_CHECK(dnnl_memory_create(&g->a, &a_md, kc->engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&g->b, &b_md, kc->engine, DNNL_MEMORY_NONE));
    DNNL_CHECK(dnnl_memory_create(&g->c, &c_md, kc->engine, DNNL_MEMORY_NONE));
    g->mem_M = M;
    return g;
}

// Finds or makes the primitive for this shape, under the lock. Linear scan: the table
// is small and the scan is nothing next to the GEMM.
static gemm_entry *gemm_lookup(kernel_ctx *kc, int kind, dnnl_data_type_t dt, int K, int N,
                               int need_prim) {
    gemm_entry *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < GEMM_CACHE_SIZE; i++) {
        gemm_entry *e = &kc->cache[i];
        if (!e->used) {
            if (!free_slot) free_slot = e;
            continue;
        }
        if (e->kind == kind && e->dt == dt && e->K == K && e->N == N) {
            if (need_prim && !e->prim) e->prim = gemm_primitive_create(kc, kind, dt, K, N);
            return e;
        }
        if (!oldest || e->last_use < oldest->last_use) oldest = e;
    }
    // A full table evicts the least recently used entry; the only cost is
    // re-creating it if that shape comes back. Not while other threads may be using it.
    BG_ASSERT(free_slot || !omp_in_parallel());
    gemm_entry *e = free_slot ? free_slot : oldest;
    if (!free_slot) gemm_entry_free(e);
    e->used = 1;
    e->kind = kind, e->dt = dt, e->K = K, e->N = N;
    e->prim = need_prim ? gemm_primitive_create(kc, kind, dt, K, N) : NULL;
    for (int t = 0; t < GEMM_MAX_THREADS; t++) e->bind[t] = (gemm_binding){NULL, NULL, NULL, -1};
    return e;
}

// ---- the own f32 GEMM ---------------------------------------------------------------

// Products this small run on the calling thread: a team costs more than it saves.
enum { OWN_TEAM_MIN_MKN = 1 << 18 };

static void own_scratch_alloc(kernel_ctx *kc, int s) {
    if (kc->own_scratch[s]) return;
    const size_t bytes = gemm_f32_scratch_floats() * sizeof(float);
    kc->own_scratch[s] = bg_aligned_alloc(bytes);
    memset(kc->own_scratch[s], 0, bytes);  // resident now, whatever the shapes touch later
}

// Threads for one own GEMM: the whole team from the main thread (for a product big
// enough), the calling thread alone inside a parallel region. Under the lock: the
// scratch of every slot of the team, allocated and touched at the first call and kept,
// so the resident memory does not depend on which thread took which expert.
static int own_prepare(kernel_ctx *kc, int t, int M, int K, int N) {
    int team = omp_in_parallel() ? omp_get_num_threads() : omp_get_max_threads();
    team = team < GEMM_MAX_THREADS ? team : GEMM_MAX_THREADS;
    for (int s = 0; s < team; s++) own_scratch_alloc(kc, s);
    own_scratch_alloc(kc, t);
    return !omp_in_parallel() && (double)M * K * N >= OWN_TEAM_MIN_MKN ? team : 1;
}

// The kind's operands as strides (the same products as gemm_layout_of).
static void own_run(kernel_ctx *kc, int kind, float *c, const float *a, const float *b, int M, int K,
                    int N, int t, int threads) {
    gemm_f32_args g;
    switch (kind) {
    case GEMM_FWD:  // out(M,N) = inp(M,K) · weight(N,K)ᵀ
        g = (gemm_f32_args){M, N, K, a, K, 1, b, 1, K, c, N, 0};
        break;
    case GEMM_BWD_DATA:  // dinp(M,K) (+)= dout(M,N) · weight(N,K)
    case GEMM_BWD_DATA_SET:
        g = (gemm_f32_args){M, K, N, a, N, 1, b, K, 1, c, K, kind == GEMM_BWD_DATA};
        break;
    default:  // dweight(N,K) (+)= dout(M,N)ᵀ · inp(M,K)
        g = (gemm_f32_args){N, K, M, a, 1, N, b, K, 1, c, K, kind == GEMM_BWD_WEIGHTS};
        break;
    }
    gemm_f32(&g, kc->own_scratch + t, threads);
}

// onednn-t: oneDNN 2.6's AVX2 sgemm runs a weights product, whose A is dout read
// transposed, at about half the rate of the same product on a row-major A
// (BENCHMARKS.md, issue 19), so dout is transposed first where the copy is small: the
// experts', not the LM head's logits. The copy is a workspace the planner does not
// count, hence the bound.
enum { TRANSPOSE_MAX_FLOATS = 1 << 20 };

// dst (n, m) = src (m, n)ᵀ; the team's threads share the column blocks when called from
// outside a parallel region.
static void transpose_rows(float *restrict dst, const float *restrict src, int m, int n) {
    #pragma omp parallel for schedule(static) if (!omp_in_parallel() && (size_t)m * n >= (1u << 16))
    for (int c0 = 0; c0 < n; c0 += 16)
        v16_transpose_block(dst + (size_t)c0 * m, (size_t)m, src + c0, (size_t)n, m, n - c0 < 16 ? n - c0 : 16);
}

static void gemm_run(kernel_ctx *kc, int kind, dnnl_data_type_t dt, float *c, const void *a,
                     const void *b, int M, int K, int N) {
    // From the main thread oneDNN (and the own GEMM) parallelises inside with the shared
    // OpenMP pool; from a thread of a parallel region it runs on that thread alone.
    BG_ASSERT(M >= 0 && K > 0 && N > 0);
    const int t = gemm_thread();
    const int own = dt == dnnl_f32 && (kc->gemm_f32 == GEMM_F32_OWN ||
                                        (kc->gemm_f32 == GEMM_F32_MIXED && kind != GEMM_BWD_DATA &&
                                         kind != GEMM_BWD_DATA_SET));
    if (kind == GEMM_BWD_WEIGHTS_SET && !own) {
        // oneDNN's JIT ran a written weights product slower than zeros and its sum post-op.
        memset(c, 0, (size_t)N * K * sizeof *c);
        kind = GEMM_BWD_WEIGHTS;
    }
    const int traced_kind = kind;
    if (kind == GEMM_BWD_WEIGHTS && dt == dnnl_f32 && kc->gemm_f32 == GEMM_F32_ONEDNN_T &&
        (size_t)M * N <= TRANSPOSE_MAX_FLOATS && M > 0) {
        float *at = grow_buf_get(&kc->operands[t][OPERAND_T], (size_t)M * N * sizeof(float));
        transpose_rows(at, a, M, N);
        a = at;
        kind = GEMM_BWD_WEIGHTS_T;
    }
    gemm_entry *e;
    dnnl_stream_t stream = NULL;
    gemm_binding *g = NULL;
    int threads = 1;
    #pragma omp critical(bg_matmul)
    {
        if (!own) stream = gemm_stream(kc, t);  // makes the engine the primitive needs
        e = gemm_lookup(kc, kind, dt, K, N, !own);
        e->last_use = ++kc->clock;
        if (own) threads = own_prepare(kc, t, M, K, N);
        else g = gemm_entry_bind_memory(kc, e, t, M);
    }
    dnnl_exec_arg_t args[3];
    if (!own) {
        DNNL_CHECK(dnnl_memory_set_data_handle(g->a, (void *)a));
        DNNL_CHECK(dnnl_memory_set_data_handle(g->b, (void *)b));
        DNNL_CHECK(dnnl_memory_set_data_handle(g->c, c));
        args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, g->a};
        args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, g->b};
        args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, g->c};
    }
    if (kc->trace) {
        #pragma omp critical(bg_matmul)
        if (kc->trace_n < kc->trace_cap)
            kc->trace[kc->trace_n++] = (matmul_call){traced_kind, dt == dnnl_bf16, omp_in_parallel(), M, K, N};
    }
    double t0 = kc->profiling ? bg_now() : 0;
    if (own) {
        own_run(kc, kind, c, a, b, M, K, N, t, threads);
    } else {
        DNNL_CHECK(dnnl_primitive_execute(e->prim, stream, 3, args));
        DNNL_CHECK(dnnl_stream_wait(stream));
    }
    if (kc->profiling) {
        const double dt_s = bg_now() - t0, fl = 2.0 * M * K * N;
        #pragma omp critical(bg_matmul)
        {
            e->calls++;
            e->seconds += dt_s;
            e->flops += fl;
        }
    }
}

void matmul_trace(kernel_ctx *kc, matmul_call *calls, int cap) {
    kc->trace = calls, kc->trace_cap = cap, kc->trace_n = 0;
}

int matmul_trace_count(const kernel_ctx *kc) { return kc->trace_n; }

// One call of the list on the calling thread's slot (inside a parallel region: alone on
// its thread, as recorded).
static void replay_one(kernel_ctx *kc, const matmul_call *c, const void *a, const void *b, float *out) {
    gemm_run(kc, c->kind, c->bf16 ? dnnl_bf16 : dnnl_f32, out, a, b, c->M, c->K, c->N);
}

static int replay_threads(void) {
    return omp_get_max_threads() < GEMM_MAX_THREADS ? omp_get_max_threads() : GEMM_MAX_THREADS;
}

matmul_replay_operands matmul_replay_operands_alloc(const matmul_call *calls, int n) {
    size_t in = 1, outn = 1;
    for (int i = 0; i < n; i++) {
        const size_t M = (size_t)calls[i].M, K = (size_t)calls[i].K, N = (size_t)calls[i].N;
        const size_t x = M * K > M * N ? M * K : M * N, y = M * K > K * N ? M * K : K * N;
        in = in > x ? in : x;
        in = in > y ? in : y;
        const int k = calls[i].kind;
        const size_t o = k == GEMM_FWD ? M * N : k == GEMM_BWD_WEIGHTS || k == GEMM_BWD_WEIGHTS_SET ? N * K : M * K;
        outn = outn > o ? outn : o;
    }
    const size_t outs = outn * (size_t)replay_threads();
    matmul_replay_operands r = {bg_aligned_alloc(in * sizeof(float)), bg_aligned_alloc(in * sizeof(float)),
                                bg_aligned_alloc(outs * sizeof(float)), outn};
    for (size_t i = 0; i < in; i++) r.a[i] = r.b[i] = 1e-3f * (float)(i % 7);
    memset(r.out, 0, outs * sizeof(float));
    return r;
}

void matmul_replay_operands_free(matmul_replay_operands *r) {
    free(r->a), free(r->b), free(r->out);
    *r = (matmul_replay_operands){0};
}

double matmul_replay(kernel_ctx *kc, const matmul_call *calls, int n, const matmul_replay_operands *r,
                     double *cpu_s) {
    const int profiling = kc->profiling;  // the replay is not the step's work: not counted
    kc->profiling = 0;
    const double t0 = bg_now(), c0 = bg_process_cpu_now();
    for (int i = 0; i < n;) {
        int j = i + 1;
        if (calls[i].concurrent) {  // a run of calls made from a parallel region
            while (j < n && calls[j].concurrent) j++;
            #pragma omp parallel for schedule(dynamic, 1)
            for (int q = i; q < j; q++)
                replay_one(kc, &calls[q], r->a, r->b, r->out + r->out_floats * omp_get_thread_num());
        } else {
            replay_one(kc, &calls[i], r->a, r->b, r->out);
        }
        i = j;
    }
    const double dt = bg_now() - t0;
    *cpu_s = bg_process_cpu_now() - c0;
    kc->profiling = profiling;
    return dt;
}

void matmul_profile(kernel_ctx *kc, int on) {
    kc->profiling = on;
    for (int i = 0; i < GEMM_CACHE_SIZE; i++)
        kc->cache[i].calls = 0, kc->cache[i].seconds = kc->cache[i].flops = 0;
}

void matmul_profile_print(const kernel_ctx *kc, FILE *f) {
    static const char *kinds[] = {"fwd", "bwd-data+", "bwd-weights", "bwd-data=", "bwd-wts=", "bwd-wts-T"};
    double total = 0;
    for (int i = 0; i < GEMM_CACHE_SIZE; i++) total += kc->cache[i].seconds;
    fprintf(f, "  %-11s %-5s %6s %6s %7s %10s %7s %9s\n", "GEMM", "type", "K", "N", "calls", "ms", "share",
            "GFLOP/s");
    for (int i = 0; i < GEMM_CACHE_SIZE; i++) {
        const gemm_entry *e = &kc->cache[i];
        if (!e->used || !e->calls) continue;
        fprintf(f, "  %-11s %-5s %6d %6d %7ld %10.1f %6.1f%% %9.1f\n", kinds[e->kind],
                e->dt == dnnl_bf16 ? "bf16" : "f32", e->K, e->N, e->calls, e->seconds * 1e3,
                100 * e->seconds / total, e->flops / e->seconds / 1e9);
    }
}

// ---- operands at reduced precision --------------------------------------------

// fp16 operands, and bf16 ones on the fp32 path, are held in f32.
static dnnl_data_type_t operand_type(operand_format p) {
    return p == OPERAND_BF16 ? dnnl_bf16 : dnnl_f32;
}

static size_t operand_bytes(operand_format p, size_t n) { return n * operand_format_bytes(p); }

size_t matmul_operand_bytes(const kernel_ctx *kc, size_t n) {
    return operand_bytes(kernel_ctx_operand_format(kc), n);
}

static void operand_round(operand_format p, void *out, const float *in, size_t n) {
    if (p == OPERAND_BF16) cast_f32_to_bf16(out, in, n);
    else if (p == OPERAND_BF16_IN_F32) round_f32_to_bf16(out, in, n);
    else round_f32_to_f16(out, in, n);
}

static const void *activation_operand(kernel_ctx *kc, operand_format p, int slot, const float *x,
                                      size_t n) {
    if (p == OPERAND_F32) return x;
    void *buf = grow_buf_get(&kc->operands[gemm_thread()][slot], operand_bytes(p, n));
    operand_round(p, buf, x, n);
    return buf;
}

static const void *operand_data(kernel_ctx *kc, operand_format p, int slot, matmul_operand x,
                                size_t n) {
    return x.rounded ? x.data : activation_operand(kc, p, slot, x.data, n);
}

// A model has a few hundred weight tensors at most; the scan is nothing next to a GEMM.
void matmul_weights_changed(kernel_ctx *kc) {
    for (int i = 0; i < kc->n_weights; i++) kc->weights[i].valid = 0;
}

// Under the lock: concurrent callers round different weights, or wait for the first
// to round a shared one.
static const void *weight_operand_locked(kernel_ctx *kc, operand_format p, const float *w, size_t n) {
    weight_copy *wc = NULL;
    for (int i = 0; i < kc->n_weights && !wc; i++)
        if (kc->weights[i].src == w) wc = &kc->weights[i];
    if (!wc) {
        if (kc->n_weights == kc->cap_weights) {
            kc->cap_weights = kc->cap_weights ? 2 * kc->cap_weights : 64;
            kc->weights = bg_realloc(kc->weights, sizeof *kc->weights * kc->cap_weights);
        }
        wc = &kc->weights[kc->n_weights++];
        memset(wc, 0, sizeof *wc);
        wc->src = w;
    }
    if (!wc->valid || wc->n != n || wc->p != p) {
        void *buf = grow_buf_get(&wc->buf, operand_bytes(p, n));
        operand_round(p, buf, w, n);
        wc->n = n, wc->p = p, wc->valid = 1;
    }
    return wc->buf.data;
}

static const void *weight_operand(kernel_ctx *kc, operand_format p, const float *w, size_t n) {
    if (p == OPERAND_F32) return w;
    const void *r;
    #pragma omp critical(bg_matmul)
    r = weight_operand_locked(kc, p, w, n);
    return r;
}

// ---- the three GEMMs ------------------------------------------------------------
// In operand format p: kc's for the public calls, fp32 for the router's.

static void forward_op(kernel_ctx *kc, operand_format p, float *out, matmul_operand inp,
                       const float *weight, int M, int K, int N) {
    if (M == 0 || N == 0) return;
    if (K == 0) {  // an empty sum; oneDNN rejects zero-sized reductions
        memset(out, 0, (size_t)M * N * sizeof *out);
        return;
    }
    const void *a = operand_data(kc, p, OPERAND_A, inp, (size_t)M * K);
    const void *b = weight_operand(kc, p, weight, (size_t)N * K);
    gemm_run(kc, GEMM_FWD, operand_type(p), out, a, b, M, K, N);
}

static void backward_op(kernel_ctx *kc, operand_format p, float *dinp, matmul_store dinp_store,
                        float *dweight, matmul_store dweight_store, matmul_operand dout,
                        matmul_operand inp, const float *weight, int M, int K, int N) {
    if (K == 0) return;  // dinp and dweight are empty
    if (M == 0 || N == 0) {  // empty sums; oneDNN rejects zero-sized reductions
        if (dinp && dinp_store == MATMUL_WRITE) memset(dinp, 0, (size_t)M * K * sizeof *dinp);
        if (dweight && dweight_store == MATMUL_WRITE) memset(dweight, 0, (size_t)N * K * sizeof *dweight);
        return;
    }
    dnnl_data_type_t dt = operand_type(p);
    const void *d = operand_data(kc, p, OPERAND_A, dout, (size_t)M * N);  // rounded once for both
    if (dinp)
        gemm_run(kc, dinp_store == MATMUL_WRITE ? GEMM_BWD_DATA_SET : GEMM_BWD_DATA, dt, dinp, d,
                 weight_operand(kc, p, weight, (size_t)N * K), M, K, N);
    if (dweight)
        gemm_run(kc, dweight_store == MATMUL_WRITE ? GEMM_BWD_WEIGHTS_SET : GEMM_BWD_WEIGHTS, dt, dweight, d,
                 operand_data(kc, p, OPERAND_B, inp, (size_t)M * K), M, K, N);
}

void matmul_forward_op(kernel_ctx *kc, float *out, matmul_operand inp, const float *weight, int M,
                       int K, int N) {
    forward_op(kc, kernel_ctx_operand_format(kc), out, inp, weight, M, K, N);
}

// inp (M,K), weight (N,K), out (M,N)
void matmul_forward(kernel_ctx *kc, float *out, const float *inp, const float *weight, int M,
                    int K, int N) {
    forward_op(kc, kernel_ctx_operand_format(kc), out, matmul_floats(inp), weight, M, K, N);
}

void matmul_backward_op(kernel_ctx *kc, float *dinp, matmul_store dinp_store, float *dweight,
                        matmul_operand dout, matmul_operand inp, const float *weight, int M,
                        int K, int N) {
    backward_op(kc, kernel_ctx_operand_format(kc), dinp, dinp_store, dweight, MATMUL_ADD, dout, inp,
                weight, M, K, N);
}

void matmul_weights_grad_op(kernel_ctx *kc, float *dweight, matmul_store store, matmul_operand dout,
                            matmul_operand inp, int M, int K, int N) {
    backward_op(kc, kernel_ctx_operand_format(kc), NULL, MATMUL_ADD, dweight, store, dout, inp, NULL,
                M, K, N);
}

// dout (M,N); dinp (M,K) += dout · weight; dweight (N,K) += doutᵀ · inp
void matmul_backward(kernel_ctx *kc, float *dinp, float *dweight, const float *dout,
                     const float *inp, const float *weight, int M, int K, int N) {
    backward_op(kc, kernel_ctx_operand_format(kc), dinp, MATMUL_ADD, dweight, MATMUL_ADD,
                matmul_floats(dout), matmul_floats(inp), weight, M, K, N);
}

void *matmul_bf16_dout_buffer(kernel_ctx *kc, size_t n) {
    if (kernel_ctx_operand_format(kc) != OPERAND_BF16) return NULL;
    return grow_buf_get(&kc->operands[gemm_thread()][OPERAND_A], operand_bytes(OPERAND_BF16, n));
}

void matmul_forward_fp32(kernel_ctx *kc, float *out, const float *inp, const float *weight, int M,
                         int K, int N) {
    forward_op(kc, OPERAND_F32, out, matmul_floats(inp), weight, M, K, N);
}

void matmul_backward_fp32(kernel_ctx *kc, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, int M, int K, int N) {
    backward_op(kc, OPERAND_F32, dinp, MATMUL_ADD, dweight, MATMUL_ADD, matmul_floats(dout),
                matmul_floats(inp), weight, M, K, N);
}

void matmul_cache_clear(kernel_ctx *kc) {
    for (int i = 0; i < GEMM_CACHE_SIZE; i++)
        if (kc->cache[i].used) gemm_entry_free(&kc->cache[i]);
    for (int t = 0; t < GEMM_MAX_THREADS; t++) {
        for (int i = 0; i < OPERAND_COUNT; i++) free(kc->operands[t][i].data);
        free(kc->own_scratch[t]);
        kc->own_scratch[t] = NULL;
    }
    memset(kc->operands, 0, sizeof kc->operands);
    for (int i = 0; i < kc->n_weights; i++) free(kc->weights[i].buf.data);
    free(kc->weights);
    kc->weights = NULL;
    kc->n_weights = kc->cap_weights = 0;
    for (int t = 0; t < GEMM_MAX_THREADS; t++)
        if (kc->streams[t]) DNNL_CHECK(dnnl_stream_destroy(kc->streams[t]));
    memset(kc->streams, 0, sizeof kc->streams);
    if (kc->engine) DNNL_CHECK(dnnl_engine_destroy(kc->engine));
    kc->engine = NULL;
    kc->clock = 0;
}

void kernel_ctx_free(kernel_ctx *kc) {
    if (!kc) return;
    matmul_cache_clear(kc);
    free(kc);
}
