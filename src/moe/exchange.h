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
#include "moe/moe_layer.h"

// Exchanges the per-expert counts and fills recv_counts, send_rows, recv_rows,
// local_offsets, recv_to_local and rows_local from acts->counts.
// With c chunks, chunk j of each (source, destination) block is its rows
// dist_chunk_lo(cnt, j, c) .. dist_chunk_lo(cnt, j+1, c); x_local is ordered
// (chunk, local expert, source, row) so that each chunk's rows of each expert are
// contiguous and can go through the expert GEMMs as soon as that chunk arrives.
void moe_exchange_plan(moe_acts *acts, const moe_shape *s);
// Rows of width C from the permuted buffer to the owners (forward dispatch, and the
// backward of the return trip): send (N·k,C) → recv (R,C) source-major.
void moe_exchange_to_experts(float *recv, const float *send, const moe_acts *acts,
                             const moe_shape *s);
// The way back: send (R,C) source-major → recv (N·k,C) in permuted order.
void moe_exchange_from_experts(float *recv, const float *send, const moe_acts *acts,
                               const moe_shape *s);
// Reorders rows between the received (source-major) and local-expert-major orders.
void moe_rows_recv_to_local(float *local, const float *recv, const moe_acts *acts, int C);
void moe_rows_local_to_recv(float *recv, const float *local, const moe_acts *acts, int C);
// Only the received rows of chunk j (of n chunks).
void moe_rows_recv_to_local_chunk(float *local, const float *recv, const moe_acts *acts, int C,
                                  int j, int n);
#endif
