// Checkpoint → Hugging Face model directory (layouts and names in export_hf.h).
#include "train/export_hf.h"

#include "core/error.h"
#include "core/text_file.h"
#include "model/params.h"
#include "moe/moe_types.h"
#include "io/file_sync.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_inspect.h"
#include "train/hf_deepseek.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT_PATH_MAX 4096
// A directory path (at most EXPORT_PATH_MAX) plus "/" and a file name of ours.
#define EXPORT_FILE_MAX (EXPORT_PATH_MAX + 32)
enum { EXPORT_OK = 0, EXPORT_FAILED = 1, EXPORT_BAD_INPUT = 2 };

// Shared by the MoE layouts (Mixtral, DeepSeek-MoE): what both need to compute exactly
// bagualu's MoE layers: RMSNorm, SwiGLU experts, RoPE, softmax top-k over all experts.
static int moe_layout_check(const model_config *c, const char *name) {
    if (c->norm != NORM_RMSNORM)
        return bg_error("no Hugging Face layout for this config: this MoE model exports as %s, "
                        "which needs \"norm\": \"rmsnorm\" (this one has layernorm)", name);
    if (c->hidden_act != FFN_SWIGLU)
        return bg_error("no Hugging Face layout for this config: this MoE model exports as %s, "
                        "which needs \"hidden_act\": \"swiglu\" (this one has gelu)", name);
    if (c->position_embedding != POS_ROPE)
        return bg_error("no Hugging Face layout for this config: this MoE model exports as %s, "
                        "which needs \"position_embedding\": \"rope\" (this one has learned)", name);
    // The bias gate picks experts by scores plus a learned bias, which a softmax top-k
    // has no place for: exported, the model would route differently.
    if (!strcmp(model_router_type_name(c->router_type), "bias"))
        return bg_error("no Hugging Face layout for this config: %s routes by softmax "
                        "top-k; router_type bias also adds a per-expert bias (DeepSeek-V3's "
                        "e_score_correction_bias)", name);
    if (!strcmp(model_router_type_name(c->router_type), "noisy_topk"))
        return bg_error("no Hugging Face layout for this config: %s has no place for "
                        "noisy_topk's gate_noise weights (router_type is noisy_topk)", name);
    // Group-limited routing restricts which experts a token may pick: the same weights
    // route differently under a plain top-k.
    if (c->router_groups > 1 && c->router_topk_groups < c->router_groups)
        return bg_error("no Hugging Face layout for this config: %s's top-k is over all "
                        "experts (router_groups %d, router_topk_groups %d)", name,
                        c->router_groups, c->router_topk_groups);
    if (c->attention_bias)
        return bg_error("no Hugging Face layout for this config: %s's attention has no "
                        "biases (attention_bias is true)", name);
    return BG_OK;
}

int export_hf_layout(const model_config *c, hf_layout *layout) {
    int L = c->num_hidden_layers, moe_layers = 0;
    for (int l = 0; l < L; l++) moe_layers += model_layer_is_moe(c, l);
    if (moe_layers == L && c->num_shared_experts == 0) {
        // Mixtral: every layer MoE, renormalized top-k, nothing else.
        if (moe_layout_check(c, "Mixtral") != BG_OK) return BG_ERR;
        if (!c->norm_topk_prob)
            return bg_error("no Hugging Face layout for this config: Mixtral always renormalizes the "
                            "top-k gate weights (norm_topk_prob is false)");
        *layout = HF_MIXTRAL;
        return BG_OK;
    }
    if (moe_layers > 0) {
        // DeepSeek-MoE: shared experts, dense layers, or both (hf_deepseek.h).
        int k, m;
        if (moe_layout_check(c, "DeepSeek-MoE") != BG_OK) return BG_ERR;
        if (c->mlp_bias)
            return bg_error("no Hugging Face layout for this config: DeepSeek-MoE's dense layers "
                            "have no biases (mlp_bias is true)");
        // MoEGate renormalizes only when top_k > 1; bagualu's top-1 weight would be 1.
        if (c->norm_topk_prob && c->num_experts_per_tok == 1)
            return bg_error("no Hugging Face layout for this config: DeepSeek-MoE does not "
                            "renormalize a top-1 gate weight (norm_topk_prob is true, "
                            "num_experts_per_tok 1)");
        if (hf_deepseek_pattern(c, &k, &m) != BG_OK) return BG_ERR;
        *layout = HF_DEEPSEEK;
        return BG_OK;
    }
    if (c->norm != NORM_LAYERNORM || c->hidden_act != FFN_GELU || c->position_embedding != POS_LEARNED)
        return bg_error("no Hugging Face layout for this config: a dense model exports as GPT-2, "
                        "which needs layernorm, gelu and learned positions (this one has %s, %s, %s)",
                        c->norm == NORM_RMSNORM ? "rmsnorm" : "layernorm",
                        c->hidden_act == FFN_SWIGLU ? "swiglu" : "gelu",
                        c->position_embedding == POS_ROPE ? "rope" : "learned");
    if (model_kv_heads(c) != c->num_attention_heads)
        return bg_error("no Hugging Face layout for this config: GPT-2 has one key/value head "
                        "per query head (num_key_value_heads is %d of %d heads)",
                        model_kv_heads(c), c->num_attention_heads);
    *layout = HF_GPT2;
    return BG_OK;
}

// ---- reading the checkpoint ---------------------------------------------------------


static int file_exists(const char *dir, const char *name) {
    char path[EXPORT_FILE_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

// The step directory to read: dir itself, or the one dir/latest names.
static int resolve_dir(const char *dir, char *out, size_t n) {
    struct stat st;
    if (strlen(dir) >= EXPORT_PATH_MAX) return bg_error("%s: path too long", dir);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return bg_error("%s: not a checkpoint directory", dir);
    if (file_exists(dir, "trainer.json")) {
        if ((size_t)snprintf(out, n, "%s", dir) >= n) return bg_error("%s: path too long", dir);
        return BG_OK;
    }
    int found = 0;
    if (ckpt_latest(dir, out, n, &found) != BG_OK) return BG_ERR;
    if (!found) return bg_error("%s: not a checkpoint directory (no trainer.json, no latest)", dir);
    return BG_OK;
}

// trainer.json's model config (the tensors are read, checksums verified, by
// ckpt_read_model, which checks trainer.json itself).
static int read_config(const char *dir, model_config *cfg) {
    char path[EXPORT_FILE_MAX];
    snprintf(path, sizeof path, "%s/trainer.json", dir);
    char *text = bg_read_text_file(path, 16u << 20, NULL);
    if (!text) return BG_ERR;
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = BG_ERR;
    const cJSON *mc = cJSON_GetObjectItemCaseSensitive(root, "model_config");
    if (!cJSON_IsObject(root)) {
        bg_error("%s: not valid JSON", path);
    } else if (!cJSON_IsObject(mc)) {
        bg_error("%s: missing model_config", path);
    } else {
        char *cfg_text = cJSON_PrintUnformatted(mc);
        rc = model_config_parse(cfg, cfg_text, path);
        free(cfg_text);
    }
    cJSON_Delete(root);
    return rc;
}

// ---- the Hugging Face tensors -------------------------------------------------------

typedef struct {
    st_tensor_in *t;
    char (*names)[PARAM_NAME_MAX];
    int count, cap;
    float **owned;              // transposed copies, freed at the end
    int n_owned;
    st_dtype dtype;
} hf_tensors;

static void hf_add(hf_tensors *o, const char *name, const float *data, int64_t d0, int64_t d1) {
    BG_ASSERT(o->count < o->cap);
    st_tensor_in *in = &o->t[o->count];
    memset(in, 0, sizeof *in);
    snprintf(o->names[o->count], PARAM_NAME_MAX, "%s", name);
    in->name = o->names[o->count];
    in->dtype = o->dtype;
    in->src_dtype = o->dtype == ST_F32 ? ST_DTYPE_NONE : ST_F32;
    in->ndim = d1 > 0 ? 2 : 1;
    in->shape[0] = d0;
    in->shape[1] = d1;
    in->data = data;
    o->count++;
}

// src (rows,cols) → a new (cols,rows) copy owned by o.
static const float *hf_transposed(hf_tensors *o, const float *src, int64_t rows, int64_t cols) {
    float *dst = bg_malloc(sizeof(float) * (size_t)rows * (size_t)cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
    o->owned[o->n_owned++] = dst;
    return dst;
}

static const float *param(const param_table *t, const float *block, const char *fmt, int l) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, l);
    const param_tensor *p = param_table_find(t, name);
    BG_ASSERT(p);
    return block + p->offset;
}

static void gpt2_tensors(hf_tensors *o, const model_config *c, const param_table *t,
                         const float *block, const float *zeros) {
    int64_t C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
    char name[PARAM_NAME_MAX];
    hf_add(o, "transformer.wte.weight", param(t, block, "model.embed_tokens.weight", 0), V, C);
    hf_add(o, "transformer.wpe.weight", param(t, block, "model.embed_positions.weight", 0),
           c->max_position_embeddings, C);
    for (int l = 0; l < c->num_hidden_layers; l++) {
#define HF_NAME(fmt) (snprintf(name, sizeof name, "transformer.h.%d." fmt, l), name)
        hf_add(o, HF_NAME("ln_1.weight"), param(t, block, "model.layers.%d.input_layernorm.weight", l), C, 0);
        hf_add(o, HF_NAME("ln_1.bias"), param(t, block, "model.layers.%d.input_layernorm.bias", l), C, 0);
        // q, k, v are adjacent in the block: one (3C,C) matrix, transposed whole.
        const float *qkv = param(t, block, "model.layers.%d.self_attn.q_proj.weight", l);
        hf_add(o, HF_NAME("attn.c_attn.weight"), hf_transposed(o, qkv, 3 * C, C), C, 3 * C);
        // Biases: the model's own (attention_bias, mlp_bias), else zeros.
        hf_add(o, HF_NAME("attn.c_attn.bias"),
               c->attention_bias ? param(t, block, "model.layers.%d.self_attn.q_proj.bias", l) : zeros, 3 * C, 0);
        const float *ow = param(t, block, "model.layers.%d.self_attn.o_proj.weight", l);
        hf_add(o, HF_NAME("attn.c_proj.weight"), hf_transposed(o, ow, C, C), C, C);
        hf_add(o, HF_NAME("attn.c_proj.bias"),
               c->attention_bias ? param(t, block, "model.layers.%d.self_attn.o_proj.bias", l) : zeros, C, 0);
        hf_add(o, HF_NAME("ln_2.weight"), param(t, block, "model.layers.%d.post_attention_layernorm.weight", l), C, 0);
        hf_add(o, HF_NAME("ln_2.bias"), param(t, block, "model.layers.%d.post_attention_layernorm.bias", l), C, 0);
        const float *up = param(t, block, "model.layers.%d.mlp.up_proj.weight", l);
        hf_add(o, HF_NAME("mlp.c_fc.weight"), hf_transposed(o, up, F, C), C, F);
        hf_add(o, HF_NAME("mlp.c_fc.bias"),
               c->mlp_bias ? param(t, block, "model.layers.%d.mlp.up_proj.bias", l) : zeros, F, 0);
        const float *down = param(t, block, "model.layers.%d.mlp.down_proj.weight", l);
        hf_add(o, HF_NAME("mlp.c_proj.weight"), hf_transposed(o, down, C, F), F, C);
        hf_add(o, HF_NAME("mlp.c_proj.bias"),
               c->mlp_bias ? param(t, block, "model.layers.%d.mlp.down_proj.bias", l) : zeros, C, 0);
#undef HF_NAME
    }
    hf_add(o, "transformer.ln_f.weight", param(t, block, "model.norm.weight", 0), C, 0);
    hf_add(o, "transformer.ln_f.bias", param(t, block, "model.norm.bias", 0), C, 0);
    if (!c->tie_word_embeddings) hf_add(o, "lm_head.weight", param(t, block, "lm_head.weight", 0), V, C);
}

// DeepSeek-MoE's names (hf_deepseek.h); each MoE layer's shared experts as one fused FFN.
static void deepseek_tensors(hf_tensors *o, const model_config *c, const param_table *t,
                             const float *block) {
    const int64_t C = c->hidden_size, F = c->moe_intermediate_size, S = c->num_shared_experts;
    char name[PARAM_NAME_MAX];
    for (int i = 0; i < t->count; i++) {
        const param_tensor *p = &t->tensors[i];
        int part, s = hf_deepseek_name(p->name, name, sizeof name, &part);
        if (s < 0) {
            hf_add(o, name, block + p->offset, p->shape[0], p->ndim > 1 ? p->shape[1] : 0);
            continue;
        }
        if (s != 0) continue;  // the first shared expert's tensor writes the fused one
        int l;
        sscanf(p->name, "model.layers.%d.", &l);
        float *fused = bg_malloc(sizeof(float) * (size_t)(S * F * C));
        char bg[PARAM_NAME_MAX];
        static const char wn[3] = {'1', '3', '2'};
        for (int e = 0; e < S; e++) {
            snprintf(bg, sizeof bg, "model.layers.%d.block_sparse_moe.shared_experts.%d.w%c.weight", l, e, wn[part]);
            const float *src = param(t, block, bg, 0);
            if (part < 2) {  // (F,C) blocks stacked by rows
                memcpy(fused + (size_t)(e * F * C), src, sizeof(float) * (size_t)(F * C));
            } else {         // (C,F) blocks side by side: row r of the (C,S*F) matrix
                for (int64_t r = 0; r < C; r++)
                    memcpy(fused + (size_t)(r * S * F + e * F), src + r * F, sizeof(float) * (size_t)F);
            }
        }
        o->owned[o->n_owned++] = fused;
        if (part < 2) hf_add(o, name, fused, S * F, C);
        else hf_add(o, name, fused, C, S * F);
    }
}

// ---- config.json --------------------------------------------------------------------

// The shortest decimal that reads back as the same float: 1e-05, not 9.9999997e-06;
// whole numbers as 10000.0 (Python's spelling; "%g" would give 1e+04).
static void add_float(cJSON *obj, const char *key, float x) {
    char buf[48];
    if (x == (float)(long)x && fabsf(x) < 1e9f) {
        snprintf(buf, sizeof buf, "%.1f", (double)x);
    } else {
        for (int p = 1; p <= 9; p++) {
            snprintf(buf, sizeof buf, "%.*g", p, (double)x);
            if ((float)strtod(buf, NULL) == x) break;
        }
    }
    cJSON_AddItemToObject(obj, key, cJSON_CreateRaw(buf));
}

static const char *torch_dtype_name(bg_dtype d) {
    return d == BG_BF16 ? "bfloat16" : d == BG_FP16 ? "float16" : "float32";
}

static char *hf_config_json(const model_config *c, hf_layout layout, bg_dtype dtype) {
    cJSON *root = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(root, "architectures");
    if (layout == HF_MIXTRAL) {
        cJSON_AddItemToArray(arch, cJSON_CreateString("MixtralForCausalLM"));
        cJSON_AddStringToObject(root, "model_type", "mixtral");
        cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
        cJSON_AddNumberToObject(root, "max_position_embeddings", c->max_position_embeddings);
        cJSON_AddNumberToObject(root, "hidden_size", c->hidden_size);
        cJSON_AddNumberToObject(root, "intermediate_size", c->moe_intermediate_size);
        cJSON_AddNumberToObject(root, "num_hidden_layers", c->num_hidden_layers);
        cJSON_AddNumberToObject(root, "num_attention_heads", c->num_attention_heads);
        cJSON_AddNumberToObject(root, "num_key_value_heads", model_kv_heads(c));
        cJSON_AddNumberToObject(root, "head_dim", c->hidden_size / c->num_attention_heads);
        cJSON_AddStringToObject(root, "hidden_act", "silu");
        add_float(root, "rms_norm_eps", c->norm_eps);
        add_float(root, "rope_theta", c->rope_theta);
        cJSON_AddNullToObject(root, "sliding_window");
        cJSON_AddNumberToObject(root, "attention_dropout", 0);
        cJSON_AddNumberToObject(root, "num_local_experts", c->num_local_experts);
        cJSON_AddNumberToObject(root, "num_experts_per_tok", c->num_experts_per_tok);
        add_float(root, "router_aux_loss_coef", c->router_aux_loss_coef);
        cJSON_AddNumberToObject(root, "router_jitter_noise", 0);
        cJSON_AddBoolToObject(root, "output_router_logits", 0);
    } else if (layout == HF_DEEPSEEK) {
        int first_k = 0, freq = 1;
        hf_deepseek_pattern(c, &first_k, &freq);  // export_hf_layout checked it
        cJSON_AddItemToArray(arch, cJSON_CreateString("DeepseekForCausalLM"));
        cJSON_AddStringToObject(root, "model_type", "deepseek");
        // transformers has no "deepseek" class of its own: DeepSeek's published code.
        cJSON *am = cJSON_AddObjectToObject(root, "auto_map");
        cJSON_AddStringToObject(am, "AutoConfig",
                                "deepseek-ai/deepseek-moe-16b-base--configuration_deepseek.DeepseekConfig");
        cJSON_AddStringToObject(am, "AutoModelForCausalLM",
                                "deepseek-ai/deepseek-moe-16b-base--modeling_deepseek.DeepseekForCausalLM");
        cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
        cJSON_AddNumberToObject(root, "max_position_embeddings", c->max_position_embeddings);
        cJSON_AddNumberToObject(root, "hidden_size", c->hidden_size);
        cJSON_AddNumberToObject(root, "intermediate_size", c->intermediate_size);
        cJSON_AddNumberToObject(root, "moe_intermediate_size", c->moe_intermediate_size);
        cJSON_AddNumberToObject(root, "num_hidden_layers", c->num_hidden_layers);
        cJSON_AddNumberToObject(root, "num_attention_heads", c->num_attention_heads);
        cJSON_AddNumberToObject(root, "num_key_value_heads", model_kv_heads(c));
        if (c->num_shared_experts > 0) cJSON_AddNumberToObject(root, "n_shared_experts", c->num_shared_experts);
        else cJSON_AddNullToObject(root, "n_shared_experts");
        cJSON_AddNumberToObject(root, "n_routed_experts", c->num_local_experts);
        cJSON_AddNumberToObject(root, "num_experts_per_tok", c->num_experts_per_tok);
        cJSON_AddNumberToObject(root, "moe_layer_freq", freq);
        cJSON_AddNumberToObject(root, "first_k_dense_replace", first_k);
        cJSON_AddBoolToObject(root, "norm_topk_prob", c->norm_topk_prob);
        cJSON_AddStringToObject(root, "scoring_func", "softmax");
        // MoEGate's aux loss is bagualu's: E·Σ f_i·P_i, per sequence when seq_aux.
        add_float(root, "aux_loss_alpha", c->router_aux_loss_coef);
        cJSON_AddBoolToObject(root, "seq_aux", c->router_aux_loss_scope == MOE_AUX_SEQUENCE);
        cJSON_AddStringToObject(root, "hidden_act", "silu");
        add_float(root, "rms_norm_eps", c->norm_eps);
        add_float(root, "rope_theta", c->rope_theta);
        cJSON_AddNullToObject(root, "rope_scaling");
        cJSON_AddBoolToObject(root, "attention_bias", 0);
        add_float(root, "attention_dropout", 0);
        cJSON_AddNumberToObject(root, "pretraining_tp", 1);
    } else {
        cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
        cJSON_AddStringToObject(root, "model_type", "gpt2");
        cJSON_AddNumberToObject(root, "vocab_size", c->vocab_size);
        cJSON_AddNumberToObject(root, "n_positions", c->max_position_embeddings);
        cJSON_AddNumberToObject(root, "n_ctx", c->max_position_embeddings);
        cJSON_AddNumberToObject(root, "n_embd", c->hidden_size);
        cJSON_AddNumberToObject(root, "n_layer", c->num_hidden_layers);
        cJSON_AddNumberToObject(root, "n_head", c->num_attention_heads);
        cJSON_AddNumberToObject(root, "n_inner", c->intermediate_size);
        cJSON_AddStringToObject(root, "activation_function", "gelu_new");
        add_float(root, "layer_norm_epsilon", c->norm_eps);
        cJSON_AddNumberToObject(root, "resid_pdrop", 0);
        cJSON_AddNumberToObject(root, "embd_pdrop", 0);
        cJSON_AddNumberToObject(root, "attn_pdrop", 0);
        cJSON_AddBoolToObject(root, "scale_attn_weights", 1);
        cJSON_AddBoolToObject(root, "scale_attn_by_inverse_layer_idx", 0);
        cJSON_AddBoolToObject(root, "reorder_and_upcast_attn", 0);
    }
    add_float(root, "initializer_range", c->initializer_range);
    cJSON_AddBoolToObject(root, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddBoolToObject(root, "use_cache", 1);
    cJSON_AddStringToObject(root, "torch_dtype", torch_dtype_name(dtype));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

// ---- writing ------------------------------------------------------------------------

// text and a final newline, fsynced.
static int write_text_file(const char *path, const char *text) {
    size_t n = strlen(text);
    char *line = bg_malloc(n + 1);
    memcpy(line, text, n);
    line[n] = '\n';
    int rc = io_write_file_synced(path, line, n + 1);
    free(line);
    return rc;
}

// Both files are written under temporary names and renamed into place, so out_dir never
// holds a half-written model.safetensors.
static int write_export(const char *out_dir, const hf_tensors *o, const char *config) {
    char tmp_model[EXPORT_FILE_MAX], tmp_cfg[EXPORT_FILE_MAX], model[EXPORT_FILE_MAX], cfg[EXPORT_FILE_MAX];
    if (strlen(out_dir) >= EXPORT_PATH_MAX) return bg_error("%s: path too long", out_dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", out_dir);
    snprintf(model, sizeof model, "%s/model.safetensors", out_dir);
    snprintf(tmp_model, sizeof tmp_model, "%s/.model.safetensors.tmp", out_dir);
    snprintf(tmp_cfg, sizeof tmp_cfg, "%s/.config.json.tmp", out_dir);
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        return bg_error("%s: cannot create output directory (%s)", out_dir, strerror(errno));
    struct stat st;
    if (stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) return bg_error("%s: not a directory", out_dir);
    st_meta meta[] = {{"format", "pt"}};  // transformers refuses safetensors without it
    if (st_write_file(tmp_model, o->t, o->count, meta, 1, NULL) != BG_OK) return BG_ERR;
    if (write_text_file(tmp_cfg, config) != BG_OK) {
        unlink(tmp_model);
        return BG_ERR;
    }
    if (rename(tmp_model, model) != 0 || rename(tmp_cfg, cfg) != 0) {
        int err = errno;
        unlink(tmp_model);
        unlink(tmp_cfg);
        return bg_error("%s: cannot rename into place (%s)", out_dir, strerror(err));
    }
    return BG_OK;
}

int export_hf(const char *ckpt_dir, const char *out_dir, bg_dtype dtype, export_hf_summary *summary) {
    if ((unsigned)dtype >= BG_DTYPE_COUNT) {
        bg_error("export: invalid dtype %d", (int)dtype);
        return EXPORT_BAD_INPUT;
    }
    char dir[EXPORT_PATH_MAX];
    model_config cfg;
    hf_layout layout;
    if (resolve_dir(ckpt_dir, dir, sizeof dir) != BG_OK || read_config(dir, &cfg) != BG_OK)
        return EXPORT_BAD_INPUT;
    if (export_hf_layout(&cfg, &layout) != BG_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bg_last_error());
        bg_error("%s: %s", dir, why);
        return EXPORT_BAD_INPUT;
    }
    param_table t;
    param_table_build(&t, &cfg);
    float *block = bg_malloc(sizeof(float) * (t.numel ? t.numel : 1));
    // The experts' tensors come from every rank's model file (a sharded checkpoint).
    if (ckpt_read_model(dir, &cfg, &t, block, NULL, NULL) != BG_OK) {
        free(block);
        param_table_free(&t);
        return EXPORT_BAD_INPUT;
    }

    hf_tensors o = {.dtype = st_dtype_from_bg(dtype)};
    o.cap = t.count + 4 * cfg.num_hidden_layers + 4;  // GPT-2 adds 4 bias tensors per layer
    o.t = bg_calloc((size_t)o.cap, sizeof *o.t);
    o.names = bg_calloc((size_t)o.cap, sizeof *o.names);
    o.owned = bg_calloc((size_t)4 * cfg.num_hidden_layers + 1, sizeof *o.owned);  // GPT-2 4, DeepSeek 3 a layer
    size_t zeros_len = 3 * (size_t)cfg.hidden_size;
    if ((size_t)cfg.intermediate_size > zeros_len) zeros_len = (size_t)cfg.intermediate_size;
    float *zeros = bg_calloc(zeros_len, sizeof(float));
    if (layout == HF_MIXTRAL) {
        // bagualu's names are Mixtral's (model/params.c); with tied embeddings the table
        // has no lm_head.weight, which is what transformers expects then.
        for (int i = 0; i < t.count; i++) {
            const param_tensor *p = &t.tensors[i];
            hf_add(&o, p->name, block + p->offset, p->shape[0], p->ndim > 1 ? p->shape[1] : 0);
        }
    } else if (layout == HF_DEEPSEEK) {
        deepseek_tensors(&o, &cfg, &t, block);
    } else {
        gpt2_tensors(&o, &cfg, &t, block, zeros);
    }
    char *config = hf_config_json(&cfg, layout, dtype);
    int rc = write_export(out_dir, &o, config) == BG_OK ? EXPORT_OK : EXPORT_FAILED;
    if (rc == EXPORT_OK && summary) {
        summary->layout = layout;
        snprintf(summary->checkpoint, sizeof summary->checkpoint, "%s", dir);
        summary->tensors = o.count;
        summary->params = t.numel;
    }
    free(config);
    for (int i = 0; i < o.n_owned; i++) free(o.owned[i]);
    free(o.owned), free(o.t), free(o.names), free(zeros), free(block);
    param_table_free(&t);
    return rc;
}
