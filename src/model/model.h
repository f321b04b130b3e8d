#ifndef BG_MODEL_H
#define BG_MODEL_H
// The decoder-only MoE transformer: forward is a straight list of layer calls,
// backward the same list reversed.
#include "core/arena.h"
#include "comm/dist.h"
#include "kernels/kernels.h"
#include "model/acts.h"
#include "model/config.h"
#include "model/params.h"
#include "moe/moe_layer.h"

// Data + expert parallelism (BaGuaLu's hybrid). Every rank of `world` holds all
// dense parameters and reads its own N tokens of the global batch; the ep_size
// ranks of an expert-parallel group hold all experts between them; expert
// gradients reduce over the edp ranks holding the same experts. NULL: one process.
typedef struct {
    dist_layout *layout;
    int a2a_algo;               // enum dist_a2a_algo
    int a2a_chunks;             // >1: overlap both trips with the experts' compute
    int a2a_sync;               // 1: the same chunks without overlap
    // Dropless: the most expert rows a rank may receive in a step before the run stops
    // (model_forward fails); 0: 8x the balanced share N·k (N: the rank's tokens).
    long max_expert_rows;
} model_parallel;

// How attention is computed; both give the same results up to float rounding. Flash is
// the default at every length: it was the faster one at every T but the shortest
// (BENCHMARKS.md, "Figures behind design choices").
typedef enum {
    MODEL_ATTN_FLASH = 0,       // tiled, online softmax: keeps (B,NH,T), not (B,NH,T,T)
    MODEL_ATTN_NAIVE = 1,       // keeps the (B,NH,T,T) probabilities (a reference)
} model_attention;

// Rows per chunk of the fused LM head: enough rows for long GEMMs, few enough that a
// chunk's logits stay near the cores and the (N,V) logits are never held whole
// (BENCHMARKS.md, "Figures behind design choices", has the sizes that were compared).
enum { MODEL_LM_HEAD_CHUNK = 1024 };

// Activation recomputation: NONE keeps every block's caches for the backward; BLOCK
// keeps each block's input (and the per-layer routing results the metrics read) and
// recomputes the block's forward into one shared set of caches right before its
// backward: one more forward's compute for about one block's caches instead of L
// layers'. Gradients are bitwise the same.
typedef enum { MODEL_RECOMPUTE_NONE = 0, MODEL_RECOMPUTE_BLOCK = 1 } model_recompute;

// How the model computes, not what: model_init sets the defaults; change them before
// model_prepare, which lays out the activations for them.
typedef struct {
    model_attention attention;
    // Rows per chunk of the fused LM head and loss. A batch of N <= lm_head_chunk
    // tokens would be a single chunk, which saves no memory: it keeps whole logits
    // instead (unfused, m->acts.logits). 0: never fuse.
    int lm_head_chunk;
    // Evaluation: model_forward computes the loss only, not the fused LM head's
    // gradients (2 of its 3 GEMMs); model_backward must not follow. May change
    // between steps.
    int no_grad;
    // Multiplies the gradient of the objective (dynamic loss scaling for fp16): the
    // gradients backward leaves are loss_scale times the true ones. 1 = none.
    float loss_scale;
    // swipe on one process standing in for this many expert-parallel workers
    // (moe_routing.virtual_workers): the layout-equivalence tests compare a P-rank run
    // with it. 0: off.
    int swipe_virtual_workers;
    model_recompute recompute;
} model_options;

typedef struct {
    model_config cfg;
    model_options opt;
    // What the kernels keep between calls, the GEMMs' operand precision among it
    // (kernels.h; fp32 unless set with kernel_ctx_set_precision); everything else
    // computes in fp32.
    kernel_ctx *kernels;
    const model_parallel *par;  // NULL: one process
    uint64_t seed;              // model_init's seed (routers that draw numbers use it)
    long step;                  // optimizer steps taken; the trainer keeps it current
    moe_parallel moe_par;       // the MoE layers' view of par
    int first_expert, n_experts;  // routed experts held here (all of them on one process)
    param_table table;
    // The gates' state kept across steps (router.h's state_size bytes per layer, zero
    // at init, replicated on every rank; NULL when the gate keeps none): read it with
    // model_router_state, moved by model_router_after_step, saved in checkpoints.
    unsigned char *router_state;
    size_t router_state_bytes;  // per layer (dense layers' slots stay unused)
    float *params;              // the one parameter block
    float *grads;               // mirrors params
    model_params w, g;          // named views into params and grads
    bg_arena arena;             // all activations for (B,T)
    model_acts acts;
    // results of the last forward
    double loss;                // mean cross-entropy over this rank's tokens; in a parallel
                                // layout grad_sync_loss (train/) makes it the global batch's
    double loss_sum;            // Σ of this rank's token losses, in token order
    double aux_loss;            // mean over MoE layers of the unscaled Switch aux loss
    double z_loss;              // mean over MoE layers of the unscaled z-loss
    double router_objective;    // Σ_layers (aux_coef·aux + z_coef·z)
    double objective;           // loss + router_objective: what backward differentiates
    // Called by model_backward after each block's backward (NULL: none): layer_done 0
    // after the FFN block, 1 after the attention block, when layer `layer`'s gradients
    // (dense and experts) and those of every layer above it, the final norm's and the
    // LM head's are final. The trainer starts the gradient reduction there.
    void (*backward_hook)(void *ctx, int layer, int layer_done);
    void *backward_hook_ctx;
} model;

// Allocates the parameter and gradient blocks and initializes parameters from seed.
void model_init(model *m, const model_config *cfg, uint64_t seed);
// The same for one rank of a parallel layout (par NULL: model_init). Initial values
// equal those of the one-process model, tensor by tensor.
void model_init_parallel(model *m, const model_config *cfg, uint64_t seed,
                         const model_parallel *par);
// Lays out the activation arena for batches of (B,T); T <= max_position_embeddings.
// With a capacity, B·T must be whole routing groups (model_check_routing_groups).
void model_prepare(model *m, int B, int T);
// BG_ERR naming routing_group_tokens and the batch when a rank's B·T tokens are not
// whole routing groups (capacity is defined per group, which must not span ranks).
int model_check_routing_groups(const model_config *cfg, int B, int T);
// The MoE layers' expert rows on this rank: *bound the rows the buffers were sized
// for (0: dropless expert parallelism, grown on demand up to *limit), *hwm the most
// rows received in one forward so far, *alloc the rows the grown buffers hold.
void model_expert_rows(const model *m, long *bound, long *limit, long *hwm, long *alloc);
void model_free(model *m);

// inputs/targets (B,T) token ids < vocab_size (checked by the data layer).
// targets may be NULL: logits only (no loss), in m->acts.logits unless the LM head is
// fused (then model_logits). With the fused LM head and targets, the forward also
// computes the LM head's gradients for model_backward (unless opt.no_grad).
// BG_ERR, on every rank alike, when a dropless MoE layer would send some rank more than
// max_expert_rows rows (bg_error names layer, step, rows and remedies); the forward's
// results are unusable then.
int model_forward(model *m, const int *inputs, const int *targets);
// logits (rows,V) of token rows row0..row0+rows-1 of the last model_forward (the
// final norm's output is kept, so this works in every mode and after backward).
void model_logits(const model *m, float *logits, int row0, int rows);
void model_zero_grad(model *m);
// Accumulates d(objective)/d(params) into m->grads (this rank's tokens' part).
void model_backward(model *m);
// Routed tokens per expert for MoE layer `layer` in the last forward (NULL if dense).
const int *model_expert_counts(const model *m, int layer);
// Layer `layer`'s gate state (floats, e.g. the bias gate's per-expert biases), NULL
// when the layer is dense or its gate keeps none.
float *model_router_state(const model *m, int layer);
// After an optimizer step that changed the weights (not a skipped fp16 step): each MoE
// layer's gate updates its state from the last training forward (the bias gate's bias
// update). Call it before any other forward (evaluation) overwrites that forward's cache.
void model_router_after_step(model *m);
// The gates' state as checkpoint tensors, a table over the floats of m->router_state:
// one F32 tensor per MoE layer, model.layers.{l}.block_sparse_moe.gate.<state_name>
// (router.h), at layer l's slot. count 0 when the gate keeps none (topk). Free with
// param_table_free.
void model_router_state_table(param_table *t, const model_config *cfg);
// The activations for batches of (B,T) under opt, par the MoE layers' parallel view
// (NULL: one process; its sizes, not its communicators, are read). model_prepare runs
// it on a measuring arena (capacity 0) and then for real; the memory report measures
// it alone: a->layers NULL keeps no layer's pointers. Allocates nothing.
void model_acts_layout(model_acts *a, bg_arena *ar, const model_config *c,
                       const model_options *opt, const moe_parallel *par, int B, int T);
// The MoE layers' shape as the model runs them for sequences of T tokens.
moe_shape model_layer_moe_shape(const model_config *c, const model_options *opt,
                                const moe_parallel *par, int T);
// The MoE layers' shape for a config; par NULL on one process.
moe_shape model_moe_shape(const model_config *cfg, const moe_parallel *par);
// FLOPs of one training step per token: 6·(active matmul params) + attention.
double model_flops_per_token(const model_config *cfg, int T);
#endif
