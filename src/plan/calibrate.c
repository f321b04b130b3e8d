// Measuring this machine's compute rates for a cluster file (calibrate.h).
#include "plan/calibrate.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

typedef plan_gemm_shape shape;

// By size; of equal sizes the model's own shapes first.
static int by_flops(const void *a, const void *b) {
    const shape *x = a, *y = b;
    if (x->flops != y->flops) return (x->flops > y->flops) - (x->flops < y->flops);
    return y->own - x->own;
}

// A timed shape's operands, activations in the precision's operand format: a step's
// GEMMs mostly take activations their producers already rounded, and the planner
// prices the remaining rounding passes as memory-bound work.
typedef struct {
    float *w, *o, *da, *dw;
    void *a, *dout;
} operands;

static void operands_alloc(operands *x, const shape *s, operand_format f) {
    size_t mk = (size_t)s->M * s->K, nk = (size_t)s->N * s->K, mn = (size_t)s->M * s->N;
    size_t big = mk > nk ? mk : nk;
    float *tmp = bg_aligned_alloc((big > mn ? big : mn) * 4);
    x->w = bg_aligned_alloc(nk * 4), x->dw = bg_aligned_alloc(nk * 4);
    x->o = bg_aligned_alloc(mn * 4), x->da = bg_aligned_alloc(mk * 4);
    x->a = bg_aligned_alloc(mk * 4), x->dout = bg_aligned_alloc(mn * 4);
    for (size_t i = 0; i < nk; i++) x->w[i] = (float)(i % 13) * 0.01f, x->dw[i] = 0;
    for (size_t i = 0; i < mk; i++) tmp[i] = (float)(i % 17) * 0.01f;
    operand_store(x->a, 0, tmp, mk, f);
    for (size_t i = 0; i < mn; i++) tmp[i] = (float)(i % 7) * 0.01f;
    operand_store(x->dout, 0, tmp, mn, f);
    free(tmp);
}

static void operands_free(operands *x) {
    free(x->w), free(x->dw), free(x->o), free(x->da), free(x->a), free(x->dout);
}

// The GEMM curves' samples: CURVE_PASSES passes over the shapes, PASS_SAMPLES each.
enum { CURVE_PASSES = 3, PASS_SAMPLES = 2, CURVE_SAMPLES = CURVE_PASSES * PASS_SAMPLES };
enum { ACT_PAIRS = 5 };  // the elementwise kernels' speedup: pairs of timings on 1 and all threads

// Between two uses of a weight a step streams the rest of the model, so every GEMM
// finds its weight in memory, not in cache: with bf16 operands (make_cold) a streaming
// pass over flush_floats() floats evicts it before each timed product (AMX's bf16 GEMMs on the experts' skinny
// shapes run at about half their hot-cache rate then). Three times the last-level
// cache: a pass the size of the cache (AMD's L3 holds what L2 evicts) left the expert
// weights of one expert mostly cached, timed as fast as reused ones. At most 96 MiB
// (three Zen 5 L3s): a VM reports its host socket's L3 (480 MiB on a 2-core Intel
// 6/167), of which its cores hold a slice; 1.4 GB passes there made the calibration
// take 220 s and priced M2's expert GEMMs at twice the time they take in its step.
static size_t flush_floats(void) {
    const size_t lo = (size_t)32 << 20, hi = (size_t)96 << 20;
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    size_t bytes = l3 > 0 ? 3 * (size_t)l3 : 0;
    bytes = bytes < lo ? lo : bytes > hi ? hi : bytes;
    return bytes / 4;
}

// On the timed call's team: its threads stay awake into the call, as after a step's
// previous kernel (a team idle through a one-thread flush sleeps, and waking it cost
// the two-thread products a tenth of their speedup on a KVM guest).
static void flush(float *f, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n / 2; i++) f[i] = 1.0001f * f[i + n / 2] + f[i];
}

// A weight's cache lines out to memory, the rest of the caches kept: a step's products
// on float operands find their weights in memory (streamed past since their last use)
// but their activations, just written, and the kernel's packing buffers, used by every
// product, in cache. The streaming flush evicted those too, pricing a 32-row expert
// product at two thirds of its rate in M2's step. Elsewhere than x86, left cached.
static void evict(const float *w, size_t floats) {
#if defined(__SSE2__)
    for (size_t i = 0; i < floats; i += 16) _mm_clflush(w + i);
    _mm_mfence();
#else
    (void)w, (void)floats;
#endif
}

// Before a timed product: with bf16 operands the kernels hold their own rounded copy of
// the weight, out of evict's reach, so everything is flushed; otherwise the weight is
// evicted, and before the forward its gradient too (the forward leaves it untouched, so
// it is still out for the backward that writes it).
static void make_cold(const operands *x, const shape *s, operand_format f, float *fl, size_t nfl, int grad) {
    if (!nfl) return;
    if (f == OPERAND_BF16) {
        flush(fl, nfl);
        return;
    }
    evict(x->w, (size_t)s->N * s->K);
    if (grad) evict(x->dw, (size_t)s->N * s->K);
}

// ns samples of a call's seconds into t, each the mean over calls repeated for at least
// `sample` seconds, evictions included: a shared machine's preemptions land in the samples
// the way they land in a step, instead of being dodged by a best-of (a first call builds
// the primitives and rounds the weight). A call is the trainer's triple for one weight:
// the forward, the backward's data product and its weight product (oneDNN runs them
// through different kernels, the backward ones slower on skinny shapes), each after
// make_cold and timed without it. nfl = 0: nothing evicted, the operands stay cached
// from the previous call (a model that fits in the cache).
static void time_gemm_samples(kernel_ctx *kc, const shape *s, float *fl, size_t nfl, double sample,
                              double *t, int ns) {
    operands x;
    const operand_format f = kernel_ctx_operand_format(kc);
    operands_alloc(&x, s, f);
    matmul_weights_changed(kc);
    for (int r = -1; r < ns; r++) {
        double dt = 0, start = bg_now();
        long calls = 0;
        do {
            make_cold(&x, s, f, fl, nfl, 1);
            double t0 = bg_now();
            matmul_forward_op(kc, x.o, matmul_rounded(x.a), x.w, s->M, s->K, s->N);
            double t1 = bg_now();
            make_cold(&x, s, f, fl, nfl, 0);
            double t2 = bg_now();
            matmul_backward_op(kc, x.da, MATMUL_WRITE, x.dw, matmul_rounded(x.dout),
                               matmul_rounded(x.a), x.w, s->M, s->K, s->N);
            dt += (t1 - t0) + (bg_now() - t2);
            calls++;
        } while (r >= 0 && (bg_now() - start < sample || calls < 3));
        if (r >= 0) t[r] = dt / calls;
    }
    operands_free(&x);
}

// The triple's seconds on cached operands, the median of 5 samples.
static double time_gemm_cached(kernel_ctx *kc, const shape *s, double sample) {
    double t[5];
    time_gemm_samples(kc, s, NULL, 0, sample, t, 5);
    return bg_median(t, 5);
}

static void add_shape(shape *v, int *n, double M, double K, double N, int own) {
    if (M < 1 || K < 1 || N < 1 || *n >= PLAN_CALIBRATE_SHAPES) return;
    if (M * K > 6e7 || K * N > 6e7 || M * N > 6e7) return;  // keep the buffers modest
    for (int i = 0; i < *n; i++)
        if (v[i].M == (int)M && v[i].K == (int)K && v[i].N == (int)N) return;
    v[(*n)++] = (shape){2 * M * K * N, (int)M, (int)K, (int)N, own};
}

// The median of 5 samples of a call's time, a sample the mean over calls repeated for
// budget/5 seconds (time_gemm_samples' samples, nothing evicted).
static double median_call_s(void (*call)(void *ctx), void *ctx, double budget) {
    double t[5];
    for (int r = 0; r < 5; r++) {
        double t0 = bg_now(), dt;
        long calls = 0;
        do {
            call(ctx);
            calls++;
        } while ((dt = bg_now() - t0) < budget / 5);
        t[r] = dt / calls;
    }
    return bg_median(t, 5);
}

typedef struct {
    kernel_ctx *kc;
    float *qkv, *dqkv, *out, *dout, *lse, *scratch;
    int B, T, C, NH, NKV;
} attention_call;

static void attention_step(void *ctx) {
    attention_call *a = ctx;
    flash_attention_forward(a->kc, a->out, a->lse, a->scratch, a->qkv, a->B, a->T, a->C, a->NH, a->NKV);
    flash_attention_backward(a->kc, a->dqkv, a->scratch, a->dout, a->qkv, a->out, a->lse, a->B, a->T,
                             a->C, a->NH, a->NKV);
}

// The flash attention core forward + backward at the model's shape: FLOP/s counted
// as the planner counts them (7·N·T·C: forward 2, backward 5, causal halves).
static double time_attention(bg_dtype dt, int B, int T, int C, int NH, int NKV, double budget) {
    kernel_ctx *kc = kernel_ctx_create(dt);
    size_t n = (size_t)B * T * C, nqkv = (size_t)B * T * (C + 2 * (size_t)NKV * (C / NH));
    float *qkv = bg_aligned_alloc(nqkv * 4), *dqkv = bg_aligned_alloc(nqkv * 4);
    float *out = bg_aligned_alloc(n * 4), *dout = bg_aligned_alloc(n * 4);
    float *lse = bg_aligned_alloc((size_t)B * NH * T * 4);
    float *scratch = bg_aligned_alloc(flash_attention_scratch_size(B, T, C, NH, NKV) * 4 + 64);
    for (size_t i = 0; i < nqkv; i++) qkv[i] = (float)(i % 23) * 0.01f, dqkv[i] = 0;
    for (size_t i = 0; i < n; i++) dout[i] = (float)(i % 7) * 0.01f;
    attention_call a = {kc, qkv, dqkv, out, dout, lse, scratch, B, T, C, NH, NKV};
    flash_attention_forward(kc, out, lse, scratch, qkv, B, T, C, NH, NKV);
    double best = median_call_s(attention_step, &a, budget);
    free(qkv), free(dqkv), free(out), free(dout), free(lse), free(scratch);
    kernel_ctx_free(kc);
    return 7.0 * B * T * (double)T * C / best;
}

typedef struct {
    const model_config *c;
    float *x, *y, *dx, *w, *dw, *b, *db, *mean, *rstd, *qkv, *a, *da, *h, *cs, *sn;
    int B, T, rope;
} activation_call;

static void activation_step(void *ctx) {
    activation_call *k = ctx;
    const model_config *c = k->c;
    const int N = k->B * k->T, C = c->hidden_size;
    const int I = c->num_local_experts > 0 ? c->moe_intermediate_size : c->intermediate_size;
    if (c->norm == NORM_RMSNORM) {
        rmsnorm_forward(k->y, k->rstd, k->x, k->w, N, C, 1e-5f);
        rmsnorm_backward(k->dx, k->dw, k->y, k->x, k->w, k->rstd, N, C);
    } else {
        layernorm_forward(k->y, k->mean, k->rstd, k->x, k->w, k->b, N, C, 1e-5f);
        layernorm_backward(k->dx, k->dw, k->db, k->y, k->x, k->w, k->mean, k->rstd, N, C);
    }
    if (k->rope) {
        rope_forward(k->qkv, k->cs, k->sn, k->B, k->T, C, c->num_attention_heads, model_kv_heads(c));
        rope_backward(k->qkv, k->cs, k->sn, k->B, k->T, C, c->num_attention_heads, model_kv_heads(c));
    }
    residual_forward(k->y, k->x, k->dx, (size_t)N * C);
    if (c->hidden_act == FFN_SWIGLU) {
        swiglu_forward(k->h, OPERAND_F32, k->a, N, I);
        swiglu_backward(k->da, OPERAND_F32, k->h, k->a, N, I);
    } else {
        gelu_forward(k->h, OPERAND_F32, k->a, (size_t)N * I);
        gelu_backward(k->da, OPERAND_F32, k->h, k->a, (size_t)N * I);
    }
}

// A layer's elementwise kernels at the model's shape, one forward and backward each: its
// norm, RoPE (where the model has it), a residual add and its activation function; as
// bytes/s of the passes the planner counts for them (norm 2 + 3, RoPE 2 + 2 over q and
// k, residual 3, GELU 2 + 3, SwiGLU 3 + 5 of their widths). Over tensors a step finds
// in cache these kernels are bound by their arithmetic and per-call costs, which the
// triad's bandwidth does not see.
static double time_activation_kernels(const model_config *c, int B, int T, double budget) {
    const int N = B * T, C = c->hidden_size, NH = c->num_attention_heads, NKV = model_kv_heads(c);
    const int hs = C / NH, W = (int)model_qkv_width(c), swiglu = c->hidden_act == FFN_SWIGLU;
    const int I = c->num_local_experts > 0 ? c->moe_intermediate_size : c->intermediate_size;
    const size_t nc = (size_t)N * C, nw = (size_t)N * W, ni = (size_t)N * I * (swiglu ? 2 : 1);
    float *x = bg_aligned_alloc(nc * 4), *y = bg_aligned_alloc(nc * 4), *dx = bg_aligned_alloc(nc * 4);
    float *w = bg_aligned_alloc((size_t)C * 4), *dw = bg_aligned_alloc((size_t)C * 4);
    float *b = bg_aligned_alloc((size_t)C * 4), *db = bg_aligned_alloc((size_t)C * 4);
    float *mean = bg_aligned_alloc((size_t)N * 4), *rstd = bg_aligned_alloc((size_t)N * 4);
    float *qkv = bg_aligned_alloc(nw * 4), *a = bg_aligned_alloc(ni * 4), *da = bg_aligned_alloc(ni * 4);
    float *h = bg_aligned_alloc((size_t)N * I * 4);
    float *cs = bg_aligned_alloc((size_t)T * hs * 2), *sn = bg_aligned_alloc((size_t)T * hs * 2);
    for (size_t i = 0; i < nc; i++) x[i] = (float)(i % 19) * 0.01f - 0.09f, y[i] = 0.01f;
    for (int i = 0; i < C; i++) w[i] = 1, b[i] = 0, dw[i] = db[i] = 0;
    for (size_t i = 0; i < nw; i++) qkv[i] = (float)(i % 11) * 0.01f;
    for (size_t i = 0; i < ni; i++) a[i] = (float)(i % 23) * 0.01f - 0.1f;
    for (size_t i = 0; i < (size_t)N * I; i++) h[i] = 0.01f;
    const int rope = c->position_embedding == POS_ROPE;
    if (rope) rope_tables(cs, sn, T, hs, c->rope_theta);
    double bytes = 4.0 * (5.0 * nc + 3.0 * nc + (swiglu ? 8.0 : 5.0) * N * I);
    if (rope) bytes += 4.0 * 4 * (double)N * (C + NKV * hs);
    activation_call k = {c, x, y, dx, w, dw, b, db, mean, rstd, qkv, a, da, h, cs, sn, B, T, rope};
    const double t = median_call_s(activation_step, &k, budget);
    free(x), free(y), free(dx), free(w), free(dw), free(b), free(db), free(mean), free(rstd);
    free(qkv), free(a), free(da), free(h), free(cs), free(sn);
    return bytes / t;
}

// How much faster a rank runs the model's fp32 GEMM triples on `all` threads than on
// `threads`: the median over the shapes of their time ratios, each shape timed at both
// counts in turn (the machine's drift lands on both). A median, not the ratio of summed
// times, because a shared host's stolen core slows one shape's two-thread samples by up
// to a third, and one such shape moved the sum's ratio from 1.8-2.0 to 1.4.
static double gemm_speedup(const shape *v, int n, int threads, int all, double budget) {
    int own = 0;
    for (int i = 0; i < n; i++) own += v[i].own;
    if (!own) return 0;
    kernel_ctx *kc = kernel_ctx_create(BG_FP32);
    double ratio[PLAN_CALIBRATE_SHAPES];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!v[i].own) continue;
        double t[2];
        for (int r = 0; r < 2; r++) {
            bg_threads_set(r ? all : threads);
            t[r] = time_gemm_cached(kc, &v[i], budget / (2.0 * 5 * own));
        }
        ratio[m++] = t[0] / t[1];
    }
    bg_threads_set(threads);
    kernel_ctx_free(kc);
    return bg_median(ratio, m);
}

int plan_calibrate_shapes(plan_gemm_shape *v, const model_config *c, int B, int T) {
    int n = 0;
    if (c) {
        double N = (double)B * T, C = c->hidden_size;
        double in = c->hidden_act == FFN_SWIGLU ? 2 : 1;
        add_shape(v, &n, N, C, model_qkv_width(c), 1);
        add_shape(v, &n, N, C, C, 1);
        add_shape(v, &n, N, C, in * c->intermediate_size, 1);
        add_shape(v, &n, N, c->intermediate_size, C, 1);
        if (c->num_local_experts > 0) {
            double rows = N * c->num_experts_per_tok / c->num_local_experts;
            add_shape(v, &n, N, C, c->num_local_experts, 1);
            for (int f = 1; f <= 4; f *= 2) {  // the experts at EP = 1, 2, 4
                add_shape(v, &n, f * rows, C, in * c->moe_intermediate_size, 1);
                add_shape(v, &n, f * rows, c->moe_intermediate_size, C, 1);
            }
        }
        add_shape(v, &n, N, C, c->vocab_size, 1);
    }
    // A spread of each class, so the curves reach sizes the model's shapes do not.
    for (int s = 64; s <= 1024; s *= 2) add_shape(v, &n, s, s, s, 0);
    for (int s = 128; s <= 2048; s *= 2) add_shape(v, &n, 16, s, s, 0), add_shape(v, &n, 64, s, s, 0);
    for (int s = 256; s <= 2048; s *= 2) add_shape(v, &n, s / 2, s, s, 0);
    qsort(v, n, sizeof *v, by_flops);
    // A curve needs increasing sizes: of near-equal sizes in a class (within 5%) one
    // is timed, the model's own shape rather than the spread's.
    int kept = 0, last[PLAN_GEMM_CLASSES], count[PLAN_GEMM_CLASSES] = {0};
    for (int i = 0; i < n; i++) {
        int k = plan_gemm_class_of(v[i].M, v[i].K, v[i].N);
        if (count[k] && v[i].flops <= v[last[k]].flops * 1.05) {
            if (v[i].own && !v[last[k]].own) v[last[k]] = v[i];
            continue;
        }
        if (count[k] == PLAN_GEMM_POINTS) continue;
        v[kept] = v[i], last[k] = kept++, count[k]++;
    }
    return kept;
}

// Bytes/s of a copy plus scale over x and y, len floats each (read + write counted),
// on n threads: the best of `samples`, each the mean pass of passes repeated for at least
// min_s seconds (0: one pass; small sets need more to be timed).
static double triad_bw(float *x, float *y, size_t len, int n, int samples, double min_s) {
    double best = 1e30;
    for (int r = 0; r < samples; r++) {
        long passes = 0;
        double t0 = bg_now(), dt;
        do {
            #pragma omp parallel for num_threads(n) schedule(static)
            for (size_t i = 0; i < len; i++) y[i] = 1.0001f * x[i] + y[i];
            passes++;
        } while ((dt = bg_now() - t0) < min_s);
        if (dt / passes < best) best = dt / passes;
    }
    return 3.0 * len * 4 / best;
}

// Bytes/s of mixed precision's rounding as the trainer runs it (kernels/matmul.c: each
// weight rounded into its copy once a step, each activation operand into a buffer) on
// the bf16 path of this CPU: 64 MiB of floats, in blocks of an M2 expert's w_in (512K
// elements, each one call), 6 bytes an element as the time model counts them; the best
// of 5 on the team of bg_threads_set. Zen 5: one thread 37 GB/s against a triad of 54,
// both cores 50-58 against 97: the conversion's arithmetic and its 2-byte stores keep it
// under the triad, which priced the rounding of M2's 118M weights a step at half its
// time.
static double rounding_bw(void) {
    const size_t len = (size_t)16 << 20, block = (size_t)1 << 19;
    const operand_format p = operand_format_of(BG_BF16, bf16_path_default());
    float *x = bg_aligned_alloc(len * 4);
    void *y = bg_aligned_alloc(len * 4);
    for (size_t i = 0; i < len; i++) x[i] = 1e-3f * (float)(i % 1000);
    memset(y, 0, len * 4);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = bg_now();
        for (size_t o = 0; o < len; o += block) {
            if (p == OPERAND_BF16) cast_f32_to_bf16((uint16_t *)y + o, x + o, block);
            else round_f32_to_bf16((float *)y + o, x + o, block);
        }
        double dt = bg_now() - t0;
        if (dt < best) best = dt;
    }
    free(x), free(y);
    return 6.0 * len / best;
}

// The cache a model's state stays in: the triad on n threads over working sets of
// 1 to 64 MiB (two arrays, x and y of at least 8M floats), each pass repeated for 2 ms,
// the best of 3; the largest set streamed at 1.5x the memory's rate (mem_bw, a 128 MiB
// set) or more, and its rate. Measured, not read from sysconf: a VM reports its host
// socket's L3 (480 MiB on a 2-core Intel 6/167), of which its cores hold a slice.
static void cache_probe(float *x, float *y, double mem_bw, int n, double *bytes, double *bw) {
    *bytes = *bw = 0;
    for (size_t len = (size_t)128 << 10; len <= (size_t)8 << 20; len *= 2) {
        const double rate = triad_bw(x, y, len, n, 3, 2e-3);
        if (rate < 1.5 * mem_bw) break;
        *bytes = 2.0 * len * 4, *bw = rate;
    }
}

// Whether a shape also gets a cached rate: its triple's six operands take at most half
// of the cache.
static int cached_shape(const shape *s, double cache_bytes) {
    const double M = s->M, K = s->K, N = s->N;
    return 8 * (M * K + K * N + M * N) <= cache_bytes / 2;
}

int plan_calibrate_compute(plan_cluster *cl, const model_config *c, int B, int T, int threads,
                           double seconds) {
    bg_threads_set(threads);
    shape v[PLAN_CALIBRATE_SHAPES];
    int n = plan_calibrate_shapes(v, c, B, T);
    const size_t nfl = flush_floats();
    float *fl = bg_aligned_alloc(nfl * 4);
    memset(fl, 0, nfl * 4);
    const bg_dtype dts[3] = {BG_FP32, BG_BF16, BG_FP16};
    const plan_dtype pd[3] = {PLAN_FP32, PLAN_BF16, PLAN_FP16};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    // A rank's memory bandwidth, and the node's with every core streaming (the ranks of
    // a node share it: one core's stream does not reach it cores times); 2 x 64 MiB.
    // Then the cache, against the rank's: it says which shapes also get a cached rate.
    {
        size_t len = (size_t)16 << 20;
        float *x = bg_aligned_alloc(len * 4), *y = bg_aligned_alloc(len * 4);
        memset(x, 0, len * 4), memset(y, 0, len * 4);
        cl->mem_bw = triad_bw(x, y, len, threads, 5, 0);
        cl->node_mem_bw = cores > threads ? triad_bw(x, y, len, (int)cores, 5, 0) : cl->mem_bw;
        cache_probe(x, y, cl->mem_bw, threads, &cl->cache_bytes, &cl->cache_bw);
        free(x), free(y);
    }
    int cached_n = 0;
    for (int i = 0; i < n; i++) cached_n += cached_shape(&v[i], cl->cache_bytes);
    double(*cold)[CURVE_SAMPLES] = bg_malloc(sizeof *cold * (n > 0 ? n : 1));
    double(*warm)[CURVE_SAMPLES] = bg_malloc(sizeof *warm * (n > 0 ? n : 1));
    for (int d = 0; d < 3; d++) {
        kernel_ctx *kc = kernel_ctx_create(dts[d]);
        // fp16, and bf16 on the fp32 path, run the fp32 GEMM on rounded operands held in
        // floats (operand_format_of): the same kernels at the same shapes, so fp32's
        // rates, not timed again (each dtype's timing is a third of the calibration).
        if (d > 0 && kernel_ctx_operand_format(kc) != OPERAND_BF16) {
            memcpy(cl->gemm[pd[d]], cl->gemm[PLAN_FP32], sizeof cl->gemm[PLAN_FP32]);
            cl->peak[pd[d]] = cl->peak[PLAN_FP32];
        } else {
            double peak = 0;
            for (int k = 0; k < PLAN_GEMM_CLASSES; k++) cl->gemm[pd[d]][k].n = 0;
            // The shapes' samples are taken in passes over all of them, so that a slow
            // spell of a shared host lands in a pass's samples of several shapes, which
            // their medians drop, instead of in every sample of one shape.
            for (int p = 0; p < CURVE_PASSES; p++)
                for (int i = 0; i < n; i++) {
                    time_gemm_samples(kc, &v[i], fl, nfl, 0.8 * seconds / (3.0 * CURVE_SAMPLES * n),
                                      cold[i] + p * PASS_SAMPLES, PASS_SAMPLES);
                    if (cached_shape(&v[i], cl->cache_bytes))
                        time_gemm_samples(kc, &v[i], fl, 0, 0.15 * seconds / (3.0 * CURVE_SAMPLES * cached_n),
                                          warm[i] + p * PASS_SAMPLES, PASS_SAMPLES);
                }
            for (int i = 0; i < n; i++) {
                plan_gemm_curve *g = &cl->gemm[pd[d]][plan_gemm_class_of(v[i].M, v[i].K, v[i].N)];
                double r = 3 * v[i].flops / bg_median(cold[i], CURVE_SAMPLES);
                g->flops[g->n] = v[i].flops, g->ai[g->n] = plan_gemm_ai(v[i].M, v[i].K, v[i].N);
                g->cached[g->n] = cached_shape(&v[i], cl->cache_bytes)
                                      ? 3 * v[i].flops / bg_median(warm[i], CURVE_SAMPLES)
                                      : 0;
                g->rate[g->n++] = r;
                if (r > peak) peak = r;
            }
            for (int k = 0; k < PLAN_GEMM_CLASSES; k++) plan_gemm_curve_finish(&cl->gemm[pd[d]][k]);
            cl->peak[pd[d]] = peak;
        }
        kernel_ctx_free(kc);
        // fp16's attention is fp32's (fp32 tiles on its operands as they are); bf16's
        // rounds its operands first, so it is timed.
        if (c) cl->attention_rate[pd[d]] = dts[d] == BG_FP16
                                               ? cl->attention_rate[PLAN_FP32]
                                               : time_attention(dts[d], B, T, c->hidden_size, c->num_attention_heads,
                                                                model_kv_heads(c), 0.1 * seconds / 3);  // 5 samples
    }
    // One rank on all the cores (ranks_per_node x threads, as the CLI's file states):
    // its speedup over `threads`, at most the ratio. Timed on cached operands: the
    // curves price the cold operands' traffic already, and cold products on all the
    // cores at once (sharing the memory bus) read well under the speedup a step gets
    // over those curves (docs/PLANNER.md, all cores).
    const int all = cores >= 2 * threads ? (int)(cores / threads) * threads : threads;
    if (c && all > threads) {
        const double ratio = (double)all / threads;
        cl->node_gemm_speedup = fmin(ratio, gemm_speedup(v, n, threads, all, 0.1 * seconds));
        // The elementwise kernels' speedup likewise from pairs timed in turn, the median
        // of their ratios: one pair alone read x0.79 on a shared host (the other core stolen).
        double act[ACT_PAIRS];
        for (int i = 0; i < ACT_PAIRS; i++) {
            const double act1 = time_activation_kernels(c, B, T, 0.03 * seconds / ACT_PAIRS);
            bg_threads_set(all);
            act[i] = time_activation_kernels(c, B, T, 0.03 * seconds / ACT_PAIRS) / act1;
            bg_threads_set(threads);
        }
        cl->node_act_speedup = fmin(ratio, bg_median(act, ACT_PAIRS));
    }
    free(fl), free(cold), free(warm);
    cl->round_bw = rounding_bw();
    if (cores > threads) {
        bg_threads_set((int)cores);
        cl->node_round_bw = rounding_bw();
        bg_threads_set(threads);
    } else {
        cl->node_round_bw = cl->round_bw;
    }
    cl->act_bw = c ? time_activation_kernels(c, B, T, 0.05 * seconds) : 0;
    cl->cores_per_rank = threads;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    cl->mem_per_node = pages > 0 && page > 0 ? (double)pages * page : 1e9;
    cl->gemm_efficiency = 0.7;
    cl->attention_efficiency = 0.5;
    return BG_OK;
}
