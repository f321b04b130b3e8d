#ifndef BG_DATA_LOADER_H
#define BG_DATA_LOADER_H
// Deterministic batches of (T+1)-token windows over a set of shards.
// Shard k is cut into W_k = (count_k-1)/T windows starting at multiples of T (each
// window's last token is the next one's first, so every token is a target once); a
// shard shorter than one window gives none. The set's windows are numbered shard by
// shard in the set's (sorted) order, W = sum of W_k. Epoch e visits the W windows in a
// permutation drawn from (seed, e). Global sample g of the run is window
// perm_{g / W}[g % W]; batch `step` holds global samples [step·GB, (step+1)·GB). A rank
// reads its own contiguous slice of each global batch, so the tokens trained on depend
// only on the data, the seed and the global batch size — never on the number of
// ranks — and the position to resume from is just the step. One shard gives the order
// of the single-file loader before shard sets, bit for bit.
#include <stddef.h>
#include <stdint.h>

#include "data/shard_set.h"

typedef struct {
    const shard_set *set;
    int T;
    size_t windows;
    size_t *first;       // (set->count + 1): window number of each shard's first window
    uint64_t seed;
    long epoch;          // epoch whose permutation is in perm (-1: none yet)
    uint32_t *perm;      // (windows)
} data_loader;

// Fails (bg_error naming origin) when the set holds no whole window.
int loader_init(data_loader *l, const shard_set *set, int T, uint64_t seed, const char *origin);
void loader_free(data_loader *l);
// Fills inputs/targets (B,T) with samples [first, first+B) of the global sample stream.
void loader_samples(data_loader *l, uint64_t first, int B, int *inputs, int *targets);
// One sample of the stream, window `w` of sample g into inputs/targets (T).
void loader_sample(data_loader *l, uint64_t g, int *inputs, int *targets);
// Evaluation: window i in set order (no shuffle), i < windows.
void loader_window(const data_loader *l, size_t i, int *inputs, int *targets);
#endif
