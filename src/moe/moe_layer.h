#ifndef BG_MOE_LAYER_H
#define BG_MOE_LAYER_H
// The MoE FFN layer as three replaceable parts (Megatron-Core's split):
//   router (router.h): scores → expert ids and weights, balance statistics and losses;
//   dispatcher (dispatcher.h): the rows' trip to their experts (permute, exchange) and
//     back, combined with the gate weights here;
//   experts (experts.h): one GEMM pair per expert over its contiguous rows;
// plus the always-on shared experts. Between the gate and the dispatcher, a capacity
// (capacity.h) may drop assignments. The rows this rank's experts receive are bounded
// by the capacity, by a balanced gate or (one process) by N·k, and their buffers sized
// once; dropless expert parallelism grows them to the rows actually received, up to
// moe_parallel.max_rows.
#include "core/arena.h"
#include "moe/dispatcher.h"
#include "moe/exchange.h"
#include "moe/moe_types.h"
#include "moe/router.h"

// The experts' forward cache: routed experts over the rows the dispatcher gives them
// (rows_alloc rows, moe_expert_rows_bound or grown), shared experts over all N tokens.
typedef struct {
    const float *x;     // (rows,C) the rows the routed experts read (the dispatcher's buffer)
    float *h;           // (rows_alloc,U) routed experts' pre-activations
    float *a;           // (rows_alloc,F) their activations
    float *sh_h;        // (S,N,U) shared experts' caches, NULL when S == 0
    float *sh_a;        // (S,N,F)
    int grown;          // 1: h and a may grow with the exchange's buffers
    int heap;           // 1: they are the heap's now
    size_t rows_alloc;
    long rows_hwm;      // the most rows the experts received in one forward so far
} moe_expert_cache;

// Per-layer forward caches, one part per stage (pointers into the activation arena).
typedef struct {
    moe_router_cache router;      // ids, weights, balance statistics, losses
    moe_dispatch_cache dispatch;  // local plan and permuted rows
    moe_exchange_cache exchange;  // expert parallelism's plan and buffers (NULL otherwise)
    moe_expert_cache experts;
} moe_acts;

// Backward workspace, shared by all MoE layers (pointers into the arena).
typedef struct {
    moe_router_scratch router;
    float *dtopk_w;               // (N,k) the combine's gradient of the gate weights
    moe_dispatch_scratch dispatch;
    moe_exchange_scratch exchange;
    float *dh;                    // (rows_alloc,U) routed and shared experts
    float *da;                    // (rows_alloc,F)
    int grown;                    // 1: dh and da may grow in the backward
    int heap;                     // 1: they are the heap's now
    size_t rows_alloc;            // >= N and >= the routed rows
} moe_scratch;

// Lays out caches / workspace for N tokens in the arena (a measuring arena with
// capacity 0 sizes it; see core/arena.h).
void moe_acts_layout(moe_acts *acts, bg_arena *arena, const moe_shape *s, int N);
void moe_scratch_layout(moe_scratch *scr, bg_arena *arena, const moe_shape *s, int N);
// What one layer's forward leaves for the metrics, the routing health and the gate's
// after_step, apart from its caches: the router's counts_global, stats and scalars
// (aux and z losses, tokens, drops), the dispatch's drops and the exchange's send_rows.
// Activation recomputation keeps this per layer and the caches once (model/acts.h).
// keep_layout lays out those arrays (every other pointer NULL); keep copies them.
void moe_acts_keep_layout(moe_acts *keep, bg_arena *arena, const moe_shape *s);
void moe_acts_keep(moe_acts *keep, const moe_acts *from, const moe_shape *s);
// Heap bytes of dropless expert parallelism's grown buffers when they hold `rows` rows:
// n_caches layers' exchange row buffers and expert caches, plus the one backward
// workspace (the exchange's and the experts'). The memory report's bound.
size_t moe_grown_bytes(const moe_shape *s, size_t rows, int n_caches);
// Frees the buffers grown on the heap (dropless expert parallelism); the arena's stay.
void moe_acts_free(moe_acts *acts);
void moe_scratch_free(moe_scratch *scr);

// inp (N,C) → out (N,C) WRITES: Σ_slots w·expert(x) + Σ shared(x). Fills acts,
// including the balance statistics, both (unscaled) balance losses and the drops
// (router.dropped_global; dispatch.dropped on this rank). BG_ERR, on every rank at
// the same layer, when a dropless step would send a rank more than
// s->par->max_rows rows (bg_error says which and what to do); out is then unusable.
int moe_forward(kernel_ctx *kc, float *out, moe_acts *acts, const float *inp,
                const moe_params *p, const moe_router_ctx *rc, const moe_shape *s, int N);
// dinp (N,C) +=, grads += ; also backpropagates aux_coef·aux_loss + z_coef·z_loss
// (the layer's contribution to the total loss) into the router.
void moe_backward(kernel_ctx *kc, float *dinp, moe_params *grads, moe_scratch *scr,
                  const float *dout, const float *inp, const moe_acts *acts, const moe_params *p,
                  const moe_router_ctx *rc, const moe_shape *s, int N);
#endif
