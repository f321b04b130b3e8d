#include "model/config.h"
#include "core/error.h"
#include "moe/router.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

void model_config_defaults(model_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->norm = NORM_LAYERNORM;
    cfg->hidden_act = FFN_GELU;
    cfg->position_embedding = POS_LEARNED;
    cfg->rope_theta = 10000.0f;
    cfg->norm_eps = 1e-5f;
    cfg->tie_word_embeddings = 1;
    cfg->initializer_range = 0.02f;
    cfg->num_experts_per_tok = 2;
    cfg->moe_layer_freq = 1;
    cfg->norm_topk_prob = 1;
    cfg->router_aux_loss_coef = 0.01f;
    cfg->router_z_loss_coef = 0.0f;
    cfg->router_bias_update_rate = 0.001f;  // DeepSeek-V3's gamma
    cfg->router_groups = 1;
    cfg->router_topk_groups = 1;
}

typedef enum { KEY_INT, KEY_FLOAT, KEY_BOOL, KEY_ENUM } key_kind;

typedef struct {
    const char *name;
    key_kind kind;
    size_t offset;
    int required;
    const char *const *choices;  // KEY_ENUM: NULL-terminated names, value = index
    int plan_only;               // priced by the planner, not trained; written when set
} key_spec;

static const char *const norm_names[] = {"layernorm", "rmsnorm", NULL};
static const char *const act_names[] = {"gelu", "swiglu", NULL};
static const char *const pos_names[] = {"learned", "rope", NULL};
static const char *const router_type_names[] = {"topk", "switch", "gshard", "noisy_topk",
                                                "swipe", "bias", NULL};
static const char *const router_score_names[] = {"softmax", "sigmoid", NULL};
static const char *const aux_scope_names[] = {"batch", "sequence", NULL};
static const char *const drop_policy_names[] = {"probability", "position", NULL};

const char *model_router_type_name(int r) {
    return r >= 0 && r < (int)(sizeof router_type_names / sizeof *router_type_names) - 1
               ? router_type_names[r]
               : NULL;
}

#define KEY(field, kind, req, ch) {#field, kind, offsetof(model_config, field), req, ch, 0}
#define PLAN_KEY(field) {#field, KEY_INT, offsetof(model_config, field), 0, NULL, 1}
static const key_spec keys[] = {
    KEY(vocab_size, KEY_INT, 1, NULL),
    KEY(max_position_embeddings, KEY_INT, 1, NULL),
    KEY(hidden_size, KEY_INT, 1, NULL),
    KEY(num_hidden_layers, KEY_INT, 1, NULL),
    KEY(num_attention_heads, KEY_INT, 1, NULL),
    KEY(num_key_value_heads, KEY_INT, 0, NULL),
    KEY(intermediate_size, KEY_INT, 0, NULL),
    KEY(norm, KEY_ENUM, 0, norm_names),
    KEY(hidden_act, KEY_ENUM, 0, act_names),
    KEY(position_embedding, KEY_ENUM, 0, pos_names),
    KEY(rope_theta, KEY_FLOAT, 0, NULL),
    KEY(norm_eps, KEY_FLOAT, 0, NULL),
    KEY(tie_word_embeddings, KEY_BOOL, 0, NULL),
    KEY(attention_bias, KEY_BOOL, 0, NULL),
    KEY(mlp_bias, KEY_BOOL, 0, NULL),
    KEY(initializer_range, KEY_FLOAT, 0, NULL),
    KEY(num_local_experts, KEY_INT, 0, NULL),
    KEY(num_experts_per_tok, KEY_INT, 0, NULL),
    KEY(moe_intermediate_size, KEY_INT, 0, NULL),
    KEY(moe_layer_freq, KEY_INT, 0, NULL),
    KEY(num_shared_experts, KEY_INT, 0, NULL),
    KEY(norm_topk_prob, KEY_BOOL, 0, NULL),
    KEY(router_aux_loss_coef, KEY_FLOAT, 0, NULL),
    KEY(router_z_loss_coef, KEY_FLOAT, 0, NULL),
    KEY(router_type, KEY_ENUM, 0, router_type_names),
    KEY(router_score, KEY_ENUM, 0, router_score_names),
    KEY(router_jitter, KEY_FLOAT, 0, NULL),
    KEY(router_bias_update_rate, KEY_FLOAT, 0, NULL),
    KEY(router_groups, KEY_INT, 0, NULL),
    KEY(router_topk_groups, KEY_INT, 0, NULL),
    KEY(router_aux_loss_scope, KEY_ENUM, 0, aux_scope_names),
    KEY(capacity_factor, KEY_FLOAT, 0, NULL),
    KEY(drop_policy, KEY_ENUM, 0, drop_policy_names),
    KEY(routing_group_tokens, KEY_INT, 0, NULL),
    PLAN_KEY(q_lora_rank),
    PLAN_KEY(kv_lora_rank),
    PLAN_KEY(qk_nope_head_dim),
    PLAN_KEY(qk_rope_head_dim),
    PLAN_KEY(v_head_dim),
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

// Keys a Hugging Face config carries that do not change bagualu's model.
static const char *const ignored_keys[] = {"model_type", "architectures", "torch_dtype",
                                           "_name_or_path", "transformers_version", NULL};

static int set_key(model_config *cfg, const key_spec *k, const cJSON *v, const char *origin) {
    char *field = (char *)cfg + k->offset;
    switch (k->kind) {
    case KEY_INT: {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
            fabs(v->valuedouble) > 2147483647.0)
            return bg_error("%s: \"%s\" must be an integer", origin, k->name);
        *(int *)field = (int)v->valuedouble;
        return BG_OK;
    }
    case KEY_FLOAT:
        // Finite as a float, not only as a double: 1e39 would become infinity.
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !isfinite((float)v->valuedouble))
            return bg_error("%s: \"%s\" must be a finite number", origin, k->name);
        *(float *)field = (float)v->valuedouble;
        return BG_OK;
    case KEY_BOOL:
        if (!cJSON_IsBool(v)) return bg_error("%s: \"%s\" must be true or false", origin, k->name);
        *(int *)field = cJSON_IsTrue(v);
        return BG_OK;
    case KEY_ENUM:
        if (cJSON_IsString(v)) {
            for (int i = 0; k->choices[i]; i++)
                if (strcmp(v->valuestring, k->choices[i]) == 0) {
                    *(int *)field = i;
                    return BG_OK;
                }
        }
        {
            char list[128] = "";
            for (int i = 0; k->choices[i]; i++) {
                strcat(list, i ? ", " : "");
                strcat(list, k->choices[i]);
            }
            return bg_error("%s: \"%s\" must be one of: %s", origin, k->name, list);
        }
    }
    return BG_ERR;
}

static int parse_config(model_config *cfg, const char *json, const char *origin, int plan) {
    model_config_defaults(cfg);
    cJSON *root = cJSON_Parse(json);
    if (!root) return bg_error("%s: not valid JSON (near \"%.20s\")", origin,
                               cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return bg_error("%s: the config must be a JSON object", origin);
    }
    int seen[NKEYS] = {0};
    int rc = BG_OK;
    for (const cJSON *v = root->child; v && rc == BG_OK; v = v->next) {
        int found = -1;
        for (int i = 0; i < NKEYS; i++)
            if (strcmp(v->string, keys[i].name) == 0) found = i;
        if (found < 0) {
            int ignored = 0;
            for (int i = 0; ignored_keys[i]; i++) ignored |= strcmp(v->string, ignored_keys[i]) == 0;
            if (!ignored) rc = bg_error("%s: unknown key \"%s\"", origin, v->string);
            continue;
        }
        if (seen[found]) rc = bg_error("%s: key \"%s\" given twice", origin, v->string);
        else rc = set_key(cfg, &keys[found], v, origin);
        seen[found] = 1;
    }
    for (int i = 0; i < NKEYS && rc == BG_OK; i++)
        if (keys[i].required && !seen[i])
            rc = bg_error("%s: missing required key \"%s\"", origin, keys[i].name);
    cJSON_Delete(root);
    if (rc != BG_OK) return rc;
    // Absent, it is Hugging Face's default: one key/value head per query head.
    for (int i = 0; i < NKEYS; i++)
        if (rc == BG_OK && strcmp(keys[i].name, "num_key_value_heads") == 0) {
            if (!seen[i]) cfg->num_key_value_heads = cfg->num_attention_heads;
            else if (cfg->num_key_value_heads <= 0)
                rc = bg_error("%s: num_key_value_heads must be positive, got %d", origin,
                              cfg->num_key_value_heads);
        }
    if (rc != BG_OK) return rc;
    rc = model_config_validate(cfg, origin);
    if (rc == BG_OK && !plan && model_config_mla(cfg))
        rc = bg_error("%s: multi-head latent attention (v_head_dim) is for `bagualu plan` only: "
                      "bagualu trains standard attention", origin);
    return rc;
}

int model_config_parse(model_config *cfg, const char *json, const char *origin) {
    return parse_config(cfg, json, origin, 0);
}

int model_config_parse_plan(model_config *cfg, const char *json, const char *origin) {
    return parse_config(cfg, json, origin, 1);
}

// The routing keys of a MoE model (num_local_experts and num_experts_per_tok already
// checked).
static int validate_routing(const model_config *c, const char *origin) {
    const char *type = router_type_names[c->router_type];
    const int E = c->num_local_experts, k = c->num_experts_per_tok;
    if (c->router_type == 1 && k != 1)
        return bg_error("%s: router_type switch routes top-1: num_experts_per_tok must be 1, got %d",
                        origin, k);
    if (c->router_type == 2 && k != 2)
        return bg_error("%s: router_type gshard routes top-2: num_experts_per_tok must be 2, got %d",
                        origin, k);
    BG_ASSERT(moe_router_find(type));  // every name router_type accepts has a gate
    // Sigmoid scores only where the gate defines them (DeepSeek-V3's bias gate); the
    // others' balance losses are written for softmax probabilities.
    if (c->router_score == MOE_SCORE_SIGMOID && strcmp(type, "bias") != 0)
        return bg_error("%s: router_score sigmoid applies to router_type bias only, got %s",
                        origin, type);
    if (c->capacity_factor < 0)
        return bg_error("%s: capacity_factor must be >= 0 (0: dropless), got %g", origin,
                        c->capacity_factor);
    if (c->router_jitter < 0 || c->router_jitter >= 1)
        return bg_error("%s: router_jitter must be in [0, 1), got %g", origin, c->router_jitter);
    if (c->router_bias_update_rate < 0)
        return bg_error("%s: router_bias_update_rate must be >= 0", origin);
    if (c->routing_group_tokens < 0)
        return bg_error("%s: routing_group_tokens must be >= 0 (0: one sequence)", origin);
    if (c->router_groups < 1) return bg_error("%s: router_groups must be >= 1", origin);
    if (E % c->router_groups != 0)
        return bg_error("%s: router_groups (%d) must divide num_local_experts (%d)", origin,
                        c->router_groups, E);
    if (c->router_topk_groups < 1 || c->router_topk_groups > c->router_groups)
        return bg_error("%s: router_topk_groups must be in [1, router_groups = %d], got %d",
                        origin, c->router_groups, c->router_topk_groups);
    if (k > c->router_topk_groups * (E / c->router_groups))
        return bg_error("%s: num_experts_per_tok (%d) exceeds the experts of router_topk_groups "
                        "(%d groups of %d)", origin, k, c->router_topk_groups, E / c->router_groups);
    return BG_OK;
}

int model_config_validate(const model_config *c, const char *origin) {
    if (c->vocab_size <= 0) return bg_error("%s: vocab_size must be positive", origin);
    if (c->max_position_embeddings <= 0)
        return bg_error("%s: max_position_embeddings must be positive", origin);
    if (c->hidden_size <= 0) return bg_error("%s: hidden_size must be positive", origin);
    if (c->num_hidden_layers <= 0) return bg_error("%s: num_hidden_layers must be positive", origin);
    if (c->num_attention_heads <= 0)
        return bg_error("%s: num_attention_heads must be positive", origin);
    if (c->hidden_size % c->num_attention_heads != 0)
        return bg_error("%s: num_attention_heads (%d) does not divide hidden_size (%d)", origin,
                        c->num_attention_heads, c->hidden_size);
    if (c->num_key_value_heads < 0 ||
        (c->num_key_value_heads > 0 && c->num_attention_heads % c->num_key_value_heads != 0))
        return bg_error("%s: num_key_value_heads (%d) must be positive and divide num_attention_heads (%d)",
                        origin, c->num_key_value_heads, c->num_attention_heads);
    const int mla[] = {c->q_lora_rank, c->kv_lora_rank, c->qk_nope_head_dim, c->qk_rope_head_dim,
                       c->v_head_dim};
    for (int i = 0; i < 5; i++)
        if (mla[i] < 0 || mla[i] > (1 << 16))
            return bg_error("%s: the latent attention sizes (q_lora_rank, kv_lora_rank, qk_nope_head_dim, "
                            "qk_rope_head_dim, v_head_dim) must be in [0, 65536]", origin);
    const int mla_any = c->q_lora_rank || c->kv_lora_rank || c->qk_nope_head_dim ||
                        c->qk_rope_head_dim || c->v_head_dim;
    if (mla_any && (!c->v_head_dim || !c->kv_lora_rank || c->qk_nope_head_dim + c->qk_rope_head_dim <= 0))
        return bg_error("%s: latent attention needs v_head_dim, kv_lora_rank and a query/key head "
                        "size (qk_nope_head_dim + qk_rope_head_dim) all positive", origin);
    int hs = c->hidden_size / c->num_attention_heads;
    if (c->position_embedding == POS_ROPE && hs % 2 != 0)
        return bg_error("%s: rope needs an even head size, got %d", origin, hs);
    if (c->position_embedding == POS_ROPE && !(c->rope_theta > 0))
        return bg_error("%s: rope_theta must be positive", origin);
    if (!(c->norm_eps > 0)) return bg_error("%s: norm_eps must be positive", origin);
    if (!(c->initializer_range > 0)) return bg_error("%s: initializer_range must be positive", origin);
    if (c->num_local_experts < 0) return bg_error("%s: num_local_experts must be >= 0", origin);
    // Sizes must keep every tensor's element count within size_t and every row
    // count within int: bound the hidden dimensions generously,
    // and before the per-layer loop below (10^9 layers would spin there).
    if (c->vocab_size > (1 << 24) || c->hidden_size > (1 << 16) ||
        c->max_position_embeddings > (1 << 20) || c->intermediate_size > (1 << 18) ||
        c->moe_intermediate_size > (1 << 18) || c->num_local_experts > (1 << 14) ||
        c->num_hidden_layers > 4096)
        return bg_error("%s: a size in the config is beyond what bagualu supports", origin);
    int any_dense = 0, any_moe = 0;
    if (c->moe_layer_freq <= 0) return bg_error("%s: moe_layer_freq must be positive", origin);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        if (model_layer_is_moe(c, l)) any_moe = 1;
        else any_dense = 1;
    }
    if (c->mlp_bias && !any_dense)
        return bg_error("%s: mlp_bias is for dense FFN layers, and every layer is MoE (experts have no biases)", origin);
    if (any_dense && c->intermediate_size <= 0)
        return bg_error("%s: intermediate_size must be positive (the model has dense FFN layers)",
                        origin);
    if (any_moe) {
        if (c->num_experts_per_tok <= 0)
            return bg_error("%s: num_experts_per_tok must be positive", origin);
        if (c->num_experts_per_tok > c->num_local_experts)
            return bg_error("%s: num_experts_per_tok (%d) exceeds num_local_experts (%d)", origin,
                            c->num_experts_per_tok, c->num_local_experts);
        if (c->moe_intermediate_size <= 0)
            return bg_error("%s: moe_intermediate_size must be positive", origin);
        if (c->num_shared_experts < 0)
            return bg_error("%s: num_shared_experts must be >= 0", origin);
        if (c->router_aux_loss_coef < 0 || c->router_z_loss_coef < 0)
            return bg_error("%s: router loss coefficients must be >= 0", origin);
        int rc = validate_routing(c, origin);
        if (rc != BG_OK) return rc;
    }
    return BG_OK;
}

static int load_config(model_config *cfg, const char *path, int plan) {
    FILE *f = fopen(path, "rb");
    if (!f) return bg_error("%s: cannot open config file", path);
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            if (cap > (64u << 20)) {
                free(text);
                fclose(f);
                return bg_error("%s: config file too large", path);
            }
            text = realloc(text, cap);
            if (!text) {
                fclose(f);
                return bg_error("%s: out of memory reading config", path);
            }
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    int read_error = ferror(f);
    fclose(f);
    if (read_error) {
        free(text);
        return bg_error("%s: cannot read config file", path);
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        return bg_error("%s: config file contains NUL bytes (not JSON text)", path);
    }
    int rc = parse_config(cfg, text, path, plan);
    free(text);
    return rc;
}

int model_config_load(model_config *cfg, const char *path) { return load_config(cfg, path, 0); }

int model_config_load_plan(model_config *cfg, const char *path) { return load_config(cfg, path, 1); }

char *model_config_to_json(const model_config *cfg) {
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < NKEYS; i++) {
        const char *field = (const char *)cfg + keys[i].offset;
        if (keys[i].plan_only && *(const int *)field == 0) continue;  // standard attention
        switch (keys[i].kind) {
        case KEY_INT: {
            int v = *(const int *)field;
            if (field == (const char *)&cfg->num_key_value_heads) v = model_kv_heads(cfg);
            cJSON_AddNumberToObject(root, keys[i].name, v);
            break;
        }
        case KEY_FLOAT: cJSON_AddNumberToObject(root, keys[i].name, *(const float *)field); break;
        case KEY_BOOL: cJSON_AddBoolToObject(root, keys[i].name, *(const int *)field); break;
        case KEY_ENUM:
            cJSON_AddStringToObject(root, keys[i].name, keys[i].choices[*(const int *)field]);
            break;
        }
    }
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    return out;
}
