#ifndef BG_MODEL_BLOCK_H
#define BG_MODEL_BLOCK_H
// A transformer layer is two blocks, each a norm, a branch and a residual add:
//   attention block     x2 = x + o_proj(attention(rope(qkv_proj(norm1(x)))))
//   feed-forward block  x_next = x2 + ffn(norm2(x2)), the FFN dense or MoE.
// model_forward runs them over whole sequences and gen_step over one row with a
// key/value cache; only the attention core differs, so the caller supplies it.
// Backward of each block sits right below its forward.
#include "kernels/kernels.h"
#include "model/acts.h"
#include "model/config.h"
#include "model/params.h"
#include "moe/moe_layer.h"

// The attention core of layer `layer`: causal softmax(q·kᵀ/√hs)·v of every head.
// forward reads qkv (N,W) after RoPE (W = model_qkv_width: q, then k and v of the kv
// heads) and writes atty (N,C); backward adds to dqkv (N,W) from datty (N,C), given the forward's qkv and atty. backward may be NULL
// when no backward runs (generation). ctx is the caller's, passed through.
typedef struct {
    void (*forward)(void *ctx, int layer, float *atty, const float *qkv);
    void (*backward)(void *ctx, int layer, float *dqkv, const float *datty, const float *qkv,
                     const float *atty);
    void *ctx;
} block_attention_core;

// The config's norm (LayerNorm or RMSNorm) over N rows of C = hidden_size.
// out (N,C), mean/rstd (N) (mean unused by RMSNorm), inp (N,C); b unused by RMSNorm.
void block_norm_forward(const model_config *c, float *out, float *mean, float *rstd,
                        const float *inp, const float *w, const float *b, int N);
// dinp (N,C) +=, dw/db (C) +=.
void block_norm_backward(const model_config *c, float *dinp, float *dw, float *db,
                         const float *dout, const float *inp, const float *w, const float *mean,
                         const float *rstd, int N);

// N = B·T rows: positions 0..T-1 of B sequences. rope_cos/rope_sin (T,hs/2) hold the
// rotations of those positions (unused without RoPE). Reads la->x; writes la->x2 and
// keeps ln1, ln1_mean, ln1_rstd, qkv (after RoPE) and atty for backward. la->x2 NULL:
// only those caches (recomputation), no o_proj and no residual.
void block_attention_forward(kernel_ctx *kc, layer_acts *la, const layer_params *lp, const model_config *c,
                             const block_attention_core *core, int layer, const float *rope_cos,
                             const float *rope_sin, int B, int T);
// a->d_resid (N,C): d(x2) in, d(x) out (the residual passes it through, the branch
// adds through the norm). gp +=. a's d_atty, d_qkv and d_ln are workspace.
void block_attention_backward(kernel_ctx *kc, model_acts *a, layer_params *gp, const layer_acts *la,
                              const layer_params *lp, const model_config *c,
                              const block_attention_core *core, int layer);

// Reads la->x2; writes x_next (N,C) (the next layer's input) and keeps ln2, ln2_mean,
// ln2_rstd, the FFN's caches (ffn_h and ffn_a, or moe) and ffn_out for backward.
// x_next NULL: no residual (recomputation needs only the caches).
// rc: the MoE router's view of this layer and batch (unused by a dense FFN).
// BG_ERR when the MoE layer's dispatch stopped the step (moe_forward).
int block_ffn_forward(kernel_ctx *kc, float *x_next, layer_acts *la, const layer_params *lp,
                      const model_config *c, const moe_shape *ms, const moe_router_ctx *rc,
                      int N);
// a->d_resid (N,C): d(x_next) in, d(x2) out. gp +=. a's d_ln, d_ffn_a, d_ffn_h and
// moe_scr are workspace.
void block_ffn_backward(kernel_ctx *kc, model_acts *a, layer_params *gp, const layer_acts *la,
                        const layer_params *lp, const model_config *c, const moe_shape *ms,
                        const moe_router_ctx *rc);
#endif
