#ifndef BG_MODEL_CONFIG_H
#define BG_MODEL_CONFIG_H
// The model config: a JSON file with Hugging Face style keys (see configs/).
#include "moe/ffn.h"

typedef enum { NORM_LAYERNORM = 0, NORM_RMSNORM = 1 } model_norm;
typedef enum { POS_LEARNED = 0, POS_ROPE = 1 } model_pos;

typedef struct {
    int vocab_size;
    int max_position_embeddings;
    int hidden_size;
    int num_hidden_layers;
    int num_attention_heads;
    // Grouped-query attention (Hugging Face's name): k and v have this many heads, query
    // head h reads head h / (heads / kv heads). 0 (a config built in code): = heads.
    int num_key_value_heads;
    int intermediate_size;      // dense FFN hidden size
    model_norm norm;
    ffn_act hidden_act;
    model_pos position_embedding;
    float rope_theta;
    float norm_eps;
    int tie_word_embeddings;
    // Hugging Face's names: biases on q, k, v and o projections (attention_bias) and on
    // the dense FFN layers' two projections (mlp_bias; experts have none). GPT-2 has both.
    int attention_bias;
    int mlp_bias;
    float initializer_range;
    // MoE: num_local_experts == 0 gives a dense model
    int num_local_experts;
    int num_experts_per_tok;
    int moe_intermediate_size;
    int moe_layer_freq;         // layer l is MoE when (l+1) % freq == 0
    int num_shared_experts;
    int norm_topk_prob;
    float router_aux_loss_coef;
    float router_z_loss_coef;
    // Routing (moe/moe_types.h's moe_routing says what each does). The enums are
    // indices into their name lists: router_type into model_router_type_name, the
    // others in the order of moe_score, moe_aux_scope and moe_drop_policy.
    int router_type;            // topk (default), switch, gshard, noisy_topk, swipe, bias
    int router_score;           // softmax (default) or sigmoid
    float router_jitter;        // switch: multiplicative uniform noise 1 ± jitter (0: off)
    float router_bias_update_rate;  // bias: per-step bias change rate · sign(...)
    int router_groups;          // group-limited routing: experts in G contiguous groups
    int router_topk_groups;     // a token's experts come from at most M groups
    int router_aux_loss_scope;  // batch (default) or sequence
    float capacity_factor;      // 0: dropless; else capacity = ceil(cf·tokens·k/E) per group
    int drop_policy;            // probability (default) or position
    int routing_group_tokens;   // tokens per routing group; 0: one sequence (--seq-len)
    // Multi-head latent attention (DeepSeek-V2/V3; Hugging Face's names), priced by
    // `bagualu plan` only: q and kv pass through low-rank latents (q_lora_rank 0: q is
    // projected directly), each head scores with qk_nope + qk_rope dims and reads v_head_dim.
    // model_config_parse refuses a config with v_head_dim set (bagualu's attention is
    // standard); model_config_parse_plan accepts it. 0 everywhere: standard attention.
    int q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
} model_config;

// "topk", "switch", ...: the name of router_type r (moe_router_find's key), NULL if none.
const char *model_router_type_name(int r);

// Defaults for every optional key (used before parsing).
void model_config_defaults(model_config *cfg);
// Parses JSON text; unknown keys, wrong types and invalid values are errors (bg_error).
int model_config_parse(model_config *cfg, const char *json, const char *origin);
int model_config_load(model_config *cfg, const char *path);
// The same, admitting what only the planner prices (multi-head latent attention).
int model_config_parse_plan(model_config *cfg, const char *json, const char *origin);
int model_config_load_plan(model_config *cfg, const char *path);
int model_config_validate(const model_config *cfg, const char *origin);
// The config as JSON text (caller frees); parsing it gives the same config.
char *model_config_to_json(const model_config *cfg);

// The key/value heads: num_key_value_heads, or the query heads when it is 0.
static inline int model_kv_heads(const model_config *cfg) {
    return cfg->num_key_value_heads > 0 ? cfg->num_key_value_heads : cfg->num_attention_heads;
}

// Floats of one token's q, k and v: hidden_size + 2 · kv heads · head size.
static inline int model_qkv_width(const model_config *cfg) {
    return cfg->hidden_size + 2 * model_kv_heads(cfg) * (cfg->hidden_size / cfg->num_attention_heads);
}

// Multi-head latent attention (plan only).
static inline int model_config_mla(const model_config *cfg) { return cfg->v_head_dim > 0; }

static inline int model_layer_is_moe(const model_config *cfg, int layer) {
    return cfg->num_local_experts > 0 && (layer + 1) % cfg->moe_layer_freq == 0;
}
#endif
