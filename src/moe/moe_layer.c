// The MoE FFN layer: router → dispatcher (to the experts, the experts, back) → combine,
// plus the always-on shared experts. Backward is the same list reversed.
#include "moe/moe_layer.h"

#include "comm/dist.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "moe/capacity.h"
#include "moe/dispatch.h"
#include "moe/experts.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

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
    size_t S = (size_t)s->S, bound = moe_expert_rows_bound(s, N);
    c->x = NULL;
    c->grown = moe_expert_rows_growable(s, N);
    c->heap = 0;
    c->rows_alloc = bound;
    c->rows_hwm = 0;
    c->h = bound ? BG_ARENA_NEW(arena, float, bound * U) : NULL;
    c->a = bound ? BG_ARENA_NEW(arena, float, bound * F) : NULL;
    c->sh_h = S ? BG_ARENA_NEW(arena, float, S * n * U) : NULL;
    c->sh_a = S ? BG_ARENA_NEW(arena, float, S * n * F) : NULL;
}

void moe_acts_layout(moe_acts *acts, bg_arena *arena, const moe_shape *s, int N) {
    moe_router_cache_layout(&acts->router, arena, s, N);
    dispatcher_of(s)->layout(&acts->dispatch, &acts->exchange, arena, s, N);
    expert_cache_layout(&acts->experts, arena, s, N);
}

void moe_acts_keep_layout(moe_acts *keep, bg_arena *arena, const moe_shape *s) {
    memset(keep, 0, sizeof *keep);
    keep->router.counts_global = BG_ARENA_NEW(arena, int, s->E);
    keep->router.stats = BG_ARENA_NEW(arena, double, MOE_ROUTER_STATS_ALLOC(s->E));
    if (s->par) keep->exchange.send_rows = BG_ARENA_NEW(arena, int, s->par->ep_size);
}

void moe_acts_keep(moe_acts *keep, const moe_acts *from, const moe_shape *s) {
    moe_router_cache *r = &keep->router;
    const moe_router_cache *f = &from->router;
    memcpy(r->counts_global, f->counts_global, sizeof(int) * (size_t)s->E);
    memcpy(r->stats, f->stats, sizeof(double) * MOE_ROUTER_STATS_ALLOC(s->E));
    r->n_tokens = f->n_tokens;
    r->dropped_global = f->dropped_global;
    r->aux_loss = f->aux_loss;
    r->z_loss = f->z_loss;
    keep->dispatch.dropped = from->dispatch.dropped;
    moe_exchange_cache *x = &keep->exchange;
    if (x->send_rows && from->exchange.send_rows) {
        memcpy(x->send_rows, from->exchange.send_rows, sizeof(int) * (size_t)s->par->ep_size);
        x->ep_size = from->exchange.ep_size;
        x->rows_local = from->exchange.rows_local;
    }
}

size_t moe_grown_bytes(const moe_shape *s, size_t rows, int n_caches) {
    size_t C = (size_t)s->C, F = (size_t)s->F, U = (size_t)ffn_in_rows(s->act, s->F);
    int chunked = s->par && s->par->a2a_chunks > 1;
    // moe_exchange_reserve: recv_to_local, x_recv, x_local, y_local; expert_cache_reserve: h, a
    size_t cache = rows * (sizeof(int) + sizeof(float) * (3 * C + U + F));
    // moe_exchange_scratch_reserve: ex_a, ex_b (ex_c chunked); scratch_reserve: dh, da
    size_t scratch = rows * sizeof(float) * ((chunked ? 3 : 2) * C + U + F);
    return (size_t)n_caches * cache + scratch;
}

void moe_scratch_layout(moe_scratch *scr, bg_arena *arena, const moe_shape *s, int N) {
    size_t n = (size_t)N, NK = n * s->k;
    size_t F = (size_t)s->F, U = (size_t)ffn_in_rows(s->act, s->F);
    size_t bound = moe_expert_rows_bound(s, N);
    size_t rows = bound > n ? bound : n;  // dh / da serve the routed experts and the shared ones
    moe_router_scratch_layout(&scr->router, arena, s, N);
    scr->dtopk_w = BG_ARENA_NEW(arena, float, NK);
    dispatcher_of(s)->scratch_layout(&scr->dispatch, &scr->exchange, arena, s, N);
    scr->grown = moe_expert_rows_growable(s, N);
    scr->heap = 0;
    scr->rows_alloc = bound ? rows : 0;
    scr->dh = bound ? BG_ARENA_NEW(arena, float, rows * U) : NULL;
    scr->da = bound ? BG_ARENA_NEW(arena, float, rows * F) : NULL;
}

void moe_acts_free(moe_acts *acts) {
    moe_expert_cache *c = &acts->experts;
    if (c->heap) {
        bg_mapped_free(c->h), bg_mapped_free(c->a);
        c->h = c->a = NULL;
        c->rows_alloc = 0;
        c->heap = 0;
    }
    moe_exchange_cache_free(&acts->exchange);
}

void moe_scratch_free(moe_scratch *scr) {
    if (scr->heap) {
        bg_mapped_free(scr->dh), bg_mapped_free(scr->da);
        scr->dh = scr->da = NULL;
        scr->rows_alloc = 0;
        scr->heap = 0;
    }
    moe_exchange_scratch_free(&scr->exchange);
}

// Dropless expert parallelism: the experts' caches follow the exchange's row buffers.
static void expert_cache_reserve(moe_expert_cache *c, const moe_exchange_cache *xc,
                                 const moe_shape *s) {
    if (!c->grown || xc->rows_alloc <= c->rows_alloc) return;
    size_t rows = xc->rows_alloc, F = (size_t)s->F, U = (size_t)ffn_in_rows(s->act, s->F);
    if (c->heap) bg_mapped_free(c->h), bg_mapped_free(c->a);
    c->h = bg_mapped_alloc(sizeof(float) * rows * U);
    c->a = bg_mapped_alloc(sizeof(float) * rows * F);
    c->rows_alloc = rows;
    c->heap = 1;
}

// The backward workspace of the experts, before anything writes it.
static void scratch_reserve(moe_scratch *scr, const moe_acts *acts, const moe_shape *s, int N) {
    if (!scr->grown) return;  // the dispatcher grows its own workspace
    size_t need = acts->exchange.rows_alloc > (size_t)N ? acts->exchange.rows_alloc : (size_t)N;
    if (need <= scr->rows_alloc) return;
    size_t F = (size_t)s->F, U = (size_t)ffn_in_rows(s->act, s->F);
    if (scr->heap) bg_mapped_free(scr->dh), bg_mapped_free(scr->da);
    scr->dh = bg_mapped_alloc(sizeof(float) * need * U);
    scr->da = bg_mapped_alloc(sizeof(float) * need * F);
    scr->rows_alloc = need;
    scr->heap = 1;
}

// The capacity between the gate and the plan: the gate's own ids and weights are kept
// for its backward (the dropped slots get a zero weight gradient there, so the
// gradient is that of the kept weights, normalisation included), and the drops of
// the whole batch are summed over the world.
static void apply_capacity(moe_router_cache *rt, moe_dispatch_cache *dc,
                           const moe_router_ctx *rc, const moe_shape *s, int N) {
    size_t NK = (size_t)N * s->k;
    memcpy(dc->gate_idx, rt->topk_idx, sizeof(int) * NK);
    memcpy(dc->gate_w, rt->topk_w, sizeof(float) * NK);
    dc->dropped = moe_capacity_apply(rt->topk_idx, rt->topk_w, dc->cap_keys, s, N);
    double d = (double)dc->dropped;
    if (rc->comm) dist_allreduce_sum_f64(rc->comm, &d, 1);
    rt->dropped_global = d;
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

int moe_forward(kernel_ctx *kc, float *out, moe_acts *acts, const float *inp, const moe_params *p,
                const moe_router_ctx *rc, const moe_shape *s, int N) {
    BG_ASSERT(s->k >= 1 && s->k <= s->E);
    const moe_dispatcher *d = dispatcher_of(s);
    moe_router_cache *rt = &acts->router;
    moe_dispatch_cache *dc = &acts->dispatch;

    router_of(s)->forward(kc, rt, rc, inp, p->gate, s, N);
    if (s->routing.capacity_factor > 0) apply_capacity(rt, dc, rc, s, N);
    else rt->dropped_global = 0;
    const moe_plan_ctx pc = {.counts_global = rt->counts_global, .world = rc->comm,
                             .step = rc->step, .layer = rc->layer};
    if (d->plan(dc, &acts->exchange, rt->topk_idx, &pc, s, N) != BG_OK) return BG_ERR;
    long rows = s->par ? acts->exchange.rows_local : dc->offsets[s->E];
    if (rows > acts->experts.rows_hwm) acts->experts.rows_hwm = rows;
    expert_cache_reserve(&acts->experts, &acts->exchange, s);
    // Shared experts first, straight into out: y_perm is not filled yet, so it can hold
    // the second and later shared outputs (N rows <= N·k rows) and no extra buffer is
    // needed. The routed combine then accumulates on top.
    shared_forward(kc, out, dc->y_perm, &acts->experts, inp, p, s, N);
    experts_fwd f = {kc, &acts->experts, p, s};
    d->to_experts(dc, &acts->exchange, inp, &(moe_expert_pass){experts_forward_pass, &f, 0}, s, N);
    d->from_experts(dc, &acts->exchange, s, N);
    moe_combine_forward(out, dc->y_perm, rt->topk_w, dc->row_of, N, s->k, s->C);
    return BG_OK;
}

void moe_backward(kernel_ctx *kc, float *dinp, moe_params *grads, moe_scratch *scr, const float *dout,
                  const float *inp, const moe_acts *acts, const moe_params *p,
                  const moe_router_ctx *rc, const moe_shape *s, int N) {
    if (N == 0) return;
    const moe_dispatcher *d = dispatcher_of(s);
    const moe_router_cache *rt = &acts->router;
    const moe_dispatch_cache *dc = &acts->dispatch;

    scratch_reserve(scr, acts, s, N);
    shared_backward(kc, dinp, grads, scr, dout, inp, &acts->experts, p, s, N);
    moe_combine_backward(scr->dispatch.dy_perm, scr->dtopk_w, dout, dc->y_perm, rt->topk_w,
                         dc->row_of, N, s->k, s->C);
    experts_bwd b = {kc, &acts->experts, grads, scr, p, s};
    d->from_experts_backward(&scr->dispatch, &scr->exchange, dc, &acts->exchange,
                             &(moe_expert_pass){experts_backward_pass, &b, 1}, s, N);
    d->to_experts_backward(dinp, &scr->dispatch, &scr->exchange, dc, &acts->exchange, s, N);
    moe_router_cache gate_view;
    if (s->routing.capacity_factor > 0) {  // the gate differentiates its own choices
        gate_view = *rt;
        gate_view.topk_idx = dc->gate_idx;
        gate_view.topk_w = dc->gate_w;
        rt = &gate_view;
    }
    router_of(s)->backward(kc, dinp, grads->gate, &scr->router, scr->dtopk_w, inp, rt, rc, p->gate,
                           s, N);
}
