#ifndef BG_MOE_TYPES_H
#define BG_MOE_TYPES_H
// What every part of the MoE layer (router, dispatcher, experts) agrees on: the
// layer's shape, its parameter views and the expert-parallel layout. A header of its
// own so that the parts depend on it and not on each other.
#include <stddef.h>

#include "moe/ffn.h"

struct dist_comm;
struct moe_router;
struct moe_dispatcher;

// Expert parallelism (BaGuaLu's layout): the ep_size ranks of ep_comm together hold
// all E experts, E/ep_size each, rank q the experts [q·E/ep_size, (q+1)·E/ep_size).
// Tokens go to the rank owning their expert and come back (all-to-all-v).
typedef struct {
    struct dist_comm *ep_comm;
    int ep_size, ep_rank;
    int a2a_algo;       // enum dist_a2a_algo: flat or hierarchical
    int a2a_chunks;     // >1: both trips in chunks, overlapped with the experts' compute
    int a2a_sync;       // 1: the same chunks without overlap (each trip waits whole)
    // How rows reach the experts; moe_dispatcher_for(this) once the fields above are
    // set (dispatcher.h).
    const struct moe_dispatcher *dispatcher;
    // Dropless: the most rows this rank's experts may receive in one step (the
    // trainer's --max-expert-rows); a step needing more stops the run on every rank.
    long max_rows;
} moe_parallel;

// How tokens are routed beyond the gate's own rule (the config's routing keys).
typedef enum { MOE_SCORE_SOFTMAX = 0, MOE_SCORE_SIGMOID = 1 } moe_score;
typedef enum { MOE_AUX_BATCH = 0, MOE_AUX_SEQUENCE = 1 } moe_aux_scope;
typedef enum { MOE_DROP_PROBABILITY = 0, MOE_DROP_POSITION = 1 } moe_drop_policy;
typedef struct {
    moe_score score;          // router scores: softmax over experts, or per-expert sigmoid
    float jitter;             // multiplicative input noise 1 ± jitter (switch), 0: none
    float bias_update_rate;   // bias gate: step of the per-expert bias update
    int groups, topk_groups;  // experts in `groups` contiguous groups, a token's experts
                              // from at most `topk_groups` of them (1, 1: no limit)
    moe_aux_scope aux_scope;  // balance loss over the batch or per sequence
    // Capacity: 0 = dropless; else each expert takes at most ceil(cf·G·k/E) of a routing
    // group's G·k assignments, and the overflow is dropped by drop_policy.
    float capacity_factor;
    moe_drop_policy drop_policy;
    int group_tokens;         // G: tokens per routing group (a sequence unless configured);
                              // a rank's N tokens are always whole groups
    int virtual_workers;  // swipe on one process: split the batch into this many workers (tests)
} moe_routing;

typedef struct {
    int C;              // hidden size
    int E;              // routed experts
    int k;              // experts per token
    int F;              // expert (and shared expert) intermediate size
    int S;              // shared experts (always on), 0 = none
    ffn_act act;
    int norm_topk_prob; // renormalize the k gate weights to sum to 1
    float aux_coef;     // Switch aux loss coefficient
    float z_coef;       // router z-loss coefficient
    const moe_parallel *par;         // NULL: one process holds every expert
    const struct moe_router *router; // the gate (router.h), e.g. &moe_router_topk
    moe_routing routing;
} moe_shape;

static inline int moe_local_experts(const moe_shape *s) { return s->par ? s->E / s->par->ep_size : s->E; }
static inline int moe_first_expert(const moe_shape *s) {
    return s->par ? s->par->ep_rank * moe_local_experts(s) : 0;
}

// The worst case of the rows the experts of this rank may see: N·k on one process;
// with expert parallelism every source rank may send each token's rows for up to
// min(k, El) local experts. Grows with EP, so buffers are sized from a tighter bound
// (capacity.h) or from the rows actually exchanged; this only caps them.
static inline size_t moe_expert_rows_cap(const moe_shape *s, int N) {
    if (!s->par) return (size_t)N * s->k;
    int El = moe_local_experts(s), per_token = s->k < El ? s->k : El;
    return (size_t)N * per_token * s->par->ep_size;
}

// Views into the parameter block, or into the gradient block (same layout).
typedef struct {
    float *gate;        // (E,C) router; noisy_topk: (2E,C) = [gate ; gate_noise]
    float *w_in;        // (El,U,C) this rank's experts' input projections, expert-major
    float *w_out;       // (El,C,F)     (El = E, or E/ep_size with expert parallelism)
    float *shared_in;   // (S,U,C), NULL when S == 0
    float *shared_out;  // (S,C,F)
} moe_params;
#endif
