#include "data/loader.h"
#include "core/error.h"
#include "core/rng.h"

#include <string.h>

int loader_init(data_loader *l, const token_shard *shard, int T, uint64_t seed, const char *origin) {
    memset(l, 0, sizeof *l);
    if (shard->count < (size_t)T + 1)
        return bg_error("%s: %zu tokens is shorter than one training window of %d tokens", origin,
                        shard->count, T + 1);
    if ((shard->count - 1) / T > UINT32_MAX) return bg_error("%s: too many windows", origin);
    l->shard = shard;
    l->T = T;
    l->windows = (shard->count - 1) / T;
    l->seed = seed;
    l->epoch = -1;
    l->perm = bg_malloc(sizeof(uint32_t) * l->windows);
    return BG_OK;
}

void loader_free(data_loader *l) {
    free(l->perm);
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
    size_t start = w * (size_t)l->T;
    for (int t = 0; t < l->T; t++) {
        inputs[t] = (int)shard_token(l->shard, start + t);
        targets[t] = (int)shard_token(l->shard, start + t + 1);
    }
}

void loader_samples(data_loader *l, uint64_t first, int B, int *inputs, int *targets) {
    for (int b = 0; b < B; b++) {
        uint64_t g = first + (uint64_t)b;
        long epoch = (long)(g / l->windows);
        if (epoch != l->epoch) loader_shuffle(l, epoch);
        loader_window(l, l->perm[g % l->windows], inputs + (size_t)b * l->T,
                      targets + (size_t)b * l->T);
    }
}
