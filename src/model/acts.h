#ifndef BG_MODEL_ACTS_H
#define BG_MODEL_ACTS_H
// The activations of one step: what each layer keeps for backward (layer_acts) and the
// model's caches and backward workspace (model_acts), all pointers into one arena that
// model_prepare lays out. With recomputation (model_options.recompute) a layer keeps
// only x, x2 and moe's per-layer results (moe_acts_keep), and every block computes in
// model_acts.shared. Apart from model.h so that the layer blocks (block.h), which
// model.c calls, need not include the model.
#include "moe/moe_layer.h"

typedef struct {
    float *x;                   // (N,C) residual stream entering the layer
    float *ln1, *ln1_mean, *ln1_rstd;
    float *qkv;                 // (N,3C), after RoPE when used
    float *att;                 // (B,NH,T,T) softmax probabilities (naive attention only)
    float *att_lse;             // (B,NH,T) softmax log-sum-exp (flash attention only)
    float *atty;                // (N,C) attention output before o_proj
    float *x2;                  // (N,C) residual after attention
    float *ln2, *ln2_mean, *ln2_rstd;
    float *ffn_h, *ffn_a;       // dense FFN caches (N,U), (N,F)
    moe_acts moe;               // MoE caches
    float *ffn_out;             // (N,C)
} layer_acts;

typedef struct {
    int B, T, N;
    layer_acts *layers;         // (L)
    float *x_final;             // (N,C) residual stream after the last layer
    float *lnf, *lnf_mean, *lnf_rstd;
    float *logits;              // (N,V); backward overwrites it with dlogits. NULL when
                                // the LM head is fused: model_logits gives any rows
    float *losses, *lse;        // (N)
    // Fused LM head (lm_fused): the loss and the LM head's gradients are computed in
    // model_forward, chunk by chunk; the weight gradient waits in d_lm_head and the
    // input gradient in d_ln until model_backward (model_zero_grad runs in between).
    int flash, lm_fused;        // the options model_prepare resolved for this (B,T)
    int recompute;              // 1: blocks recompute their forward in `shared`
    layer_acts shared;          // recomputation's one set of block caches (x, x2 are
                                // the current layer's); the attention block's and the
                                // FFN block's overlap
    int lm_chunk_rows;
    int lm_grads_ready;         // a fused forward left gradients for model_backward
    float *lm_chunk;            // (lm_chunk_rows,V) logits of one chunk of rows
    float *d_lm_head;           // (V,C)
    int *inputs, *targets;      // (N) copies of the batch
    float *rope_cos, *rope_sin; // (T,hs/2)
    // backward workspace, shared by all layers
    float *d_resid;             // (N,C) gradient of the residual stream
    float *d_ln;                // (N,C)
    float *d_qkv;               // (N,3C)
    float *d_atty;              // (N,C)
    float *d_att_scratch;       // (B,NH,T,T) naive attention; ~6(N,C) flash (forward and backward)
    float *d_ffn_h, *d_ffn_a;   // (N,U), (N,F)
    moe_scratch moe_scr;
} model_acts;
#endif
