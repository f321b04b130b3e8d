// The MoE FFN layer: router → dispatch plan → permute → experts → combine, plus the
// always-on shared experts. Backward is the same list reversed.
#include "moe/moe_layer.h"

#include "core/error.h"
#include "kernels/kernels.h"
#include "moe/dispatch.h"
#include "moe/experts.h"
#include "moe/router.h"

#include <stddef.h>

void moe_acts_layout(moe_acts *acts, bg_arena *arena, const moe_shape *s, int N) {
    size_t n = (size_t)N, NK = n * s->k, E = (size_t)s->E, C = (size_t)s->C;
    size_t F = (size_t)s->F, U = (size_t)ffn_in_rows(s->act, s->F), S = (size_t)s->S;
    acts->logits = BG_ARENA_NEW(arena, float, n * E);
    acts->probs = BG_ARENA_NEW(arena, float, n * E);
    acts->lse = BG_ARENA_NEW(arena, float, n);
    acts->topk_idx = BG_ARENA_NEW(arena, int, NK);
    acts->topk_w = BG_ARENA_NEW(arena, float, NK);
    acts->counts = BG_ARENA_NEW(arena, int, E);
    acts->offsets = BG_ARENA_NEW(arena, int, E + 1);
    acts->row_of = BG_ARENA_NEW(arena, int, NK);
    acts->token_of = BG_ARENA_NEW(arena, int, NK);
    // Dropless: exactly N·k permuted rows, whatever the routing.
    acts->x_perm = BG_ARENA_NEW(arena, float, NK * C);
    acts->h = BG_ARENA_NEW(arena, float, NK * U);
    acts->a = BG_ARENA_NEW(arena, float, NK * F);
    acts->y_perm = BG_ARENA_NEW(arena, float, NK * C);
    acts->sh_h = S ? BG_ARENA_NEW(arena, float, S * n * U) : NULL;
    acts->sh_a = S ? BG_ARENA_NEW(arena, float, S * n * F) : NULL;
    acts->aux_loss = 0.0;
    acts->z_loss = 0.0;
}

void moe_scratch_layout(moe_scratch *scr, bg_arena *arena, const moe_shape *s, int N) {
    size_t n = (size_t)N, NK = n * s->k, E = (size_t)s->E, C = (size_t)s->C;
    size_t F = (size_t)s->F, U = (size_t)ffn_in_rows(s->act, s->F);
    size_t rows = NK > n ? NK : n;  // dh / da serve the routed experts and the shared ones
    scr->dy_perm = BG_ARENA_NEW(arena, float, NK * C);
    scr->dx_perm = BG_ARENA_NEW(arena, float, NK * C);
    scr->dh = BG_ARENA_NEW(arena, float, rows * U);
    scr->da = BG_ARENA_NEW(arena, float, rows * F);
    scr->dlogits = BG_ARENA_NEW(arena, float, n * E);
    scr->dprobs = BG_ARENA_NEW(arena, float, n * E);
    scr->dtopk_w = BG_ARENA_NEW(arena, float, NK);
}

void moe_forward(float *out, moe_acts *acts, const float *inp, const moe_params *p,
                 const moe_shape *s, int N) {
    const int C = s->C, E = s->E, k = s->k, F = s->F, S = s->S;
    const size_t U = (size_t)ffn_in_rows(s->act, F), n = (size_t)N;
    BG_ASSERT(k >= 1 && k <= E);

    moe_router_forward(acts->logits, acts->probs, acts->lse, acts->topk_idx, acts->topk_w,
                       inp, p->gate, N, C, E, k, s->norm_topk_prob);
    moe_dispatch_plan(acts->counts, acts->offsets, acts->row_of, acts->token_of,
                      acts->topk_idx, N, E, k);
    moe_router_balance_losses(&acts->aux_loss, &acts->z_loss, acts->probs, acts->lse,
                              acts->counts, N, E, k);

    // Shared experts first, straight into out: y_perm is not filled yet, so it can hold
    // the second and later shared outputs (N rows <= N·k rows) and no extra buffer is
    // needed. The routed combine then accumulates on top.
    if (S == 0) vec_zero(out, n * C);
    for (int i = 0; i < S; i++) {
        float *dst = i == 0 ? out : acts->y_perm;
        ffn_forward(dst, acts->sh_h + (size_t)i * n * U, acts->sh_a + (size_t)i * n * F, inp,
                    p->shared_in + (size_t)i * U * C, p->shared_out + (size_t)i * C * F, N, C,
                    F, s->act);
        if (i > 0) vec_add(out, acts->y_perm, n * C);
    }

    moe_permute_forward(acts->x_perm, inp, acts->token_of, N * k, C);
    moe_experts_forward(acts->y_perm, acts->h, acts->a, acts->x_perm, p->w_in, p->w_out,
                        acts->offsets, E, C, F, s->act);
    moe_combine_forward(out, acts->y_perm, acts->topk_w, acts->row_of, N, k, C);
}

void moe_backward(float *dinp, moe_params *grads, moe_scratch *scr, const float *dout,
                  const float *inp, const moe_acts *acts, const moe_params *p,
                  const moe_shape *s, int N) {
    const int C = s->C, E = s->E, k = s->k, F = s->F, S = s->S;
    const size_t U = (size_t)ffn_in_rows(s->act, F), n = (size_t)N;
    if (N == 0) return;

    for (int i = 0; i < S; i++)
        ffn_backward(dinp, grads->shared_in + (size_t)i * U * C,
                     grads->shared_out + (size_t)i * C * F, scr->da, scr->dh, dout, inp,
                     acts->sh_h + (size_t)i * n * U, acts->sh_a + (size_t)i * n * F,
                     p->shared_in + (size_t)i * U * C, p->shared_out + (size_t)i * C * F, N,
                     C, F, s->act);

    moe_combine_backward(scr->dy_perm, scr->dtopk_w, dout, acts->y_perm, acts->topk_w,
                         acts->row_of, N, k, C);
    vec_zero(scr->dx_perm, n * k * C);  // the experts accumulate into it
    moe_experts_backward(scr->dx_perm, grads->w_in, grads->w_out, scr->da, scr->dh,
                         scr->dy_perm, acts->x_perm, acts->h, acts->a, p->w_in, p->w_out,
                         acts->offsets, E, C, F, s->act);
    moe_permute_backward(dinp, scr->dx_perm, acts->row_of, N, k, C);
    moe_router_backward(dinp, grads->gate, scr->dlogits, scr->dprobs, scr->dtopk_w, inp,
                        p->gate, acts->probs, acts->lse, acts->topk_idx, acts->topk_w,
                        acts->counts, N, C, E, k, s->norm_topk_prob, s->aux_coef, s->z_coef);
}
