// Running out of memory while the tokenizer grows (its token lists, caches, hash maps,
// training tables) is an error the caller gets back, never an exit: every allocation
// of bpe_encode, bpe_trainer_add_text and bpe_train is made to fail in turn, one at a
// time, and each must return BG_ERR with an out-of-memory message (no crash), leave
// the encoder and the trainer usable, and without the failure give the same ids and
// merges as before. malloc, calloc and realloc are interposed by this executable
// (symbols defined here win over libc's), as in tests/train/test_no_alloc.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/bpe.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define OOM_SKIP 1  // the sanitizers own malloc in their builds
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OOM_SKIP 1
#endif
#endif

#ifndef OOM_SKIP
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

// Armed: counts allocations down and fails the one that reaches zero.
static long countdown = -1, seen = 0;
static int injected = 0;

static int fail_now(void) {
    if (countdown < 0) return 0;
    seen++;
    if (countdown-- == 0) {
        injected = 1;
        return 1;
    }
    return 0;
}

void *malloc(size_t n) { return fail_now() ? NULL : __libc_malloc(n); }
void *calloc(size_t n, size_t s) { return fail_now() ? NULL : __libc_calloc(n, s); }
void *realloc(void *p, size_t n) { return fail_now() ? NULL : __libc_realloc(p, n); }

static void arm(long k) {
    bg_clear_error();
    seen = 0;
    injected = 0;
    countdown = k;
}
static void disarm(void) { countdown = -1; }

// A never-NULL allocation failing inside these paths would mean one was missed.
static void fixed_allocation_failed(size_t bytes) {
    countdown = -1;
    fprintf(stderr, "FAIL: a never-NULL allocation of %zu bytes failed inside a path that must return errors\n",
            bytes);
    exit(1);
}

static int is_oom_error(int rc) {
    return rc == BG_ERR && bg_last_error_is_out_of_memory() && strstr(bg_last_error(), "out of memory");
}

// Text with every kind of word the encoder caches differently: single bytes, short
// words, words of 17..64 bytes, short words of many tokens, and pre-tokens longer
// than 32 bytes (merged on the heap with scratch arrays).
static size_t make_text(uint8_t *t, size_t cap) {
    static const char *words[] = {"a", "the", "cat", "abcabcabc", "xyzzy", "aaaaaaaaaaaaaaaaaaaaaaaa",
                                  "interoperability", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                                  "qzqzqzqzqzqzqzqzqzqzqzqzqzqzqzqzqzqzqzqzqzqz", "\xC3\xA9t\xC3\xA9", "42", "..."};
    size_t n = 0;
    for (int i = 0; n + 80 < cap; i++) {
        const char *w = words[(size_t)(tu_uniform() * (sizeof words / sizeof *words))];
        size_t len = strlen(w);
        memcpy(t + n, w, len);
        n += len;
        if (i % 3 == 0) n += (size_t)snprintf((char *)t + n, 8, "%d", i);  // new words: caches keep growing
        t[n++] = i % 17 ? ' ' : '\n';
    }
    return n;
}

static void check_encode(const bpe_tokenizer *tok, const uint8_t *text, size_t len) {
    bpe_encoder *enc = bpe_encoder_new(tok);
    bpe_ids want = {0};
    TU_CHECK(bpe_encode(enc, text, len, &want) == BG_OK, "reference encoding: %s", bg_last_error());
    bpe_encoder_free(enc);
    enc = bpe_encoder_new(tok);
    bpe_ids got = {0};
    arm(1L << 40);
    (void)bpe_encode(enc, text, len, &got);
    long total = seen;
    disarm();
    bpe_ids_free(&got);
    bpe_encoder_free(enc);
    int tried = 0;
    for (long k = 0; k < total; k++) {
        enc = bpe_encoder_new(tok);
        got = (bpe_ids){0};
        arm(k);
        int rc = bpe_encode(enc, text, len, &got);
        disarm();
        TU_CHECK(injected && is_oom_error(rc), "encode, allocation %ld of %ld failing: rc %d, error \"%s\"", k, total,
                 rc, bg_last_error());
        // The encoder stays usable: encoding again, with memory, gives the reference ids.
        got.count = 0;
        rc = bpe_encode(enc, text, len, &got);
        TU_CHECK(rc == BG_OK && got.count == want.count && !memcmp(got.ids, want.ids, want.count * sizeof *want.ids),
                 "encode after a failure at allocation %ld differs from the reference", k);
        bpe_ids_free(&got);
        bpe_encoder_free(enc);
        tried++;
    }
    TU_CHECK(total > 5 && tried > 5, "encoding should grow several times, saw %ld allocations", total);
    printf("encode: %d allocations failed in turn\n", tried);
    bpe_ids_free(&want);
}

static void check_ids_push(void) {
    bpe_ids v = {0};
    for (uint32_t i = 0; i < 5000; i++) BG_ASSERT(bpe_ids_push(&v, i) == BG_OK);
    size_t cap = v.capacity;
    while (v.count < v.capacity) BG_ASSERT(bpe_ids_push(&v, 1) == BG_OK);
    arm(0);
    int rc = bpe_ids_push(&v, 7);
    disarm();
    TU_CHECK(is_oom_error(rc) && strstr(bg_last_error(), "token list"), "push into a full list: \"%s\"",
             bg_last_error());
    TU_CHECK(v.count == cap && v.capacity == cap && v.ids[4999] == 4999, "a failed push leaves the list as it was");
    TU_CHECK(bpe_ids_push(&v, 7) == BG_OK && v.ids[cap] == 7, "and the next push with memory works");
    bpe_ids_free(&v);
}

static int add_all(bpe_trainer *tr, const uint8_t *text, size_t len) {
    for (size_t at = 0; at < len; at += 5000)
        if (bpe_trainer_add_text(tr, text + at, len - at < 5000 ? len - at : 5000) != BG_OK) return BG_ERR;
    return BG_OK;
}

// Adding texts: the word map's slots and key store grow. Words of 7 random letters,
// over a hundred thousand of them, so that the slots double too.
static void check_add_text(void) {
    size_t len = 8 * 150000;
    uint8_t *text = malloc(len);
    for (size_t i = 0; i < len; i++) text[i] = i % 8 == 7 ? ' ' : (uint8_t)('a' + (int)(tu_uniform() * 26));
    bpe_trainer *tr = bpe_trainer_new();
    arm(1L << 40);
    (void)add_all(tr, text, len);
    long total = seen;
    disarm();
    bpe_trainer_free(tr);
    for (long k = 0; k < total; k++) {
        tr = bpe_trainer_new();
        arm(k);
        int rc = add_all(tr, text, len);
        disarm();
        TU_CHECK(injected && is_oom_error(rc), "add_text, allocation %ld of %ld failing: \"%s\"", k, total,
                 bg_last_error());
        bpe_trainer_free(tr);
    }
    TU_CHECK(total >= 5, "adding the words should grow the map several times, saw %ld allocations", total);
    printf("add_text: %ld allocations failed in turn\n", total);
    free(text);
}

static void check_train(const uint8_t *text, size_t len, bpe_tokenizer **out) {
    const int vocab = 600;
    bpe_trainer *tr = bpe_trainer_new();
    TU_CHECK(add_all(tr, text, len) == BG_OK, "reference add_text");
    bpe_tokenizer *want = NULL;
    TU_CHECK(bpe_train(tr, vocab, &want, NULL, NULL) == BG_OK, "reference training: %s", bg_last_error());
    bpe_trainer_free(tr);

    // Training: its tables, pair lists and heap, then the tokenizer it builds.
    tr = bpe_trainer_new();
    BG_ASSERT(add_all(tr, text, len) == BG_OK);
    bpe_tokenizer *got = NULL;
    arm(1L << 40);
    (void)bpe_train(tr, vocab, &got, NULL, NULL);
    long total = seen;
    disarm();
    bpe_free(got);
    int tried = 0;
    for (long k = 0; k < total; k++) {
        arm(k);
        int rc = bpe_train(tr, vocab, &got, NULL, NULL);
        disarm();
        TU_CHECK(injected && is_oom_error(rc) && got == NULL, "train, allocation %ld of %ld failing: rc %d, \"%s\"", k,
                 total, rc, bg_last_error());
        bpe_free(got);
        got = NULL;
        tried++;
    }
    printf("train: %d allocations failed in turn\n", tried);
    // The trainer is unchanged by failed runs: training again gives the same merges.
    TU_CHECK(bpe_train(tr, vocab, &got, NULL, NULL) == BG_OK, "train after failures: %s", bg_last_error());
    int same = got && bpe_merge_count(got) == bpe_merge_count(want);
    for (int r = 0; same && r < bpe_merge_count(want); r++) {
        uint32_t a[3], b[3];
        bpe_merge_at(want, r, &a[0], &a[1], &a[2]);
        bpe_merge_at(got, r, &b[0], &b[1], &b[2]);
        same = !memcmp(a, b, sizeof a);
    }
    TU_CHECK(same, "training after failed runs must learn the same merges");
    bpe_free(got);
    bpe_trainer_free(tr);
    *out = want;
}

int main(void) {
    bg_set_out_of_memory_handler(fixed_allocation_failed);
    tu_seed(5);
    size_t cap = 60000;
    uint8_t *text = malloc(cap);
    size_t len = make_text(text, cap);
    check_ids_push();
    check_add_text();
    bpe_tokenizer *tok = NULL;
    check_train(text, len, &tok);
    if (tok) check_encode(tok, text, len);
    bpe_free(tok);
    free(text);
    return tu_finish("test_bpe_oom");
}
#else
int main(void) {
    printf("test_bpe_oom: skipped under the address sanitizer (it owns malloc)\n");
    return 0;
}
#endif
