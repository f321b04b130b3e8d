#ifndef BG_MODEL_PARAMS_H
#define BG_MODEL_PARAMS_H
// Parameters: one size table, one contiguous block, a struct of named views.
// The same table names checkpoint tensors and lays out gradients and optimizer
// state (all mirror the parameter block element for element).
#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "moe/moe_types.h"

#define PARAM_NAME_MAX 96
#define PARAM_MAX_DIMS 2

typedef enum { INIT_NORMAL = 0, INIT_NORMAL_RESIDUAL, INIT_ONES, INIT_ZEROS } param_init;

typedef struct {
    char name[PARAM_NAME_MAX];  // Hugging Face style, e.g. model.layers.3.block_sparse_moe.experts.5.w1.weight
    int ndim;
    int64_t shape[PARAM_MAX_DIMS];
    size_t offset;              // in elements, into the block
    size_t numel;
    int decay;                  // AdamW weight decay applies (matrices, not norms/embeddings)
    param_init init;
    int expert;                 // global expert id for routed-expert tensors, else -1
    int layer;                  // layer index, -1 for embeddings / final norm / head
} param_tensor;

typedef struct {
    float *ln1_w, *ln1_b;       // (C); ln*_b NULL for RMSNorm
    float *qkv_w;               // (3C,C) = [q_proj ; k_proj ; v_proj]
    float *o_w;                 // (C,C)
    float *qkv_b, *o_b;         // (3C), (C); NULL without attention_bias
    float *ln2_w, *ln2_b;       // (C)
    int is_moe;
    float *ffn_in, *ffn_out;    // dense: (U,C), (C,F)
    float *ffn_in_b, *ffn_out_b;  // dense with mlp_bias: (U), (C); else NULL
    moe_params moe;             // MoE: router, experts, shared experts
} layer_params;

typedef struct {
    float *wte;                 // (V,C)
    float *wpe;                 // (maxT,C), NULL with RoPE
    layer_params *layers;       // (L)
    float *lnf_w, *lnf_b;       // (C)
    float *lm_head;             // (V,C), == wte when tied
} model_params;

typedef struct {
    param_tensor *tensors;
    int count;
    size_t numel;               // total elements of the block
    size_t dense_numel;         // [0, dense_numel): tensors every rank holds; the rest:
                                // routed experts (only this rank's share of them)
} param_table;

void param_table_build(param_table *t, const model_config *cfg);
// The table of a rank holding routed experts [first_expert, first_expert+n_experts)
// of every MoE layer (names keep global expert ids).
void param_table_build_local(param_table *t, const model_config *cfg, int first_expert,
                             int n_experts);
void param_table_free(param_table *t);
// The sizes param_table_build_local would give (numel, dense_numel), allocating nothing.
void param_table_numel_local(const model_config *cfg, int first_expert, int n_experts,
                             size_t *numel, size_t *dense_numel);
const param_tensor *param_table_find(const param_table *t, const char *name);
// Points every view of `v` into `block` (parameters, gradients, or optimizer state).
void model_params_bind(model_params *v, const model_config *cfg, float *block);
void model_params_bind_local(model_params *v, const model_config *cfg, float *block,
                             int first_expert, int n_experts);
void model_params_free(model_params *v);
// Fills the block from the seed, deterministically: each tensor from its own stream
// keyed by (seed, name), so values do not depend on which tensors a rank holds.
void param_table_init_values(const param_table *t, const model_config *cfg, float *block,
                             uint64_t seed);

// Parameter counts: total, and active per token (embeddings excluded from the
// FLOP count's active set are reported separately by the caller).
size_t model_param_count(const model_config *cfg);
// Parameters touched per token in matmuls (attention, k routed + shared experts,
// router, dense FFNs, LM head): the N in 6·N·tokens.
double model_active_matmul_params(const model_config *cfg);
// One layer's attention projection parameters (latent attention's when the config has it).
double model_attention_matmul_params(const model_config *cfg);
#endif
