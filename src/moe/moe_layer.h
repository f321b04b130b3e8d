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
} moe_shape;

// Views into the parameter block, or into the gradient block (same layout).
typedef struct {
    float *gate;        // (E,C) router
    float *w_in;        // (E,U,C) all experts' input projections, expert-major
    float *w_out;       // (E,C,F)
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
} moe_scratch;

// Lays out caches / workspace for N tokens in the arena (a measuring arena with
// capacity 0 sizes it; see core/arena.h).
void moe_acts_layout(moe_acts *acts, bg_arena *arena, const moe_shape *s, int N);
void moe_scratch_layout(moe_scratch *scr, bg_arena *arena, const moe_shape *s, int N);

// inp (N,C) → out (N,C) WRITES: Σ_slots w·expert(x) + Σ shared(x). Fills acts,
// including counts and both (unscaled) balance losses.
void moe_forward(float *out, moe_acts *acts, const float *inp, const moe_params *p,
                 const moe_shape *s, int N);
// dinp (N,C) +=, grads += ; also backpropagates aux_coef·aux_loss + z_coef·z_loss
// (the layer's contribution to the total loss) into the router.
void moe_backward(float *dinp, moe_params *grads, moe_scratch *scr, const float *dout,
                  const float *inp, const moe_acts *acts, const moe_params *p,
                  const moe_shape *s, int N);
#endif
