#include "model/params.h"
#include "core/error.h"
#include "core/rng.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

// Walks the model's tensors in block order. With `t` it records the table; with
// `v` and `block` it binds views. One walk keeps names, offsets and views in step.
// The block holds every dense tensor first and the routed experts' tensors last
// (experts [e0, e0+el) only: a rank holds its share), so gradients reduce in two
// large contiguous pieces: dense over every rank, experts over their replicas.
typedef struct {
    param_table *t;
    model_params *v;
    float *block;
    size_t offset;
    int cap;
    int phase;          // 0: dense tensors, 1: routed-expert tensors
    int e0, el;         // experts held
    size_t dense_numel; // offset where phase 1 began
} walker;

static void add(walker *w, float **view, int layer, int expert, int decay, param_init init,
                int64_t d0, int64_t d1, const char *fmt, ...) __attribute__((format(printf, 9, 10)));

static void add(walker *w, float **view, int layer, int expert, int decay, param_init init,
                int64_t d0, int64_t d1, const char *fmt, ...) {
    if ((expert >= 0) != w->phase) return;
    if (expert >= 0 && (expert < w->e0 || expert >= w->e0 + w->el)) return;
    size_t numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    if (w->t) {
        if (w->t->count == w->cap) {
            w->cap = w->cap ? 2 * w->cap : 64;
            w->t->tensors = realloc(w->t->tensors, sizeof(param_tensor) * w->cap);
            BG_ASSERT(w->t->tensors);
        }
        param_tensor *p = &w->t->tensors[w->t->count++];
        memset(p, 0, sizeof *p);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->name, sizeof p->name, fmt, ap);
        va_end(ap);
        p->ndim = d1 > 0 ? 2 : 1;
        p->shape[0] = d0;
        p->shape[1] = d1 > 0 ? d1 : 0;
        p->offset = w->offset;
        p->numel = numel;
        p->decay = decay;
        p->init = init;
        p->layer = layer;
        p->expert = expert;
    }
    if (view && w->v) *view = w->block ? w->block + w->offset : NULL;
    w->offset += numel;
}

static void walk_phase(walker *w, const model_config *c) {
    int C = c->hidden_size, V = c->vocab_size, L = c->num_hidden_layers;
    int swiglu = c->hidden_act == FFN_SWIGLU, rms = c->norm == NORM_RMSNORM;
    model_params dummy;
    layer_params dummy_layer;
    model_params *v = w->v ? w->v : &dummy;

    add(w, &v->wte, -1, -1, 0, INIT_NORMAL, V, C, "model.embed_tokens.weight");
    if (c->position_embedding == POS_LEARNED)
        add(w, &v->wpe, -1, -1, 0, INIT_NORMAL, c->max_position_embeddings, C,
            "model.embed_positions.weight");
    const int KV = model_kv_heads(c) * (C / c->num_attention_heads);  // k's and v's rows
    for (int l = 0; l < L; l++) {
        layer_params *lp = w->v ? &v->layers[l] : &dummy_layer;
        const char *pre = "model.layers";
        add(w, &lp->ln1_w, l, -1, 0, INIT_ONES, C, 0, "%s.%d.input_layernorm.weight", pre, l);
        if (!rms) add(w, &lp->ln1_b, l, -1, 0, INIT_ZEROS, C, 0, "%s.%d.input_layernorm.bias", pre, l);
        // q, k, v adjacent: the block holds them as one (C+2KV,C) matrix for one GEMM.
        add(w, &lp->qkv_w, l, -1, 1, INIT_NORMAL, C, C, "%s.%d.self_attn.q_proj.weight", pre, l);
        add(w, NULL, l, -1, 1, INIT_NORMAL, KV, C, "%s.%d.self_attn.k_proj.weight", pre, l);
        add(w, NULL, l, -1, 1, INIT_NORMAL, KV, C, "%s.%d.self_attn.v_proj.weight", pre, l);
        add(w, &lp->o_w, l, -1, 1, INIT_NORMAL_RESIDUAL, C, C, "%s.%d.self_attn.o_proj.weight", pre, l);
        if (c->attention_bias) {  // q, k, v biases adjacent too: one (C+2KV) vector
            add(w, &lp->qkv_b, l, -1, 0, INIT_ZEROS, C, 0, "%s.%d.self_attn.q_proj.bias", pre, l);
            add(w, NULL, l, -1, 0, INIT_ZEROS, KV, 0, "%s.%d.self_attn.k_proj.bias", pre, l);
            add(w, NULL, l, -1, 0, INIT_ZEROS, KV, 0, "%s.%d.self_attn.v_proj.bias", pre, l);
            add(w, &lp->o_b, l, -1, 0, INIT_ZEROS, C, 0, "%s.%d.self_attn.o_proj.bias", pre, l);
        }
        add(w, &lp->ln2_w, l, -1, 0, INIT_ONES, C, 0, "%s.%d.post_attention_layernorm.weight", pre, l);
        if (!rms)
            add(w, &lp->ln2_b, l, -1, 0, INIT_ZEROS, C, 0, "%s.%d.post_attention_layernorm.bias", pre, l);
        lp->is_moe = model_layer_is_moe(c, l);
        if (!lp->is_moe) {
            int F = c->intermediate_size;
            // gate and up adjacent: one (2F,C) GEMM gives [gate | up] per token.
            if (swiglu) {
                add(w, &lp->ffn_in, l, -1, 1, INIT_NORMAL, F, C, "%s.%d.mlp.gate_proj.weight", pre, l);
                add(w, NULL, l, -1, 1, INIT_NORMAL, F, C, "%s.%d.mlp.up_proj.weight", pre, l);
            } else {
                add(w, &lp->ffn_in, l, -1, 1, INIT_NORMAL, F, C, "%s.%d.mlp.up_proj.weight", pre, l);
            }
            add(w, &lp->ffn_out, l, -1, 1, INIT_NORMAL_RESIDUAL, C, F, "%s.%d.mlp.down_proj.weight", pre, l);
            if (c->mlp_bias) {
                if (swiglu) {
                    add(w, &lp->ffn_in_b, l, -1, 0, INIT_ZEROS, F, 0, "%s.%d.mlp.gate_proj.bias", pre, l);
                    add(w, NULL, l, -1, 0, INIT_ZEROS, F, 0, "%s.%d.mlp.up_proj.bias", pre, l);
                } else {
                    add(w, &lp->ffn_in_b, l, -1, 0, INIT_ZEROS, F, 0, "%s.%d.mlp.up_proj.bias", pre, l);
                }
                add(w, &lp->ffn_out_b, l, -1, 0, INIT_ZEROS, C, 0, "%s.%d.mlp.down_proj.bias", pre, l);
            }
            continue;
        }
        int E = c->num_local_experts, F = c->moe_intermediate_size, S = c->num_shared_experts;
        const char *moe = "block_sparse_moe";
        add(w, &lp->moe.gate, l, -1, 1, INIT_NORMAL, E, C, "%s.%d.%s.gate.weight", pre, l, moe);
        // noisy_topk's noise projection, right after the gate: the router reads both as
        // one (2E,C) matrix. Zeros, as tensor2tensor's w_noise: it trains from step 1
        // (the load loss reaches it through softplus'(0) = 1/2).
        if (!strcmp(model_router_type_name(c->router_type), "noisy_topk"))
            add(w, NULL, l, -1, 1, INIT_ZEROS, E, C, "%s.%d.%s.gate_noise.weight", pre, l, moe);
        // The held experts' input projections, then their output projections: local
        // expert j's rows are w_in + j*U*C, as moe/ expects. Only the held ones are
        // visited (add skips the rest): a plan's --search counts a rank's parameters for
        // every layout, and a paper model has thousands of experts a layer.
        const int e_lo = w->phase ? w->e0 : 0, e_hi = w->phase ? (E < w->e0 + w->el ? E : w->e0 + w->el) : 0;
        for (int e = e_lo; e < e_hi; e++) {
            float **first = e == w->e0 ? &lp->moe.w_in : NULL;
            add(w, first, l, e, 1, INIT_NORMAL, F, C, "%s.%d.%s.experts.%d.w1.weight", pre, l, moe, e);
            if (swiglu) add(w, NULL, l, e, 1, INIT_NORMAL, F, C, "%s.%d.%s.experts.%d.w3.weight", pre, l, moe, e);
        }
        for (int e = e_lo; e < e_hi; e++) {
            float **first = e == w->e0 ? &lp->moe.w_out : NULL;
            add(w, first, l, e, 1, INIT_NORMAL_RESIDUAL, C, F, "%s.%d.%s.experts.%d.w2.weight", pre,
                l, moe, e);
        }
        for (int s = 0; s < S; s++) {
            add(w, s == 0 ? &lp->moe.shared_in : NULL, l, -1, 1, INIT_NORMAL, F, C,
                "%s.%d.%s.shared_experts.%d.w1.weight", pre, l, moe, s);
            if (swiglu)
                add(w, NULL, l, -1, 1, INIT_NORMAL, F, C, "%s.%d.%s.shared_experts.%d.w3.weight", pre, l, moe, s);
        }
        for (int s = 0; s < S; s++)
            add(w, s == 0 ? &lp->moe.shared_out : NULL, l, -1, 1, INIT_NORMAL_RESIDUAL, C, F,
                "%s.%d.%s.shared_experts.%d.w2.weight", pre, l, moe, s);
    }
    add(w, &v->lnf_w, -1, -1, 0, INIT_ONES, C, 0, "model.norm.weight");
    if (!rms) add(w, &v->lnf_b, -1, -1, 0, INIT_ZEROS, C, 0, "model.norm.bias");
    if (c->tie_word_embeddings) {
        if (w->phase == 0) v->lm_head = v->wte;
    } else {
        add(w, &v->lm_head, -1, -1, 1, INIT_NORMAL, V, C, "lm_head.weight");
    }
}

static void walk(walker *w, const model_config *c, int e0, int el) {
    w->e0 = e0;
    w->el = el;
    w->phase = 0;
    walk_phase(w, c);
    w->dense_numel = w->offset;
    w->phase = 1;
    walk_phase(w, c);
}

void param_table_build(param_table *t, const model_config *cfg) {
    param_table_build_local(t, cfg, 0, cfg->num_local_experts);
}

void param_table_build_local(param_table *t, const model_config *cfg, int first_expert,
                             int n_experts) {
    memset(t, 0, sizeof *t);
    walker w = {.t = t};
    walk(&w, cfg, first_expert, n_experts);
    t->numel = w.offset;
    t->dense_numel = w.dense_numel;
}

void param_table_numel_local(const model_config *cfg, int first_expert, int n_experts,
                             size_t *numel, size_t *dense_numel) {
    walker w = {0};
    walk(&w, cfg, first_expert, n_experts);
    *numel = w.offset;
    *dense_numel = w.dense_numel;
}

void param_table_free(param_table *t) {
    free(t->tensors);
    memset(t, 0, sizeof *t);
}

const param_tensor *param_table_find(const param_table *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->tensors[i].name, name) == 0) return &t->tensors[i];
    return NULL;
}

void model_params_bind(model_params *v, const model_config *cfg, float *block) {
    model_params_bind_local(v, cfg, block, 0, cfg->num_local_experts);
}

void model_params_bind_local(model_params *v, const model_config *cfg, float *block,
                             int first_expert, int n_experts) {
    memset(v, 0, sizeof *v);
    v->layers = bg_calloc((size_t)cfg->num_hidden_layers, sizeof(layer_params));
    walker w = {.v = v, .block = block};
    walk(&w, cfg, first_expert, n_experts);
}

void model_params_free(model_params *v) {
    free(v->layers);
    v->layers = NULL;
}

// FNV-1a: a tensor's random stream is named by the tensor, so a rank holding a few
// experts draws exactly the values a single process holding all of them would.
static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void param_table_init_values(const param_table *t, const model_config *cfg, float *block,
                             uint64_t seed) {
    bg_rng rng;
    float std = cfg->initializer_range;
    // GPT-2's scaled init: projections that write into the residual stream are
    // shrunk by 1/sqrt(2L) so the stream's variance does not grow with depth.
    float std_resid = std / sqrtf(2.0f * (float)cfg->num_hidden_layers);
    for (int i = 0; i < t->count; i++) {
        const param_tensor *p = &t->tensors[i];
        float *x = block + p->offset;
        bg_rng_seed(&rng, seed ^ name_hash(p->name));
        switch (p->init) {
        case INIT_ONES:
            for (size_t j = 0; j < p->numel; j++) x[j] = 1.0f;
            break;
        case INIT_ZEROS:
            memset(x, 0, p->numel * sizeof(float));
            break;
        case INIT_NORMAL:
        case INIT_NORMAL_RESIDUAL: {
            float s = p->init == INIT_NORMAL ? std : std_resid;
            for (size_t j = 0; j < p->numel; j++) x[j] = s * bg_rng_normal(&rng);
            break;
        }
        }
    }
}

size_t model_param_count(const model_config *cfg) {
    walker w = {0};
    walk(&w, cfg, 0, cfg->num_local_experts);
    return w.offset;
}

// One layer's attention projections: q, o and the (GQA: narrower) k, v; under latent
// attention (plan only) the latents' down and up projections and o from the v heads.
double model_attention_matmul_params(const model_config *c) {
    const double C = c->hidden_size, H = c->num_attention_heads;
    if (model_config_mla(c)) {
        const double qk = c->qk_nope_head_dim + c->qk_rope_head_dim, ql = c->q_lora_rank;
        const double q = ql > 0 ? C * ql + ql * H * qk : C * H * qk;
        const double kv = C * (c->kv_lora_rank + c->qk_rope_head_dim) +
                          (double)c->kv_lora_rank * H * (c->qk_nope_head_dim + c->v_head_dim);
        return q + kv + H * c->v_head_dim * C;
    }
    const double KV = (double)model_kv_heads(c) * (c->hidden_size / c->num_attention_heads);
    return 2 * C * C + 2 * C * KV;
}

double model_active_matmul_params(const model_config *c) {
    double C = c->hidden_size, total = 0;
    int U_mul = c->hidden_act == FFN_SWIGLU ? 3 : 2;  // matrices per FFN
    for (int l = 0; l < c->num_hidden_layers; l++) {
        total += model_attention_matmul_params(c);
        if (model_layer_is_moe(c, l)) {
            double ffn = U_mul * C * c->moe_intermediate_size;
            total += c->num_local_experts * C;  // router
            total += (c->num_experts_per_tok + c->num_shared_experts) * ffn;
        } else {
            total += U_mul * C * c->intermediate_size;
        }
    }
    total += (double)c->vocab_size * C;  // LM head
    return total;
}
