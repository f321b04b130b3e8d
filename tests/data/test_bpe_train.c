// BPE training: the expected merges on small texts worked out by hand (ties go to
// the smallest (left, right) ids); the incremental trainer equals a naive one that
// recounts every pair before each merge; the order of documents does not matter;
// tok.json round-trips; and the tok.json parser refuses bad files with one message
// and never crashes on mangled ones (run under ASan by `make asan`).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "data/bpe_internal.h"
#include "test_util.h"

static bpe_tokenizer *train_on(const char *const *docs, int ndocs, int vocab) {
    bpe_trainer *tr = bpe_trainer_new();
    for (int i = 0; i < ndocs; i++) bpe_trainer_add_text(tr, (const uint8_t *)docs[i], strlen(docs[i]));
    bpe_tokenizer *t = NULL;
    if (bpe_train(tr, vocab, &t, NULL, NULL) != BG_OK) TU_CHECK(0, "train: %s", bg_last_error());
    bpe_trainer_free(tr);
    return t;
}

static void expect_merges(const bpe_tokenizer *t, const uint32_t (*want)[2], int n, const char *what) {
    TU_CHECK(t && bpe_merge_count(t) == n, "%s: %d merges, want %d", what, t ? bpe_merge_count(t) : -1, n);
    if (!t || bpe_merge_count(t) != n) return;
    for (int r = 0; r < n; r++) {
        uint32_t l, rr, res;
        bpe_merge_at(t, r, &l, &rr, &res);
        TU_CHECK(l == want[r][0] && rr == want[r][1] && res == (uint32_t)(256 + r),
                 "%s: merge %d is (%u, %u) -> %u, want (%u, %u) -> %d", what, r, l, rr, res, want[r][0], want[r][1],
                 256 + r);
    }
}

// Naive training: count every adjacent pair of every word occurrence, merge the most
// frequent (ties: smallest ids), repeat.
typedef struct {
    uint32_t *sym;
    size_t n;
} word;

static int naive_train(const char *const *docs, int ndocs, int merges_wanted, uint32_t (*out)[2]) {
    size_t cap = 0;
    for (int d = 0; d < ndocs; d++) cap += strlen(docs[d]);
    word *words = calloc(cap + 1, sizeof *words);
    size_t nw = 0;
    for (int d = 0; d < ndocs; d++) {
        const uint8_t *s = (const uint8_t *)docs[d];
        size_t len = strlen(docs[d]);
        for (size_t pos = 0; pos < len;) {
            size_t end = bpe_pretoken_end(s, len, pos);
            words[nw].n = end - pos;
            words[nw].sym = malloc((end - pos) * sizeof(uint32_t));
            for (size_t k = pos; k < end; k++) words[nw].sym[k - pos] = s[k];
            nw++;
            pos = end;
        }
    }
    int done = 0;
    size_t vocab = 256 + (size_t)merges_wanted;
    long *count = malloc(vocab * vocab * sizeof *count);
    for (; done < merges_wanted; done++) {
        memset(count, 0, vocab * vocab * sizeof *count);
        for (size_t w = 0; w < nw; w++)
            for (size_t k = 0; k + 1 < words[w].n; k++) count[words[w].sym[k] * vocab + words[w].sym[k + 1]]++;
        size_t best = 0;
        for (size_t p = 1; p < vocab * vocab; p++)
            if (count[p] > count[best]) best = p;  // strict: the first (smallest ids) wins ties
        if (count[best] == 0) break;
        uint32_t l = (uint32_t)(best / vocab), r = (uint32_t)(best % vocab), id = (uint32_t)(256 + done);
        out[done][0] = l;
        out[done][1] = r;
        for (size_t w = 0; w < nw; w++) {
            size_t k = 0;
            for (size_t i = 0; i < words[w].n;) {
                if (i + 1 < words[w].n && words[w].sym[i] == l && words[w].sym[i + 1] == r) {
                    words[w].sym[k++] = id;
                    i += 2;
                } else {
                    words[w].sym[k++] = words[w].sym[i++];
                }
            }
            words[w].n = k;
        }
    }
    for (size_t w = 0; w < nw; w++) free(words[w].sym);
    free(words);
    free(count);
    return done;
}

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    BG_ASSERT(f);
    fwrite(text, 1, n, f);
    fclose(f);
}

static void expect_load_error(const char *dir, const char *json, const char *needle) {
    char path[4200];
    snprintf(path, sizeof path, "%s/bad.json", dir);
    write_file(path, json, strlen(json));
    bpe_tokenizer *t = NULL;
    int rc = bpe_load(&t, path);
    TU_CHECK(rc == BG_ERR && !t && strstr(bg_last_error(), needle), "tok.json %s: got \"%s\", want an error with \"%s\"",
             json, rc == BG_OK ? "success" : bg_last_error(), needle);
    bpe_free(t);
}

int main(void) {
    // One word: "aaabdaaabac". (a,a) 4 times; then (a,b) and (aa,a) tie at 2 and
    // (97,98) < (256,97); then (aa,ab); then all pairs tie at 1, smallest ids first.
    {
        const char *docs[] = {"aaabdaaabac"};
        const uint32_t want[][2] = {{97, 97}, {97, 98}, {256, 257}, {97, 99}, {100, 258}, {258, 260}, {261, 259}};
        bpe_tokenizer *t = train_on(docs, 1, 1000);
        expect_merges(t, want, 7, "aaabdaaabac");  // the word is one token after 7: training stops
        TU_CHECK(t && bpe_vocab_size(t) == 257 + 7 && bpe_eot_token(t) == 263, "vocabulary 256 + 7 + eot");
        bpe_free(t);
    }
    // Words with counts: "the" once, " the" twice, " cat", " hat". (h,e) and (t,h)
    // tie at 3: (104,101) first; then "the"; then " the" (32 < 97) and "at".
    {
        const char *docs[] = {"the cat the hat the"};
        const uint32_t want[][2] = {{104, 101}, {116, 256}, {32, 257}, {97, 116},
                                    {32, 99},   {32, 104},  {260, 259}, {261, 259}};
        bpe_tokenizer *t = train_on(docs, 1, 1000);
        expect_merges(t, want, 8, "the cat the hat the");
        bpe_free(t);
        // vocab_size caps the merges.
        t = train_on(docs, 1, 257 + 3);
        expect_merges(t, want, 3, "the cat... capped at 3 merges");
        bpe_free(t);
    }

    // Incremental vs naive on random texts over small alphabets (many ties, runs of
    // one letter for overlapping pairs, spaces and newlines for pre-token edges).
    tu_seed(3);
    for (int round = 0; round < 6; round++) {
        static const char alpha[] = "aaaabbc  \n'sde";
        char *docs[4];
        for (int d = 0; d < 4; d++) {
            size_t n = 200 + (size_t)(tu_uniform() * 3000);
            docs[d] = malloc(n + 1);
            for (size_t i = 0; i < n; i++) docs[d][i] = alpha[(size_t)(tu_uniform() * (sizeof alpha - 1))];
            docs[d][n] = 0;
        }
        int want_merges = 150;
        uint32_t(*want)[2] = malloc((size_t)want_merges * sizeof *want);
        int got = naive_train((const char *const *)docs, 4, want_merges, want);
        bpe_tokenizer *t = train_on((const char *const *)docs, 4, 257 + want_merges);
        char what[64];
        snprintf(what, sizeof what, "random text %d vs naive trainer", round);
        expect_merges(t, (const uint32_t(*)[2])want, got, what);
        // Document order does not matter.
        const char *rev[4] = {docs[3], docs[2], docs[1], docs[0]};
        bpe_tokenizer *t2 = train_on(rev, 4, 257 + want_merges);
        snprintf(what, sizeof what, "random text %d, documents reversed", round);
        expect_merges(t2, (const uint32_t(*)[2])want, got, what);
        bpe_free(t);
        bpe_free(t2);
        free(want);
        for (int d = 0; d < 4; d++) free(docs[d]);
    }

    // tok.json: save, load, same merges; then bad files.
    char dir[] = "/tmp/bagualu_bpe_XXXXXX";
    BG_ASSERT(mkdtemp(dir));
    char path[4200];
    snprintf(path, sizeof path, "%s/tok.json", dir);
    const char *docs[] = {"the cat the hat the", "aaabdaaabac"};
    bpe_tokenizer *t = train_on(docs, 2, 300), *back = NULL;
    TU_CHECK(t && bpe_save(t, path) == BG_OK, "save: %s", bg_last_error());
    TU_CHECK(bpe_load(&back, path) == BG_OK, "load saved tok.json: %s", bg_last_error());
    if (t && back) {
        TU_CHECK(bpe_vocab_size(back) == bpe_vocab_size(t) && bpe_merge_count(back) == bpe_merge_count(t),
                 "loaded tok.json has the same size");
        for (int r = 0; r < bpe_merge_count(t) && r < bpe_merge_count(back); r++) {
            uint32_t a[3], b[3];
            bpe_merge_at(t, r, &a[0], &a[1], &a[2]);
            bpe_merge_at(back, r, &b[0], &b[1], &b[2]);
            TU_CHECK(memcmp(a, b, sizeof a) == 0, "merge %d differs after save and load", r);
        }
    }
    {
        bpe_trainer *tr = bpe_trainer_new();
        bpe_tokenizer *none = NULL;
        TU_CHECK(bpe_train(tr, 100, &none, NULL, NULL) == BG_ERR && !none, "vocabulary below 257 refused");
        bpe_trainer_free(tr);
    }

    const char *head = "{\"format\": \"bagualu-bpe\", \"version\": 1, \"pretokenizer\": \"gpt2\", ";
    char buf[1024];
#define BAD(body, needle)                                   \
    do {                                                    \
        snprintf(buf, sizeof buf, "%s%s}", head, body);     \
        expect_load_error(dir, buf, needle);                \
    } while (0)
    BAD("\"vocab_size\": 258, \"merges\": [[97, 97]], \"special_tokens\": {\"<|endoftext|>\": 300}", "special_tokens");
    BAD("\"vocab_size\": 258, \"merges\": [[97, 97]], \"special_tokens\": {\"<|eot|>\": 257}", "special_tokens");
    BAD("\"vocab_size\": 258, \"merges\": [[97, 256]], \"special_tokens\": {\"<|endoftext|>\": 257}", "earlier tokens");
    BAD("\"vocab_size\": 259, \"merges\": [[97, 97]], \"special_tokens\": {\"<|endoftext|>\": 257}", "does not match");
    BAD("\"vocab_size\": 258, \"merges\": [[97, -1]], \"special_tokens\": {\"<|endoftext|>\": 257}", "earlier tokens");
    BAD("\"vocab_size\": 258, \"merges\": [[97, 1.5]], \"special_tokens\": {\"<|endoftext|>\": 257}", "earlier tokens");
    BAD("\"vocab_size\": 259, \"merges\": [[97, 97], [97, 97]], \"special_tokens\": {\"<|endoftext|>\": 258}",
        "repeats");
    BAD("\"vocab_size\": 257, \"merges\": [], \"special_tokens\": {\"<|endoftext|>\": 256}, \"colour\": 1", "unknown key");
    BAD("\"vocab_size\": 257, \"merges\": {}, \"special_tokens\": {\"<|endoftext|>\": 256}", "merges");
    BAD("\"merges\": [], \"special_tokens\": {\"<|endoftext|>\": 256}", "missing key \"vocab_size\"");
    expect_load_error(dir, "{\"format\": \"sentencepiece\"}", "unknown tokenizer format");
    expect_load_error(dir, "[1, 2, 3]", "unknown tokenizer format");
    expect_load_error(dir, "\x01\x02\x03 not json", "unknown tokenizer format");
    expect_load_error(dir, "", "unknown tokenizer format");
    // A doubling chain would make tokens of 2^k bytes: refused, not allocated.
    {
        char *big = malloc(1 << 16);
        int n = snprintf(big, 1 << 16, "%s\"vocab_size\": %d, \"merges\": [[97, 97]", head, 257 + 40);
        for (int r = 1; r < 40; r++) n += snprintf(big + n, (size_t)(1 << 16) - (size_t)n, ", [%d, %d]", 255 + r, 255 + r);
        snprintf(big + n, (size_t)(1 << 16) - (size_t)n, "], \"special_tokens\": {\"<|endoftext|>\": %d}}", 256 + 40);
        expect_load_error(dir, big, "bytes (at most");
        free(big);
    }

    // Mangled copies of a good file: byte flips, cuts, inserted junk. Each must load or
    // fail with a message; never crash (ASan/UBSan builds check memory errors too).
    {
        FILE *f = fopen(path, "rb");
        BG_ASSERT(f);
        char good[1 << 14];
        size_t n = fread(good, 1, sizeof good - 1, f);
        fclose(f);
        char *m = malloc(sizeof good + 64);
        snprintf(buf, sizeof buf, "%s/mangled.json", dir);
        int loaded = 0;
        for (int round = 0; round < 400; round++) {
            memcpy(m, good, n);
            size_t len = n;
            int kind = round % 4;
            if (kind == 3) {  // one digit changed: still JSON, so the checks behind the parser run
                for (size_t at = (size_t)(tu_uniform() * len); at < len; at++)
                    if (m[at] >= '0' && m[at] <= '9') {
                        m[at] = (char)('0' + (int)(tu_uniform() * 10));
                        break;
                    }
            } else if (kind == 0) {
                for (int k = 0; k < 3; k++) m[(size_t)(tu_uniform() * len)] = (char)(tu_uniform() * 256);
            } else if (kind == 1) {
                len = (size_t)(tu_uniform() * len);
            } else {
                size_t at = (size_t)(tu_uniform() * len);
                memmove(m + at + 8, m + at, len - at);
                memcpy(m + at, "[99999,]", 8);
                len += 8;
            }
            write_file(buf, m, len);
            bpe_tokenizer *x = NULL;
            if (bpe_load(&x, buf) == BG_OK) loaded++;
            else TU_CHECK(strlen(bg_last_error()) > 10, "a failed load names its problem");
            bpe_free(x);
        }
        free(m);
        printf("mangled tok.json: %d of 400 still loaded, the rest refused with a message\n", loaded);
        unlink(buf);
    }
    unlink(path);
    snprintf(path, sizeof path, "%s/bad.json", dir);
    unlink(path);
    rmdir(dir);
    bpe_free(t);
    bpe_free(back);
    return tu_finish("test_bpe_train");
}
