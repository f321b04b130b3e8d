#ifndef BG_TRAIN_EXPORT_HF_H
#define BG_TRAIN_EXPORT_HF_H
// Export of a checkpoint as a Hugging Face model directory: config.json and
// model.safetensors (metadata format "pt"), loadable by transformers' from_pretrained.
//
// Three layouts, each chosen only where it computes exactly bagualu's model:
//   Mixtral (MixtralForCausalLM): every layer MoE, RMSNorm, SwiGLU experts, RoPE,
//     renormalized top-k (Mixtral always renormalizes), no shared experts. bagualu's
//     parameter names are already Mixtral's; lm_head.weight is left out when tied
//     (tie_word_embeddings true), as transformers' save_pretrained does.
//       config: hidden_size, intermediate_size (= moe_intermediate_size),
//       num_local_experts, num_experts_per_tok, num_attention_heads,
//       num_key_value_heads (k_proj/v_proj of that many heads), head_dim, rms_norm_eps, ...
//   GPT-2 (GPT2LMHeadModel): every layer dense, LayerNorm, GELU, learned positions.
//       transformer.wte / wpe, transformer.h.N.ln_1 / ln_2 (weight, bias),
//       attn.c_attn = [q;k;v]ᵀ (C,3C), attn.c_proj = o_projᵀ, mlp.c_fc = up_projᵀ (C,F),
//       mlp.c_proj = down_projᵀ (F,C): GPT-2's Conv1D stores (in,out), the transpose of
//       a Linear; their biases are the model's (attention_bias: q, k, v, o; mlp_bias:
//       up, down), written as zeros when the config has none.
//       transformer.ln_f; lm_head.weight only when untied.
//       config: n_embd, n_layer, n_head, n_inner, n_positions, vocab_size,
//       layer_norm_epsilon, activation_function "gelu_new" (GELU, tanh approximation)
//   DeepSeek-MoE (DeepseekForCausalLM, model_type "deepseek", v1): a MoE model with shared
//     experts or with dense layers (where DeepSeek's first_k_dense_replace and
//     moe_layer_freq give bagualu's MoE layers), RMSNorm, SwiGLU, RoPE, softmax top-k
//     (norm_topk_prob as configured, not with top-1). Names and the fused shared experts:
//     hf_deepseek.h. config: n_routed_experts, n_shared_experts (null when none),
//     moe_intermediate_size, intermediate_size (dense layers), first_k_dense_replace,
//     moe_layer_freq, scoring_func "softmax", aux_loss_alpha (= router_aux_loss_coef: the
//     same E·Σ f_i·P_i), seq_aux (router_aux_loss_scope sequence), auto_map to DeepSeek's
//     published code (transformers has no class of its own for "deepseek").
// Dropout rates are written as 0: bagualu trains without dropout.
#include "model/config.h"
#include "io/safetensors.h"

typedef enum { HF_MIXTRAL = 0, HF_GPT2 = 1, HF_DEEPSEEK = 2 } hf_layout;

// The layout that represents cfg exactly; BG_ERR (bg_error naming why) when none does.
int export_hf_layout(const model_config *cfg, hf_layout *layout);

// Reads the checkpoint ckpt_dir (a step directory, or a save directory whose `latest`
// names one): trainer.json's model_config, model.safetensors (checksum verified when
// trainer.json records one). Writes out_dir/config.json and out_dir/model.safetensors
// (out_dir is created if missing) with every tensor stored as `dtype` (safetensors F32,
// BF16 or F16, rounded to nearest even). Returns 0, 2 on bad input (unreadable or corrupt
// checkpoint, a config no layout represents, a bad dtype) or 1 if writing fails; the
// message is in bg_last_error(). On success *summary (if not NULL) says what was written.
typedef struct {
    hf_layout layout;
    char checkpoint[4096];      // the step directory read
    int tensors;                // tensors written
    size_t params;              // bagualu parameters exported (GPT-2's zero biases not counted)
} export_hf_summary;
int export_hf(const char *ckpt_dir, const char *out_dir, bg_dtype dtype, export_hf_summary *summary);
#endif
