// Shard sets and blends (data/shard_set.h, data/loader.h, data/blend.h):
//   - 5 shards whose windows coincide with their concatenation's read exactly as the
//     one concatenated file; shards whose windows do not, in another but deterministic
//     order that still visits every window once per epoch;
//   - a glob, a directory, a comma list and an @list name the same sorted set;
//   - bad sets fail with a message naming the culprit;
//   - a blend over 1000 steps: each dataset's share within 1% of its weight, every
//     global batch within one sample of weight x batch; seeking = replaying;
//   - bad blend specs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/blend.h"
#include "data/loader.h"
#include "data/shard_set.h"
#include "test_util.h"

enum { T = 8, K = 5 };
static char dir[] = "/tmp/bagualu_set_XXXXXX";

static const char *at(const char *name) {
    static char buf[8][400];
    static int i;
    i = (i + 1) % 8;
    snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
    return buf[i];
}

// Stream of n samples from a loader over spec (seed 7), into in/tg (n*T each).
static int read_stream(const char *spec, int n, int *in, int *tg) {
    shard_set s;
    data_loader l;
    if (shard_set_open(&s, spec, 1000, 0) != BG_OK) return BG_ERR;
    if (loader_init(&l, &s, T, 7, spec) != BG_OK) {
        shard_set_free(&s);
        return BG_ERR;
    }
    loader_samples(&l, 0, n, in, tg);
    loader_free(&l);
    shard_set_free(&s);
    return BG_OK;
}

static void expect_error(const char *spec, const char *needle) {
    shard_set s;
    bg_clear_error();
    int rc = shard_set_open(&s, spec, 1000, 0);
    TU_CHECK(rc == BG_ERR && strstr(bg_last_error(), needle), "%s: expected an error with '%s', got '%s'", spec,
             needle, rc == BG_OK ? "success" : bg_last_error());
    if (rc == BG_OK) shard_set_free(&s);
}

static void shards_and_concatenation(void) {
    // Shard k holds w_k windows: w_k*T + 1 tokens, its first token the previous shard's
    // last, so the concatenation without those repeats has exactly the shards' windows.
    int w[K] = {3, 5, 2, 7, 4}, total = 0;
    uint32_t all[64 * T], part[16 * T];
    size_t n_all = 1;
    all[0] = 1;
    for (int k = 0; k < K; k++) {
        part[0] = all[n_all - 1];
        for (int i = 1; i <= w[k] * T; i++, n_all++) all[n_all] = part[i] = (uint32_t)((n_all * 37 + (size_t)k) % 997);
        char name[32];
        snprintf(name, sizeof name, "c/train_%06d.bin", k);
        TU_CHECK(shard_write(at(name), part, (size_t)w[k] * T + 1, SHARD_VERSION_U16) == BG_OK, "write");
        total += w[k];
    }
    TU_CHECK(shard_write(at("one.bin"), all, n_all, SHARD_VERSION_U16) == BG_OK, "write one");
    int n = 3 * total;  // three epochs
    int *a = malloc(sizeof(int) * n * T * 4), *ta = a + n * T, *b = ta + n * T, *tb = b + n * T;
    TU_CHECK(read_stream(at("c/train_*.bin"), n, a, ta) == BG_OK, "glob: %s", bg_last_error());
    TU_CHECK(read_stream(at("one.bin"), n, b, tb) == BG_OK, "one: %s", bg_last_error());
    TU_CHECK(memcmp(a, b, sizeof(int) * n * T) == 0 && memcmp(ta, tb, sizeof(int) * n * T) == 0,
             "5 shards read differently from their concatenation");
    // The same set named four ways.
    char spec[2000];
    snprintf(spec, sizeof spec, "%s,%s,%s", at("c/train_000003.bin"), at("c/train_00000[0-2].bin"),
             at("c/train_000004.bin"));
    FILE *f = fopen(at("list.txt"), "w");
    fprintf(f, "# shards\n%s\n\n%s\n", at("c/train_00000[2-4].bin"), at("c/train_00000[01].bin"));
    fclose(f);
    char list[420];
    snprintf(list, sizeof list, "@%s", at("list.txt"));
    const char *names[3] = {at("c"), spec, list};
    for (int i = 0; i < 3; i++) {
        memset(b, 0, sizeof(int) * n * T);
        TU_CHECK(read_stream(names[i], n, b, tb) == BG_OK && memcmp(a, b, sizeof(int) * n * T) == 0,
                 "%s reads differently from the glob (%s)", names[i], bg_last_error());
    }
    free(a);
}

static void shards_not_coinciding(void) {
    // 5 shards of w*T + 4 tokens: the concatenation's windows straddle shard edges.
    uint32_t all[5 * (4 * T + 4)], part[4 * T + 4];
    size_t n_all = 0;
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < 4 * T + 4; i++, n_all++) all[n_all] = part[i] = (uint32_t)((n_all * 53 + 11) % 997);
        char name[32];
        snprintf(name, sizeof name, "d/s%d.bin", k);
        shard_write(at(name), part, 4 * T + 4, SHARD_VERSION_U16);
    }
    shard_write(at("d1.bin"), all, n_all, SHARD_VERSION_U16);
    int n = 20;  // one epoch of the set: 5 shards x 4 windows
    int a[20 * T], ta[20 * T], a2[20 * T], ta2[20 * T], b[20 * T], tb[20 * T];
    TU_CHECK(read_stream(at("d/*.bin"), n, a, ta) == BG_OK, "glob d");
    TU_CHECK(read_stream(at("d/*.bin"), n, a2, ta2) == BG_OK, "glob d again");
    TU_CHECK(read_stream(at("d1.bin"), n, b, tb) == BG_OK, "d1");
    TU_CHECK(memcmp(a, a2, sizeof a) == 0, "the same set read twice differs");
    TU_CHECK(memcmp(a, b, sizeof a) != 0, "windows that do not coincide gave the same stream");
    // every shard window once in the epoch: window (k, j) starts at token k*(4T+4) + j*T of `all`
    int seen[20] = {0};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < K; k++)
            for (int j = 0; j < 4; j++) {
                const uint32_t *src = all + k * (4 * T + 4) + j * T;
                int same = 1;
                for (int t = 0; t < T; t++) same &= (uint32_t)a[i * T + t] == src[t] && (uint32_t)ta[i * T + t] == src[t + 1];
                if (same) seen[k * 4 + j]++;
            }
    for (int i = 0; i < 20; i++) TU_CHECK(seen[i] == 1, "window %d seen %d times in an epoch", i, seen[i]);
}

static void bad_sets(void) {
    expect_error(at("nothing_*.bin"), "no file matches");
    char cmd[500];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/empty && touch %s/empty/readme.txt", dir, dir);
    TU_CHECK(system(cmd) == 0, "mkdir");
    expect_error(at("empty"), "directory holds no token shards");
    expect_error(at("missing.bin"), "missing.bin: cannot open");
    uint32_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = (uint32_t)i * 9;  // up to 891 < 1000
    shard_write(at("bad/a.bin"), tok, 100, SHARD_VERSION_U16);
    tok[57] = 1000;
    shard_write(at("bad/b.bin"), tok, 100, SHARD_VERSION_U16);
    expect_error(at("bad/*.bin"), "b.bin: token 1000 at position 57");
    tok[57] = 5;
    shard_write(at("bad/b.bin"), tok, 100, SHARD_VERSION_U16);
    snprintf(cmd, sizeof cmd, "truncate -s -2 %s/bad/b.bin", dir);
    TU_CHECK(system(cmd) == 0, "truncate");
    expect_error(at("bad/*.bin"), "b.bin: header says 100 tokens");
    shard_write(at("bad/b.bin"), tok, 100, SHARD_VERSION_U32);
    expect_error(at("bad/*.bin"), "b.bin: token file version 2 differs");
    FILE *f = fopen(at("bad/b.bin"), "r+b");
    int32_t v = 3;
    fseek(f, 4, SEEK_SET);
    fwrite(&v, 4, 1, f);
    fclose(f);
    expect_error(at("bad/*.bin"), "b.bin: unsupported token file version 3");
}

static void blends(void) {
    const double w[3] = {0.7, 0.2, 0.1};
    blend_sampler b;
    blend_init(&b, w, 3);
    uint64_t next[3] = {0}, local;
    int GB = 16, worst_batch = 0;
    for (int step = 0; step < 1000; step++) {
        int in_batch[3] = {0};
        for (int i = 0; i < GB; i++) {
            int d = blend_next(&b, &local);
            TU_CHECK(local == next[d]++, "dataset %d drew sample %llu out of order", d, (unsigned long long)local);
            in_batch[d]++;
        }
        for (int d = 0; d < 3; d++) {
            double off = in_batch[d] - w[d] * GB;
            if (off < 0) off = -off;
            if (off > 1.0) worst_batch++;
        }
    }
    TU_CHECK(worst_batch == 0, "%d batches had a dataset more than one sample off its weight", worst_batch);
    for (int d = 0; d < 3; d++) {
        double share = (double)b.taken[d] / (double)b.pos;
        TU_CHECK(share > w[d] - 0.01 && share < w[d] + 0.01, "dataset %d: share %.4f, weight %.2f", d, share, w[d]);
    }
    // Resuming mid-blend: seek to a position, then the stream continues as it would have.
    blend_sampler r;
    blend_init(&r, w, 3);
    blend_seek(&r, 5 * (uint64_t)GB + 3);
    blend_seek(&b, 5 * (uint64_t)GB + 3);  // backwards: replays
    for (int i = 0; i < 500; i++) {
        uint64_t l1, l2;
        int d1 = blend_next(&b, &l1), d2 = blend_next(&r, &l2);
        TU_CHECK(d1 == d2 && l1 == l2, "seek then draw differs at %d", i);
    }
    blend_free(&b);
    blend_free(&r);

    blend_entry *e;
    int n;
    TU_CHECK(blend_parse("web:0.7=a/*.bin,books:3=b", 1, &e, &n) == BG_OK && n == 2 && e[1].weight == 3 &&
                 !strcmp(e[0].data, "a/*.bin"),
             "parse: %s", bg_last_error());
    blend_entries_free(e, n);
    TU_CHECK(blend_parse("web=a,books=b", 0, &e, &n) == BG_OK && n == 2, "val spec without weights");
    blend_entries_free(e, n);
    char json[420];
    snprintf(json, sizeof json, "%s/mix.json", dir);
    FILE *f = fopen(json, "w");
    fprintf(f, "[{\"name\": \"web\", \"weight\": 0.7, \"data\": \"w/*.bin\"}, {\"name\": \"books\", \"weight\": 0.3, \"data\": \"b\"}]");
    fclose(f);
    TU_CHECK(blend_parse(json, 1, &e, &n) == BG_OK && n == 2 && e[0].weight == 0.7 && !strcmp(e[1].name, "books") &&
                 !strcmp(e[1].data, "b"),
             "JSON mix: %s", bg_last_error());
    blend_entries_free(e, n);
    f = fopen(json, "w");
    fprintf(f, "[{\"name\": \"web\", \"weight\": 0, \"data\": \"w\"}]");
    fclose(f);
    TU_CHECK(blend_parse(json, 1, &e, &n) == BG_ERR && strstr(bg_last_error(), "weights must be > 0"), "JSON weight 0");
    const char *bad[][2] = {{"web:0=a", "weights must be > 0"},     {"web:-1=a", "weights must be > 0"},
                            {":0.5=a", "dataset name"},             {"web:0.5=a,web:0.5=b", "named twice"},
                            {"web=a", "has no weight"},             {"web:x=a", "not a number"},
                            {"web:0.5", "not name:weight=shards"}, {"web:0.5=", "names no shards"}};
    for (int i = 0; i < 8; i++) {
        bg_clear_error();
        TU_CHECK(blend_parse(bad[i][0], 1, &e, &n) == BG_ERR && strstr(bg_last_error(), bad[i][1]),
                 "%s: expected '%s', got '%s'", bad[i][0], bad[i][1], bg_last_error());
    }
}

int main(void) {
    BG_ASSERT(mkdtemp(dir));
    char cmd[400];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/c %s/d %s/bad", dir, dir, dir);
    BG_ASSERT(system(cmd) == 0);
    shards_and_concatenation();
    shards_not_coinciding();
    bad_sets();
    blends();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return tu_finish("shard_set");
}
