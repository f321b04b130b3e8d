// The MoE FFN layer: router → dispatch plan → permute → experts → combine, plus the
// always-on shared experts. Backward is the same list reversed.
#include "moe/moe_layer.h"

#include "core/error.h"
#include "kernels/kernels.h"
#include "comm/dist.h"
#include "moe/dispatch.h"
#include "moe/exchange.h"
#include "moe/experts.h"
#include "moe/router.h"

#include <stddef.h>

// Rows the experts of this rank may see: N·k on one process; with expert
// parallelism every source rank may send each token's rows for up to min(k, El)
// local experts.
static size_t expert_rows_cap(const moe_shape *s, int N) {
    if (!s->par) return (size_t)N * s->k;
    int El = moe_local_experts(s), per_token = s->k < El ? s->k : El;
    return (size_t)N * per_token * s->par->ep_size;
}

void moe_acts_layout(moe_acts *acts, bg_arena *arena, const moe_shape *s, int N) {
    size_t n = (size_t)N, NK = n * s->k, E = (size_t)s->E, C = (size_t)s->C;
    size_t F = (size_t)s->F, U = (size_t)ffn_in_rows(s->act, s->F), S = (size_t)s->S;
    size_t cap = expert_rows_cap(s, N), El = (size_t)moe_local_experts(s);
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
    acts->h = BG_ARENA_NEW(arena, float, cap * U);
    acts->a = BG_ARENA_NEW(arena, float, cap * F);
    acts->y_perm = BG_ARENA_NEW(arena, float, NK * C);
    acts->sh_h = S ? BG_ARENA_NEW(arena, float, S * n * U) : NULL;
    acts->sh_a = S ? BG_ARENA_NEW(arena, float, S * n * F) : NULL;
    acts->aux_loss = 0.0;
    acts->z_loss = 0.0;
    acts->counts_global = BG_ARENA_NEW(arena, int, E);
    acts->stats = BG_ARENA_NEW(arena, double, 2 * E + 1);
    acts->n_tokens = 0;
    acts->recv_counts = acts->send_rows = acts->recv_rows = NULL;
    acts->local_offsets = acts->recv_to_local = acts->chunk_rows = NULL;
    acts->ep_size = 1;
    acts->x_recv = acts->x_local = acts->y_local = NULL;
    acts->rows_local = 0;
    if (s->par) {
        size_t P = (size_t)s->par->ep_size;
        size_t chunks = s->par->a2a_chunks > 1 ? (size_t)s->par->a2a_chunks : 1;
        acts->ep_size = (int)P;
        acts->chunk_rows = BG_ARENA_NEW(arena, int, chunks * El * P);
        acts->recv_counts = BG_ARENA_NEW(arena, int, P * El);
        acts->send_rows = BG_ARENA_NEW(arena, int, P);
        acts->recv_rows = BG_ARENA_NEW(arena, int, P);
        acts->local_offsets = BG_ARENA_NEW(arena, int, chunks * El + 1);
        acts->recv_to_local = BG_ARENA_NEW(arena, int, cap);
        acts->x_recv = BG_ARENA_NEW(arena, float, cap * C);
        acts->x_local = BG_ARENA_NEW(arena, float, cap * C);
        acts->y_local = BG_ARENA_NEW(arena, float, cap * C);
    }
}

void moe_scratch_layout(moe_scratch *scr, bg_arena *arena, const moe_shape *s, int N) {
    size_t n = (size_t)N, NK = n * s->k, E = (size_t)s->E, C = (size_t)s->C;
    size_t F = (size_t)s->F, U = (size_t)ffn_in_rows(s->act, s->F);
    size_t cap = expert_rows_cap(s, N);
    size_t rows = cap > n ? cap : n;  // dh / da serve the routed experts and the shared ones
    scr->dy_perm = BG_ARENA_NEW(arena, float, NK * C);
    scr->dx_perm = BG_ARENA_NEW(arena, float, NK * C);
    scr->dh = BG_ARENA_NEW(arena, float, rows * U);
    scr->da = BG_ARENA_NEW(arena, float, rows * F);
    scr->dlogits = BG_ARENA_NEW(arena, float, n * E);
    scr->dprobs = BG_ARENA_NEW(arena, float, n * E);
    scr->dtopk_w = BG_ARENA_NEW(arena, float, NK);
    scr->ex_a = s->par ? BG_ARENA_NEW(arena, float, cap * C) : NULL;
    scr->ex_b = s->par ? BG_ARENA_NEW(arena, float, cap * C) : NULL;
    scr->ex_c = s->par && s->par->a2a_chunks > 1 ? BG_ARENA_NEW(arena, float, cap * C) : NULL;
}

// Balance statistics of the whole batch: this rank's probability sums, counts and
// Σ lse² in one buffer, summed over every rank of the batch in one all-reduce
// (a fixed rank order, so the result is the same bits on every rank).
static void balance_statistics(moe_acts *acts, const moe_shape *s, int N) {
    const int E = s->E;
    double *st = acts->stats;
    moe_router_stat_sums(st, &st[2 * E], acts->probs, acts->lse, N, E);
    for (int i = 0; i < E; i++) st[E + i] = acts->counts[i];
    acts->n_tokens = N;
    if (s->par) {
        dist_allreduce_sum_f64(s->par->stats_comm, st, 2 * (size_t)E + 1);
        acts->n_tokens = (double)N * dist_size(s->par->stats_comm);
    }
    for (int i = 0; i < E; i++) acts->counts_global[i] = (int)st[E + i];
    moe_router_losses_from_sums(&acts->aux_loss, &acts->z_loss, st, st[2 * E],
                                acts->counts_global, acts->n_tokens, E, s->k);
}

void moe_forward(kernel_ctx *kc, float *out, moe_acts *acts, const float *inp, const moe_params *p,
                 const moe_shape *s, int N) {
    const int C = s->C, E = s->E, k = s->k, F = s->F, S = s->S;
    const size_t U = (size_t)ffn_in_rows(s->act, F), n = (size_t)N;
    BG_ASSERT(k >= 1 && k <= E);

    moe_router_forward(kc, acts->logits, acts->probs, acts->lse, acts->topk_idx, acts->topk_w,
                       inp, p->gate, N, C, E, k, s->norm_topk_prob);
    moe_dispatch_plan(acts->counts, acts->offsets, acts->row_of, acts->token_of,
                      acts->topk_idx, N, E, k);
    balance_statistics(acts, s, N);

    // Shared experts first, straight into out: y_perm is not filled yet, so it can hold
    // the second and later shared outputs (N rows <= N·k rows) and no extra buffer is
    // needed. The routed combine then accumulates on top.
    if (S == 0) vec_zero(out, n * C);
    for (int i = 0; i < S; i++) {
        float *dst = i == 0 ? out : acts->y_perm;
        ffn_forward(kc, dst, acts->sh_h + (size_t)i * n * U, acts->sh_a + (size_t)i * n * F, inp,
                    p->shared_in + (size_t)i * U * C, p->shared_out + (size_t)i * C * F, N, C,
                    F, s->act);
        if (i > 0) vec_add(out, acts->y_perm, n * C);
    }

    moe_permute_forward(acts->x_perm, inp, acts->token_of, N * k, C);
    if (!s->par) {
        moe_experts_forward(kc, acts->y_perm, acts->h, acts->a, acts->x_perm, p->w_in, p->w_out,
                            acts->offsets, E, C, F, s->act);
    } else {
        // rows to their experts' ranks, the local experts, and back
        moe_exchange_plan(acts, s);
        const int El = moe_local_experts(s), n_chunks = s->par->a2a_chunks;
        if (n_chunks <= 1) {
            moe_exchange_to_experts(acts->x_recv, acts->x_perm, acts, s);
            moe_rows_recv_to_local(acts->x_local, acts->x_recv, acts, C);
            moe_experts_forward(kc, acts->y_local, acts->h, acts->a, acts->x_local, p->w_in,
                                p->w_out, acts->local_offsets, El, C, F, s->act);
        } else {
            // Chunk j's experts run while chunks j+1.. are still in flight.
            dist_a2a *h = dist_a2a_begin(s->par->ep_comm, (enum dist_a2a_algo)s->par->a2a_algo,
                                         acts->x_perm, acts->send_rows, acts->x_recv,
                                         acts->recv_rows, (size_t)C, n_chunks);
            for (int j = 0; j < n_chunks; j++) {
                dist_a2a_wait_chunk(h, j);
                moe_rows_recv_to_local_chunk(acts->x_local, acts->x_recv, acts, C, j, n_chunks);
                moe_experts_forward(kc, acts->y_local, acts->h, acts->a, acts->x_local, p->w_in,
                                    p->w_out, acts->local_offsets + (size_t)j * El, El, C, F,
                                    s->act);
                dist_a2a_progress(h);
            }
            dist_a2a_end(h);
        }
        moe_rows_local_to_recv(acts->x_recv, acts->y_local, acts, C);
        moe_exchange_from_experts(acts->y_perm, acts->x_recv, acts, s);
    }
    moe_combine_forward(out, acts->y_perm, acts->topk_w, acts->row_of, N, k, C);
}

void moe_backward(kernel_ctx *kc, float *dinp, moe_params *grads, moe_scratch *scr,
                  const float *dout, const float *inp, const moe_acts *acts, const moe_params *p,
                  const moe_shape *s, int N) {
    const int C = s->C, E = s->E, k = s->k, F = s->F, S = s->S;
    const size_t U = (size_t)ffn_in_rows(s->act, F), n = (size_t)N;
    if (N == 0) return;

    for (int i = 0; i < S; i++)
        ffn_backward(kc, dinp, grads->shared_in + (size_t)i * U * C,
                     grads->shared_out + (size_t)i * C * F, scr->da, scr->dh, dout, inp,
                     acts->sh_h + (size_t)i * n * U, acts->sh_a + (size_t)i * n * F,
                     p->shared_in + (size_t)i * U * C, p->shared_out + (size_t)i * C * F, N,
                     C, F, s->act);

    moe_combine_backward(scr->dy_perm, scr->dtopk_w, dout, acts->y_perm, acts->topk_w,
                         acts->row_of, N, k, C);
    if (!s->par) {
        vec_zero(scr->dx_perm, n * k * C);  // the experts accumulate into it
        moe_experts_backward(kc, scr->dx_perm, grads->w_in, grads->w_out, scr->da, scr->dh,
                             scr->dy_perm, acts->x_perm, acts->h, acts->a, p->w_in, p->w_out,
                             acts->offsets, E, C, F, s->act);
    } else {
        // the forward's trips in reverse: gradients to the experts' ranks and back
        const int R = acts->rows_local, El = moe_local_experts(s), n_chunks = s->par->a2a_chunks;
        if (n_chunks <= 1) {
            moe_exchange_to_experts(scr->ex_a, scr->dy_perm, acts, s);
            moe_rows_recv_to_local(scr->ex_b, scr->ex_a, acts, C);
            vec_zero(scr->ex_a, (size_t)R * C);
            moe_experts_backward(kc, scr->ex_a, grads->w_in, grads->w_out, scr->da, scr->dh,
                                 scr->ex_b, acts->x_local, acts->h, acts->a, p->w_in, p->w_out,
                                 acts->local_offsets, El, C, F, s->act);
            moe_rows_local_to_recv(scr->ex_b, scr->ex_a, acts, C);
        } else {
            // ex_a receives, ex_b holds dy by (chunk, expert), ex_c collects dx.
            vec_zero(scr->ex_c, (size_t)R * C);
            dist_a2a *h = dist_a2a_begin(s->par->ep_comm, (enum dist_a2a_algo)s->par->a2a_algo,
                                         scr->dy_perm, acts->send_rows, scr->ex_a,
                                         acts->recv_rows, (size_t)C, n_chunks);
            for (int j = 0; j < n_chunks; j++) {
                dist_a2a_wait_chunk(h, j);
                moe_rows_recv_to_local_chunk(scr->ex_b, scr->ex_a, acts, C, j, n_chunks);
                moe_experts_backward(kc, scr->ex_c, grads->w_in, grads->w_out, scr->da, scr->dh,
                                     scr->ex_b, acts->x_local, acts->h, acts->a, p->w_in,
                                     p->w_out, acts->local_offsets + (size_t)j * El, El, C, F,
                                     s->act);
                dist_a2a_progress(h);
            }
            dist_a2a_end(h);
            moe_rows_local_to_recv(scr->ex_b, scr->ex_c, acts, C);
        }
        moe_exchange_from_experts(scr->dx_perm, scr->ex_b, acts, s);
    }
    moe_permute_backward(dinp, scr->dx_perm, acts->row_of, N, k, C);
    moe_router_backward_global(kc, dinp, grads->gate, scr->dlogits, scr->dprobs, scr->dtopk_w, inp,
                               p->gate, acts->probs, acts->lse, acts->topk_idx, acts->topk_w,
                               acts->counts_global, acts->n_tokens, N, C, E, k,
                               s->norm_topk_prob, s->aux_coef, s->z_coef);
}
