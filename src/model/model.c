#include "model/model.h"
#include "model/block.h"
#include "core/error.h"
#include "comm/dist.h"
#include "kernels/kernels.h"
#include "moe/capacity.h"

#include <stdio.h>
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
    m->seed = seed;
    m->first_expert = 0;
    m->n_experts = cfg->num_local_experts;
    if (par) {
        const dist_layout *L = par->layout;
        m->moe_par = (moe_parallel){.ep_comm = L->ep_comm, .ep_size = L->ep,
                                    .ep_rank = L->ep_rank, .a2a_algo = par->a2a_algo,
                                    .a2a_chunks = par->a2a_chunks, .a2a_sync = par->a2a_sync};
        m->moe_par.dispatcher = moe_dispatcher_for(&m->moe_par);
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
    if (cfg->num_local_experts > 0) {
        moe_shape s = model_moe_shape(cfg, NULL);
        m->router_state_bytes = s.router->state_size(&s);
        if (m->router_state_bytes)
            m->router_state = bg_calloc((size_t)cfg->num_hidden_layers, m->router_state_bytes);
    }
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
        .router = moe_router_find(model_router_type_name(c->router_type)),
        .routing = {.score = (moe_score)c->router_score,
                    .jitter = c->router_jitter,
                    .bias_update_rate = c->router_bias_update_rate,
                    .groups = c->router_groups,
                    .topk_groups = c->router_topk_groups,
                    .aux_scope = (moe_aux_scope)c->router_aux_loss_scope,
                    .capacity_factor = c->capacity_factor,
                    .drop_policy = (moe_drop_policy)c->drop_policy,
                    .group_tokens = c->routing_group_tokens},
    };
    BG_ASSERT(s.router);  // model_config_validate admits only built-in gates
    return s;
}

static moe_shape layer_moe_shape(const model *m) {
    return model_layer_moe_shape(&m->cfg, &m->opt, m->par ? &m->moe_par : NULL, m->acts.T);
}

// Layer l's routing context for a batch of N tokens per rank: the balance statistics
// (and any gate's exchanged counts) span every rank of the global batch, whose tokens
// are numbered rank by rank.
static moe_router_ctx layer_router_ctx(const model *m, int l, int N) {
    const dist_layout *L = m->par ? m->par->layout : NULL;
    return (moe_router_ctx){.comm = L ? L->world : NULL, .seed = m->seed, .step = m->step,
                            .layer = l, .first_token = L ? (long)L->world_rank * N : 0,
                            .eval = m->opt.no_grad, .state = model_router_state(m, l)};
}

int model_check_routing_groups(const model_config *c, int B, int T) {
    long G = c->routing_group_tokens > 0 ? c->routing_group_tokens : T, N = (long)B * T;
    if (c->num_local_experts > 0 && c->capacity_factor > 0 && N % G != 0)
        return bg_error("routing_group_tokens %ld does not divide a rank's batch of %ld tokens "
                        "(--batch-size %d x --seq-len %d): capacity is per whole group",
                        G, N, B, T);
    return BG_OK;
}

// The heap buffers of dropless expert parallelism, grown by the MoE layers.
static void free_grown_rows(model *m) {
    if (!m->acts.layers) return;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)  // a recomputing layer's are zeroed
        if (model_layer_is_moe(&m->cfg, l)) moe_acts_free(&m->acts.layers[l].moe);
    if (m->acts.recompute && m->acts.shared.moe.router.logits) moe_acts_free(&m->acts.shared.moe);
    moe_scratch_free(&m->acts.moe_scr);  // zeroed when no layer is MoE: a no-op
}

void model_prepare(model *m, int B, int T) {
    const model_config *c = &m->cfg;
    BG_ASSERT(B > 0 && T > 0 && T <= c->max_position_embeddings);
    BG_ASSERT(model_check_routing_groups(c, B, T) == BG_OK);
    free_grown_rows(m);
    bg_arena_free(&m->arena);
    free(m->acts.layers);
    m->acts.layers = bg_calloc((size_t)c->num_hidden_layers, sizeof(layer_acts));
    if (m->par) {  // the dropless limit: 8x the balanced share unless set
        long share = (long)B * T * c->num_experts_per_tok;
        m->moe_par.max_rows = m->par->max_expert_rows > 0 ? m->par->max_expert_rows : 8 * share;
    }
    const moe_parallel *mp = m->par ? &m->moe_par : NULL;
    bg_arena measure;
    bg_arena_init(&measure, 0);
    model_acts_layout(&m->acts, &measure, c, &m->opt, mp, B, T);
    bg_arena_init(&m->arena, measure.used);
    model_acts_layout(&m->acts, &m->arena, c, &m->opt, mp, B, T);
    if (c->position_embedding == POS_ROPE)
        rope_tables(m->acts.rope_cos, m->acts.rope_sin, T, c->hidden_size / c->num_attention_heads,
                    c->rope_theta);
}

void model_free(model *m) {
    free_grown_rows(m);
    bg_arena_free(&m->arena);
    free(m->acts.layers);
    model_params_free(&m->w);
    model_params_free(&m->g);
    param_table_free(&m->table);
    free(m->params);
    free(m->grads);
    free(m->router_state);
    kernel_ctx_free(m->kernels);
    memset(m, 0, sizeof *m);
}

// d(objective)/d(loss of one token), times the loss scale: the objective averages over
// the global batch, so each rank's share of tokens enters with 1/(N·P), and
// grad_sync_grads (train/) sums the shares.
static float lm_grad_scale(const model *m) {
    return m->opt.loss_scale / ((float)m->acts.N * (m->par ? m->par->layout->world_size : 1));
}

// Layer l's block caches: its own, or with recomputation the one shared set, pointed
// at the layer's kept block inputs.
static layer_acts *block_caches(model_acts *a, int l) {
    if (!a->recompute) return &a->layers[l];
    a->shared.x = a->layers[l].x;
    a->shared.x2 = a->layers[l].x2;
    return &a->shared;
}

// The training attention core: every query row of the whole sequences at once, flash
// or naive as model_prepare resolved (block_attention_core; ctx is the model).
static void attention_sequence_forward(void *ctx, int l, float *atty, const float *qkv) {
    model *m = ctx;
    const model_config *c = &m->cfg;
    model_acts *a = &m->acts;
    const layer_acts *la = block_caches(a, l);
    int B = a->B, T = a->T, C = c->hidden_size, NH = c->num_attention_heads;
    int NKV = model_kv_heads(c);
    if (a->flash)
        flash_attention_forward(m->kernels, atty, la->att_lse, a->d_att_scratch, qkv, B, T, C,
                                NH, NKV);
    else attention_forward(atty, la->att, qkv, B, T, C, NH, NKV);
}

static void attention_sequence_backward(void *ctx, int l, float *dqkv, const float *datty,
                                        const float *qkv, const float *atty) {
    model *m = ctx;
    const model_config *c = &m->cfg;
    model_acts *a = &m->acts;
    const layer_acts *la = block_caches(a, l);
    int B = a->B, T = a->T, C = c->hidden_size, NH = c->num_attention_heads;
    int NKV = model_kv_heads(c);
    if (a->flash)
        flash_attention_backward(m->kernels, dqkv, a->d_att_scratch, datty, qkv, atty,
                                 la->att_lse, B, T, C, NH, NKV);
    else
        attention_backward(dqkv, a->d_att_scratch, datty, qkv, la->att, B, T, C, NH, NKV);
}

static block_attention_core attention_sequence(model *m) {
    return (block_attention_core){.forward = attention_sequence_forward,
                                  .backward = attention_sequence_backward,
                                  .ctx = m};
}

int model_forward(model *m, const int *inputs, const int *targets) {
    const model_config *c = &m->cfg;
    model_acts *a = &m->acts;
    int B = a->B, T = a->T, N = a->N, C = c->hidden_size, V = c->vocab_size;
    int L = c->num_hidden_layers;
    moe_shape ms = layer_moe_shape(m);
    block_attention_core core = attention_sequence(m);
    memcpy(a->inputs, inputs, sizeof(int) * N);
    matmul_weights_changed(m->kernels);  // an optimizer step may have run since the last pass

    embedding_forward(a->layers[0].x, inputs, m->w.wte, m->w.wpe, N, T, C);
    double aux = 0, z = 0, objective_router = 0;
    int moe_layers = 0;
    for (int l = 0; l < L; l++) {
        layer_acts *la = block_caches(a, l);
        layer_params *lp = &m->w.layers[l];
        float *x_next = l + 1 < L ? a->layers[l + 1].x : a->x_final;
        block_attention_forward(m->kernels, la, lp, c, &core, l, a->rope_cos, a->rope_sin, B, T);
        moe_router_ctx rc = layer_router_ctx(m, l, N);
        if (block_ffn_forward(m->kernels, x_next, la, lp, c, &ms, &rc, N) != BG_OK) return BG_ERR;
        if (lp->is_moe) {
            // The losses, statistics and counts are taken here, once: the backward's
            // recomputation repeats the forward but counts nothing.
            if (a->recompute) moe_acts_keep(&a->layers[l].moe, &la->moe, &ms);
            const moe_router_cache *rt = &la->moe.router;
            aux += rt->aux_loss;
            z += rt->z_loss;
            objective_router += ms.aux_coef * rt->aux_loss + ms.z_coef * rt->z_loss;
            moe_layers++;
        }
    }
    block_norm_forward(c, a->lnf, a->lnf_mean, a->lnf_rstd, a->x_final, m->w.lnf_w, m->w.lnf_b, N);
    if (!a->lm_fused) matmul_forward(m->kernels, a->logits, a->lnf, m->w.lm_head, N, C, V);

    m->aux_loss = moe_layers ? aux / moe_layers : 0.0;
    m->z_loss = moe_layers ? z / moe_layers : 0.0;
    a->lm_grads_ready = 0;
    m->router_objective = objective_router;
    if (!targets) {
        m->loss = m->loss_sum = m->objective = 0.0;
        return BG_OK;
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
        // model_zero_grad may clear in between. Both are written, not added to.
        lmhead_xent_fused(m->kernels, a->losses, a->lse, a->d_ln, a->d_lm_head, a->lnf,
                          m->w.lm_head, targets, lm_grad_scale(m), N, C, V, a->lm_chunk,
                          a->lm_chunk_rows);
        a->lm_grads_ready = 1;
    }
    double sum = 0;  // summed in double, in token order: deterministic and exact enough
    for (int i = 0; i < N; i++) sum += a->losses[i];
    m->loss_sum = sum;
    m->loss = sum / (double)N;
    m->objective = m->loss + objective_router;
    return BG_OK;
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

// Recomputation: a block's forward again, from its kept input into the shared caches,
// right before its backward. The same inputs, weights and router context (noise keyed
// by step, layer and token) give the same bits, and an MoE layer repeats its exchange
// on every rank alike; the block's output is not needed again and is not written.
static void recompute_ffn(model *m, layer_acts *la, const layer_params *lp, const moe_shape *ms,
                          const moe_router_ctx *rc) {
    int rc_fwd = block_ffn_forward(m->kernels, NULL, la, lp, &m->cfg, ms, rc, m->acts.N);
    BG_ASSERT(rc_fwd == BG_OK);  // the forward's rows passed the same check
}

static void recompute_attention(model *m, layer_acts *la, const layer_params *lp,
                                const block_attention_core *core, int l) {
    model_acts *a = &m->acts;
    float *x2 = la->x2;
    la->x2 = NULL;  // the caches only: no o_proj, no residual
    block_attention_forward(m->kernels, la, lp, &m->cfg, core, l, a->rope_cos, a->rope_sin, a->B,
                            a->T);
    la->x2 = x2;
}

void model_backward(model *m) {
    const model_config *c = &m->cfg;
    model_acts *a = &m->acts;
    int T = a->T, N = a->N, C = c->hidden_size, V = c->vocab_size;
    int L = c->num_hidden_layers;
    size_t NC = (size_t)N * C;
    moe_shape ms = layer_moe_shape(m), ms_forward = ms;
    block_attention_core core = attention_sequence(m);
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
    block_norm_backward(c, a->d_resid, m->g.lnf_w, m->g.lnf_b, a->d_ln, a->x_final, m->w.lnf_w,
                        a->lnf_mean, a->lnf_rstd, N);

    for (int l = L - 1; l >= 0; l--) {
        layer_acts *la = block_caches(a, l);
        layer_params *lp = &m->w.layers[l], *gp = &m->g.layers[l];
        // d_resid holds d(objective)/d(x_next), then d(x2), then d(x)
        moe_router_ctx rc = layer_router_ctx(m, l, N);
        if (a->recompute) recompute_ffn(m, la, lp, &ms_forward, &rc);
        block_ffn_backward(m->kernels, a, gp, la, lp, c, &ms, &rc);
        if (m->backward_hook) m->backward_hook(m->backward_hook_ctx, l, 0);
        if (a->recompute) recompute_attention(m, la, lp, &core, l);
        block_attention_backward(m->kernels, a, gp, la, lp, c, &core, l);
        if (m->backward_hook) m->backward_hook(m->backward_hook_ctx, l, 1);
    }
    embedding_backward(m->g.wte, m->g.wpe, a->d_resid, a->inputs, N, T, C);
}

const int *model_expert_counts(const model *m, int layer) {
    if (!model_layer_is_moe(&m->cfg, layer)) return NULL;
    return m->acts.layers[layer].moe.router.counts_global;
}

void model_expert_rows(const model *m, long *bound, long *limit, long *hwm, long *alloc) {
    *bound = *limit = *hwm = *alloc = 0;
    if (m->cfg.num_local_experts == 0 || !m->acts.layers) return;
    moe_shape ms = layer_moe_shape(m);
    *bound = (long)moe_expert_rows_bound(&ms, m->acts.N);
    *limit = *bound ? *bound : m->moe_par.max_rows;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        if (!model_layer_is_moe(&m->cfg, l)) continue;
        const moe_expert_cache *ec = m->acts.recompute ? &m->acts.shared.moe.experts
                                                       : &m->acts.layers[l].moe.experts;
        if (ec->rows_hwm > *hwm) *hwm = ec->rows_hwm;
        if ((long)ec->rows_alloc > *alloc) *alloc = (long)ec->rows_alloc;
    }
}

float *model_router_state(const model *m, int layer) {
    if (!m->router_state || !model_layer_is_moe(&m->cfg, layer)) return NULL;
    return (float *)(m->router_state + (size_t)layer * m->router_state_bytes);
}

void model_router_after_step(model *m) {
    const model_config *c = &m->cfg;
    moe_shape ms = layer_moe_shape(m);
    if (!ms.router || !ms.router->after_step) return;
    for (int l = 0; l < c->num_hidden_layers; l++)
        if (model_layer_is_moe(c, l))
            ms.router->after_step(model_router_state(m, l), &m->acts.layers[l].moe.router, &ms);
}

void model_router_state_table(param_table *t, const model_config *cfg) {
    memset(t, 0, sizeof *t);
    if (cfg->num_local_experts <= 0) return;
    moe_shape s = model_moe_shape(cfg, NULL);
    size_t bytes = s.router->state_size(&s), numel = bytes / sizeof(float);
    if (!bytes) return;
    BG_ASSERT(bytes % sizeof(float) == 0 && s.router->state_name);
    const int L = cfg->num_hidden_layers;
    t->tensors = bg_calloc((size_t)L, sizeof *t->tensors);
    for (int l = 0; l < L; l++) {
        if (!model_layer_is_moe(cfg, l)) continue;
        param_tensor *p = &t->tensors[t->count++];
        snprintf(p->name, sizeof p->name, "model.layers.%d.block_sparse_moe.gate.%s", l,
                 s.router->state_name);
        p->ndim = 1;
        p->shape[0] = (int64_t)numel;
        p->offset = (size_t)l * numel;
        p->numel = numel;
        p->init = INIT_ZEROS;
        p->expert = -1;
        p->layer = l;
    }
    t->numel = t->dense_numel = (size_t)L * numel;  // the whole block, dense slots included
}

double model_flops_per_token(const model_config *c, int T) {
    // PaLM's accounting: 6 FLOPs per matmul parameter per token (forward + backward)
    // plus 6·L·T·(score width + value width) for the attention score and value products,
    // 12·L·C·T for standard heads (every query head scores and weights, whatever the
    // key/value heads).
    const double H = c->num_attention_heads;
    const double widths = model_config_mla(c)
                              ? H * (c->qk_nope_head_dim + c->qk_rope_head_dim + c->v_head_dim)
                              : 2.0 * c->hidden_size;
    return 6.0 * model_active_matmul_params(c) + 6.0 * c->num_hidden_layers * widths * T;
}
