#ifndef BG_DATA_DATA_SOURCE_H
#define BG_DATA_DATA_SOURCE_H
// What a run reads: one shard set (--data, --val, eval --data), or several named ones
// blended (--data-mix, data/blend.h), each with its own loader (data/loader.h). A plain
// set is a blend of one unnamed dataset of weight 1: sample g of the stream is sample g
// of its loader, the order of one shard set.
#include <stdint.h>

#include "data/blend.h"
#include "data/loader.h"
#include "data/shard_set.h"

typedef struct {
    int count;            // datasets
    int named;            // from a mix (names set) or one plain set
    char **names;         // (count), NULL when !named
    double *weights;      // (count) as given (0: none)
    shard_set *sets;      // (count)
    data_loader *loaders; // (count)
    blend_sampler blend;  // training order over the datasets
} data_source;

// shards: a shard set spec (data/shard_set.h) or, when mix is set, NULL. mix: a blend
// spec; weights_required for training. Dataset d's loader uses seed + d, so a mix of one
// reads as its plain set does.
int data_source_open(data_source *s, const char *shards, const char *mix, int weights_required, int vocab_size,
                     int T, uint64_t seed, int verbose);
void data_source_free(data_source *s);
// The training stream's global samples [first, first+GB): the blend walks all of them
// (every rank alike) and this rank fills inputs/targets (B,T) with [first+lo, first+lo+B).
// Samples are drawn in order: first must be where the last batch ended (or 0 after seek).
void data_source_batch(data_source *s, uint64_t first, int GB, int lo, int B, int *inputs, int *targets);
// Moves the blend to global sample pos (resume).
void data_source_seek(data_source *s, uint64_t pos);
// Dataset d by name, or -1.
int data_source_find(const data_source *s, const char *name);
#endif
