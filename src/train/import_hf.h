#ifndef BG_TRAIN_IMPORT_HF_H
#define BG_TRAIN_IMPORT_HF_H
#include <stddef.h>
#include <stdint.h>

// Import of a Hugging Face model directory (config.json and model.safetensors, or a
// sharded model.safetensors.index.json) as a bagualu checkpoint: the inverse of
// export_hf.h, for the three layouts it writes:
//   Mixtral (model_type "mixtral"): the names are bagualu's already; num_key_value_heads
//     (grouped-query attention; MixtralConfig's 8 when absent) sets k_proj/v_proj's rows.
//   DeepSeek-MoE (model_type "deepseek", v1): names and fused shared experts as in
//     hf_deepseek.h; first_k_dense_replace / moe_layer_freq become bagualu's
//     moe_layer_freq where one gives the same MoE layers (else an error naming them);
//     aux_loss_alpha / seq_aux become router_aux_loss_coef / router_aux_loss_scope (the
//     same loss); scoring_func softmax, topk_method greedy, routed_scaling_factor 1 and
//     n_group / topk_group 1 are the only values accepted; rotary_emb.inv_freq skipped.
//   GPT-2 (model_type "gpt2"): Conv1D weights transposed back, c_attn split into q, k, v;
//     names with or without the "transformer." prefix.
// Nothing is dropped silently: a config key this model cannot represent (key/value
// heads that do not divide the heads, sliding windows, rope scaling, Mixtral attention biases, another
// activation, any key not known to be harmless) and a tensor no parameter takes are
// errors naming the key or tensor. GPT-2 imports with attention_bias and mlp_bias (its
// linear biases become parameters); its causal-mask buffers (attn.bias,
// attn.masked_bias) are skipped.
//
// The checkpoint is format 2 at SAVE_DIR/step_<step>/ with `latest` pointing at it:
// parameters as read (converted to f32), a fresh optimizer (zero moments, AdamW step 0),
// data position 0, `step` as given; and SAVE_DIR/config.json, the model config to
// train on with (train --config SAVE_DIR/config.json --resume latest). eval and generate
// read the checkpoint alone.
// Returns 0, 2 on bad input (message names the file and key) or 1 if writing failed.
typedef struct {
    const char *layout;         // "mixtral", "deepseek" or "gpt2"
    char checkpoint[4200];      // the step directory written
    int tensors;                // Hugging Face tensors read
    size_t params;              // bagualu parameters
} import_hf_summary;
int import_hf(const char *hf_dir, const char *save_dir, long step, uint64_t seed,
              import_hf_summary *summary);
#endif
