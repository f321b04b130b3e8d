#ifndef BG_TRAIN_HF_DEEPSEEK_H
#define BG_TRAIN_HF_DEEPSEEK_H
// DeepSeek-MoE (v1: model_type "deepseek", DeepseekForCausalLM) as bagualu sees it: the
// tensor names and the layer pattern, shared by export_hf.c and import_hf.c.
//
// Names: bagualu's are Mixtral's (model/params.c); DeepSeek differs only in the MoE block:
//   block_sparse_moe.gate.weight              -> mlp.gate.weight (the router, (E,C))
//   block_sparse_moe.experts.E.w1 / w3 / w2   -> mlp.experts.E.gate_proj / up_proj / down_proj
//   block_sparse_moe.shared_experts.S.wN      -> one fused FFN mlp.shared_experts.* of width
//     S*F: gate_proj and up_proj are the S experts' w1 (w3) stacked by rows, down_proj their
//     w2 side by side by columns. Σ_s w2_s·(silu(w1_s·x) ⊙ w3_s·x) is that one FFN.
// Layers: DeepSeek's layer l is MoE iff l >= first_k_dense_replace and
// l % moe_layer_freq == 0; bagualu's iff (l + 1) % moe_layer_freq == 0.
#include "model/config.h"

#include <stddef.h>

// DeepSeek's name for bagualu's tensor `bg` into out. For a shared expert's tensor it
// returns the shared expert's index (out: the fused tensor's name) and sets *part to
// 0 (w1, gate_proj), 1 (w3, up_proj) or 2 (w2, down_proj); for any other tensor -1.
int hf_deepseek_name(const char *bg, char *out, size_t n, int *part);

// DeepSeek's (first_k_dense_replace, moe_layer_freq) with the MoE layers of cfg; BG_ERR
// (bg_error naming moe_layer_freq) when no pair gives them.
int hf_deepseek_pattern(const model_config *cfg, int *first_k_dense, int *freq);

// bagualu's moe_layer_freq with DeepSeek's MoE layers of L layers; 0 when none gives them
// (including no MoE layer at all).
int hf_deepseek_bagualu_freq(int L, int first_k_dense, int freq);
#endif
