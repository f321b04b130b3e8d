// libFuzzer target: bagualu's tokenizer file, tok.json (data/bpe_tokjson.c), through
// bpe_load's format sniffing. Invariants on accepted files: the input itself round-trips
// through encode and decode; saving the tokenizer and loading that gives the same merges.
#include "fuzz_bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bpe_tokenizer *tok = NULL;
    bg_clear_error();
    const char *path = fuzz_file(0, data, size);
    if (bpe_load(&tok, path) != BG_OK) {
        fuzz_check_error("/proc/self/fd/");  // this file, or the one it names beside it
        FUZZ_CHECK(tok == NULL);
        return 0;
    }
    FUZZ_CHECK(bpe_vocab_size(tok) == 257 + bpe_merge_count(tok));
    FUZZ_CHECK(bpe_eot_token(tok) == (uint32_t)bpe_vocab_size(tok) - 1);
    fuzz_bpe_roundtrip(tok, NULL, data, size);
    const char *saved = fuzz_file(1, "", 0);
    FUZZ_CHECK(bpe_save(tok, saved) == BG_OK);
    bpe_tokenizer *again = NULL;
    FUZZ_CHECK(bpe_load_tokjson(&again, saved) == BG_OK);
    FUZZ_CHECK(bpe_merge_count(again) == bpe_merge_count(tok));
    for (int r = 0; r < bpe_merge_count(tok); r++) {
        uint32_t a[3], b[3];
        bpe_merge_at(tok, r, &a[0], &a[1], &a[2]);
        bpe_merge_at(again, r, &b[0], &b[1], &b[2]);
        FUZZ_CHECK(memcmp(a, b, sizeof a) == 0);
    }
    bpe_free(again);
    bpe_free(tok);
    return 0;
}
