// Hugging Face model directory → bagualu checkpoint (what is accepted: import_hf.h).
#include "train/import_hf.h"

#include "core/error.h"
#include "core/text_file.h"
#include "io/file_sync.h"
#include "io/safetensors.h"
#include "model/params.h"
#include "model/zero_shard.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"
#include "train/hf_deepseek.h"
#include "train/trainer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { IMPORT_OK = 0, IMPORT_FAILED = 1, IMPORT_BAD_INPUT = 2 };
#define IMPORT_PATH_MAX 4096

// ---- the tensors: one file or a sharded index ---------------------------------------

typedef struct {
    st_file *files;
    unsigned char **used;       // per file, per tensor: taken by a parameter (or skipped)
    int n;
} hf_source;

static void source_close(hf_source *s) {
    for (int i = 0; i < s->n; i++) {
        st_close(&s->files[i]);
        free(s->used[i]);
    }
    free(s->files);
    free(s->used);
    memset(s, 0, sizeof *s);
}

static int source_add(hf_source *s, const char *dir, const char *name) {
    char path[IMPORT_PATH_MAX + 300];
    if (strchr(name, '/') || !strcmp(name, "..") || strlen(name) > 255)
        return bg_error("%s/model.safetensors.index.json: weight_map names a file outside the directory: \"%s\"", dir, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->files[i].path, path)) return BG_OK;
    s->files = realloc(s->files, sizeof *s->files * (size_t)(s->n + 1));
    s->used = realloc(s->used, sizeof *s->used * (size_t)(s->n + 1));
    BG_ASSERT(s->files && s->used);
    memset(&s->files[s->n], 0, sizeof s->files[s->n]);
    if (st_open(&s->files[s->n], path) != BG_OK) return BG_ERR;
    s->used[s->n] = calloc((size_t)s->files[s->n].count + 1, 1);
    BG_ASSERT(s->used[s->n]);
    s->n++;
    return BG_OK;
}

static int source_open(hf_source *s, const char *dir) {
    memset(s, 0, sizeof *s);
    char path[IMPORT_PATH_MAX + 64];
    struct stat st;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (stat(path, &st) == 0) return source_add(s, dir, "model.safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    char *text = bg_read_text_file(path, 64u << 20, NULL);
    if (!text) return bg_error("%s: no model.safetensors and no model.safetensors.index.json", dir);
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map"), *e;
    int rc = BG_OK;
    if (!cJSON_IsObject(map)) rc = bg_error("%s: no \"weight_map\" object", path);
    cJSON_ArrayForEach(e, map) {
        if (rc != BG_OK) break;
        if (!cJSON_IsString(e)) rc = bg_error("%s: weight_map[\"%s\"] is not a file name", path, e->string);
        else rc = source_add(s, dir, e->valuestring);
    }
    // Every tensor the index names must be in the file it names.
    cJSON_ArrayForEach(e, map) {
        if (rc != BG_OK) break;
        char file[IMPORT_PATH_MAX + 300];
        snprintf(file, sizeof file, "%s/%s", dir, e->valuestring);
        for (int i = 0; i < s->n; i++)
            if (!strcmp(s->files[i].path, file) && !st_find(&s->files[i], e->string))
                rc = bg_error("%s: tensor \"%s\" is not in %s", path, e->string, e->valuestring);
    }
    cJSON_Delete(root);
    if (rc == BG_OK && s->n == 0) rc = bg_error("%s: weight_map names no file", path);
    return rc;
}

static const st_tensor *source_find(const hf_source *s, const char *name, int *file, int *index) {
    for (int i = 0; i < s->n; i++) {
        const st_tensor *t = st_find(&s->files[i], name);
        if (!t) continue;
        *file = i;
        *index = (int)(t - s->files[i].tensors);
        return t;
    }
    return NULL;
}

// The tensor `name` of exactly (d0[,d1]) into out as f32, marked as taken.
static int take(hf_source *s, const char *name, float *out, int64_t d0, int64_t d1) {
    int f, i;
    if (!source_find(s, name, &f, &i)) return bg_error("%s: missing tensor \"%s\"", s->files[0].path, name);
    int64_t shape[2] = {d0, d1};
    if (st_read_f32(&s->files[f], name, out, d1 > 0 ? 2 : 1, shape) != BG_OK) return BG_ERR;
    s->used[f][i] = 1;
    return BG_OK;
}

static void skip(hf_source *s, const char *name) {
    int f, i;
    if (source_find(s, name, &f, &i)) s->used[f][i] = 1;
}

// Nothing left behind: a tensor no parameter took is something this model lacks.
static int source_all_taken(const hf_source *s) {
    for (int f = 0; f < s->n; f++)
        for (int i = 0; i < s->files[f].count; i++)
            if (!s->used[f][i])
                return bg_error("%s: tensor \"%s\" has no place in bagualu's model", s->files[f].path,
                                s->files[f].tensors[i].name);
    return BG_OK;
}

// With tied embeddings a stored lm_head.weight must be the embedding itself.
static int take_tied_head(hf_source *s, const char *name, const float *wte, int64_t V, int64_t C) {
    int f, i;
    if (!source_find(s, name, &f, &i)) return BG_OK;
    float *w = bg_malloc(sizeof(float) * (size_t)(V * C));
    int rc = take(s, name, w, V, C);
    if (rc == BG_OK && memcmp(w, wte, sizeof(float) * (size_t)(V * C)) != 0)
        rc = bg_error("%s: tensor \"%s\" differs from the embedding but tie_word_embeddings is true",
                      s->files[0].path, name);
    free(w);
    return rc;
}

// ---- config.json --------------------------------------------------------------------

typedef struct {
    const char *path;
    const cJSON *root;
    cJSON *out;                 // bagualu's config, built key by key
} hf_config;

// Keys that say nothing about the computation (bookkeeping, token ids, caching, dropout
// rates: bagualu trains without dropout and evaluates as transformers does).
static const char *const harmless_keys[] = {
    "architectures", "model_type", "torch_dtype", "transformers_version", "_name_or_path",
    "bos_token_id", "eos_token_id", "pad_token_id", "use_cache", "return_dict",
    "output_router_logits", "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type",
    "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
    "task_specific_params", "n_ctx", "reorder_and_upcast_attn", "id2label", "label2id",
    NULL};

static int in_list(const char *key, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(key, list[i])) return 1;
    return 0;
}

// Every key must be mapped, checked or harmless: anything else is refused by name.
static int check_keys(const hf_config *h, const char *const *known) {
    const cJSON *e;
    cJSON_ArrayForEach(e, h->root) {
        if (!in_list(e->string, known) && !in_list(e->string, harmless_keys))
            return bg_error("%s: key \"%s\" is not something bagualu's model can represent", h->path,
                            e->string);
    }
    return BG_OK;
}

// HF key → bagualu key, a number (def when absent; required when def is NAN).
static int map_number(hf_config *h, const char *hf_key, const char *bg_key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->root, hf_key);
    if (!v || cJSON_IsNull(v)) {
        if (def != def) return bg_error("%s: missing key \"%s\"", h->path, hf_key);
        cJSON_AddNumberToObject(h->out, bg_key, def);
        return BG_OK;
    }
    if (!cJSON_IsNumber(v)) return bg_error("%s: key \"%s\" is not a number", h->path, hf_key);
    cJSON_AddNumberToObject(h->out, bg_key, v->valuedouble);
    return BG_OK;
}

static double number_or(const hf_config *h, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->root, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

// A key this model has one value for: absent, null, or that value.
static int require_null(const hf_config *h, const char *key, const char *why) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->root, key);
    if (v && !cJSON_IsNull(v) && !(cJSON_IsFalse(v)) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return bg_error("%s: key \"%s\" is set, but %s", h->path, key, why);
    return BG_OK;
}

static int require_bool(const hf_config *h, const char *key, int want, const char *why) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->root, key);
    if (v && (!cJSON_IsBool(v) || cJSON_IsTrue(v) != want))
        return bg_error("%s: key \"%s\" must be %s: %s", h->path, key, want ? "true" : "false", why);
    return BG_OK;
}

static int require_string(const hf_config *h, const char *key, const char *const *allowed, const char *why) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->root, key);
    if (v && (!cJSON_IsString(v) || !in_list(v->valuestring, allowed)))
        return bg_error("%s: key \"%s\" is %s: %s", h->path, key,
                        cJSON_IsString(v) ? v->valuestring : "not a string", why);
    return BG_OK;
}

static int tied(const hf_config *h, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->root, "tie_word_embeddings");
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

static int mixtral_config(hf_config *h) {
    static const char *const known[] = {
        "vocab_size", "max_position_embeddings", "hidden_size", "intermediate_size",
        "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "hidden_act", "rms_norm_eps", "rope_theta", "sliding_window", "attention_dropout",
        "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
        "router_jitter_noise", "initializer_range", "tie_word_embeddings", "rope_scaling",
        "attention_bias", "mlp_bias", NULL};
    static const char *const silu[] = {"silu", NULL};
    if (check_keys(h, known) != BG_OK) return BG_ERR;
    double C = number_or(h, "hidden_size", 0), NH = number_or(h, "num_attention_heads", 0);
    // Grouped-query attention: MixtralConfig's default is 8 key/value heads, null means
    // one per query head; the config's check refuses a count that does not divide NH.
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(h->root, "num_key_value_heads");
    if (kv && !cJSON_IsNull(kv) && !cJSON_IsNumber(kv))
        return bg_error("%s: key \"num_key_value_heads\" is not a number", h->path);
    cJSON_AddNumberToObject(h->out, "num_key_value_heads", !kv ? 8 : cJSON_IsNull(kv) ? NH : kv->valuedouble);
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(h->root, "head_dim");
    if (hd && !cJSON_IsNull(hd) && (!cJSON_IsNumber(hd) || NH <= 0 || hd->valuedouble * NH != C))
        return bg_error("%s: key \"head_dim\" must be hidden_size / num_attention_heads", h->path);
    if (require_string(h, "hidden_act", silu, "Mixtral's experts in bagualu are SwiGLU (silu)") != BG_OK ||
        require_null(h, "sliding_window", "bagualu's attention is full causal attention") != BG_OK ||
        require_null(h, "rope_scaling", "bagualu's RoPE has no scaling") != BG_OK ||
        require_null(h, "attention_dropout", "bagualu has no attention dropout") != BG_OK ||
        require_null(h, "router_jitter_noise", "bagualu's top-k gate has no jitter") != BG_OK ||
        require_bool(h, "attention_bias", 0, "bagualu's attention projections have no biases") != BG_OK ||
        require_bool(h, "mlp_bias", 0, "bagualu's experts have no biases") != BG_OK)
        return BG_ERR;
    // Absent keys take MixtralConfig's defaults.
    if (map_number(h, "vocab_size", "vocab_size", 32000) != BG_OK ||
        map_number(h, "max_position_embeddings", "max_position_embeddings", 4096 * 32) != BG_OK ||
        map_number(h, "hidden_size", "hidden_size", 0.0 / 0.0) != BG_OK ||
        map_number(h, "num_hidden_layers", "num_hidden_layers", 0.0 / 0.0) != BG_OK ||
        map_number(h, "num_attention_heads", "num_attention_heads", 0.0 / 0.0) != BG_OK ||
        map_number(h, "intermediate_size", "intermediate_size", 0.0 / 0.0) != BG_OK ||
        map_number(h, "intermediate_size", "moe_intermediate_size", 0.0 / 0.0) != BG_OK ||
        map_number(h, "num_local_experts", "num_local_experts", 8) != BG_OK ||
        map_number(h, "num_experts_per_tok", "num_experts_per_tok", 2) != BG_OK ||
        map_number(h, "rms_norm_eps", "norm_eps", 1e-5) != BG_OK ||
        map_number(h, "rope_theta", "rope_theta", 1e6) != BG_OK ||
        map_number(h, "router_aux_loss_coef", "router_aux_loss_coef", 0.001) != BG_OK ||
        map_number(h, "initializer_range", "initializer_range", 0.02) != BG_OK)
        return BG_ERR;
    cJSON_AddStringToObject(h->out, "norm", "rmsnorm");
    cJSON_AddStringToObject(h->out, "hidden_act", "swiglu");
    cJSON_AddStringToObject(h->out, "position_embedding", "rope");
    cJSON_AddNumberToObject(h->out, "moe_layer_freq", 1);
    cJSON_AddBoolToObject(h->out, "norm_topk_prob", 1);
    cJSON_AddBoolToObject(h->out, "tie_word_embeddings", tied(h, 0));
    return BG_OK;
}

// A number key with one value this model has: absent, null or exactly `want`.
static int require_number(const hf_config *h, const char *key, double want, const char *why) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->root, key);
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == want))
        return bg_error("%s: key \"%s\" must be %g: %s", h->path, key, want, why);
    return BG_OK;
}

static int bool_or(const hf_config *h, const char *key, int def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->root, key);
    if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v))
        return bg_error("%s: key \"%s\" must be true or false", h->path, key);
    *out = cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
    return BG_OK;
}

static int int_or(const hf_config *h, const char *key, int def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(h->root, key);
    if (v && !cJSON_IsNull(v) && (!cJSON_IsNumber(v) || v->valuedouble != (int)v->valuedouble))
        return bg_error("%s: key \"%s\" must be an integer", h->path, key);
    *out = cJSON_IsNumber(v) ? (int)v->valuedouble : def;
    return BG_OK;
}

// DeepSeek-MoE v1 (DeepSeek's configuration_deepseek.py / modeling_deepseek.py; names
// and layers: hf_deepseek.h). Absent keys take DeepseekConfig's defaults.
static int deepseek_config(hf_config *h) {
    // auto_map names DeepSeek's code, ep_size its expert-parallel layout, pretraining_tp
    // splits the projections into slices with the same sums: none changes the function.
    static const char *const known[] = {
        "vocab_size", "max_position_embeddings", "hidden_size", "intermediate_size",
        "moe_intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "n_shared_experts", "n_routed_experts", "num_experts_per_tok",
        "moe_layer_freq", "first_k_dense_replace", "norm_topk_prob", "scoring_func",
        "aux_loss_alpha", "seq_aux", "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling",
        "attention_bias", "attention_dropout", "initializer_range", "tie_word_embeddings",
        "routed_scaling_factor", "topk_method", "n_group", "topk_group", "auto_map", "ep_size",
        "pretraining_tp", NULL};
    static const char *const silu[] = {"silu", NULL}, *const softmax[] = {"softmax", NULL};
    static const char *const greedy[] = {"greedy", "gready", NULL};  // "gready": DeepSeek's spelling
    if (check_keys(h, known) != BG_OK) return BG_ERR;
    if (require_string(h, "hidden_act", silu, "bagualu's DeepSeek experts are SwiGLU (silu)") != BG_OK ||
        require_string(h, "scoring_func", softmax, "bagualu's top-k gate scores by softmax") != BG_OK ||
        require_string(h, "topk_method", greedy, "bagualu's top-k gate picks greedily over all experts") != BG_OK ||
        require_number(h, "routed_scaling_factor", 1, "bagualu does not scale the routed experts' sum") != BG_OK ||
        require_number(h, "n_group", 1, "bagualu's DeepSeek gate is not group-limited") != BG_OK ||
        require_number(h, "topk_group", 1, "bagualu's DeepSeek gate is not group-limited") != BG_OK ||
        require_null(h, "rope_scaling", "bagualu's RoPE has no scaling") != BG_OK ||
        require_null(h, "attention_dropout", "bagualu has no attention dropout") != BG_OK ||
        require_bool(h, "attention_bias", 0, "bagualu's attention projections have no biases") != BG_OK)
        return BG_ERR;
    double NH = number_or(h, "num_attention_heads", 32);
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(h->root, "num_key_value_heads");
    if (kv && !cJSON_IsNull(kv) && !cJSON_IsNumber(kv))
        return bg_error("%s: key \"num_key_value_heads\" is not a number", h->path);
    cJSON_AddNumberToObject(h->out, "num_key_value_heads", !kv ? 32 : cJSON_IsNull(kv) ? NH : kv->valuedouble);
    // Layer l is MoE iff l >= first_k_dense_replace and l % moe_layer_freq == 0; bagualu
    // has the pattern only where some moe_layer_freq of its own gives the same layers.
    int L = 0, first_k = 0, freq = 1, S = 0, k = 0, norm = 0, seq = 1;
    if (int_or(h, "num_hidden_layers", 30, &L) != BG_OK || int_or(h, "first_k_dense_replace", 0, &first_k) != BG_OK ||
        int_or(h, "moe_layer_freq", 1, &freq) != BG_OK || int_or(h, "n_shared_experts", 0, &S) != BG_OK ||
        int_or(h, "num_experts_per_tok", 0, &k) != BG_OK ||
        bool_or(h, "norm_topk_prob", 0, &norm) != BG_OK || bool_or(h, "seq_aux", 1, &seq) != BG_OK)
        return BG_ERR;
    int bg_freq = hf_deepseek_bagualu_freq(L, first_k, freq);
    if (!bg_freq)
        return bg_error("%s: key \"first_k_dense_replace\" (%d) with \"moe_layer_freq\" (%d) of %d layers: "
                        "bagualu's MoE layers are those with (l + 1) %% moe_layer_freq == 0, and no "
                        "moe_layer_freq gives these", h->path, first_k, freq, L);
    cJSON_AddNumberToObject(h->out, "moe_layer_freq", bg_freq);
    cJSON_AddNumberToObject(h->out, "num_shared_experts", S);
    // MoEGate renormalizes only when top_k > 1: a top-1 weight stays the probability.
    cJSON_AddBoolToObject(h->out, "norm_topk_prob", norm && k != 1);
    // MoEGate's aux loss is bagualu's E·Σ f_i·P_i: over the batch, or per sequence
    // (seq_aux, the mean over sequences): training-only, mapped exactly.
    cJSON_AddStringToObject(h->out, "router_aux_loss_scope", seq ? "sequence" : "batch");
    if (map_number(h, "vocab_size", "vocab_size", 102400) != BG_OK ||
        map_number(h, "max_position_embeddings", "max_position_embeddings", 2048) != BG_OK ||
        map_number(h, "hidden_size", "hidden_size", 0.0 / 0.0) != BG_OK ||
        map_number(h, "num_hidden_layers", "num_hidden_layers", 0.0 / 0.0) != BG_OK ||
        map_number(h, "num_attention_heads", "num_attention_heads", 0.0 / 0.0) != BG_OK ||
        map_number(h, "intermediate_size", "intermediate_size", 11008) != BG_OK ||
        map_number(h, "moe_intermediate_size", "moe_intermediate_size", 1407) != BG_OK ||
        map_number(h, "n_routed_experts", "num_local_experts", 0.0 / 0.0) != BG_OK ||
        map_number(h, "num_experts_per_tok", "num_experts_per_tok", 0.0 / 0.0) != BG_OK ||
        map_number(h, "rms_norm_eps", "norm_eps", 1e-6) != BG_OK ||
        map_number(h, "rope_theta", "rope_theta", 10000) != BG_OK ||
        map_number(h, "aux_loss_alpha", "router_aux_loss_coef", 0.001) != BG_OK ||
        map_number(h, "initializer_range", "initializer_range", 0.02) != BG_OK)
        return BG_ERR;
    cJSON_AddStringToObject(h->out, "norm", "rmsnorm");
    cJSON_AddStringToObject(h->out, "hidden_act", "swiglu");
    cJSON_AddStringToObject(h->out, "position_embedding", "rope");
    cJSON_AddNumberToObject(h->out, "router_z_loss_coef", 0);  // DeepSeek has no z-loss
    cJSON_AddBoolToObject(h->out, "tie_word_embeddings", tied(h, 0));
    return BG_OK;
}

static int gpt2_config(hf_config *h) {
    static const char *const known[] = {
        "vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner",
        "activation_function", "layer_norm_epsilon", "initializer_range", "tie_word_embeddings",
        "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "add_cross_attention", NULL};
    static const char *const tanh_gelu[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    if (check_keys(h, known) != BG_OK) return BG_ERR;
    if (require_string(h, "activation_function", tanh_gelu,
                       "bagualu's GELU is the tanh approximation (gelu_new)") != BG_OK ||
        require_bool(h, "scale_attn_weights", 1, "bagualu scales attention by 1/sqrt(head_dim)") != BG_OK ||
        require_bool(h, "scale_attn_by_inverse_layer_idx", 0, "bagualu does not scale by layer") != BG_OK ||
        require_bool(h, "add_cross_attention", 0, "bagualu is decoder-only") != BG_OK)
        return BG_ERR;
    double C = number_or(h, "n_embd", 768);
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(h->root, "n_inner");
    if (map_number(h, "vocab_size", "vocab_size", 50257) != BG_OK ||
        map_number(h, "n_positions", "max_position_embeddings", 1024) != BG_OK ||
        map_number(h, "n_embd", "hidden_size", 768) != BG_OK ||
        map_number(h, "n_layer", "num_hidden_layers", 12) != BG_OK ||
        map_number(h, "n_head", "num_attention_heads", 12) != BG_OK ||
        map_number(h, "layer_norm_epsilon", "norm_eps", 1e-5) != BG_OK ||
        map_number(h, "initializer_range", "initializer_range", 0.02) != BG_OK)
        return BG_ERR;
    if (inner && !cJSON_IsNull(inner) && !cJSON_IsNumber(inner))
        return bg_error("%s: key \"n_inner\" is not a number", h->path);
    cJSON_AddNumberToObject(h->out, "intermediate_size", cJSON_IsNumber(inner) ? inner->valuedouble : 4 * C);
    cJSON_AddStringToObject(h->out, "norm", "layernorm");
    cJSON_AddStringToObject(h->out, "hidden_act", "gelu");
    cJSON_AddStringToObject(h->out, "position_embedding", "learned");
    cJSON_AddNumberToObject(h->out, "num_local_experts", 0);
    cJSON_AddBoolToObject(h->out, "attention_bias", 1);  // GPT-2 has biases on every linear layer
    cJSON_AddBoolToObject(h->out, "mlp_bias", 1);
    cJSON_AddBoolToObject(h->out, "tie_word_embeddings", tied(h, 1));
    return BG_OK;
}

// ---- the parameters -----------------------------------------------------------------

static float *param_at(const model *m, const char *fmt, int l) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, l);
    const param_tensor *p = param_table_find(&m->table, name);
    BG_ASSERT(p);
    return m->params + p->offset;
}

// (rows,cols) in the file → (cols,rows) at dst: GPT-2's Conv1D stores a Linear's transpose.
static int take_transposed(hf_source *s, const char *name, float *dst, int64_t rows, int64_t cols) {
    float *tmp = bg_malloc(sizeof(float) * (size_t)(rows * cols));
    int rc = take(s, name, tmp, rows, cols);
    for (int64_t r = 0; rc == BG_OK && r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = tmp[r * cols + c];
    free(tmp);
    return rc;
}

static int gpt2_tensors(hf_source *s, const model *m) {
    const model_config *c = &m->cfg;
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    int f, i;
    const char *pre = source_find(s, "transformer.wte.weight", &f, &i) ? "transformer." : "";
    char n[PARAM_NAME_MAX + 32];
#define HF(fmt, ...) (snprintf(n, sizeof n, "%s" fmt, pre, __VA_ARGS__), n)
    float *wte = param_at(m, "model.embed_tokens.weight", 0);
    if (take(s, HF("%s", "wte.weight"), wte, V, C) != BG_OK ||
        take(s, HF("%s", "wpe.weight"), param_at(m, "model.embed_positions.weight", 0),
             c->max_position_embeddings, C) != BG_OK)
        return BG_ERR;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        skip(s, HF("h.%d.attn.bias", l));         // the causal mask, a buffer
        skip(s, HF("h.%d.attn.masked_bias", l));
        if (take(s, HF("h.%d.ln_1.weight", l), param_at(m, "model.layers.%d.input_layernorm.weight", l), C, 0) ||
            take(s, HF("h.%d.ln_1.bias", l), param_at(m, "model.layers.%d.input_layernorm.bias", l), C, 0) ||
            take_transposed(s, HF("h.%d.attn.c_attn.weight", l), param_at(m, "model.layers.%d.self_attn.q_proj.weight", l), C, 3 * C) ||
            take(s, HF("h.%d.attn.c_attn.bias", l), param_at(m, "model.layers.%d.self_attn.q_proj.bias", l), 3 * C, 0) ||
            take_transposed(s, HF("h.%d.attn.c_proj.weight", l), param_at(m, "model.layers.%d.self_attn.o_proj.weight", l), C, C) ||
            take(s, HF("h.%d.attn.c_proj.bias", l), param_at(m, "model.layers.%d.self_attn.o_proj.bias", l), C, 0) ||
            take(s, HF("h.%d.ln_2.weight", l), param_at(m, "model.layers.%d.post_attention_layernorm.weight", l), C, 0) ||
            take(s, HF("h.%d.ln_2.bias", l), param_at(m, "model.layers.%d.post_attention_layernorm.bias", l), C, 0) ||
            take_transposed(s, HF("h.%d.mlp.c_fc.weight", l), param_at(m, "model.layers.%d.mlp.up_proj.weight", l), C, F) ||
            take(s, HF("h.%d.mlp.c_fc.bias", l), param_at(m, "model.layers.%d.mlp.up_proj.bias", l), F, 0) ||
            take_transposed(s, HF("h.%d.mlp.c_proj.weight", l), param_at(m, "model.layers.%d.mlp.down_proj.weight", l), F, C) ||
            take(s, HF("h.%d.mlp.c_proj.bias", l), param_at(m, "model.layers.%d.mlp.down_proj.bias", l), C, 0))
            return BG_ERR;
    }
    if (take(s, HF("%s", "ln_f.weight"), param_at(m, "model.norm.weight", 0), C, 0) ||
        take(s, HF("%s", "ln_f.bias"), param_at(m, "model.norm.bias", 0), C, 0))
        return BG_ERR;
#undef HF
    if (c->tie_word_embeddings) return take_tied_head(s, "lm_head.weight", wte, V, C);
    return take(s, "lm_head.weight", param_at(m, "lm_head.weight", 0), V, C);
}

// Mixtral's names are bagualu's (model/params.c).
static int mixtral_tensors(hf_source *s, const model *m) {
    const param_table *t = &m->table;
    for (int i = 0; i < t->count; i++) {
        const param_tensor *p = &t->tensors[i];
        if (take(s, p->name, m->params + p->offset, p->shape[0], p->ndim > 1 ? p->shape[1] : 0) != BG_OK)
            return BG_ERR;
    }
    if (m->cfg.tie_word_embeddings)
        return take_tied_head(s, "lm_head.weight", param_at(m, "model.embed_tokens.weight", 0),
                              m->cfg.vocab_size, m->cfg.hidden_size);
    return BG_OK;
}

// DeepSeek's names (hf_deepseek.h); the fused shared experts split back into bagualu's S.
static int deepseek_tensors(hf_source *s, const model *m) {
    const param_table *t = &m->table;
    const model_config *c = &m->cfg;
    const int64_t C = c->hidden_size, F = c->moe_intermediate_size, S = c->num_shared_experts;
    char name[PARAM_NAME_MAX + 32], bg[PARAM_NAME_MAX];
    for (int l = 0; l < c->num_hidden_layers; l++) {  // RoPE's frequencies, a buffer
        snprintf(name, sizeof name, "model.layers.%d.self_attn.rotary_emb.inv_freq", l);
        skip(s, name);
    }
    float *fused = S > 0 ? bg_malloc(sizeof(float) * (size_t)(S * F * C)) : NULL;
    int rc = BG_OK;
    for (int i = 0; i < t->count && rc == BG_OK; i++) {
        const param_tensor *p = &t->tensors[i];
        int part, e = hf_deepseek_name(p->name, name, sizeof name, &part);
        if (e < 0) {
            rc = take(s, name, m->params + p->offset, p->shape[0], p->ndim > 1 ? p->shape[1] : 0);
            continue;
        }
        if (e != 0) continue;  // the first shared expert's tensor reads the fused one
        int l;
        sscanf(p->name, "model.layers.%d.", &l);
        rc = part < 2 ? take(s, name, fused, S * F, C) : take(s, name, fused, C, S * F);
        static const char wn[3] = {'1', '3', '2'};
        for (int x = 0; x < S && rc == BG_OK; x++) {
            snprintf(bg, sizeof bg, "model.layers.%d.block_sparse_moe.shared_experts.%d.w%c.weight", l, x, wn[part]);
            float *dst = param_at(m, bg, 0);
            if (part < 2) {
                memcpy(dst, fused + (size_t)(x * F * C), sizeof(float) * (size_t)(F * C));
            } else {
                for (int64_t r = 0; r < C; r++)
                    memcpy(dst + r * F, fused + (size_t)(r * S * F + x * F), sizeof(float) * (size_t)F);
            }
        }
    }
    free(fused);
    if (rc == BG_OK && c->tie_word_embeddings)
        rc = take_tied_head(s, "lm_head.weight", param_at(m, "model.embed_tokens.weight", 0), c->vocab_size, C);
    return rc;
}

// ---- the checkpoint -----------------------------------------------------------------

// A one-process trainer holding the parameters, a fresh optimizer and the step: what
// ckpt_save writes.
static int save(model *m, const char *save_dir, long step, uint64_t seed) {
    trainer *tr = bg_calloc(1, sizeof *tr);
    train_options_defaults(&tr->opt);
    tr->opt.seed = seed;
    tr->cfg = m->cfg;
    tr->m = *m;
    tr->rank = 0;
    tr->world = 1;
    tr->zero = zero_shard_make(0, m->table.dense_numel, m->table.numel, 0, 1, 0, 1);
    adamw_init(&tr->adam, m->table.numel);
    tr->step = step;
    tr->min_lr = tr->opt.lr * 0.1f;
    tr->loss_scale = 1;
    int rc = ckpt_init_dir(save_dir) == BG_OK && ckpt_save(tr, save_dir) == BG_OK ? BG_OK : BG_ERR;
    adamw_free(&tr->adam);
    free(tr);
    return rc;
}

// SAVE_DIR/config.json: the model config to train on with (`train --config ... --resume`).
static int write_config(const model_config *cfg, const char *save_dir) {
    char path[IMPORT_PATH_MAX + 32];
    if (snprintf(path, sizeof path, "%s/config.json", save_dir) >= (int)sizeof path)
        return bg_error("%s: path too long", save_dir);
    char *text = model_config_to_json(cfg);
    if (!text) return bg_error("import: out of memory");
    size_t n = strlen(text);
    text = realloc(text, n + 2);
    BG_ASSERT(text);
    text[n] = '\n';
    text[n + 1] = '\0';
    int rc = io_write_file_synced(path, text, n + 1);
    free(text);
    return rc;
}

int import_hf(const char *hf_dir, const char *save_dir, long step, uint64_t seed,
              import_hf_summary *summary) {
    if (strlen(hf_dir) >= IMPORT_PATH_MAX) return (bg_error("%s: path too long", hf_dir), IMPORT_BAD_INPUT);
    if (step < 0) return (bg_error("import: --step must be >= 0"), IMPORT_BAD_INPUT);
    char path[IMPORT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    char *text = bg_read_text_file(path, 16u << 20, NULL);
    if (!text) return IMPORT_BAD_INPUT;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return (bg_error("%s: not a JSON object", path), IMPORT_BAD_INPUT);
    }
    hf_config h = {path, root, cJSON_CreateObject()};
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const char *layout = cJSON_IsString(type) ? type->valuestring : "";
    int is_gpt2 = !strcmp(layout, "gpt2"), is_deepseek = !strcmp(layout, "deepseek"), rc;
    if (!strcmp(layout, "mixtral")) rc = mixtral_config(&h);
    else if (is_gpt2) rc = gpt2_config(&h);
    else if (is_deepseek) rc = deepseek_config(&h);
    else if (!strcmp(layout, "qwen2_moe"))
        // Qwen2MoeSparseMoeBlock scales its shared expert by sigmoid(shared_expert_gate·x),
        // a per-token gate bagualu's always-on shared experts do not have.
        rc = bg_error("%s: tensor \"mlp.shared_expert_gate.weight\" of Qwen2-MoE (model_type "
                      "\"qwen2_moe\") has no place in bagualu's model: its shared experts are not gated",
                      path);
    else rc = bg_error("%s: key \"model_type\" is \"%s\": import reads mixtral, deepseek and gpt2", path, layout);
    model_config cfg;
    if (rc == BG_OK) {
        char *cfg_text = cJSON_PrintUnformatted(h.out);
        rc = model_config_parse(&cfg, cfg_text, path);
        free(cfg_text);
    }
    cJSON_Delete(h.out);
    cJSON_Delete(root);
    if (rc != BG_OK) return IMPORT_BAD_INPUT;

    hf_source s;
    if (source_open(&s, hf_dir) != BG_OK) {
        source_close(&s);
        return IMPORT_BAD_INPUT;
    }
    model m;
    model_init(&m, &cfg, seed);
    rc = (is_gpt2 ? gpt2_tensors(&s, &m) : is_deepseek ? deepseek_tensors(&s, &m) : mixtral_tensors(&s, &m)) == BG_OK &&
                 source_all_taken(&s) == BG_OK
             ? IMPORT_OK : IMPORT_BAD_INPUT;
    int tensors = 0;
    for (int i = 0; i < s.n; i++) tensors += s.files[i].count;
    source_close(&s);
    if (rc == IMPORT_OK && (save(&m, save_dir, step, seed) != BG_OK || write_config(&cfg, save_dir) != BG_OK))
        rc = IMPORT_FAILED;
    if (rc == IMPORT_OK && summary) {
        summary->layout = is_gpt2 ? "gpt2" : is_deepseek ? "deepseek" : "mixtral";
        snprintf(summary->checkpoint, sizeof summary->checkpoint, "%s/step_%08ld", save_dir, step);
        summary->tensors = tensors;
        summary->params = m.table.numel;
    }
    model_free(&m);
    return rc;
}
