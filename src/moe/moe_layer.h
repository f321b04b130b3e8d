#ifndef BG_MOE_LAYER_H
#define BG_MOE_LAYER_H
// The MoE FFN layer as three replaceable parts (Megatron-Core's split):
//   router (router.h): fp32 logits → softmax → top-k ids and weights, balance losses;
//   dispatcher (dispatch.h): stable expert-contiguous permutation, combine;
//   experts (ffn.h): one GEMM pair per expert over its contiguous rows.
// Dropless: every token reaches its k experts, so the permuted buffers always hold
// exactly N*k rows and can be sized once.
#include "core/arena.h"
#include "moe/ffn.h"

// Expert parallelism (BaGuaLu's layout): the ep_size ranks of ep_comm together hold
// all E experts, E/ep_size each, rank q the experts [q·E/ep_size, (q+1)·E/ep_size).
// Tokens go to the rank owning their expert and come back (all-to-all-v); the
// balance statistics are summed over stats_comm, every rank of the global batch,
// so the aux and z losses are those of the whole batch whatever the layout.
struct dist_comm;
typedef struct {
    struct dist_comm *ep_comm;
    struct dist_comm *stats_comm;
    int ep_size, ep_rank;
    int a2a_algo;       // enum dist_a2a_algo: flat or hierarchical
    int a2a_chunks;     // >1: the trip to the experts in chunks, each chunk's experts
                        // computed while the next chunk is still in flight
} moe_parallel;

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
    const moe_parallel *par;  // NULL: one process holds every expert
} moe_shape;

static inline int moe_local_experts(const moe_shape *s) { return s->par ? s->E / s->par->ep_size : s->E; }
static inline int moe_first_expert(const moe_shape *s) {
    return s->par ? s->par->ep_rank * moe_local_experts(s) : 0;
}

// Views into the parameter block, or into the gradient block (same layout).
typedef struct {
    float *gate;        // (E,C) router
    float *w_in;        // (El,U,C) this rank's experts' input projections, expert-major
    float *w_out;       // (El,C,F)     (El = E, or E/ep_size with expert parallelism)
    float *shared_in;   // (S,U,C), NULL when S == 0
    float *shared_out;  // (S,C,F)
} moe_params;

// Per-layer forward caches (pointers into the activation arena).
typedef struct {
    float *logits;      // (N,E) router logits, fp32
    float *probs;       // (N,E) softmax of logits
    float *lse;         // (N) logsumexp of logits (z-loss)
    int *topk_idx;      // (N,k) chosen experts, descending prob, ties → lower index
    float *topk_w;      // (N,k) gate weights used in the combine
    int *counts;        // (E) tokens routed to each expert in this batch
    int *offsets;       // (E+1) first row of each expert in the permuted buffers
    int *row_of;        // (N,k) permuted row of each (token, slot)
    int *token_of;      // (N*k) token of each permuted row
    float *x_perm;      // (N*k,C) expert inputs, expert-contiguous
    float *h;           // (N*k,U) expert pre-activations
    float *a;           // (N*k,F) expert activations
    float *y_perm;      // (N*k,C) expert outputs before the gate weights
    float *sh_h;        // (S,N,U) shared experts' caches
    float *sh_a;        // (S,N,F)
    double aux_loss;    // E * Σ_i f_i P_i, f_i = count_i/(N k), P_i = mean_t probs[t,i]
    double z_loss;      // mean_t logsumexp(logits_t)²
    // balance statistics of the whole batch (= counts and N without expert parallelism)
    int *counts_global; // (E)
    double n_tokens;
    double *stats;      // (2E+1) prob sums, counts, Σ lse²: one all-reduce
    // expert parallelism only (NULL otherwise); R = rows received this step
    int *recv_counts;   // (ep_size,El) rows from each source rank for each local expert
    int *send_rows;     // (ep_size)
    int *recv_rows;     // (ep_size)
    int *local_offsets; // (chunks·El+1) first row of each (chunk, local expert) in x_local
    int *chunk_rows;    // (chunks·El·ep_size) rows of each (chunk, local expert, source)
    int *recv_to_local; // (cap) row of x_local for each received row
    float *x_recv;      // (cap,C) received rows, source-major; reused for outputs going back
    float *x_local;     // (cap,C) the same rows, local-expert-major (the experts' input)
    float *y_local;     // (cap,C) expert outputs, local-expert-major
    int rows_local;     // R
    int ep_size;
} moe_acts;

// Backward workspace, shared by all MoE layers (pointers into the arena).
typedef struct {
    float *dy_perm;     // (N*k,C)
    float *dx_perm;     // (N*k,C)
    float *dh;          // (max(N*k, N),U)
    float *da;          // (max(N*k, N),F)
    float *dlogits;     // (N,E)
    float *dprobs;      // (N,E)
    float *dtopk_w;     // (N,k)
    float *ex_a, *ex_b; // (cap,C) expert-parallel exchange buffers, NULL otherwise
    float *ex_c;        // (cap,C) third buffer for the chunked exchange
} moe_scratch;

// cap: rows an expert-parallel rank may receive, N·k·ep_size (every token of
// every rank of its group could choose its experts: dropless means no capacity
// limit, so the buffers cover the worst case once and never grow).
// Lays out caches / workspace for N tokens in the arena (a measuring arena with
// capacity 0 sizes it; see core/arena.h).
void moe_acts_layout(moe_acts *acts, bg_arena *arena, const moe_shape *s, int N);
void moe_scratch_layout(moe_scratch *scr, bg_arena *arena, const moe_shape *s, int N);

// inp (N,C) → out (N,C) WRITES: Σ_slots w·expert(x) + Σ shared(x). Fills acts,
// including counts and both (unscaled) balance losses.
void moe_forward(kernel_ctx *kc, float *out, moe_acts *acts, const float *inp, const moe_params *p,
                 const moe_shape *s, int N);
// dinp (N,C) +=, grads += ; also backpropagates aux_coef·aux_loss + z_coef·z_loss
// (the layer's contribution to the total loss) into the router.
void moe_backward(kernel_ctx *kc, float *dinp, moe_params *grads, moe_scratch *scr,
                  const float *dout, const float *inp, const moe_acts *acts, const moe_params *p,
                  const moe_shape *s, int N);
#endif
