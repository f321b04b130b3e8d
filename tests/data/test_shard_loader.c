// Token shards round-trip in both versions; the loader is deterministic, covers
// every window once per epoch, and different seeds give different orders.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/loader.h"
#include "data/shard_set.h"
#include "data/shard.h"
#include "test_util.h"

int main(void) {
    char dir[] = "/tmp/bagualu_data_XXXXXX";
    BG_ASSERT(mkdtemp(dir));
    char p16[300], p32[300];
    snprintf(p16, sizeof p16, "%s/a.bin", dir);
    snprintf(p32, sizeof p32, "%s/b.bin", dir);
    size_t n = 1001;
    uint32_t *tok = malloc(n * sizeof *tok);
    for (size_t i = 0; i < n; i++) tok[i] = (uint32_t)(i * 7919 % 50000);
    TU_CHECK(shard_write(p16, tok, n, SHARD_VERSION_U16) == BG_OK, "write v1");
    for (size_t i = 0; i < n; i++) tok[i] += 70000;  // needs 32-bit ids
    TU_CHECK(shard_write(p32, tok, n, SHARD_VERSION_U32) == BG_OK, "write v2");
    TU_CHECK(shard_write(p16, tok, n, SHARD_VERSION_U16) == BG_ERR, "uint16 shard must reject id > 65535");
    for (size_t i = 0; i < n; i++) tok[i] -= 70000;
    TU_CHECK(shard_write(p16, tok, n, SHARD_VERSION_U16) == BG_OK, "rewrite v1");

    token_shard s16, s32;
    TU_CHECK(shard_load(&s16, p16, 50000) == BG_OK, "load v1: %s", bg_last_error());
    TU_CHECK(shard_load(&s32, p32, 120000) == BG_OK, "load v2: %s", bg_last_error());
    TU_CHECK(s16.count == n && s32.count == n, "counts");
    for (size_t i = 0; i < n; i++) {
        TU_CHECK(shard_token(&s16, i) == tok[i], "v1 token %zu", i);
        TU_CHECK(shard_token(&s32, i) == tok[i] + 70000, "v2 token %zu", i);
    }
    token_shard bad;
    TU_CHECK(shard_load(&bad, p32, 100000) == BG_ERR && strstr(bg_last_error(), "out of range"),
             "ids beyond vocab must be rejected");

    // Loader: T = 10 gives (1001-1)/10 = 100 windows per epoch.
    data_loader a, b, c;
    char *name16 = p16;
    shard_set set16 = {1, &name16, &s16};
    TU_CHECK(loader_init(&a, &set16, 10, 5, "a") == BG_OK, "init");
    loader_init(&b, &set16, 10, 5, "b");
    loader_init(&c, &set16, 10, 6, "c");
    TU_CHECK(a.windows == 100, "windows %zu", a.windows);
    int in_a[100 * 10], tg_a[100 * 10], in_b[100 * 10], tg_b[100 * 10], in_c[100 * 10], tg_c[100 * 10];
    int seen[100] = {0};
    for (int step = 0; step < 10; step++) {  // 10 batches of 10 = one epoch
        loader_samples(&a, (uint64_t)step * 10, 10, in_a, tg_a);
        // the same global batch read as two "ranks" of 5 samples each
        loader_samples(&b, (uint64_t)step * 10, 5, in_b, tg_b);
        loader_samples(&b, (uint64_t)step * 10 + 5, 5, in_b + 50, tg_b + 50);
        TU_CHECK(memcmp(in_a, in_b, sizeof(int) * 100) == 0 && memcmp(tg_a, tg_b, sizeof(int) * 100) == 0,
                 "split reading differs at step %d", step);
        for (int i = 0; i < 10; i++) {
            // targets are inputs shifted by one
            for (int t = 0; t + 1 < 10; t++) TU_CHECK(tg_a[i * 10 + t] == in_a[i * 10 + t + 1], "shift");
            // find which window this is: window w starts with token w*10
            int w = -1;
            for (int k = 0; k < 100; k++)
                if ((uint32_t)in_a[i * 10] == tok[k * 10] && (uint32_t)in_a[i * 10 + 1] == tok[k * 10 + 1]) w = k;
            TU_CHECK(w >= 0, "unknown window");
            if (w >= 0) seen[w]++;
        }
    }
    for (int k = 0; k < 100; k++) TU_CHECK(seen[k] == 1, "window %d seen %d times in one epoch", k, seen[k]);
    loader_samples(&a, 0, 10, in_a, tg_a);
    loader_samples(&c, 0, 10, in_c, tg_c);
    TU_CHECK(memcmp(in_a, in_c, sizeof(int) * 100) != 0, "different seeds gave the same batch");
    data_loader short_l;
    token_shard tiny = s16;
    tiny.count = 10;
    shard_set tiny_set = {1, &name16, &tiny};
    TU_CHECK(loader_init(&short_l, &tiny_set, 10, 1, "tiny") == BG_ERR, "too-short shard must be rejected");
    loader_free(&a), loader_free(&b), loader_free(&c);
    shard_free(&s16), shard_free(&s32);
    remove(p16), remove(p32), remove(dir);
    free(tok);
    return tu_finish("shard_loader");
}
