#ifndef BG_KERNELS_H
#define BG_KERNELS_H
// CPU math of the model, each op's forward and backward side by side.
// Conventions (llm.c style):
//   - arguments: outputs, then caches, then inputs, then weights, then sizes;
//   - row-major; a weight (N,K) multiplies as in nn.Linear: out = inp · weightᵀ;
//   - backward ACCUMULATES (+=) into every gradient it writes, parameters and
//     activations alike, unless the comment says "writes"; a NULL gradient
//     pointer means "not needed" and skips that work;
//   - all loops are OpenMP-threaded over the one pool (core/threads.h) and are
//     deterministic for a fixed thread count.
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/dtype.h"

// ---- kernel context -------------------------------------------------------------
// What the kernels keep between calls, passed to them as their first argument: the
// GEMMs' operand precision, oneDNN's engine, streams and primitive cache, the rounded
// weight copies and the operand buffers. Whoever runs kernels owns one (the model
// does; tests and benchmarks make their own), so nothing of it is process-wide.
//
// Operand precision (mixed precision, as autocast): GEMM inputs are rounded to it,
// products accumulate and outputs are stored in fp32.
//   BG_FP32  fp32 throughout;
//   BG_BF16  bf16 operands; on the native bf16 path oneDNN's bf16 GEMM (avx512_bf16 dot
//            products), on the fp32 path the fp32 GEMM on bf16-rounded floats (see
//            "bf16 path" below);
//   BG_FP16  IEEE fp16 operands: fp16's rounding and range (beyond 65504 is inf, which
//            dynamic loss scaling watches for). oneDNN 2.6 has no fp16 GEMM on CPUs
//            without AVX512-FP16, so the rounded operands go through the fp32 GEMM:
//            fp16's numerics at fp32's speed.
typedef struct kernel_ctx kernel_ctx;
kernel_ctx *kernel_ctx_create(bg_dtype precision);
void kernel_ctx_free(kernel_ctx *kc);  // NULL: nothing
bg_dtype kernel_ctx_precision(const kernel_ctx *kc);
// Applies to the calls that follow; the rounded weight copies of another precision are
// remade on use.
void kernel_ctx_set_precision(kernel_ctx *kc, bg_dtype precision);

// ---- bf16 path -----------------------------------------------------------------
// How bf16 GEMMs and flash-attention tiles run (bf16_path.c): with the CPU's bf16
// instructions (oneDNN's bf16 GEMM, which uses AMX where the CPU has it usable; vdpbf16ps
// tiles), or through the fp32 kernels on bf16-rounded operands (floats holding bf16
// values): the same numerics up to summation order, faster where bf16 dot products run
// below the fp32 FMA rate.
//   BF16_PATH_NATIVE       bf16 GEMMs and tiles ("native")
//   BF16_PATH_FP32         both through fp32 ("fp32")
//   BF16_PATH_NATIVE_GEMM  bf16 GEMMs (AMX), tiles through fp32 ("native-gemm")
//   BF16_PATH_AMX          bf16 GEMMs and tiles on AMX (head sizes of multiples of 32;
//                          other tiles through fp32) ("amx")
// Chosen from the CPU's identity by a table (bf16_path_for), never by timing.
typedef enum { BF16_PATH_NATIVE = 0, BF16_PATH_FP32 = 1, BF16_PATH_NATIVE_GEMM = 2, BF16_PATH_AMX = 3 } bf16_path;
typedef struct {
    char vendor[13];  // "GenuineIntel", "AuthenticAMD"
    int family, model;  // display family and model (extended fields folded in)
    int avx512f, avx512_bf16;
    int amx_bf16;  // AMX bf16 tiles, enabled by the OS
    int avx2_fma;  // AVX2 and FMA, the ymm state saved by the OS
} cpu_identity;
void cpu_identity_detect(cpu_identity *id);  // this CPU, by cpuid
bf16_path bf16_path_for(const cpu_identity *id);  // the table
const char *bf16_path_name(bf16_path p);      // "native", "fp32", "native-gemm", "amx"
int bf16_path_parse(const char *name, bf16_path *out);  // 0, or -1 for another name
// This process's path: BAGUALU_BF16_PATH=native|native-gemm|amx|fp32 when set (tests force a path so),
// else the table's for this CPU. select: BG_ERR (bg_error) for another value of the
// variable; default: the table's in that case.
int bf16_path_select(bf16_path *out);
// The check of a forced value env (set, not empty) that select applies, given whether
// oneDNN has bf16 GEMMs here (matmul_bf16_native_usable) and this process may use AMX
// tiles (fa_amx_usable): BG_ERR for another name, native(-gemm) or amx without them.
int bf16_path_forced(const char *env, int native_usable, int amx_usable, bf16_path *out);
int matmul_bf16_native_usable(void);
bf16_path bf16_path_default(void);
// The context's path (kernel_ctx_create takes bf16_path_default()); set applies to the
// calls that follow, as kernel_ctx_set_precision.
bf16_path kernel_ctx_bf16_path(const kernel_ctx *kc);
void kernel_ctx_set_bf16_path(kernel_ctx *kc, bf16_path path);

// ---- f32 GEMM ------------------------------------------------------------------
// Which GEMM runs f32 products (gemm_f32_choice.c): bagualu's own AVX-512 kernel
// (gemm_f32.h; "own") on Intel CPUs with AVX-512F, "mixed" on AMD Zen 5 (the own kernel
// for the forward and weights products, oneDNN for the data products), oneDNN's
// ("onednn") elsewhere; bf16 products always run in oneDNN. BAGUALU_GEMM=own|mixed|onednn
// forces one; select: BG_ERR for another value or for own/mixed without the own GEMM
// (AVX-512F, or AVX2 and FMA); default: the CPU's choice in that case. forced: select's
// check of a set value, given whether the own GEMM runs here (gemm_f32_supported).
// onednn-t: oneDNN, with the weights products on a transposed copy of dout where that
// is small (CPUs without AVX-512: oneDNN's AVX2 sgemm is slow on a transposed A).
typedef enum { GEMM_F32_ONEDNN = 0, GEMM_F32_OWN = 1, GEMM_F32_MIXED = 2, GEMM_F32_ONEDNN_T = 3 } gemm_f32_impl;
gemm_f32_impl gemm_f32_impl_for(const cpu_identity *id);  // the rule
const char *gemm_f32_impl_name(gemm_f32_impl g);
int gemm_f32_impl_select(gemm_f32_impl *out);
int gemm_f32_impl_forced(const char *env, int own_usable, gemm_f32_impl *out);
gemm_f32_impl gemm_f32_impl_default(void);
// The context's choice (kernel_ctx_create takes gemm_f32_impl_default()); set applies to
// the calls that follow (own needs gemm_f32_supported()).
gemm_f32_impl kernel_ctx_gemm_f32(const kernel_ctx *kc);
void kernel_ctx_set_gemm_f32(kernel_ctx *kc, gemm_f32_impl g);

// The format GEMM operands are held in ("rounded" operands, operand_store), from the
// precision and the bf16 path. The first three equal bg_dtype's values.
typedef enum {
    OPERAND_F32 = 0,          // fp32: plain floats
    OPERAND_BF16 = 1,         // bf16, native GEMMs: bf16 bits (uint16_t)
    OPERAND_F16_IN_F32 = 2,   // fp16: floats holding fp16 values
    OPERAND_BF16_IN_F32 = 3,  // bf16, fp32 path: floats holding bf16 values
} operand_format;
operand_format operand_format_of(bg_dtype precision, bf16_path path);
operand_format kernel_ctx_operand_format(const kernel_ctx *kc);
size_t operand_format_bytes(operand_format f);  // of one value

// ---- matmul (oneDNN, and the own f32 GEMM) ----------------------------------------------------------
// At reduced precision each weight (the `weight` argument) is rounded once and the
// copy reused until this is called: call it whenever weights may have changed (the
// model does at the start of every forward).
void matmul_weights_changed(kernel_ctx *kc);

// inp (M,K), weight (N,K), out (M,N): out = inp · weightᵀ (writes), at kc's precision.
// Primitives are cached by (K,N); M is a runtime dimension, so expert GEMMs whose
// row count changes every step reuse one primitive. M == 0 does nothing.
// Call from outside OpenMP parallel regions (asserted): oneDNN threads inside
// with the shared pool, and the cache is not locked.
void matmul_forward(kernel_ctx *kc, float *out, const float *inp, const float *weight, int M,
                    int K, int N);
// dinp (M,K) += dout · weight; dweight (N,K) += doutᵀ · inp.
void matmul_backward(kernel_ctx *kc, float *dinp, float *dweight, const float *dout,
                     const float *inp, const float *weight, int M, int K, int N);
// GEMM inputs that a producer already wrote in the operand format of kc's precision
// ("rounded": bf16 bits (uint16_t) under bf16, floats holding fp16 values under
// fp16, plain floats under fp32) skip the rounding pass the GEMM would otherwise make
// over them: the fused LM head's dlogits (103 M values per M1 step), the FFN's
// activation and the gradient of its pre-activation. An operand is either kind:
typedef struct {
    const void *data;
    int rounded;  // 0: floats, rounded on use
} matmul_operand;
static inline matmul_operand matmul_floats(const float *x) { return (matmul_operand){x, 0}; }
static inline matmul_operand matmul_rounded(const void *x) { return (matmul_operand){x, 1}; }
// Bytes of n values in the operand format of kc's precision.
size_t matmul_operand_bytes(const kernel_ctx *kc, size_t n);
// out (M,N) = inp · weightᵀ (writes), inp (M,K) either kind.
void matmul_forward_op(kernel_ctx *kc, float *out, matmul_operand inp, const float *weight, int M,
                       int K, int N);
// dinp (M,K) = dout · weight, written (MATMUL_WRITE: no zeroing pass, no read of the old
// values) or added (MATMUL_ADD); dweight (N,K) += doutᵀ · inp. dout (M,N) and inp (M,K)
// either kind; a float dout is rounded once for both products.
typedef enum { MATMUL_WRITE = 0, MATMUL_ADD = 1 } matmul_store;
void matmul_backward_op(kernel_ctx *kc, float *dinp, matmul_store dinp_store, float *dweight,
                        matmul_operand dout, matmul_operand inp, const float *weight, int M,
                        int K, int N);
// dweight (N,K) = doutᵀ · inp, written (MATMUL_WRITE: no zeroing pass by the caller) or
// added, alone.
void matmul_weights_grad_op(kernel_ctx *kc, float *dweight, matmul_store store, matmul_operand dout,
                            matmul_operand inp, int M, int K, int N);
// Room for n rounded values when kc's precision is bf16 (NULL otherwise), reused by the
// next GEMM call: the fused LM head writes its bf16 dlogits there.
void *matmul_bf16_dout_buffer(kernel_ctx *kc, size_t n);
// The same in fp32 whatever kc's precision: the router, whose logits decide where
// tokens go, stays in fp32.
void matmul_forward_fp32(kernel_ctx *kc, float *out, const float *inp, const float *weight, int M,
                         int K, int N);
void matmul_backward_fp32(kernel_ctx *kc, float *dinp, float *dweight, const float *dout,
                          const float *inp, const float *weight, int M, int K, int N);
// Concurrent GEMMs: matmul_forward/backward may be called from the threads of a parallel
// region (at most MATMUL_MAX_CONCURRENT threads), each call then running on its thread
// alone. matmul_concurrent(tasks): whether `tasks` independent GEMM chains are better
// run that way, one per thread, than one after the other with every GEMM threaded:
// outside a parallel region, with 2..MATMUL_MAX_CONCURRENT threads and at least two
// tasks per thread. matmul_concurrent_for: the rule at a given thread count (the
// planner's rank, whose cores may be a share of a node's).
enum { MATMUL_MAX_CONCURRENT = 64 };
int matmul_concurrent(int tasks);
int matmul_concurrent_for(int tasks, double threads);
// Releases kc's cached primitives, operand buffers and oneDNN engine; kc stays usable
// (they are remade on use).
void matmul_cache_clear(kernel_ctx *kc);
// Primitives kc created since it was made (a steady-state step must create none).
long matmul_primitives_created(const kernel_ctx *kc);
// Per-shape timing of kc's GEMMs (benchmarks): on = 1 zeroes the counts and starts
// timing every call; print writes one line per (kind, type, K, N) with calls, time,
// share and GFLOP/s.
void matmul_profile(kernel_ctx *kc, int on);
void matmul_profile_print(const kernel_ctx *kc, FILE *f);
// GEMM calls recorded for a replay (benchmarks: a step's GEMMs run alone, the same
// shapes in the same order). kind is matmul.c's (forward, data, weights, data written).
typedef struct {
    int kind, bf16, concurrent;  // concurrent: made from a parallel region's thread
    int M, K, N;
} matmul_call;
// Records kc's next calls into calls[0..cap) (NULL: stop recording); count says how
// many were made (capped at cap).
void matmul_trace(kernel_ctx *kc, matmul_call *calls, int cap);
int matmul_trace_count(const kernel_ctx *kc);
// The operands a replay of n calls reads and writes (inputs of small values, outputs
// per thread), allocated once so that repeated replays allocate nothing.
typedef struct {
    float *a, *b, *out;
    size_t out_floats;  // one thread's share of out
} matmul_replay_operands;
matmul_replay_operands matmul_replay_operands_alloc(const matmul_call *calls, int n);
void matmul_replay_operands_free(matmul_replay_operands *r);
// Runs the n calls on r's operands, each run of concurrent calls as one parallel loop
// (one call per thread), the others threaded as usual; returns the seconds taken and,
// in *cpu_s, the process's CPU seconds over the same span. Not counted by matmul_profile.
double matmul_replay(kernel_ctx *kc, const matmul_call *calls, int n, const matmul_replay_operands *r,
                     double *cpu_s);

// ---- mixed-precision operands -------------------------------------------------
// out = bf16(in), rounded to nearest even (NaN stays NaN, overflow is inf).
void cast_f32_to_bf16(uint16_t *out, const float *in, size_t n);
// out = in rounded to fp16 and back: fp16's precision and range, held in fp32. out may be in.
void round_f32_to_f16(float *out, const float *in, size_t n);
// out = in rounded to bf16 (as cast_f32_to_bf16) and held in fp32. out may be in.
void round_f32_to_bf16(float *out, const float *in, size_t n);
// out[i0 .. i0+n) = x[0 .. n) in operand format f (see matmul_operand), on the calling
// thread: for producers that compute a block of values and store it rounded, inside
// their own parallel loop.
void operand_store(void *out, size_t i0, const float *x, size_t n, operand_format f);

// ---- embeddings -------------------------------------------------------------
// out (N,C) = wte[tokens[n]] + wpe[n % T] (wpe may be NULL: RoPE models). N = B*T.
void embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                       int N, int T, int C);
// dwte (V,C) and dwpe (maxT,C) += scattered dout (N,C). Deterministic (no atomics).
void embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                        int N, int T, int C);

// ---- norms ------------------------------------------------------------------
// inp/out (N,C), mean/rstd (N), weight/bias (C); bias may be NULL.
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int N, int C, float eps);
void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int N, int C);
// out = inp * rstd * weight, rstd = 1/sqrt(mean(inp²)+eps)
void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                     int N, int C, float eps);
void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                      const float *weight, const float *rstd, int N, int C);

// ---- activations ------------------------------------------------------------
// The activations feed a GEMM and nothing else, so they write their outputs in the GEMM
// operand format f (operand_store), computed in fp32: under bf16 the same
// bits as computing in fp32 and rounding for the GEMM, without the pass that would do it.
// Backward WRITES its dinp here (its only consumer is the next GEMM), and does not add.
// GELU, tanh approximation (GPT-2's). inp (n) floats; out, dinp (n) rounded.
void gelu_forward(void *out, operand_format f, const float *inp, size_t n);
void gelu_backward(void *dinp, operand_format f, const float *dout, const float *inp, size_t n);
// SwiGLU: inp (N,2F) holds [gate | up] per row; out (N,F) = silu(gate) * up.
void swiglu_forward(void *out, operand_format f, const float *inp, int N, int F);
void swiglu_backward(void *dinp, operand_format f, const float *dout, const float *inp, int N,
                     int F);

// ---- rotary position embedding ----------------------------------------------
// Hugging Face (Llama/Mixtral) convention: dimension i pairs with i + hs/2.
// cos/sin tables (T, hs/2) for positions 0..T-1.
void rope_tables(float *cos_t, float *sin_t, int T, int hs, float theta);
// In place on qkv (B,T,C+2·NKV·hs): rotates the NH q heads and the NKV k heads; v untouched.
void rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int C, int NH,
                  int NKV);
// In place on dqkv: applies the inverse rotation to the q and k gradient parts.
void rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int C, int NH,
                   int NKV);

// ---- causal self-attention --------------------------------------------------
// qkv (B,T,C+2·KV): per token [q | k | v], q of NH heads of hs = C/NH, k and v of NKV
// heads (KV = NKV·hs; grouped-query attention when NKV < NH): query head h reads
// key/value head h / (NH/NKV). NKV divides NH.
// out (B,T,C) writes; att (B,NH,T,T) caches the softmax probabilities
// (entries above the diagonal are zero).
void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                       int NKV);
// dqkv (B,T,C+2·KV) +=, dK and dV of a head summed over its query heads; scratch
// (B,NH,T,T) is workspace the caller provides.
void attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                        const float *att, int B, int T, int C, int NH, int NKV);

// One query row against a key/value cache (generation, one token at a time): q (C) is
// the query at position t, k_cache and v_cache (T_max,KV) hold rows 0..t (RoPE already
// applied to q and the keys). out (C) writes attention_forward's row t for these
// inputs, up to float rounding; scores (NH,T_max) is workspace.
void attention_decode_forward(float *out, float *scores, const float *q, const float *k_cache,
                              const float *v_cache, int t, int T_max, int C, int NH, int NKV);

// The same attention, memory-efficient (FlashAttention): tiled with an online
// softmax, no T×T matrix anywhere. Caches only lse (B,NH,T), the log-sum-exp of each
// query row's scaled scores. out (B,T,C) and lse write. hs = C/NH <= 256. scratch is
// workspace the caller provides, of flash_attention_scratch_size floats (about 6·B·T·C).
// Under kc's precision BG_BF16 the tile products take bf16 operands and add in fp32, as
// the GEMMs (where the CPU has AVX512-BF16 and hs is even; fp32 otherwise); softmax in
// fp32.
void flash_attention_forward(const kernel_ctx *kc, float *out, float *lse, float *scratch,
                             const float *qkv, int B, int T, int C, int NH, int NKV);
// dqkv (B,T,C+2·KV) +=, recomputing the probabilities from qkv and lse tile by tile;
// out is the forward's output; scratch and precision as in the forward. Results do not
// depend on the thread count.
void flash_attention_backward(const kernel_ctx *kc, float *dqkv, float *scratch,
                              const float *dout, const float *qkv, const float *out,
                              const float *lse, int B, int T, int C, int NH, int NKV);
size_t flash_attention_scratch_size(int B, int T, int C, int NH, int NKV);
// The tile products of one flash_attention_forward (backward 0) or _backward over these
// shapes, alone: the same products at the same shapes in the same schedule, on qkv and
// dout (zeros, from the caller) and scratch (zeroed, flash_attention_scratch_size floats),
// without the softmax, masks, packing and write-back. Returns a sum of the results (0 on
// zeros), so that no product is dead code. bench_step --gemm-alone times it.
float flash_attention_products_alone(const kernel_ctx *kc, float *scratch, const float *qkv,
                                     const float *dout, int B, int T, int C, int NH, int NKV,
                                     int backward);

// ---- loss -------------------------------------------------------------------
// Cross-entropy fused with softmax. logits (N,V), targets (N), losses (N) writes,
// lse (N) caches log-sum-exp per row. Targets must lie in [0,V) (asserted).
void crossentropy_forward(float *losses, float *lse, const float *logits, const int *targets,
                          int N, int V);
// WRITES dlogits (N,V) = scale * (softmax(logits) - onehot(target)); dlogits may
// alias logits (saves the largest buffer of the step).
void crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                           const int *targets, float scale, int N, int V);

// ---- LM head fused with the loss ----------------------------------------------------
// The vocabulary projection logits = x·Wᵀ and the cross-entropy, chunk_rows rows at a
// time, so the (N,V) logits are never held: forward and backward in one pass.
// x (N,C), W (V,C), targets (N); losses and lse (N) write; dx (N,C) and dW (V,C) write
// the gradients of scale·Σ losses (NULL: not needed; never read); work is workspace of
// lmhead_workspace_floats(chunk_rows, C, V) floats. Equals matmul_forward +
// crossentropy_forward/backward + matmul_backward up to float rounding: the softmax's
// normalisation is applied to the GEMMs' (N,C) sides instead of the (N,V) gradient, so
// under bf16/fp16 the rounded operands are the unnormalised exponentials and k·x
// rather than the normalised gradient and x. Call from outside parallel regions.
size_t lmhead_workspace_floats(int chunk_rows, int C, int V);
void lmhead_xent_fused(kernel_ctx *kc, float *losses, float *lse, float *dx, float *dW,
                       const float *x, const float *W, const int *targets, float scale, int N,
                       int C, int V, float *work, int chunk_rows);
// The forward alone (evaluation): losses and lse (N) write; the same workspace.
void lmhead_xent_forward(kernel_ctx *kc, float *losses, float *lse, const float *x,
                         const float *W, const int *targets, int N, int C, int V, float *work,
                         int chunk_rows);

// ---- elementwise ------------------------------------------------------------
void residual_forward(float *out, const float *a, const float *b, size_t n);  // out = a + b
void vec_add(float *y, const float *x, size_t n);                            // y += x
void vec_zero(float *y, size_t n);

#endif
