#ifndef BG_MOE_DISPATCH_H
#define BG_MOE_DISPATCH_H
// Dispatcher on one rank: plan, permute into expert-contiguous rows, and combine the
// expert outputs back with the gate weights. A (token, slot) whose topk_idx is -1 was
// dropped (capacity): it gets no row (row_of -1) and adds nothing to the output. The
// expert-parallel exchange (comm/) slots in between permute and the experts without
// changing either side.

// Stable counting sort of the N·k (token, slot) assignments by expert. The rows of
// expert e are [offsets[e], offsets[e+1]) and hold its assignments in (token, slot)
// order (SWIPE may give one token the same expert in two slots; the lower slot first).
// topk_idx (N,k) → counts (E), offsets (E+1), row_of (N,k), token_of (offsets[E] <= N·k
// rows). All WRITE.
void moe_dispatch_plan(int *counts, int *offsets, int *row_of, int *token_of,
                       const int *topk_idx, int N, int E, int k);

// x_perm (rows,C) WRITES: x_perm[r] = inp[token_of[r]], rows = offsets[E].
void moe_permute_forward(float *x_perm, const float *inp, const int *token_of, int rows,
                         int C);
// dinp (N,C) += Σ_j dx_perm[row_of[t,j]]: one token gathers its k rows, so no two
// threads write the same row and no atomics are needed (deterministic).
void moe_permute_backward(float *dinp, const float *dx_perm, const int *row_of, int N,
                          int k, int C);

// out (N,C) += Σ_j topk_w[t,j] · y_perm[row_of[t,j]] (ACCUMULATES, so shared experts
// can be written into out first), slots summed in order j = 0..k-1.
void moe_combine_forward(float *out, const float *y_perm, const float *topk_w,
                         const int *row_of, int N, int k, int C);
// dy_perm (N·k,C) WRITES: dy_perm[row_of[t,j]] = topk_w[t,j] · dout[t];
// dtopk_w (N,k) WRITES: dtopk_w[t,j] = dout[t] · y_perm[row_of[t,j]], 0 where dropped.
void moe_combine_backward(float *dy_perm, float *dtopk_w, const float *dout,
                          const float *y_perm, const float *topk_w, const int *row_of,
                          int N, int k, int C);
#endif
