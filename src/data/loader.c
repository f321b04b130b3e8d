#include "data/loader.h"
#include "core/error.h"
#include "core/rng.h"

#include <string.h>

int loader_init(data_loader *l, const shard_set *set, int T, uint64_t seed, const char *origin) {
    memset(l, 0, sizeof *l);
    size_t windows = 0, tokens = 0;
    for (int k = 0; k < set->count; k++) {
        size_t n = set->shards[k].count;
        tokens += n;
        windows += n >= (size_t)T + 1 ? (n - 1) / (size_t)T : 0;
    }
    if (windows == 0) {
        if (set->count == 1)
            return bg_error("%s: %zu tokens is shorter than one training window of %d tokens", origin,
                            tokens, T + 1);
        return bg_error("%s: no shard of the %d holds one training window of %d tokens", origin,
                        set->count, T + 1);
    }
    if (windows > UINT32_MAX) return bg_error("%s: too many windows", origin);
    l->set = set;
    l->T = T;
    l->windows = windows;
    l->first = bg_malloc(sizeof(size_t) * ((size_t)set->count + 1));
    l->first[0] = 0;
    for (int k = 0; k < set->count; k++) {
        size_t n = set->shards[k].count;
        l->first[k + 1] = l->first[k] + (n >= (size_t)T + 1 ? (n - 1) / (size_t)T : 0);
    }
    l->seed = seed;
    l->epoch = -1;
    l->perm = bg_malloc(sizeof(uint32_t) * l->windows);
    return BG_OK;
}

void loader_free(data_loader *l) {
    free(l->perm);
    free(l->first);
    memset(l, 0, sizeof *l);
}

static void loader_shuffle(data_loader *l, long epoch) {
    bg_rng rng;
    bg_rng_seed(&rng, l->seed * 0x100000001B3ull + (uint64_t)epoch + 1);
    for (size_t i = 0; i < l->windows; i++) l->perm[i] = (uint32_t)i;
    for (size_t i = l->windows; i > 1; i--) {  // Fisher-Yates
        size_t j = bg_rng_u64(&rng) % i;
        uint32_t t = l->perm[i - 1];
        l->perm[i - 1] = l->perm[j];
        l->perm[j] = t;
    }
    l->epoch = epoch;
}

void loader_window(const data_loader *l, size_t w, int *inputs, int *targets) {
    int lo = 0, hi = l->set->count - 1;  // the shard k with first[k] <= w < first[k+1]
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (l->first[mid] <= w) lo = mid;
        else hi = mid - 1;
    }
    while (l->first[lo + 1] <= w) lo++;  // skip shards without windows
    const token_shard *s = &l->set->shards[lo];
    size_t start = (w - l->first[lo]) * (size_t)l->T;
    for (int t = 0; t < l->T; t++) {
        inputs[t] = (int)shard_token(s, start + t);
        targets[t] = (int)shard_token(s, start + t + 1);
    }
}

void loader_sample(data_loader *l, uint64_t g, int *inputs, int *targets) {
    long epoch = (long)(g / l->windows);
    if (epoch != l->epoch) loader_shuffle(l, epoch);
    loader_window(l, l->perm[g % l->windows], inputs, targets);
}

void loader_samples(data_loader *l, uint64_t first, int B, int *inputs, int *targets) {
    for (int b = 0; b < B; b++)
        loader_sample(l, first + (uint64_t)b, inputs + (size_t)b * l->T, targets + (size_t)b * l->T);
}
