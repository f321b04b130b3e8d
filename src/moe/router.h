#ifndef BG_MOE_ROUTER_H
#define BG_MOE_ROUTER_H
// The router: token activations in; expert ids, gate weights, what its backward needs
// and the batch's balance statistics out. A gate is a function table (moe_router);
// a new gate is a new file defining one, plus its line in router.c's list.
//
// Today's gate, `topk` (router_topk.c): softmax, then top-k ("softmax, then top-k",
// as in Mixtral / DeepSeek-MoE / Qwen-MoE), with the Switch aux and z balance losses.
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "moe/moe_types.h"

// Where a routing decision happens. topk needs only comm; the rest is for gates that
// exchange counts (comm), draw noise or random experts per token (seed, step, layer,
// first_token: the same draws whatever the layout) or keep state across steps. A gate
// that balances per expert-parallel worker (swipe) finds its group in moe_shape.par.
typedef struct {
    struct dist_comm *comm;  // every rank of the global batch; NULL: one process
    uint64_t seed;           // the run's seed
    long step;               // optimizer steps taken before this forward
    int layer;               // the layer's index in the model
    long first_token;        // global index in the batch of this rank's first token
    int eval;  // evaluation: no noise, no balancing exchange (plain top-k)
    void *state;             // the router's state_size(s) bytes, kept across steps and
                             // in checkpoints; NULL when that size is 0
} moe_router_ctx;

// The router's forward cache (pointers into the activation arena).
typedef struct {
    float *logits;      // (N,E) router logits, fp32
    float *probs;       // (N,E) softmax of logits
    float *lse;         // (N) logsumexp of logits (z-loss)
    int *topk_idx;      // (N,k) chosen experts, descending prob, ties → lower index
    float *topk_w;      // (N,k) gate weights used in the combine
    // balance statistics of the whole batch (this rank's alone on one process)
    int *counts_global; // (E) tokens routed to each expert
    double n_tokens;
    double dropped_global;  // assignments dropped over the whole batch (capacity)
    // [0,E) prob sums, [E,2E) counts, [2E] Σ lse², [2E+1] Σ of the tokens' router
    // entropy (routing health): MOE_ROUTER_STATS(E), always all-reduced; then
    // [2E+2] Σ of the sequences' aux losses (aux_scope sequence) and from 2E+3 a gate's
    // own sums (noisy_topk's importance and load), reduced only when used. One all-reduce.
    double *stats;
    double aux_loss;    // E · Σ_i f_i P_i, f_i = count_i/(N k), P_i = mean_t probs[t,i]
                        // (aux_scope sequence: its mean over the sequences; noisy_topk:
                        // CV²(importance) + CV²(load))
    int *seq_counts;    // (N/T, E) each sequence's counts (aux_scope sequence), else NULL
    float *gate_cache;  // router->cache_floats(s, N) floats of the gate's own, else NULL
    double z_loss;      // mean_t logsumexp(logits_t)²
} moe_router_cache;

// Backward workspace (pointers into the arena).
typedef struct {
    float *dlogits;     // (N,E)
    float *dprobs;      // (N,E)
    float *gate_scratch;  // router->scratch_floats(s, N) floats of the gate's own, else NULL
} moe_router_scratch;

typedef struct moe_router {
    const char *name;
    // 1: every worker receives exactly N·k rows (the gate balances them itself), so
    // the expert-parallel receive buffers are sized N·k.
    int balanced_rows;
    // Bytes of state the gate keeps across steps (e.g. per-expert biases), 0: none.
    size_t (*state_size)(const moe_shape *s);
    // Optional (NULL: 0): floats of forward cache / backward workspace the gate needs
    // beyond the common ones, for N tokens.
    size_t (*cache_floats)(const moe_shape *s, int N);
    size_t (*scratch_floats)(const moe_shape *s, int N);
    // inp (N,C), gate (E,C) → the cache: ids, weights, statistics and (unscaled) losses.
    void (*forward)(kernel_ctx *kc, moe_router_cache *c, const moe_router_ctx *ctx, const float *inp,
                    const float *gate, const moe_shape *s, int N);
    // dtopk_w (N,k): the loss gradient of topk_w. Adds the gate weights' gradient and
    // that of aux_coef·aux + z_coef·z: dinp (N,C) += (NULL skips), dgate (E,C) +=.
    void (*backward)(kernel_ctx *kc, float *dinp, float *dgate, moe_router_scratch *scr,
                     const float *dtopk_w, const float *inp, const moe_router_cache *c,
                     const moe_router_ctx *ctx, const float *gate, const moe_shape *s, int N);
    // Optional (NULL: none). Called once per optimizer step that updated the weights,
    // for every MoE layer, with the cache of that step's training forward: the gate's
    // state moves by the step's global statistics (the same on every rank, so the
    // state stays replicated bit for bit).
    void (*after_step)(void *state, const moe_router_cache *c, const moe_shape *s);
    // A gate with state keeps floats (state_size a multiple of sizeof(float)), saved in
    // checkpoints as one F32 tensor per MoE layer named
    // model.layers.{l}.block_sparse_moe.gate.<state_name>; NULL when it keeps none.
    const char *state_name;
} moe_router;

extern const moe_router moe_router_topk;
extern const moe_router moe_router_swipe;  // router_swipe.c, SWIPE balancing (swipe.h)
// DeepSeek-V3's auxiliary-loss-free balancing (router_bias.c): softmax or sigmoid
// scores s; the experts are the top-k of s + b (b: a per-expert bias, the gate's
// state), the gate weights the chosen s; after each step b_i += rate·sign(mean − load_i).
extern const moe_router moe_router_bias;
extern const moe_router moe_router_switch;   // router_switch.c
extern const moe_router moe_router_gshard;   // router_gshard.c
extern const moe_router moe_router_noisy_topk;  // router_noisy.c
// The gate of that name, NULL if none.
const moe_router *moe_router_find(const char *name);

// Lays out the cache / workspace for N tokens (a measuring arena with capacity 0
// sizes it; see core/arena.h).
void moe_router_cache_layout(moe_router_cache *c, bg_arena *arena, const moe_shape *s, int N);
void moe_router_scratch_layout(moe_router_scratch *scr, bg_arena *arena, const moe_shape *s,
                               int N);

// For gates that cache probs and lse: counts from topk_idx, then the statistics summed
// over ctx->comm (a fixed rank order: the same bits on every rank), counts_global,
// n_tokens and both losses.
// Dropped assignments (topk_idx -1) are not counted. aux_scope sequence: aux_loss is
// the mean over every sequence of the global batch of E·Σ_i f_i P_i within it
// (DeepSeek-V3's sequence-wise balance loss), the sequences being routing.group_tokens
// long (0: the rank's N tokens are one).
#define MOE_ROUTER_STATS(E) (2 * (size_t)(E) + 2)
// Where a gate's own sums start in stats (moe_router_balance_statistics_ex).
#define MOE_ROUTER_STATS_EXTRA(E) (2 * (size_t)(E) + 3)
// Doubles of the cache's stats array: the common sums and room for a gate's own.
#define MOE_ROUTER_STATS_ALLOC(E) (4 * (size_t)(E) + 3)
void moe_router_balance_statistics(moe_router_cache *c, const moe_router_ctx *ctx,
                                   const moe_shape *s, int N);
// Σ over the batch's tokens of −Σ_i p log p of the router's probabilities, from the
// statistics of the last forward (what moe_router_balance_statistics summed).
double moe_router_entropy_sum(const moe_router_cache *c, const moe_shape *s);
// The same, all-reducing n_extra more sums the gate wrote at stats[MOE_ROUTER_STATS_EXTRA(E)...] first.
void moe_router_balance_statistics_ex(moe_router_cache *c, const moe_router_ctx *ctx,
                                      const moe_shape *s, int N, int n_extra);
// Tokens per balance-loss sequence: routing.group_tokens, or N when that is 0.
int moe_router_seq_tokens(const moe_shape *s, int N);

// A gate's random stream for one token: splitmix64 seeded by a hash of (seed, step,
// layer, purpose, global token index), so every draw is the same whatever the layout
// or the thread count; a gate draws a token's values from it in a fixed order (e.g.
// expert by expert).
enum { MOE_RNG_JITTER = 1, MOE_RNG_GSHARD = 2, MOE_RNG_NOISY = 3 };
void moe_router_token_rng(bg_rng *r, const moe_router_ctx *ctx, int purpose, long token);

// gshard's random routing: keep the second expert (gate weight w2, renormalized over
// the pair) for the uniform draw u iff u < 2·w2.
int moe_router_gshard_keeps(float w2, double u);
// noisy_topk's noise scale softplus(r) + 0.01 (tensor2tensor's noise_epsilon).
float moe_router_noise_stddev(float r);

// --- shared steps of the gates (router_topk.c, router_groups.c) ---

// One row: p (E) = softmax(l), *lse = logsumexp(l) (stable: max-shifted, summed in double).
void moe_router_softmax_row(float *p, float *lse, const float *l, int E);
// One token's k experts in descending `key` order, ties → the lower index. With
// routing groups (r != NULL, groups > 1, topk_groups < groups) only experts of the
// topk_groups groups with the highest group score compete: a group's score is the sum
// of its two highest `score` values (its one value for one-expert groups), as
// DeepSeek-V3's n_group / topk_group routing, ties → the lower group. key and score
// order the experts alike for softmax gates (logits / probabilities).
void moe_router_select_row(int *idx, const float *key, const float *score, int E, int k,
                           const moe_routing *r);
// Whether r limits routing to some groups.
int moe_router_group_limited(const moe_routing *r);
// moe_router_forward with the group limit of r (NULL: none).
void moe_router_forward_routed(kernel_ctx *kc, float *logits, float *probs, float *lse,
                               int *topk_idx, float *topk_w, const float *inp, const float *gate,
                               int N, int C, int E, int k, int norm_topk_prob,
                               const moe_routing *r);
// Backward split in its steps (moe_router_backward_global is the four in a row):
// dprobs (N,E) = d(aux_coef·aux)/dprobs (WRITE), per batch or per sequence as the
// cache's statistics were computed;
void moe_router_aux_dprobs(float *dprobs, const moe_router_cache *c, const moe_shape *s, int N);
// dprobs += the gate weights' term (weights = probs at topk_idx, renormalized when norm);
void moe_router_weights_dprobs(float *dprobs, const float *dtopk_w, const float *probs,
                               const int *topk_idx, const float *topk_w, int N, int E, int k,
                               int norm_topk_prob);
// dlogits (N,E) = softmax backward of dprobs plus z_coef·z's term (WRITE).
void moe_router_softmax_dlogits(float *dlogits, const float *dprobs, const float *probs,
                                const float *lse, double n_tokens, float z_coef, int N, int E);
// topk's whole backward from its cache (aux_scope batch or sequence).
void moe_router_backward_cached(kernel_ctx *kc, float *dinp, float *dgate, moe_router_scratch *scr,
                                const float *dtopk_w, const float *inp, const moe_router_cache *c,
                                const float *gate, const moe_shape *s, int N, int norm_topk_prob);

// --- topk's steps, public so tests can run them alone ---

// inp (N,C), gate (E,C) → logits (N,E) = inp · gateᵀ in fp32, probs (N,E) = softmax,
// lse (N) = logsumexp(logits), topk_idx (N,k) the k largest in descending order with
// ties going to the LOWER expert index, topk_w (N,k) their probabilities, renormalized
// to sum to 1 when norm_topk_prob. All WRITE.
void moe_router_forward(kernel_ctx *kc, float *logits, float *probs, float *lse, int *topk_idx,
                        float *topk_w, const float *inp, const float *gate, int N, int C,
                        int E, int k, int norm_topk_prob);
// The part after the GEMM (softmax, top-k, weights); separate so it can be run on
// crafted logits, e.g. exact ties.
void moe_router_softmax_topk(float *probs, float *lse, int *topk_idx, float *topk_w,
                             const float *logits, int N, int E, int k, int norm_topk_prob);

// Balance losses, unscaled, in double (they are tiny sums reported to the user):
//   aux = E · Σ_i f_i · P_i, f_i = counts[i] / (N·k) (all k slots), P_i = mean_t probs[t,i];
//   z   = mean_t lse[t]².
// counts (E) are the dispatch plan's tokens per expert. N == 0 gives 0 for both.
void moe_router_balance_losses(double *aux_loss, double *z_loss, const float *probs,
                               const float *lse, const int *counts, int N, int E, int k);
// The same losses split in two so ranks can add their statistics first:
// prob_sum (E) = Σ_t probs[t,i], lse2_sum = Σ_t lse[t]² over this rank's N tokens;
// then the losses from the (world-)summed statistics, counts and token count.
void moe_router_stat_sums(double *prob_sum, double *lse2_sum, const float *probs,
                          const float *lse, int N, int E);
void moe_router_losses_from_sums(double *aux_loss, double *z_loss, const double *prob_sum,
                                 double lse2_sum, const int *counts, double n_tokens, int E,
                                 int k);

// Backward of the gate weights plus aux_coef·aux + z_coef·z, with the chosen experts
// (and so counts / f_i) held fixed: top-k is piecewise constant.
// dtopk_w (N,k) is the loss gradient of topk_w; dinp (N,C) += (NULL skips),
// dgate (E,C) +=; dlogits, dprobs (N,E) are workspace (written).
void moe_router_backward(kernel_ctx *kc, float *dinp, float *dgate, float *dlogits, float *dprobs,
                         const float *dtopk_w, const float *inp, const float *gate,
                         const float *probs, const float *lse, const int *topk_idx,
                         const float *topk_w, const int *counts, int N, int C, int E, int k,
                         int norm_topk_prob, float aux_coef, float z_coef);
// The same for a rank holding N of the n_tokens tokens of a global batch: counts (E)
// are the global counts, and the balance losses average over n_tokens.
void moe_router_backward_global(kernel_ctx *kc, float *dinp, float *dgate, float *dlogits, float *dprobs,
                                const float *dtopk_w, const float *inp, const float *gate,
                                const float *probs, const float *lse, const int *topk_idx,
                                const float *topk_w, const int *counts, double n_tokens, int N,
                                int C, int E, int k, int norm_topk_prob, float aux_coef,
                                float z_coef);
#endif
