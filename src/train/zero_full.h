#ifndef BG_TRAIN_ZERO_FULL_H
#define BG_TRAIN_ZERO_FULL_H
// Interim bridge between ZeRO-1 and the checkpoint code, which reads and writes
// whole-block AdamW state: around a save or a load, tr->adam.m and .v are swapped for
// whole blocks and back. To be dropped when checkpoints store the shards themselves.
// Both are no-ops when tr->zero.on is 0; both are collective when it is 1.
#include "train/train_state.h"

typedef struct {
    float *m, *v;  // the sharded buffers, while the whole blocks stand in for them
    size_t numel;
} zero_full_keep;

// tr->adam.m/v become whole blocks: the owned slices, and every other slice
// all-gathered (dense over the world, experts over the EDP group).
void zero_full_expand(trainer *tr, zero_full_keep *keep);
// Copies the owned slices of the whole blocks (e.g. what ckpt_load read) back into the
// sharded buffers, which become tr->adam.m/v again; frees the whole blocks.
void zero_full_shrink(trainer *tr, zero_full_keep *keep);
#endif
