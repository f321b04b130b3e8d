// The attention and feed-forward blocks of a layer (see block.h).
#include "model/block.h"
#include "core/error.h"

#include "kernels/kernels.h"
#include "moe/ffn.h"

void block_norm_forward(const model_config *c, float *out, float *mean, float *rstd,
                        const float *inp, const float *w, const float *b, int N) {
    if (c->norm == NORM_RMSNORM) rmsnorm_forward(out, rstd, inp, w, N, c->hidden_size, c->norm_eps);
    else layernorm_forward(out, mean, rstd, inp, w, b, N, c->hidden_size, c->norm_eps);
}

void block_norm_backward(const model_config *c, float *dinp, float *dw, float *db,
                         const float *dout, const float *inp, const float *w, const float *mean,
                         const float *rstd, int N) {
    if (c->norm == NORM_RMSNORM) rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, c->hidden_size);
    else layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, c->hidden_size);
}

void block_attention_forward(kernel_ctx *kc, layer_acts *la, const layer_params *lp, const model_config *c,
                             const block_attention_core *core, int layer, const float *rope_cos,
                             const float *rope_sin, int B, int T) {
    const int N = B * T, C = c->hidden_size, NH = c->num_attention_heads, W = model_qkv_width(c);
    block_norm_forward(c, la->ln1, la->ln1_mean, la->ln1_rstd, la->x, lp->ln1_w, lp->ln1_b, N);
    matmul_forward(kc, la->qkv, la->ln1, lp->qkv_w, N, C, W);
    if (lp->qkv_b) ffn_bias_forward(la->qkv, lp->qkv_b, N, W);  // before RoPE, as in HF
    if (c->position_embedding == POS_ROPE)
        rope_forward(la->qkv, rope_cos, rope_sin, B, T, C, NH, model_kv_heads(c));
    core->forward(core->ctx, layer, la->atty, la->qkv);
    if (!la->x2) return;  // recomputing the caches
    matmul_forward(kc, la->x2, la->atty, lp->o_w, N, C, C);
    if (lp->o_b) ffn_bias_forward(la->x2, lp->o_b, N, C);
    vec_add(la->x2, la->x, (size_t)N * C);
}

void block_attention_backward(kernel_ctx *kc, model_acts *a, layer_params *gp, const layer_acts *la,
                              const layer_params *lp, const model_config *c,
                              const block_attention_core *core, int layer) {
    const int B = a->B, T = a->T, N = a->N, C = c->hidden_size, NH = c->num_attention_heads;
    const int W = model_qkv_width(c);
    const size_t NC = (size_t)N * C;
    vec_zero(a->d_atty, NC);
    matmul_backward(kc, a->d_atty, gp->o_w, a->d_resid, la->atty, lp->o_w, N, C, C);
    if (lp->o_b) ffn_bias_backward(gp->o_b, a->d_resid, N, C);
    vec_zero(a->d_qkv, (size_t)N * W);
    core->backward(core->ctx, layer, a->d_qkv, a->d_atty, la->qkv, la->atty);
    if (c->position_embedding == POS_ROPE)
        rope_backward(a->d_qkv, a->rope_cos, a->rope_sin, B, T, C, NH, model_kv_heads(c));
    if (lp->qkv_b) ffn_bias_backward(gp->qkv_b, a->d_qkv, N, W);
    vec_zero(a->d_ln, NC);
    matmul_backward(kc, a->d_ln, gp->qkv_w, a->d_qkv, la->ln1, lp->qkv_w, N, C, W);
    block_norm_backward(c, a->d_resid, gp->ln1_w, gp->ln1_b, a->d_ln, la->x, lp->ln1_w,
                        la->ln1_mean, la->ln1_rstd, N);
}

int block_ffn_forward(kernel_ctx *kc, float *x_next, layer_acts *la, const layer_params *lp,
                      const model_config *c, const moe_shape *ms, const moe_router_ctx *rc,
                      int N) {
    const int C = c->hidden_size;
    block_norm_forward(c, la->ln2, la->ln2_mean, la->ln2_rstd, la->x2, lp->ln2_w, lp->ln2_b, N);
    if (lp->is_moe) {
        if (moe_forward(kc, la->ffn_out, &la->moe, la->ln2, &lp->moe, rc, ms, N) != BG_OK)
            return BG_ERR;
    } else
        ffn_forward_bias(kc, la->ffn_out, la->ffn_h, la->ffn_a, la->ln2, lp->ffn_in, lp->ffn_in_b,
                         lp->ffn_out, lp->ffn_out_b, N, C, c->intermediate_size, c->hidden_act);
    if (x_next) residual_forward(x_next, la->x2, la->ffn_out, (size_t)N * C);
    return BG_OK;
}

void block_ffn_backward(kernel_ctx *kc, model_acts *a, layer_params *gp, const layer_acts *la,
                        const layer_params *lp, const model_config *c, const moe_shape *ms,
                        const moe_router_ctx *rc) {
    const int N = a->N, C = c->hidden_size;
    vec_zero(a->d_ln, (size_t)N * C);
    if (lp->is_moe) {
        moe_backward(kc, a->d_ln, &gp->moe, &a->moe_scr, a->d_resid, la->ln2, &la->moe, &lp->moe,
                     rc, ms, N);
    } else {
        ffn_backward_bias(kc, a->d_ln, gp->ffn_in, gp->ffn_in_b, gp->ffn_out, gp->ffn_out_b,
                          a->d_ffn_a, a->d_ffn_h, a->d_resid, la->ln2, la->ffn_h, la->ffn_a,
                          lp->ffn_in, lp->ffn_out, N, C, c->intermediate_size, c->hidden_act);
    }
    block_norm_backward(c, a->d_resid, gp->ln2_w, gp->ln2_b, a->d_ln, la->x2, lp->ln2_w,
                        la->ln2_mean, la->ln2_rstd, N);
}
