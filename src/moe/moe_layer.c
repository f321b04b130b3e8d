// The MoE FFN layer: router → dispatcher (to the experts, the experts, back) → combine,
// plus the always-on shared experts. Backward is the same list reversed.
#include "moe/moe_layer.h"

#include "core/error.h"
#include "kernels/kernels.h"
#include "moe/dispatch.h"
#include "moe/experts.h"

#include <stddef.h>

static const moe_router *router_of(const moe_shape *s) {
    BG_ASSERT(s->router);
    return s->router;
}

static const moe_dispatcher *dispatcher_of(const moe_shape *s) {
    if (!s->par) return &moe_dispatcher_local;
    BG_ASSERT(s->par->dispatcher);  // set once with moe_dispatcher_for
    return s->par->dispatcher;
}

static void expert_cache_layout(moe_expert_cache *c, bg_arena *arena, const moe_shape *s, int N) {
    size_t n = (size_t)N, F = (size_t)s->F, U = (size_t)ffn_in_rows(s->act, s->F);
    size_t S = (size_t)s->S, cap = moe_expert_rows_cap(s, N);
    c->x = NULL;
    c->h = BG_ARENA_NEW(arena, float, cap * U);
    c->a = BG_ARENA_NEW(arena, float, cap * F);
    c->sh_h = S ? BG_ARENA_NEW(arena, float, S * n * U) : NULL;
    c->sh_a = S ? BG_ARENA_NEW(arena, float, S * n * F) : NULL;
}

void moe_acts_layout(moe_acts *acts, bg_arena *arena, const moe_shape *s, int N) {
    moe_router_cache_layout(&acts->router, arena, s, N);
    dispatcher_of(s)->layout(&acts->dispatch, &acts->exchange, arena, s, N);
    expert_cache_layout(&acts->experts, arena, s, N);
}

void moe_scratch_layout(moe_scratch *scr, bg_arena *arena, const moe_shape *s, int N) {
    size_t n = (size_t)N, NK = n * s->k;
    size_t F = (size_t)s->F, U = (size_t)ffn_in_rows(s->act, s->F);
    size_t cap = moe_expert_rows_cap(s, N);
    size_t rows = cap > n ? cap : n;  // dh / da serve the routed experts and the shared ones
    moe_router_scratch_layout(&scr->router, arena, s, N);
    scr->dtopk_w = BG_ARENA_NEW(arena, float, NK);
    dispatcher_of(s)->scratch_layout(&scr->dispatch, &scr->exchange, arena, s, N);
    scr->dh = BG_ARENA_NEW(arena, float, rows * U);
    scr->da = BG_ARENA_NEW(arena, float, rows * F);
}

// --- the experts, as the passes the dispatcher runs on rows where they arrive ---

typedef struct {
    kernel_ctx *kc;
    moe_expert_cache *c;
    const moe_params *p;
    const moe_shape *s;
} experts_fwd;

static void experts_forward_pass(void *ctx, float *out, const float *in, const int *offsets,
                                 int n_experts) {
    experts_fwd *f = ctx;
    f->c->x = in;  // the backward reads the same rows
    moe_experts_forward(f->kc, out, f->c->h, f->c->a, in, f->p->w_in, f->p->w_out, offsets, n_experts,
                        f->s->C, f->s->F, f->s->act);
}

typedef struct {
    kernel_ctx *kc;
    const moe_expert_cache *c;
    moe_params *grads;
    moe_scratch *scr;
    const moe_params *p;
    const moe_shape *s;
} experts_bwd;

static void experts_backward_pass(void *ctx, float *out, const float *in, const int *offsets,
                                  int n_experts) {
    experts_bwd *b = ctx;
    moe_experts_backward(b->kc, out, b->grads->w_in, b->grads->w_out, b->scr->da, b->scr->dh, in,
                         b->c->x, b->c->h, b->c->a, b->p->w_in, b->p->w_out, offsets, n_experts,
                         b->s->C, b->s->F, b->s->act);
}

// Shared experts straight into out; tmp (N,C) holds the second and later ones' outputs.
static void shared_forward(kernel_ctx *kc, float *out, float *tmp, moe_expert_cache *c, const float *inp,
                           const moe_params *p, const moe_shape *s, int N) {
    const int C = s->C, F = s->F;
    const size_t U = (size_t)ffn_in_rows(s->act, F), n = (size_t)N;
    if (s->S == 0) vec_zero(out, n * C);
    for (int i = 0; i < s->S; i++) {
        float *dst = i == 0 ? out : tmp;
        ffn_forward(kc, dst, c->sh_h + (size_t)i * n * U, c->sh_a + (size_t)i * n * F, inp,
                    p->shared_in + (size_t)i * U * C, p->shared_out + (size_t)i * C * F, N, C,
                    F, s->act);
        if (i > 0) vec_add(out, tmp, n * C);
    }
}

static void shared_backward(kernel_ctx *kc, float *dinp, moe_params *grads, moe_scratch *scr, const float *dout,
                            const float *inp, const moe_expert_cache *c, const moe_params *p,
                            const moe_shape *s, int N) {
    const int C = s->C, F = s->F;
    const size_t U = (size_t)ffn_in_rows(s->act, F), n = (size_t)N;
    for (int i = 0; i < s->S; i++)
        ffn_backward(kc, dinp, grads->shared_in + (size_t)i * U * C,
                     grads->shared_out + (size_t)i * C * F, scr->da, scr->dh, dout, inp,
                     c->sh_h + (size_t)i * n * U, c->sh_a + (size_t)i * n * F,
                     p->shared_in + (size_t)i * U * C, p->shared_out + (size_t)i * C * F, N,
                     C, F, s->act);
}

void moe_forward(kernel_ctx *kc, float *out, moe_acts *acts, const float *inp, const moe_params *p,
                 const moe_router_ctx *rc, const moe_shape *s, int N) {
    BG_ASSERT(s->k >= 1 && s->k <= s->E);
    const moe_dispatcher *d = dispatcher_of(s);
    moe_router_cache *rt = &acts->router;
    moe_dispatch_cache *dc = &acts->dispatch;

    router_of(s)->forward(kc, rt, rc, inp, p->gate, s, N);
    d->plan(dc, &acts->exchange, rt->topk_idx, s, N);
    // Shared experts first, straight into out: y_perm is not filled yet, so it can hold
    // the second and later shared outputs (N rows <= N·k rows) and no extra buffer is
    // needed. The routed combine then accumulates on top.
    shared_forward(kc, out, dc->y_perm, &acts->experts, inp, p, s, N);
    experts_fwd f = {kc, &acts->experts, p, s};
    d->to_experts(dc, &acts->exchange, inp, &(moe_expert_pass){experts_forward_pass, &f, 0}, s, N);
    d->from_experts(dc, &acts->exchange, s, N);
    moe_combine_forward(out, dc->y_perm, rt->topk_w, dc->row_of, N, s->k, s->C);
}

void moe_backward(kernel_ctx *kc, float *dinp, moe_params *grads, moe_scratch *scr, const float *dout,
                  const float *inp, const moe_acts *acts, const moe_params *p,
                  const moe_router_ctx *rc, const moe_shape *s, int N) {
    if (N == 0) return;
    const moe_dispatcher *d = dispatcher_of(s);
    const moe_router_cache *rt = &acts->router;
    const moe_dispatch_cache *dc = &acts->dispatch;

    shared_backward(kc, dinp, grads, scr, dout, inp, &acts->experts, p, s, N);
    moe_combine_backward(scr->dispatch.dy_perm, scr->dtopk_w, dout, dc->y_perm, rt->topk_w,
                         dc->row_of, N, s->k, s->C);
    experts_bwd b = {kc, &acts->experts, grads, scr, p, s};
    d->from_experts_backward(&scr->dispatch, &scr->exchange, dc, &acts->exchange,
                             &(moe_expert_pass){experts_backward_pass, &b, 1}, s, N);
    d->to_experts_backward(dinp, &scr->dispatch, &scr->exchange, dc, &acts->exchange, s, N);
    router_of(s)->backward(kc, dinp, grads->gate, &scr->router, scr->dtopk_w, inp, rt, rc, p->gate,
                           s, N);
}
