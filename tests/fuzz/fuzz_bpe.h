#ifndef BG_TESTS_FUZZ_BPE_H
#define BG_TESTS_FUZZ_BPE_H
// The tokenizer targets' common invariant: any bytes encode to ids in the vocabulary
// that decode back to exactly those bytes, and the stepwise encoder gives the same ids.
#include "data/bpe.h"
#include "fuzz_util.h"

// enc: an encoder of tok kept by the caller (its cache warm across inputs), or NULL.
static inline void fuzz_bpe_roundtrip(const bpe_tokenizer *tok, bpe_encoder *kept, const uint8_t *text, size_t n) {
    bpe_encoder *enc = kept ? kept : bpe_encoder_new(tok);
    FUZZ_CHECK(enc);
    bpe_ids ids = {0}, parts = {0};
    FUZZ_CHECK(bpe_encode(enc, text, n, &ids) == BG_OK);
    for (size_t i = 0; i < ids.count; i++) FUZZ_CHECK(ids.ids[i] < (uint32_t)bpe_vocab_size(tok));
    FUZZ_CHECK(ids.count <= n);  // every token is at least one byte
    uint8_t *back = malloc(n + 1);
    FUZZ_CHECK(bpe_decode(tok, ids.ids, ids.count, back, n + 1) == (long long)n);
    FUZZ_CHECK(n == 0 || memcmp(back, text, n) == 0);
    for (size_t pos = 0; pos < n;) {
        size_t before = pos;
        FUZZ_CHECK(bpe_encode_part(enc, text, n, &pos, 7, &parts) == BG_OK);
        FUZZ_CHECK(pos > before && pos <= n);
    }
    FUZZ_CHECK(parts.count == ids.count);
    FUZZ_CHECK(ids.count == 0 || memcmp(parts.ids, ids.ids, ids.count * sizeof *ids.ids) == 0);
    // Again on a warm cache: the same ids.
    parts.count = 0;
    FUZZ_CHECK(bpe_encode(enc, text, n, &parts) == BG_OK && parts.count == ids.count);
    FUZZ_CHECK(ids.count == 0 || memcmp(parts.ids, ids.ids, ids.count * sizeof *ids.ids) == 0);
    free(back);
    bpe_ids_free(&ids);
    bpe_ids_free(&parts);
    if (!kept) bpe_encoder_free(enc);
}
#endif
