#ifndef BG_MOE_EXCHANGE_H
#define BG_MOE_EXCHANGE_H
// The expert-parallel part of the dispatcher: between permute and the experts,
// rows travel to the rank owning their expert and back (comm/ all-to-all-v).
//
// A rank's permuted rows are sorted by global expert, and each rank owns a
// contiguous range of experts, so the rows bound for rank q are one contiguous
// block. What arrives is source-major (source rank, then local expert); the
// experts want local-expert-major (local expert, then source rank), so rows are
// reordered once each way. Both orders are fixed by (source rank, token order),
// so results do not depend on message timing.
#include "core/arena.h"
#include "moe/moe_types.h"

// The exchange's plan and buffers, per layer; R = rows received this step. The row
// buffers hold rows_alloc rows: with a bound on the rows (capacity.h) they are the
// activation arena's, sized once; dropless they are the heap's, sized from the rows
// actually exchanged and grown only when a step needs more (grown = 1: may grow; a
// balanced gate's arena buffers may be replaced by larger heap ones in evaluation).
typedef struct {
    int *recv_counts;   // (ep_size,El) rows from each source rank for each local expert
    int *send_rows;     // (ep_size)
    int *recv_rows;     // (ep_size)
    int *local_offsets; // (chunks·El+1) first row of each (chunk, local expert) in x_local
    int *chunk_rows;    // (chunks·El·ep_size) rows of each (chunk, local expert, source)
    int *recv_to_local; // (rows_alloc) row of x_local for each received row
    float *x_recv;      // (rows_alloc,C) received rows, source-major; reused going back
    float *x_local;     // (rows_alloc,C) the same rows, local-expert-major (experts' input)
    float *y_local;     // (rows_alloc,C) expert outputs, local-expert-major
    int rows_local;     // R
    int ep_size;
    int grown;          // 1: the row buffers may grow on demand
    int heap;           // 1: they are the heap's now
    size_t rows_alloc;  // rows the row buffers hold
    size_t rows_worst;  // moe_expert_rows_cap: growth never goes past it
    long rows_hwm;      // the most rows received in one step so far
    struct dist_a2a *back; // chunked: the trip home, in flight between to_experts and
                           // from_experts
} moe_exchange_cache;

// Backward workspace, shared by all MoE layers; heap and grown like the cache's.
typedef struct {
    float *ex_a, *ex_b; // (rows_alloc,C) gradients received and reordered
    float *ex_c;        // (rows_alloc,C) third buffer for the chunked exchange, NULL otherwise
    int grown, heap;
    int chunked;        // ex_c is needed
    size_t rows_alloc;
    struct dist_a2a *back; // chunked: the trip home, in flight between the two backward
                           // halves of the dispatcher
} moe_exchange_scratch;

// Lays out the exchange for N tokens per rank (s->par set; a measuring arena sizes it).
void moe_exchange_cache_layout(moe_exchange_cache *xc, bg_arena *arena, const moe_shape *s, int N);
void moe_exchange_scratch_layout(moe_exchange_scratch *xs, bg_arena *arena, const moe_shape *s,
                                 int N);
// Frees what was grown on the heap (nothing when the buffers are the arena's).
void moe_exchange_cache_free(moe_exchange_cache *xc);
void moe_exchange_scratch_free(moe_exchange_scratch *xs);

// The plan in three steps, so that the rows can be checked and the buffers grown
// before anything is written into them:
// counts: exchanges the per-expert counts (E, the local dispatch plan's): recv_counts,
//   send_rows, recv_rows, rows_local and rows_hwm (a collective);
// reserve: grows the row buffers to hold rows_local (grown caches only);
// order: local_offsets, chunk_rows, recv_to_local. With c chunks, chunk j of each
//   (source, destination) block is its rows dist_chunk_lo(cnt, j, c) ..
//   dist_chunk_lo(cnt, j+1, c); x_local is ordered (chunk, local expert, source, row)
//   so that each chunk's rows of each expert are contiguous and can go through the
//   expert GEMMs as soon as that chunk arrives.
void moe_exchange_counts(moe_exchange_cache *xc, const int *counts, const moe_shape *s);
void moe_exchange_reserve(moe_exchange_cache *xc, int C);
void moe_exchange_order(moe_exchange_cache *xc, const moe_shape *s);
// All three, for callers with no limit to check.
void moe_exchange_plan(moe_exchange_cache *xc, const int *counts, const moe_shape *s);
// Grows the backward workspace to hold the rows of xc (grown workspaces only).
void moe_exchange_scratch_reserve(moe_exchange_scratch *xs, const moe_exchange_cache *xc, int C);
// Rows of width C from the permuted buffer to the owners (forward dispatch, and the
// backward of the return trip): send (N·k,C) → recv (R,C) source-major.
void moe_exchange_to_experts(float *recv, const float *send, const moe_exchange_cache *xc,
                             const moe_shape *s);
// The way back: send (R,C) source-major → recv (N·k,C) in permuted order.
void moe_exchange_from_experts(float *recv, const float *send, const moe_exchange_cache *xc,
                               const moe_shape *s);
// Reorders rows between the received (source-major) and local-expert-major orders.
void moe_rows_recv_to_local(float *local, const float *recv, const moe_exchange_cache *xc, int C);
void moe_rows_local_to_recv(float *recv, const float *local, const moe_exchange_cache *xc, int C);
// Only the received rows of chunk j (of n chunks).
void moe_rows_recv_to_local_chunk(float *local, const float *recv, const moe_exchange_cache *xc,
                                  int C, int j, int n);
void moe_rows_local_to_recv_chunk(float *recv, const float *local, const moe_exchange_cache *xc,
                                  int C, int j, int n);
#endif
