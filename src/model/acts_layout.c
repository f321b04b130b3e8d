// The activation layout (model.h, model_acts_layout): one routine for the measuring pass,
// the real one and the memory report, so the report is the bytes the run allocates.
#include "model/model.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "moe/ffn.h"

#include <string.h>

moe_shape model_layer_moe_shape(const model_config *c, const model_options *opt,
                                const moe_parallel *par, int T) {
    moe_shape s = model_moe_shape(c, par);
    if (s.routing.group_tokens == 0) s.routing.group_tokens = T;  // one sequence
    s.routing.virtual_workers = opt->swipe_virtual_workers;
    return s;
}

// What the attention block keeps for its backward (block.h).
static void attention_caches(layer_acts *la, bg_arena *ar, int flash, int B, int T,
                             const model_config *c) {
    size_t N = (size_t)B * T, NC = N * c->hidden_size, NH = c->num_attention_heads;
    la->ln1 = BG_ARENA_NEW(ar, float, NC);
    la->ln1_mean = BG_ARENA_NEW(ar, float, N);
    la->ln1_rstd = BG_ARENA_NEW(ar, float, N);
    la->qkv = BG_ARENA_NEW(ar, float, N * model_qkv_width(c));
    la->att = flash ? NULL : BG_ARENA_NEW(ar, float, (size_t)B * NH * T * T);
    la->att_lse = flash ? BG_ARENA_NEW(ar, float, (size_t)B * NH * T) : NULL;
    la->atty = BG_ARENA_NEW(ar, float, NC);
}

// What the FFN block keeps: the norm, then the dense FFN's caches or the MoE layer's.
static void ffn_caches(layer_acts *la, bg_arena *ar, const model_config *c, const moe_shape *ms,
                       int moe, int N) {
    size_t NC = (size_t)N * c->hidden_size;
    int Fd = c->intermediate_size, Ud = ffn_in_rows(c->hidden_act, Fd);
    la->ln2 = BG_ARENA_NEW(ar, float, NC);
    la->ln2_mean = BG_ARENA_NEW(ar, float, N);
    la->ln2_rstd = BG_ARENA_NEW(ar, float, N);
    if (moe) {
        moe_acts_layout(&la->moe, ar, ms, N);
    } else {
        la->ffn_h = BG_ARENA_NEW(ar, float, (size_t)N * Ud);
        la->ffn_a = BG_ARENA_NEW(ar, float, (size_t)N * Fd);
    }
    la->ffn_out = BG_ARENA_NEW(ar, float, NC);
}

// Buffers that are never live at once share bytes: each layout starts at the same
// mark and the arena keeps the largest end.
static size_t overlap_end(bg_arena *ar, size_t mark, size_t end) {
    if (ar->used > end) end = ar->used;
    ar->used = mark;
    return end;
}

// Recomputation's one set of block caches: the attention block's and the FFN block's
// overlap (a block's backward recomputes only its own), and so do a dense FFN's and an
// MoE layer's.
static void shared_caches(layer_acts *sh, bg_arena *ar, const model_config *c,
                          const moe_shape *ms, int flash, int B, int T) {
    int N = B * T, any_dense = 0, any_moe = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        if (model_layer_is_moe(c, l)) any_moe = 1;
        else any_dense = 1;
    }
    memset(sh, 0, sizeof *sh);
    size_t mark = ar->used, end = mark;
    attention_caches(sh, ar, flash, B, T, c);
    end = overlap_end(ar, mark, end);
    if (any_dense) {
        ffn_caches(sh, ar, c, ms, 0, N);
        end = overlap_end(ar, mark, end);
    }
    if (any_moe) {
        layer_acts moe_part = *sh;
        ffn_caches(&moe_part, ar, c, ms, 1, N);
        end = overlap_end(ar, mark, end);
        // The dense FFN's pointers stay; norm and output buffers are the same bytes.
        sh->ln2 = moe_part.ln2, sh->ln2_mean = moe_part.ln2_mean, sh->ln2_rstd = moe_part.ln2_rstd;
        sh->ffn_out = moe_part.ffn_out;
        sh->moe = moe_part.moe;
    }
    ar->used = end;
}

void model_acts_layout(model_acts *a, bg_arena *ar, const model_config *c,
                       const model_options *opt, const moe_parallel *par, int B, int T) {
    int N = B * T, C = c->hidden_size, V = c->vocab_size, NH = c->num_attention_heads;
    int hs = C / NH, L = c->num_hidden_layers;
    int Fd = c->intermediate_size, Ud = ffn_in_rows(c->hidden_act, Fd);
    size_t NC = (size_t)N * C, att = (size_t)B * NH * T * T;
    a->B = B, a->T = T, a->N = N;
    moe_shape ms = model_layer_moe_shape(c, opt, par, T);
    // Flash attention keeps one number per query row instead of a T×T matrix per head,
    // and needs about (N,C) of backward workspace instead of (B,NH,T,T).
    a->flash = opt->attention == MODEL_ATTN_FLASH;
    size_t att_scratch = a->flash ? flash_attention_scratch_size(B, T, C, NH, model_kv_heads(c)) : att;
    // The fused LM head holds one chunk of logits instead of all N rows, and stages
    // the LM head's weight gradient from forward to backward.
    a->lm_fused = opt->lm_head_chunk > 0 && N > opt->lm_head_chunk;
    a->lm_chunk_rows = a->lm_fused ? opt->lm_head_chunk : 0;
    a->recompute = opt->recompute == MODEL_RECOMPUTE_BLOCK;
    for (int l = 0; l < L; l++) {
        layer_acts scratch, *la = a->layers ? &a->layers[l] : &scratch;  // NULL: measure only
        int moe = model_layer_is_moe(c, l);
        la->x = BG_ARENA_NEW(ar, float, NC);
        if (a->recompute) {
            // Only the blocks' inputs and what is read per layer after the step.
            la->x2 = BG_ARENA_NEW(ar, float, NC);
            if (moe) moe_acts_keep_layout(&la->moe, ar, &ms);
            continue;
        }
        attention_caches(la, ar, a->flash, B, T, c);
        la->x2 = BG_ARENA_NEW(ar, float, NC);
        ffn_caches(la, ar, c, &ms, moe, N);
    }
    if (a->recompute) shared_caches(&a->shared, ar, c, &ms, a->flash, B, T);
    else memset(&a->shared, 0, sizeof a->shared);
    a->x_final = BG_ARENA_NEW(ar, float, NC);
    a->lnf = BG_ARENA_NEW(ar, float, NC);
    a->lnf_mean = BG_ARENA_NEW(ar, float, N);
    a->lnf_rstd = BG_ARENA_NEW(ar, float, N);
    a->logits = a->lm_fused ? NULL : BG_ARENA_NEW(ar, float, (size_t)N * V);
    a->lm_chunk = a->lm_fused ? BG_ARENA_NEW(ar, float, lmhead_workspace_floats(a->lm_chunk_rows, C, V))
                              : NULL;
    a->d_lm_head = a->lm_fused ? BG_ARENA_NEW(ar, float, (size_t)V * C) : NULL;
    a->lm_grads_ready = 0;
    a->losses = BG_ARENA_NEW(ar, float, N);
    a->lse = BG_ARENA_NEW(ar, float, N);
    a->inputs = BG_ARENA_NEW(ar, int, N);
    a->targets = BG_ARENA_NEW(ar, int, N);
    a->rope_cos = BG_ARENA_NEW(ar, float, (size_t)T * (hs / 2 + 1));
    a->rope_sin = BG_ARENA_NEW(ar, float, (size_t)T * (hs / 2 + 1));
    a->d_resid = BG_ARENA_NEW(ar, float, NC);
    a->d_ln = BG_ARENA_NEW(ar, float, NC);
    a->d_qkv = BG_ARENA_NEW(ar, float, (size_t)N * model_qkv_width(c));
    a->d_atty = BG_ARENA_NEW(ar, float, NC);
    a->d_att_scratch = BG_ARENA_NEW(ar, float, att_scratch);
    int any_dense = 0, any_moe = 0;
    for (int l = 0; l < L; l++) {
        if (model_layer_is_moe(c, l)) any_moe = 1;
        else any_dense = 1;
    }
    a->d_ffn_h = any_dense ? BG_ARENA_NEW(ar, float, (size_t)N * Ud) : NULL;
    a->d_ffn_a = any_dense ? BG_ARENA_NEW(ar, float, (size_t)N * Fd) : NULL;
    if (any_moe) moe_scratch_layout(&a->moe_scr, ar, &ms, N);
    else memset(&a->moe_scr, 0, sizeof a->moe_scr);
}
