// The three dispatchers and the choice between them. The local plan and permutation
// are the expert-parallel dispatchers' first step too.
#include "moe/dispatcher.h"

#include "comm/dist.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "moe/capacity.h"
#include "moe/dispatch.h"

#include <stddef.h>

// The local plan and permuted rows, shared by every dispatcher.
static void local_layout(moe_dispatch_cache *dc, moe_exchange_cache *xc, bg_arena *arena,
                         const moe_shape *s, int N) {
    size_t NK = (size_t)N * s->k, E = (size_t)s->E, C = (size_t)s->C;
    dc->counts = BG_ARENA_NEW(arena, int, E);
    dc->offsets = BG_ARENA_NEW(arena, int, E + 1);
    dc->row_of = BG_ARENA_NEW(arena, int, NK);
    dc->token_of = BG_ARENA_NEW(arena, int, NK);
    // At most N·k permuted rows (exactly that many without drops).
    dc->x_perm = BG_ARENA_NEW(arena, float, NK * C);
    dc->y_perm = BG_ARENA_NEW(arena, float, NK * C);
    const int capacity = s->routing.capacity_factor > 0;
    size_t Gk = (size_t)moe_routing_group_tokens(s, N) * s->k;
    dc->gate_idx = capacity ? BG_ARENA_NEW(arena, int, NK) : NULL;
    dc->gate_w = capacity ? BG_ARENA_NEW(arena, float, NK) : NULL;
    dc->cap_keys = capacity ? BG_ARENA_NEW(arena, uint64_t, Gk) : NULL;
    dc->dropped = 0;
    *xc = (moe_exchange_cache){.ep_size = 1};
}

static void local_scratch_layout(moe_dispatch_scratch *ds, moe_exchange_scratch *xs,
                                 bg_arena *arena, const moe_shape *s, int N) {
    size_t NK = (size_t)N * s->k, C = (size_t)s->C;
    ds->dy_perm = BG_ARENA_NEW(arena, float, NK * C);
    ds->dx_perm = BG_ARENA_NEW(arena, float, NK * C);
    *xs = (moe_exchange_scratch){0};
}

static int local_plan(moe_dispatch_cache *dc, moe_exchange_cache *xc, const int *topk_idx,
                      const moe_plan_ctx *pc, const moe_shape *s, int N) {
    (void)xc, (void)pc;
    moe_dispatch_plan(dc->counts, dc->offsets, dc->row_of, dc->token_of, topk_idx, N, s->E,
                      s->k);
    return BG_OK;
}

static void local_to_experts(moe_dispatch_cache *dc, moe_exchange_cache *xc, const float *inp,
                             const moe_expert_pass *pass, const moe_shape *s, int N) {
    (void)N;  // the plan counted the rows
    (void)xc;
    moe_permute_forward(dc->x_perm, inp, dc->token_of, dc->offsets[s->E], s->C);
    pass->run(pass->ctx, dc->y_perm, dc->x_perm, dc->offsets, s->E);
}

static void local_from_experts(moe_dispatch_cache *dc, moe_exchange_cache *xc,
                               const moe_shape *s, int N) {
    (void)dc, (void)xc, (void)s, (void)N;  // the experts wrote y_perm in place
}

static void local_from_experts_backward(moe_dispatch_scratch *ds, moe_exchange_scratch *xs,
                                        const moe_dispatch_cache *dc,
                                        const moe_exchange_cache *xc,
                                        const moe_expert_pass *pass, const moe_shape *s, int N) {
    (void)N;  // the plan counted the rows
    (void)xs, (void)xc;
    if (pass->accumulates) vec_zero(ds->dx_perm, (size_t)dc->offsets[s->E] * s->C);
    pass->run(pass->ctx, ds->dx_perm, ds->dy_perm, dc->offsets, s->E);
}

static void local_to_experts_backward(float *dinp, moe_dispatch_scratch *ds,
                                      moe_exchange_scratch *xs, const moe_dispatch_cache *dc,
                                      const moe_exchange_cache *xc, const moe_shape *s, int N) {
    (void)xs, (void)xc;
    moe_permute_backward(dinp, ds->dx_perm, dc->row_of, N, s->k, s->C);
}

const moe_dispatcher moe_dispatcher_local = {
    .name = "local",
    .layout = local_layout,
    .scratch_layout = local_scratch_layout,
    .plan = local_plan,
    .to_experts = local_to_experts,
    .from_experts = local_from_experts,
    .from_experts_backward = local_from_experts_backward,
    .to_experts_backward = local_to_experts_backward,
};

// --- expert parallelism: the local plan and permutation, then the exchange ---

static void ep_layout(moe_dispatch_cache *dc, moe_exchange_cache *xc, bg_arena *arena,
                      const moe_shape *s, int N) {
    local_layout(dc, xc, arena, s, N);
    moe_exchange_cache_layout(xc, arena, s, N);
}

static void ep_scratch_layout(moe_dispatch_scratch *ds, moe_exchange_scratch *xs, bg_arena *arena,
                              const moe_shape *s, int N) {
    local_scratch_layout(ds, xs, arena, s, N);
    moe_exchange_scratch_layout(xs, arena, s, N);
}

// Dropless: the rows this step sends to each rank, checked against max_rows before any
// buffer grows, so that a router sending everything to one rank stops the run with
// an error and not an out-of-memory kill, and every rank stops at the same layer. A
// free test first: rank q of any expert-parallel group receives at most the world's
// count of its experts, which every rank knows alike; only when that bound passes the
// limit do the ranks agree on their exact rows with one max all-reduce.
static int check_rows(const moe_exchange_cache *xc, const moe_plan_ctx *pc, const moe_shape *s) {
    const long limit = s->par->max_rows;
    if (!xc->grown || limit <= 0) return BG_OK;
    const int El = moe_local_experts(s);
    if (pc && pc->counts_global) {
        long worst = 0;
        for (int q = 0; q < s->par->ep_size; q++) {
            long rows = 0;
            for (int e = 0; e < El; e++) rows += pc->counts_global[q * El + e];
            worst = rows > worst ? rows : worst;
        }
        if (worst <= limit) return BG_OK;
    }
    double need = xc->rows_local;
    dist_allreduce_max_f64(pc && pc->world ? pc->world : s->par->ep_comm, &need, 1);
    if (need <= limit) return BG_OK;
    return bg_error("MoE layer %d, step %ld: a rank would receive %.0f expert rows, more than "
                    "--max-expert-rows %ld; set capacity_factor in the model config, use "
                    "router_type swipe, or raise --max-expert-rows",
                    pc ? pc->layer : -1, pc ? pc->step + 1 : 0, need, limit);
}

static int ep_plan(moe_dispatch_cache *dc, moe_exchange_cache *xc, const int *topk_idx,
                   const moe_plan_ctx *pc, const moe_shape *s, int N) {
    local_plan(dc, xc, topk_idx, pc, s, N);
    moe_exchange_counts(xc, dc->counts, s);
    if (check_rows(xc, pc, s) != BG_OK) return BG_ERR;
    moe_exchange_reserve(xc, s->C);
    moe_exchange_order(xc, s);
    return BG_OK;
}

// One trip to the experts: send (N·k,C) in permuted order lands in recv (R,C)
// source-major, is reordered into local (R,C) local-expert-major, and the pass turns
// local into out (R,C). The same for the forward's x and the backward's dy.
typedef struct {
    const float *send;
    float *recv, *local, *out;
} ep_trip;

static void alltoall_trip(const ep_trip *t, const moe_exchange_cache *xc,
                          const moe_expert_pass *pass, const moe_shape *s) {
    const int C = s->C;
    moe_exchange_to_experts(t->recv, t->send, xc, s);
    moe_rows_recv_to_local(t->local, t->recv, xc, C);
    // After the reorder: out may be the receive buffer, free by now.
    if (pass->accumulates) vec_zero(t->out, (size_t)xc->rows_local * C);
    pass->run(pass->ctx, t->out, t->local, xc->local_offsets, moe_local_experts(s));
}

// Both ways in chunks. Chunk j's experts run while chunks j+1.. are still on their
// way in, and chunk j's output leaves (through tmp, in chunk j's rows of the source-
// major order) as soon as it is computed; *back is the trip home, still in flight,
// for the caller to end (it lands in home). Expert GEMMs and the exchange alternate on
// this thread: MPI advances non-blocking transfers only inside MPI calls, so the
// chunks are tested between the chunks' GEMMs. tmp may be recv: chunk j's rows of recv
// are free once copied into local. With a2a_sync the same chunks and the same GEMMs
// run, but each way waits for the whole exchange (nothing overlaps): the same bits.
static void chunked_trip(const ep_trip *t, float *tmp, float *home, const moe_exchange_cache *xc,
                         const moe_expert_pass *pass, const moe_shape *s, dist_a2a **back) {
    const int C = s->C, El = moe_local_experts(s), n_chunks = s->par->a2a_chunks;
    const int sync = s->par->a2a_sync;
    const enum dist_a2a_algo algo = (enum dist_a2a_algo)s->par->a2a_algo;
    dist_comm *ep = s->par->ep_comm;
    if (pass->accumulates) vec_zero(t->out, (size_t)xc->rows_local * C);
    dist_a2a *h = dist_a2a_begin(ep, algo, t->send, xc->send_rows, t->recv, xc->recv_rows,
                                 (size_t)C, n_chunks);
    if (sync) dist_a2a_end(h), h = NULL;
    dist_a2a *b = NULL;
    for (int j = 0; j < n_chunks; j++) {
        if (h) dist_a2a_wait_chunk(h, j);
        moe_rows_recv_to_local_chunk(t->local, t->recv, xc, C, j, n_chunks);
        pass->run(pass->ctx, t->out, t->local, xc->local_offsets + (size_t)j * El, El);
        moe_rows_local_to_recv_chunk(tmp, t->out, xc, C, j, n_chunks);
        if (sync) continue;
        // The trip in ends before the last chunk home is posted: a hierarchical or 2d
        // return starts then, and must not interleave with the trip in.
        if (j == n_chunks - 1) dist_a2a_end(h), h = NULL;
        if (!b)
            b = dist_a2a_open(ep, algo, tmp, xc->recv_rows, home, xc->send_rows, (size_t)C,
                              n_chunks);
        dist_a2a_post(b, j);
        if (h) dist_a2a_progress(h);
        dist_a2a_progress(b);
    }
    if (sync)
        b = dist_a2a_begin(ep, algo, tmp, xc->recv_rows, home, xc->send_rows, (size_t)C,
                           n_chunks);
    *back = b;
}

// The way back: out (R,C) local-expert-major through tmp (R,C) source-major to
// dst (N·k,C) in permuted order.
static void ep_home(float *dst, float *tmp, const float *out, const moe_exchange_cache *xc,
                    const moe_shape *s) {
    moe_rows_local_to_recv(tmp, out, xc, s->C);
    moe_exchange_from_experts(dst, tmp, xc, s);
}

// The forward's rows: x_perm → x_recv → x_local → y_local, back through x_recv.
static ep_trip forward_trip(const moe_dispatch_cache *dc, const moe_exchange_cache *xc) {
    return (ep_trip){.send = dc->x_perm, .recv = xc->x_recv, .local = xc->x_local,
                     .out = xc->y_local};
}

static void alltoall_to_experts(moe_dispatch_cache *dc, moe_exchange_cache *xc, const float *inp,
                                const moe_expert_pass *pass, const moe_shape *s, int N) {
    (void)N;  // the plan counted the rows
    moe_permute_forward(dc->x_perm, inp, dc->token_of, dc->offsets[s->E], s->C);
    ep_trip t = forward_trip(dc, xc);
    alltoall_trip(&t, xc, pass, s);
}

static void chunked_to_experts(moe_dispatch_cache *dc, moe_exchange_cache *xc, const float *inp,
                               const moe_expert_pass *pass, const moe_shape *s, int N) {
    (void)N;  // the plan counted the rows
    moe_permute_forward(dc->x_perm, inp, dc->token_of, dc->offsets[s->E], s->C);
    ep_trip t = forward_trip(dc, xc);
    chunked_trip(&t, xc->x_recv, dc->y_perm, xc, pass, s, &xc->back);
}

// The chunked trip home is already under way: its end lands the rows in y_perm.
static void chunked_from_experts(moe_dispatch_cache *dc, moe_exchange_cache *xc,
                                 const moe_shape *s, int N) {
    (void)dc, (void)s, (void)N;
    dist_a2a_end(xc->back);
    xc->back = NULL;
}

static void ep_from_experts(moe_dispatch_cache *dc, moe_exchange_cache *xc, const moe_shape *s,
                            int N) {
    (void)N;
    ep_home(dc->y_perm, xc->x_recv, xc->y_local, xc, s);
}

// The backward's rows: dy_perm → ex_a → ex_b → the experts' dx, which the single trip
// writes over ex_a and the chunked one into ex_c; back through ex_b (single) or ex_a
// (chunked, chunk by chunk) into dx_perm.
static void alltoall_from_experts_backward(moe_dispatch_scratch *ds, moe_exchange_scratch *xs,
                                           const moe_dispatch_cache *dc,
                                           const moe_exchange_cache *xc,
                                           const moe_expert_pass *pass, const moe_shape *s,
                                           int N) {
    (void)dc, (void)N;
    moe_exchange_scratch_reserve(xs, xc, s->C);
    ep_trip t = {.send = ds->dy_perm, .recv = xs->ex_a, .local = xs->ex_b, .out = xs->ex_a};
    alltoall_trip(&t, xc, pass, s);
}

static void chunked_from_experts_backward(moe_dispatch_scratch *ds, moe_exchange_scratch *xs,
                                          const moe_dispatch_cache *dc,
                                          const moe_exchange_cache *xc,
                                          const moe_expert_pass *pass, const moe_shape *s,
                                          int N) {
    (void)dc, (void)N;
    moe_exchange_scratch_reserve(xs, xc, s->C);
    ep_trip t = {.send = ds->dy_perm, .recv = xs->ex_a, .local = xs->ex_b, .out = xs->ex_c};
    chunked_trip(&t, xs->ex_a, ds->dx_perm, xc, pass, s, &xs->back);
}

static void alltoall_to_experts_backward(float *dinp, moe_dispatch_scratch *ds,
                                         moe_exchange_scratch *xs, const moe_dispatch_cache *dc,
                                         const moe_exchange_cache *xc, const moe_shape *s,
                                         int N) {
    ep_home(ds->dx_perm, xs->ex_b, xs->ex_a, xc, s);
    moe_permute_backward(dinp, ds->dx_perm, dc->row_of, N, s->k, s->C);
}

static void chunked_to_experts_backward(float *dinp, moe_dispatch_scratch *ds,
                                        moe_exchange_scratch *xs, const moe_dispatch_cache *dc,
                                        const moe_exchange_cache *xc, const moe_shape *s, int N) {
    (void)xc;
    dist_a2a_end(xs->back);  // the trip home left chunk by chunk: dx_perm once it ends
    xs->back = NULL;
    moe_permute_backward(dinp, ds->dx_perm, dc->row_of, N, s->k, s->C);
}

const moe_dispatcher moe_dispatcher_alltoall = {
    .name = "alltoall",
    .layout = ep_layout,
    .scratch_layout = ep_scratch_layout,
    .plan = ep_plan,
    .to_experts = alltoall_to_experts,
    .from_experts = ep_from_experts,
    .from_experts_backward = alltoall_from_experts_backward,
    .to_experts_backward = alltoall_to_experts_backward,
};

const moe_dispatcher moe_dispatcher_chunked = {
    .name = "chunked",
    .layout = ep_layout,
    .scratch_layout = ep_scratch_layout,
    .plan = ep_plan,
    .to_experts = chunked_to_experts,
    .from_experts = chunked_from_experts,
    .from_experts_backward = chunked_from_experts_backward,
    .to_experts_backward = chunked_to_experts_backward,
};

const moe_dispatcher *moe_dispatcher_for(const moe_parallel *par) {
    if (!par) return &moe_dispatcher_local;
    return par->a2a_chunks > 1 ? &moe_dispatcher_chunked : &moe_dispatcher_alltoall;
}
