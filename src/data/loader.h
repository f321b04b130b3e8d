#ifndef BG_DATA_LOADER_H
#define BG_DATA_LOADER_H
// Deterministic batches of (T+1)-token windows.
// The shard is cut into W = (count-1)/T windows starting at multiples of T (each
// window's last token is the next one's first, so every token is a target once).
// Epoch e visits the windows in a permutation drawn from (seed, e). Global sample g
// of the run is window perm_{g / W}[g % W]; batch `step` holds global samples
// [step·GB, (step+1)·GB). A rank reads its own contiguous slice of each global
// batch, so the tokens trained on depend only on the data, the seed and the
// global batch size — never on the number of ranks — and the position to resume
// from is just the step.
#include <stddef.h>
#include <stdint.h>

#include "data/shard.h"

typedef struct {
    const token_shard *shard;
    int T;
    size_t windows;
    uint64_t seed;
    long epoch;          // epoch whose permutation is in perm (-1: none yet)
    uint32_t *perm;      // (windows)
} data_loader;

// Fails (bg_error) when the shard is shorter than one window.
int loader_init(data_loader *l, const token_shard *shard, int T, uint64_t seed, const char *origin);
void loader_free(data_loader *l);
// Fills inputs/targets (B,T) with samples [first, first+B) of the global sample stream.
void loader_samples(data_loader *l, uint64_t first, int B, int *inputs, int *targets);
// Evaluation: window i in file order (no shuffle), i < windows.
void loader_window(const data_loader *l, size_t i, int *inputs, int *targets);
#endif
