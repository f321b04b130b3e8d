#ifndef BG_MODEL_ZERO_SHARD_H
#define BG_MODEL_ZERO_SHARD_H
// ZeRO-1: which slice of the optimizer state a rank owns. The parameter block of a
// rank's table is [0, dense_numel) dense tensors (the same on every rank) then
// [dense_numel, numel) its experts (the same on the P/EP ranks of its
// expert-data-parallel group). With sharding on, rank r of P owns the contiguous
// dense slice [D·r/P, D·(r+1)/P) and expert-data-parallel rank s of S owns the
// expert slice D + [X·s/S, X·(s+1)/S) (X = numel − D); off, a rank owns both blocks
// whole. AdamW's m and v hold exactly the owned elements: the dense slice first, the
// expert slice after it. Computed from sizes alone (allocates nothing), so the memory
// report and the planner (which may include model/ but not train/) use the same rule
// as the run.
#include <stddef.h>

typedef struct {
    int on;                        // 1: sharded (--zero 1)
    size_t dense_lo, dense_hi;     // owned dense elements [lo, hi) of the block
    size_t expert_lo, expert_hi;   // owned expert elements [lo, hi), in block offsets
} zero_shard;

// dense = the table's dense_numel, numel its total; rank/size of the world and of
// the expert-data-parallel group (1 and 0 on one process).
static inline zero_shard zero_shard_make(int on, size_t dense, size_t numel, int world_rank,
                                         int world_size, int edp_rank, int edp_size) {
    zero_shard z = {on, 0, dense, dense, numel};
    if (!on) return z;
    size_t X = numel - dense;
    z.dense_lo = dense * (size_t)world_rank / (size_t)world_size;
    z.dense_hi = dense * (size_t)(world_rank + 1) / (size_t)world_size;
    z.expert_lo = dense + X * (size_t)edp_rank / (size_t)edp_size;
    z.expert_hi = dense + X * (size_t)(edp_rank + 1) / (size_t)edp_size;
    return z;
}

// Elements of m (and of v): the owned dense slice, then the owned expert slice.
static inline size_t zero_shard_numel(const zero_shard *z) {
    return (z->dense_hi - z->dense_lo) + (z->expert_hi - z->expert_lo);
}
// Index into m/v of block element i (which the rank must own).
static inline size_t zero_shard_index(const zero_shard *z, size_t i) {
    return i < z->dense_hi ? i - z->dense_lo : (z->dense_hi - z->dense_lo) + (i - z->expert_lo);
}
#endif
