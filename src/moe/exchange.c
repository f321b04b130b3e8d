#include "moe/exchange.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "moe/capacity.h"
#include "comm/dist.h"

// The trip to the experts in a2a_chunks chunks, or in one.
static int exchange_chunks(const moe_shape *s) {
    return s->par->a2a_chunks > 1 ? s->par->a2a_chunks : 1;
}

void moe_exchange_cache_layout(moe_exchange_cache *xc, bg_arena *arena, const moe_shape *s, int N) {
    size_t C = (size_t)s->C, El = (size_t)moe_local_experts(s);
    size_t P = (size_t)s->par->ep_size, chunks = (size_t)exchange_chunks(s);
    size_t bound = moe_expert_rows_bound(s, N);
    xc->ep_size = (int)P;
    xc->rows_local = 0;
    xc->rows_hwm = 0;
    xc->rows_worst = moe_expert_rows_cap(s, N);
    xc->back = NULL;
    xc->chunk_rows = BG_ARENA_NEW(arena, int, chunks * El * P);
    xc->recv_counts = BG_ARENA_NEW(arena, int, P * El);
    xc->send_rows = BG_ARENA_NEW(arena, int, P);
    xc->recv_rows = BG_ARENA_NEW(arena, int, P);
    xc->local_offsets = BG_ARENA_NEW(arena, int, chunks * El + 1);
    xc->grown = moe_expert_rows_growable(s, N);
    xc->heap = 0;
    xc->rows_alloc = bound;
    if (bound == 0) {
        xc->recv_to_local = NULL;
        xc->x_recv = xc->x_local = xc->y_local = NULL;
        return;
    }
    xc->recv_to_local = BG_ARENA_NEW(arena, int, bound);
    xc->x_recv = BG_ARENA_NEW(arena, float, bound * C);
    xc->x_local = BG_ARENA_NEW(arena, float, bound * C);
    xc->y_local = BG_ARENA_NEW(arena, float, bound * C);
}

void moe_exchange_scratch_layout(moe_exchange_scratch *xs, bg_arena *arena, const moe_shape *s,
                                 int N) {
    size_t C = (size_t)s->C, bound = moe_expert_rows_bound(s, N);
    xs->grown = moe_expert_rows_growable(s, N);
    xs->heap = 0;
    xs->rows_alloc = bound;
    xs->chunked = exchange_chunks(s) > 1;
    xs->back = NULL;
    if (bound == 0) {
        xs->ex_a = xs->ex_b = xs->ex_c = NULL;
        return;
    }
    xs->ex_a = BG_ARENA_NEW(arena, float, bound * C);
    xs->ex_b = BG_ARENA_NEW(arena, float, bound * C);
    xs->ex_c = xs->chunked ? BG_ARENA_NEW(arena, float, bound * C) : NULL;
}

void moe_exchange_cache_free(moe_exchange_cache *xc) {
    if (!xc->heap) return;
    bg_mapped_free(xc->recv_to_local), bg_mapped_free(xc->x_recv), bg_mapped_free(xc->x_local),
        bg_mapped_free(xc->y_local);
    xc->recv_to_local = NULL;
    xc->x_recv = xc->x_local = xc->y_local = NULL;
    xc->rows_alloc = 0;
    xc->heap = 0;
}

void moe_exchange_scratch_free(moe_exchange_scratch *xs) {
    if (!xs->heap) return;
    bg_mapped_free(xs->ex_a), bg_mapped_free(xs->ex_b), bg_mapped_free(xs->ex_c);
    xs->ex_a = xs->ex_b = xs->ex_c = NULL;
    xs->rows_alloc = 0;
    xs->heap = 0;
}

// Rows to hold `need`: an eighth more, so that a slowly rising peak does not allocate
// every step, but never past the worst case.
static size_t grow_rows(size_t need, size_t worst) {
    size_t rows = need + need / 8;
    return rows < worst ? rows : worst > need ? worst : need;
}

void moe_exchange_reserve(moe_exchange_cache *xc, int C) {
    size_t need = (size_t)xc->rows_local;
    if (need <= xc->rows_alloc) return;
    BG_ASSERT(xc->grown);  // a bound that the routing broke is a bug
    size_t rows = grow_rows(need, xc->rows_worst);
    moe_exchange_cache_free(xc);
    xc->heap = 1;
    xc->recv_to_local = bg_mapped_alloc(sizeof(int) * rows);
    xc->x_recv = bg_mapped_alloc(sizeof(float) * rows * C);
    xc->x_local = bg_mapped_alloc(sizeof(float) * rows * C);
    xc->y_local = bg_mapped_alloc(sizeof(float) * rows * C);
    xc->rows_alloc = rows;
}

void moe_exchange_scratch_reserve(moe_exchange_scratch *xs, const moe_exchange_cache *xc, int C) {
    size_t need = (size_t)xc->rows_local;
    if (need <= xs->rows_alloc) return;
    BG_ASSERT(xs->grown);
    size_t rows = grow_rows(need, xc->rows_worst);
    moe_exchange_scratch_free(xs);
    xs->ex_a = bg_mapped_alloc(sizeof(float) * rows * C);
    xs->ex_b = bg_mapped_alloc(sizeof(float) * rows * C);
    xs->ex_c = xs->chunked ? bg_mapped_alloc(sizeof(float) * rows * C) : NULL;
    xs->rows_alloc = rows;
    xs->heap = 1;
}

void moe_exchange_counts(moe_exchange_cache *xc, const int *counts, const moe_shape *s) {
    const moe_parallel *par = s->par;
    const int P = par->ep_size, El = moe_local_experts(s);
    // counts is expert-ordered, so rank q's slice is counts[q·El, (q+1)·El): exactly
    // the all-to-all layout.
    dist_alltoall_i32(par->ep_comm, counts, xc->recv_counts, El);
    int total = 0;
    for (int q = 0; q < P; q++) {
        int sent = 0, got = 0;
        for (int e = 0; e < El; e++) {
            sent += counts[q * El + e];
            got += xc->recv_counts[q * El + e];
        }
        xc->send_rows[q] = sent;
        xc->recv_rows[q] = got;
        total += got;
    }
    xc->rows_local = total;
    if (total > xc->rows_hwm) xc->rows_hwm = total;
}

void moe_exchange_plan(moe_exchange_cache *xc, const int *counts, const moe_shape *s) {
    moe_exchange_counts(xc, counts, s);
    moe_exchange_reserve(xc, s->C);
    moe_exchange_order(xc, s);
}

void moe_exchange_order(moe_exchange_cache *xc, const moe_shape *s) {
    const int P = s->par->ep_size, El = moe_local_experts(s);
    const int n = exchange_chunks(s);
    // Rows of each (chunk j, local expert e, source q): a source's block holds its
    // experts in order, and chunk j takes rows [lo_j, lo_{j+1}) of the block.
    int *cnt = xc->chunk_rows;  // [(j·El + e)·P + q]
    memset(cnt, 0, sizeof(int) * (size_t)n * El * P);
    for (int q = 0; q < P; q++) {
        int block = xc->recv_rows[q], i = 0;
        for (int e = 0; e < El; e++)
            for (int x = 0; x < xc->recv_counts[q * El + e]; x++, i++) {
                int j = 0;
                while (j + 1 < n && i >= dist_chunk_lo(block, j + 1, n)) j++;
                cnt[((size_t)j * El + e) * P + q]++;
            }
    }
    xc->local_offsets[0] = 0;
    for (int je = 0; je < n * El; je++) {
        int rows = 0;
        for (int q = 0; q < P; q++) rows += cnt[(size_t)je * P + q];
        xc->local_offsets[je + 1] = xc->local_offsets[je] + rows;
    }
    // Received row (source q, i-th of its block) goes to local row: start of its
    // (chunk, expert), plus the rows of that (chunk, expert) from earlier sources,
    // plus its rank among its own (chunk, expert, source) rows.
    int r = 0;
    for (int q = 0; q < P; q++) {
        int block = xc->recv_rows[q], i = 0;
        for (int e = 0; e < El; e++) {
            int seen_j = -1, k = 0;
            for (int x = 0; x < xc->recv_counts[q * El + e]; x++, i++, r++) {
                int j = 0;
                while (j + 1 < n && i >= dist_chunk_lo(block, j + 1, n)) j++;
                if (j != seen_j) seen_j = j, k = 0;
                size_t je = (size_t)j * El + e;
                int dst = xc->local_offsets[je];
                for (int q2 = 0; q2 < q; q2++) dst += cnt[je * P + q2];
                xc->recv_to_local[r] = dst + k++;
            }
        }
    }
    BG_ASSERT(r == xc->rows_local);
    BG_ASSERT(r == xc->local_offsets[n * El]);
}

void moe_exchange_to_experts(float *recv, const float *send, const moe_exchange_cache *xc,
                             const moe_shape *s) {
    dist_alltoallv(s->par->ep_comm, (enum dist_a2a_algo)s->par->a2a_algo, send, xc->send_rows,
                   recv, xc->recv_rows, (size_t)s->C);
}

void moe_exchange_from_experts(float *recv, const float *send, const moe_exchange_cache *xc,
                               const moe_shape *s) {
    dist_alltoallv(s->par->ep_comm, (enum dist_a2a_algo)s->par->a2a_algo, send, xc->recv_rows,
                   recv, xc->send_rows, (size_t)s->C);
}

void moe_rows_recv_to_local(float *local, const float *recv, const moe_exchange_cache *xc, int C) {
    const int R = xc->rows_local;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++)
        memcpy(local + (size_t)xc->recv_to_local[r] * C, recv + (size_t)r * C, sizeof(float) * C);
}

void moe_rows_local_to_recv(float *recv, const float *local, const moe_exchange_cache *xc, int C) {
    const int R = xc->rows_local;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++)
        memcpy(recv + (size_t)r * C, local + (size_t)xc->recv_to_local[r] * C, sizeof(float) * C);
}

void moe_rows_recv_to_local_chunk(float *local, const float *recv, const moe_exchange_cache *xc, int C,
                                  int j, int n) {
    int start = 0;
    for (int q = 0; q < xc->ep_size; q++) {
        int block = xc->recv_rows[q];
        int r0 = start + dist_chunk_lo(block, j, n), r1 = start + dist_chunk_lo(block, j + 1, n);
        #pragma omp parallel for schedule(static)
        for (int r = r0; r < r1; r++)
            memcpy(local + (size_t)xc->recv_to_local[r] * C, recv + (size_t)r * C,
                   sizeof(float) * C);
        start += block;
    }
}

void moe_rows_local_to_recv_chunk(float *recv, const float *local, const moe_exchange_cache *xc,
                                  int C, int j, int n) {
    int start = 0;
    for (int q = 0; q < xc->ep_size; q++) {
        int block = xc->recv_rows[q];
        int r0 = start + dist_chunk_lo(block, j, n), r1 = start + dist_chunk_lo(block, j + 1, n);
        #pragma omp parallel for schedule(static)
        for (int r = r0; r < r1; r++)
            memcpy(recv + (size_t)r * C, local + (size_t)xc->recv_to_local[r] * C,
                   sizeof(float) * C);
        start += block;
    }
}
