#include "model/model.h"
#include "core/error.h"
#include "comm/dist.h"
#include "kernels/kernels.h"
#include "train/grad_norm.h"

#include <math.h>
#include <string.h>

void model_init(model *m, const model_config *cfg, uint64_t seed) {
    model_init_parallel(m, cfg, seed, NULL);
}

void model_init_parallel(model *m, const model_config *cfg, uint64_t seed,
                         const model_parallel *par) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->opt = (model_options){.attention = MODEL_ATTN_FLASH,
                             .lm_head_chunk = MODEL_LM_HEAD_CHUNK,
                             .loss_scale = 1.0f};
    m->kernels = kernel_ctx_create(BG_FP32);
    m->par = par;
    m->first_expert = 0;
    m->n_experts = cfg->num_local_experts;
    if (par) {
        const dist_layout *L = par->layout;
        m->moe_par = (moe_parallel){.ep_comm = L->ep_comm, .stats_comm = L->world,
                                    .ep_size = L->ep, .ep_rank = L->ep_rank,
                                    .a2a_algo = par->a2a_algo,
                                    .a2a_chunks = par->a2a_chunks};
        if (cfg->num_local_experts > 0) {
            BG_ASSERT(cfg->num_local_experts % L->ep == 0);
            m->n_experts = cfg->num_local_experts / L->ep;
            m->first_expert = L->ep_rank * m->n_experts;
        }
    }
    param_table_build_local(&m->table, cfg, m->first_expert, m->n_experts);
    m->params = bg_aligned_alloc(m->table.numel * sizeof(float));
    m->grads = bg_aligned_alloc(m->table.numel * sizeof(float));
    memset(m->grads, 0, m->table.numel * sizeof(float));
    model_params_bind_local(&m->w, cfg, m->params, m->first_expert, m->n_experts);
    model_params_bind_local(&m->g, cfg, m->grads, m->first_expert, m->n_experts);
    param_table_init_values(&m->table, cfg, m->params, seed);
}

moe_shape model_moe_shape(const model_config *c, const moe_parallel *par) {
    moe_shape s = {
        .C = c->hidden_size,
        .E = c->num_local_experts,
        .k = c->num_experts_per_tok,
        .F = c->moe_intermediate_size,
        .S = c->num_shared_experts,
        .act = c->hidden_act,
        .norm_topk_prob = c->norm_topk_prob,
        .aux_coef = c->router_aux_loss_coef,
        .z_coef = c->router_z_loss_coef,
        .par = par,
    };
    return s;
}

static moe_shape layer_moe_shape(const model *m) {
    return model_moe_shape(&m->cfg, m->par ? &m->moe_par : NULL);
}

// One layout routine for measuring (arena capacity 0) and for real.
static void acts_layout(model_acts *a, bg_arena *ar, const model *m, int B, int T) {
    const model_config *c = &m->cfg;
    int N = B * T, C = c->hidden_size, V = c->vocab_size, NH = c->num_attention_heads;
    int hs = C / NH, L = c->num_hidden_layers;
    int Fd = c->intermediate_size, Ud = ffn_in_rows(c->hidden_act, Fd);
    size_t NC = (size_t)N * C, att = (size_t)B * NH * T * T;
    moe_shape ms = layer_moe_shape(m);
    a->B = B, a->T = T, a->N = N;
    // Flash attention keeps one number per query row instead of a T×T matrix per head,
    // and needs about (N,C) of backward workspace instead of (B,NH,T,T).
    a->flash = m->opt.attention == MODEL_ATTN_FLASH;
    size_t att_scratch = a->flash ? flash_attention_scratch_size(B, T, C, NH) : att;
    // The fused LM head holds one chunk of logits instead of all N rows, and stages
    // the LM head's weight gradient from forward to backward.
    a->lm_fused = m->opt.lm_head_chunk > 0 && N > m->opt.lm_head_chunk;
    a->lm_chunk_rows = a->lm_fused ? m->opt.lm_head_chunk : 0;
    for (int l = 0; l < L; l++) {
        layer_acts *la = &a->layers[l];
        la->x = BG_ARENA_NEW(ar, float, NC);
        la->ln1 = BG_ARENA_NEW(ar, float, NC);
        la->ln1_mean = BG_ARENA_NEW(ar, float, N);
        la->ln1_rstd = BG_ARENA_NEW(ar, float, N);
        la->qkv = BG_ARENA_NEW(ar, float, 3 * NC);
        la->att = a->flash ? NULL : BG_ARENA_NEW(ar, float, att);
        la->att_lse = a->flash ? BG_ARENA_NEW(ar, float, (size_t)B * NH * T) : NULL;
        la->atty = BG_ARENA_NEW(ar, float, NC);
        la->x2 = BG_ARENA_NEW(ar, float, NC);
        la->ln2 = BG_ARENA_NEW(ar, float, NC);
        la->ln2_mean = BG_ARENA_NEW(ar, float, N);
        la->ln2_rstd = BG_ARENA_NEW(ar, float, N);
        if (model_layer_is_moe(c, l)) {
            moe_acts_layout(&la->moe, ar, &ms, N);
        } else {
            la->ffn_h = BG_ARENA_NEW(ar, float, (size_t)N * Ud);
            la->ffn_a = BG_ARENA_NEW(ar, float, (size_t)N * Fd);
        }
        la->ffn_out = BG_ARENA_NEW(ar, float, NC);
    }
    a->x_final = BG_ARENA_NEW(ar, float, NC);
    a->lnf = BG_ARENA_NEW(ar, float, NC);
    a->lnf_mean = BG_ARENA_NEW(ar, float, N);
    a->lnf_rstd = BG_ARENA_NEW(ar, float, N);
    a->logits = a->lm_fused ? NULL : BG_ARENA_NEW(ar, float, (size_t)N * V);
    a->lm_chunk = a->lm_fused ? BG_ARENA_NEW(ar, float, lmhead_workspace_floats(a->lm_chunk_rows, C, V))
                              : NULL;
    a->d_lm_head = a->lm_fused ? BG_ARENA_NEW(ar, float, (size_t)V * C) : NULL;
    a->lm_grads_ready = 0;
    a->losses = BG_ARENA_NEW(ar, float, N);
    a->lse = BG_ARENA_NEW(ar, float, N);
    a->inputs = BG_ARENA_NEW(ar, int, N);
    a->targets = BG_ARENA_NEW(ar, int, N);
    a->rope_cos = BG_ARENA_NEW(ar, float, (size_t)T * (hs / 2 + 1));
    a->rope_sin = BG_ARENA_NEW(ar, float, (size_t)T * (hs / 2 + 1));
    a->d_resid = BG_ARENA_NEW(ar, float, NC);
    a->d_ln = BG_ARENA_NEW(ar, float, NC);
    a->d_qkv = BG_ARENA_NEW(ar, float, 3 * NC);
    a->d_atty = BG_ARENA_NEW(ar, float, NC);
    a->d_att_scratch = BG_ARENA_NEW(ar, float, att_scratch);
    int any_dense = 0, any_moe = 0;
    for (int l = 0; l < L; l++) {
        if (model_layer_is_moe(c, l)) any_moe = 1;
        else any_dense = 1;
    }
    a->d_ffn_h = any_dense ? BG_ARENA_NEW(ar, float, (size_t)N * Ud) : NULL;
    a->d_ffn_a = any_dense ? BG_ARENA_NEW(ar, float, (size_t)N * Fd) : NULL;
    if (any_moe) moe_scratch_layout(&a->moe_scr, ar, &ms, N);
}

void model_prepare(model *m, int B, int T) {
    const model_config *c = &m->cfg;
    BG_ASSERT(B > 0 && T > 0 && T <= c->max_position_embeddings);
    bg_arena_free(&m->arena);
    free(m->acts.layers);
    m->acts.layers = bg_calloc((size_t)c->num_hidden_layers, sizeof(layer_acts));
    bg_arena measure;
    bg_arena_init(&measure, 0);
    acts_layout(&m->acts, &measure, m, B, T);
    bg_arena_init(&m->arena, measure.used);
    acts_layout(&m->acts, &m->arena, m, B, T);
    if (c->position_embedding == POS_ROPE)
        rope_tables(m->acts.rope_cos, m->acts.rope_sin, T, c->hidden_size / c->num_attention_heads,
                    c->rope_theta);
}

void model_free(model *m) {
    bg_arena_free(&m->arena);
    free(m->acts.layers);
    model_params_free(&m->w);
    model_params_free(&m->g);
    param_table_free(&m->table);
    free(m->params);
    free(m->grads);
    kernel_ctx_free(m->kernels);
    memset(m, 0, sizeof *m);
}

static void norm_forward(const model_config *c, float *out, float *mean, float *rstd,
                         const float *inp, const float *w, const float *b, int N) {
    if (c->norm == NORM_RMSNORM) rmsnorm_forward(out, rstd, inp, w, N, c->hidden_size, c->norm_eps);
    else layernorm_forward(out, mean, rstd, inp, w, b, N, c->hidden_size, c->norm_eps);
}

static void norm_backward(const model_config *c, float *dinp, float *dw, float *db,
                          const float *dout, const float *inp, const float *w, const float *mean,
                          const float *rstd, int N) {
    if (c->norm == NORM_RMSNORM) rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, c->hidden_size);
    else layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, c->hidden_size);
}

// d(objective)/d(loss of one token), times the loss scale: the objective averages over
// the global batch, so each rank's share of tokens enters with 1/(N·P), and
// model_reduce_grads sums the shares.
static float lm_grad_scale(const model *m) {
    return m->opt.loss_scale / ((float)m->acts.N * (m->par ? m->par->layout->world_size : 1));
}

void model_forward(model *m, const int *inputs, const int *targets) {
    const model_config *c = &m->cfg;
    model_acts *a = &m->acts;
    int B = a->B, T = a->T, N = a->N, C = c->hidden_size, V = c->vocab_size;
    int NH = c->num_attention_heads, L = c->num_hidden_layers;
    moe_shape ms = layer_moe_shape(m);
    memcpy(a->inputs, inputs, sizeof(int) * N);
    matmul_weights_changed(m->kernels);  // an optimizer step may have run since the last pass

    embedding_forward(a->layers[0].x, inputs, m->w.wte, m->w.wpe, N, T, C);
    double aux = 0, z = 0, objective_router = 0;
    int moe_layers = 0;
    for (int l = 0; l < L; l++) {
        layer_acts *la = &a->layers[l];
        layer_params *lp = &m->w.layers[l];
        float *x_next = l + 1 < L ? a->layers[l + 1].x : a->x_final;
        // attention block
        norm_forward(c, la->ln1, la->ln1_mean, la->ln1_rstd, la->x, lp->ln1_w, lp->ln1_b, N);
        matmul_forward(m->kernels, la->qkv, la->ln1, lp->qkv_w, N, C, 3 * C);
        if (c->position_embedding == POS_ROPE) rope_forward(la->qkv, a->rope_cos, a->rope_sin, B, T, C, NH);
        if (a->flash)
            flash_attention_forward(m->kernels, la->atty, la->att_lse, a->d_att_scratch, la->qkv,
                                    B, T, C, NH);
        else attention_forward(la->atty, la->att, la->qkv, B, T, C, NH);
        matmul_forward(m->kernels, la->x2, la->atty, lp->o_w, N, C, C);
        vec_add(la->x2, la->x, (size_t)N * C);
        // feed-forward block: dense or MoE
        norm_forward(c, la->ln2, la->ln2_mean, la->ln2_rstd, la->x2, lp->ln2_w, lp->ln2_b, N);
        if (lp->is_moe) {
            moe_forward(m->kernels, la->ffn_out, &la->moe, la->ln2, &lp->moe, &ms, N);
            aux += la->moe.aux_loss;
            z += la->moe.z_loss;
            objective_router += ms.aux_coef * la->moe.aux_loss + ms.z_coef * la->moe.z_loss;
            moe_layers++;
        } else {
            ffn_forward(m->kernels, la->ffn_out, la->ffn_h, la->ffn_a, la->ln2, lp->ffn_in,
                        lp->ffn_out, N, C, c->intermediate_size, c->hidden_act);
        }
        residual_forward(x_next, la->x2, la->ffn_out, (size_t)N * C);
    }
    norm_forward(c, a->lnf, a->lnf_mean, a->lnf_rstd, a->x_final, m->w.lnf_w, m->w.lnf_b, N);
    if (!a->lm_fused) matmul_forward(m->kernels, a->logits, a->lnf, m->w.lm_head, N, C, V);

    m->aux_loss = moe_layers ? aux / moe_layers : 0.0;
    m->z_loss = moe_layers ? z / moe_layers : 0.0;
    a->lm_grads_ready = 0;
    if (!targets) {
        m->loss = m->objective = 0.0;
        return;
    }
    memcpy(a->targets, targets, sizeof(int) * N);
    if (!a->lm_fused) {
        crossentropy_forward(a->losses, a->lse, a->logits, targets, N, V);
    } else if (m->opt.no_grad) {
        lmhead_xent_forward(m->kernels, a->losses, a->lse, a->lnf, m->w.lm_head, targets, N, C,
                            V, a->lm_chunk, a->lm_chunk_rows);
    } else {
        // Training: the chunk's logits are at hand only now, so the LM head's backward
        // runs here too (recomputing them in model_backward would cost a fourth GEMM
        // as large as the others). Its results wait for model_backward: d lnf in d_ln
        // (backward workspace, untouched until then) and dW apart from m->grads, which
        // model_zero_grad may clear in between.
        vec_zero(a->d_ln, (size_t)N * C);
        vec_zero(a->d_lm_head, (size_t)V * C);
        lmhead_xent_fused(m->kernels, a->losses, a->lse, a->d_ln, a->d_lm_head, a->lnf,
                          m->w.lm_head, targets, lm_grad_scale(m), N, C, V, a->lm_chunk,
                          a->lm_chunk_rows);
        a->lm_grads_ready = 1;
    }
    double sum = 0;  // summed in double, in token order: deterministic and exact enough
    for (int i = 0; i < N; i++) sum += a->losses[i];
    if (m->par) dist_allreduce_sum_f64(m->par->layout->world, &sum, 1);
    m->loss = sum / ((double)N * (m->par ? m->par->layout->world_size : 1));
    m->objective = m->loss + objective_router;
}

void model_logits(const model *m, float *logits, int row0, int rows) {
    const model_acts *a = &m->acts;
    const int C = m->cfg.hidden_size;
    BG_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= a->N);
    matmul_forward(m->kernels, logits, a->lnf + (size_t)row0 * C, m->w.lm_head, rows, C,
                   m->cfg.vocab_size);
}

// Threaded: a serial memset of every gradient (123 MB for M1) left the second core idle.
void model_zero_grad(model *m) { vec_zero(m->grads, m->table.numel); }

void model_backward(model *m) {
    const model_config *c = &m->cfg;
    model_acts *a = &m->acts;
    int B = a->B, T = a->T, N = a->N, C = c->hidden_size, V = c->vocab_size;
    int NH = c->num_attention_heads, L = c->num_hidden_layers;
    size_t NC = (size_t)N * C;
    moe_shape ms = layer_moe_shape(m);
    ms.aux_coef *= m->opt.loss_scale;  // the balance losses' share of the scaled gradient
    ms.z_coef *= m->opt.loss_scale;
    // LM head and final norm; dlogits overwrite the logits in place. The fused head
    // did this work in model_forward.
    if (a->lm_fused) {
        BG_ASSERT(a->lm_grads_ready);  // model_forward with targets, without opt.no_grad
        vec_add(m->g.lm_head, a->d_lm_head, (size_t)V * C);
        a->lm_grads_ready = 0;
    } else {
        crossentropy_backward(a->logits, a->logits, a->lse, a->targets, lm_grad_scale(m), N, V);
        vec_zero(a->d_ln, NC);
        matmul_backward(m->kernels, a->d_ln, m->g.lm_head, a->logits, a->lnf, m->w.lm_head, N, C,
                        V);
    }
    vec_zero(a->d_resid, NC);
    norm_backward(c, a->d_resid, m->g.lnf_w, m->g.lnf_b, a->d_ln, a->x_final, m->w.lnf_w,
                  a->lnf_mean, a->lnf_rstd, N);

    for (int l = L - 1; l >= 0; l--) {
        layer_acts *la = &a->layers[l];
        layer_params *lp = &m->w.layers[l], *gp = &m->g.layers[l];
        // d_resid holds d(objective)/d(x_next); the FFN block's residual passes it
        // through unchanged, its branch adds through the norm.
        vec_zero(a->d_ln, NC);
        if (lp->is_moe) {
            moe_backward(m->kernels, a->d_ln, &gp->moe, &a->moe_scr, a->d_resid, la->ln2,
                         &la->moe, &lp->moe, &ms, N);
        } else {
            ffn_backward(m->kernels, a->d_ln, gp->ffn_in, gp->ffn_out, a->d_ffn_a, a->d_ffn_h,
                         a->d_resid, la->ln2, la->ffn_h, la->ffn_a, lp->ffn_in, lp->ffn_out, N,
                         C, c->intermediate_size, c->hidden_act);
        }
        norm_backward(c, a->d_resid, gp->ln2_w, gp->ln2_b, a->d_ln, la->x2, lp->ln2_w,
                      la->ln2_mean, la->ln2_rstd, N);
        // attention block
        vec_zero(a->d_atty, NC);
        matmul_backward(m->kernels, a->d_atty, gp->o_w, a->d_resid, la->atty, lp->o_w, N, C, C);
        vec_zero(a->d_qkv, 3 * NC);
        if (a->flash)
            flash_attention_backward(m->kernels, a->d_qkv, a->d_att_scratch, a->d_atty, la->qkv,
                                     la->atty, la->att_lse, B, T, C, NH);
        else
            attention_backward(a->d_qkv, a->d_att_scratch, a->d_atty, la->qkv, la->att, B, T, C, NH);
        if (c->position_embedding == POS_ROPE) rope_backward(a->d_qkv, a->rope_cos, a->rope_sin, B, T, C, NH);
        vec_zero(a->d_ln, NC);
        matmul_backward(m->kernels, a->d_ln, gp->qkv_w, a->d_qkv, la->ln1, lp->qkv_w, N, C, 3 * C);
        norm_backward(c, a->d_resid, gp->ln1_w, gp->ln1_b, a->d_ln, la->x, lp->ln1_w,
                      la->ln1_mean, la->ln1_rstd, N);
    }
    embedding_backward(m->g.wte, m->g.wpe, a->d_resid, a->inputs, N, T, C);
}

void model_reduce_grads(model *m) {
    if (!m->par) return;
    const dist_layout *L = m->par->layout;
    size_t dense = m->table.dense_numel, experts = m->table.numel - dense;
    dist_allreduce_sum_f32(L->world, m->grads, dense);
    if (experts && L->edp_size > 1) dist_allreduce_sum_f32(L->edp_comm, m->grads + dense, experts);
}

double model_grad_norm(model *m) {
    size_t dense = m->table.dense_numel, experts = m->table.numel - dense;
    double d = grad_global_norm(m->grads, dense), e = grad_global_norm(m->grads + dense, experts);
    double sq[2] = {d * d, e * e};
    // Each expert lives on one rank of an expert-parallel group: the group's sum of
    // expert norms covers all of them once; dense gradients are equal everywhere.
    if (m->par && m->par->layout->ep > 1) dist_allreduce_sum_f64(m->par->layout->ep_comm, &sq[1], 1);
    return sqrt(sq[0] + sq[1]);
}

const int *model_expert_counts(const model *m, int layer) {
    if (!model_layer_is_moe(&m->cfg, layer)) return NULL;
    return m->acts.layers[layer].moe.counts_global;
}

double model_flops_per_token(const model_config *c, int T) {
    // PaLM's accounting: 6 FLOPs per matmul parameter per token (forward + backward)
    // plus 12·L·C·T for the attention score and value products.
    return 6.0 * model_active_matmul_params(c) +
           12.0 * c->num_hidden_layers * (double)c->hidden_size * T;
}
