#ifndef BG_DATA_BLEND_H
#define BG_DATA_BLEND_H
// Blended datasets (Megatron-LM's BlendedDataset): sample i of the stream goes to the
// dataset d with the largest error w_d·max(i,1) − taken_d (ties to the lower d), which
// keeps every prefix of the stream, and so every global batch, as close to the weights
// as whole samples allow. Each dataset is then read in its own order (its own epochs):
// the k-th sample drawn from d is sample k of d's loader. The sequence depends only on
// the weights, so the position to resume from is the number of samples drawn.
//
// Spec ("--data-mix"): "name:weight=shards,name:weight=shards,..." (shards: a glob, a
// directory or @list, data/shard_set.h; not a comma list), or a path ending in .json
// holding [{"name": "web", "weight": 0.7, "data": "web/*.bin"}, ...]. Weights need not
// sum to 1 (they are normalised); each must be > 0; names are unique, [A-Za-z0-9_-].
// For validation sets the weight may be left out ("name=shards").
#include <stdint.h>

typedef struct {
    char *name;
    double weight;  // as given; 0 when left out
    char *data;
} blend_entry;

int blend_parse(const char *spec, int weights_required, blend_entry **out, int *count);
void blend_entries_free(blend_entry *e, int count);

typedef struct {
    int count;
    double *weights;  // normalised to sum 1
    uint64_t pos;     // samples drawn
    uint64_t *taken;  // (count) samples drawn from each dataset
} blend_sampler;

void blend_init(blend_sampler *b, const double *weights, int count);
void blend_free(blend_sampler *b);
// The dataset of sample b->pos and its index in that dataset; advances by one.
int blend_next(blend_sampler *b, uint64_t *local);
// Replays the stream from the start to sample pos.
void blend_seek(blend_sampler *b, uint64_t pos);
#endif
