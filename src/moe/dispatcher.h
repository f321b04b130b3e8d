#ifndef BG_MOE_DISPATCHER_H
#define BG_MOE_DISPATCHER_H
// The token dispatcher: how each token's k rows reach their experts and come back.
// One function table per way of doing it, chosen once (moe_dispatcher_for):
//   local     one process holds every expert: permute, experts, nothing to exchange;
//   alltoall  expert parallelism: permute, all-to-all-v to the experts' ranks, back;
//   chunked   both trips in chunks: each chunk's experts computed while the next
//             chunks are still on their way in, and each chunk's output sent home as
//             soon as it is computed (forward and backward alike); a2a_sync runs the
//             same chunks without overlap (the same bits, for measuring).
// The experts run inside the trip (a chunk's experts start as soon as it arrives), so
// the caller hands the dispatcher what to run on the rows: a moe_expert_pass.
#include <stdint.h>

#include "core/arena.h"
#include "moe/exchange.h"
#include "moe/moe_types.h"

// The local dispatch plan and permuted rows, per layer (pointers into the arena).
// At most N·k rows: offsets[E] of them, fewer when the capacity dropped some.
typedef struct {
    int *counts;        // (E) tokens routed to each expert on this rank
    int *offsets;       // (E+1) first row of each expert in the permuted buffers
    int *row_of;        // (N,k) permuted row of each (token, slot), -1: dropped
    int *token_of;      // (N*k) token of each permuted row
    float *x_perm;      // (N*k,C) expert inputs, expert-contiguous
    float *y_perm;      // (N*k,C) expert outputs before the gate weights
    // With a capacity (capacity_factor > 0; NULL otherwise):
    int *gate_idx;      // (N,k) the gate's ids before the drops, for the gate's backward
    float *gate_w;      // (N,k) its weights before the drops
    uint64_t *cap_keys; // (G·k) the drop policy's workspace
    long dropped;       // assignments dropped on this rank in the last forward
} moe_dispatch_cache;

// What the plan needs beyond the ids: to check, on every rank alike, the rows a
// dropless step would send to one rank against moe_parallel.max_rows.
typedef struct {
    const int *counts_global; // (E) the world's assignments per expert (the router's),
                              // bitwise the same on every rank; NULL: unknown
    struct dist_comm *world;  // every rank of the batch, so that all stop together;
                              // NULL: the expert-parallel group is the world
    long step;                // for the error message: steps taken before this one
    int layer;
} moe_plan_ctx;

// Backward workspace, shared by all MoE layers.
typedef struct {
    float *dy_perm;     // (N*k,C)
    float *dx_perm;     // (N*k,C)
} moe_dispatch_scratch;

// What the experts do with rows once they hold them: in and out are expert-major,
// expert e (of n_experts, this rank's) owning rows [offsets[e], offsets[e+1]).
// A chunked trip calls run once per chunk, with that chunk's offsets.
typedef struct {
    void (*run)(void *ctx, float *out, const float *in, const int *offsets, int n_experts);
    void *ctx;
    int accumulates;    // run does out += (a backward): the dispatcher zeroes out first
} moe_expert_pass;

typedef struct moe_dispatcher {
    const char *name;
    // Lays out the cache / workspace for N tokens (a measuring arena sizes them);
    // the exchange's parts stay NULL where the dispatcher has no exchange.
    void (*layout)(moe_dispatch_cache *dc, moe_exchange_cache *xc, bg_arena *arena,
                   const moe_shape *s, int N);
    void (*scratch_layout)(moe_dispatch_scratch *ds, moe_exchange_scratch *xs, bg_arena *arena,
                           const moe_shape *s, int N);
    // topk_idx (N,k) → where every row goes (a collective under expert parallelism).
    // BG_ERR, on every rank alike, when a dropless step would send some rank more
    // than s->par->max_rows rows (bg_error names the layer, step and remedies).
    int (*plan)(moe_dispatch_cache *dc, moe_exchange_cache *xc, const int *topk_idx,
                const moe_plan_ctx *pc, const moe_shape *s, int N);
    // inp (N,C): each token's k rows to their experts; pass (the experts' forward) runs
    // on them there and leaves its output rows for from_experts.
    void (*to_experts)(moe_dispatch_cache *dc, moe_exchange_cache *xc, const float *inp,
                       const moe_expert_pass *pass, const moe_shape *s, int N);
    // The experts' output rows back: dc->y_perm (offsets[E],C) WRITES, in permuted order.
    void (*from_experts)(moe_dispatch_cache *dc, moe_exchange_cache *xc, const moe_shape *s,
                         int N);
    // Backward of from_experts: ds->dy_perm (N·k,C) to the experts; pass (the experts'
    // backward, accumulating) runs on it there.
    void (*from_experts_backward)(moe_dispatch_scratch *ds, moe_exchange_scratch *xs,
                                  const moe_dispatch_cache *dc, const moe_exchange_cache *xc,
                                  const moe_expert_pass *pass, const moe_shape *s, int N);
    // Backward of to_experts: the experts' input gradients back, dinp (N,C) +=.
    void (*to_experts_backward)(float *dinp, moe_dispatch_scratch *ds, moe_exchange_scratch *xs,
                                const moe_dispatch_cache *dc, const moe_exchange_cache *xc,
                                const moe_shape *s, int N);
} moe_dispatcher;

extern const moe_dispatcher moe_dispatcher_local;
extern const moe_dispatcher moe_dispatcher_alltoall;
extern const moe_dispatcher moe_dispatcher_chunked;

// The dispatcher for a layout: local without one, else alltoall or (a2a_chunks > 1)
// chunked.
const moe_dispatcher *moe_dispatcher_for(const moe_parallel *par);
#endif
