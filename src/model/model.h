#ifndef BG_MODEL_H
#define BG_MODEL_H
// The decoder-only MoE transformer: forward is a straight list of layer calls,
// backward the same list reversed.
#include "core/arena.h"
#include "dist/dist.h"
#include "model/config.h"
#include "model/params.h"
#include "moe/moe_layer.h"

typedef struct {
    float *x;                   // (N,C) residual stream entering the layer
    float *ln1, *ln1_mean, *ln1_rstd;
    float *qkv;                 // (N,3C), after RoPE when used
    float *att;                 // (B,NH,T,T) softmax probabilities
    float *atty;                // (N,C) attention output before o_proj
    float *x2;                  // (N,C) residual after attention
    float *ln2, *ln2_mean, *ln2_rstd;
    float *ffn_h, *ffn_a;       // dense FFN caches (N,U), (N,F)
    moe_acts moe;               // MoE caches
    float *ffn_out;             // (N,C)
} layer_acts;

typedef struct {
    int B, T, N;
    layer_acts *layers;         // (L)
    float *x_final;             // (N,C) residual stream after the last layer
    float *lnf, *lnf_mean, *lnf_rstd;
    float *logits;              // (N,V); backward overwrites it with dlogits
    float *losses, *lse;        // (N)
    int *inputs, *targets;      // (N) copies of the batch
    float *rope_cos, *rope_sin; // (T,hs/2)
    // backward workspace, shared by all layers
    float *d_resid;             // (N,C) gradient of the residual stream
    float *d_ln;                // (N,C)
    float *d_qkv;               // (N,3C)
    float *d_atty;              // (N,C)
    float *d_att_scratch;       // (B,NH,T,T)
    float *d_ffn_h, *d_ffn_a;   // (N,U), (N,F)
    moe_scratch moe_scr;
} model_acts;

// Data + expert parallelism (BaGuaLu's hybrid). Every rank of `world` holds all
// dense parameters and reads its own N tokens of the global batch; the ep_size
// ranks of an expert-parallel group hold all experts between them; expert
// gradients reduce over the edp ranks holding the same experts. NULL: one process.
typedef struct {
    dist_layout *layout;
    int a2a_algo;               // enum dist_a2a_algo
    int a2a_chunks;             // >1: overlap the trip to the experts with their compute
} model_parallel;

typedef struct {
    model_config cfg;
    const model_parallel *par;  // NULL: one process
    moe_parallel moe_par;       // the MoE layers' view of par
    int first_expert, n_experts;  // routed experts held here (all of them on one process)
    param_table table;
    float *params;              // the one parameter block
    float *grads;               // mirrors params
    model_params w, g;          // named views into params and grads
    bg_arena arena;             // all activations for (B,T)
    model_acts acts;
    // results of the last forward
    double loss;                // mean cross-entropy (over the global batch)
    double aux_loss;            // mean over MoE layers of the unscaled Switch aux loss
    double z_loss;              // mean over MoE layers of the unscaled z-loss
    double objective;           // loss + Σ_layers (aux_coef·aux + z_coef·z): what backward differentiates
} model;

// Allocates the parameter and gradient blocks and initializes parameters from seed.
void model_init(model *m, const model_config *cfg, uint64_t seed);
// The same for one rank of a parallel layout (par NULL: model_init). Initial values
// equal those of the one-process model, tensor by tensor.
void model_init_parallel(model *m, const model_config *cfg, uint64_t seed,
                         const model_parallel *par);
// Lays out the activation arena for batches of (B,T); T <= max_position_embeddings.
void model_prepare(model *m, int B, int T);
void model_free(model *m);

// inputs/targets (B,T) token ids < vocab_size (checked by the data layer).
// targets may be NULL: logits only (no loss).
void model_forward(model *m, const int *inputs, const int *targets);
void model_zero_grad(model *m);
// Accumulates d(objective)/d(params) into m->grads (this rank's tokens' part).
void model_backward(model *m);
// Sums gradients across ranks: dense over every rank, experts over their replicas
// (nothing on one process). After it every rank holds the global batch's gradient.
void model_reduce_grads(model *m);
// Global L2 norm of the (reduced) gradient, the same on every rank.
double model_grad_norm(model *m);
// Routed tokens per expert for MoE layer `layer` in the last forward (NULL if dense).
const int *model_expert_counts(const model *m, int layer);
// FLOPs of one training step per token: 6·(active matmul params) + attention.
double model_flops_per_token(const model_config *cfg, int T);
#endif
