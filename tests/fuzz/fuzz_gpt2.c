// libFuzzer target: GPT-2's tokenizer files (data/bpe_gpt2_files.c). The input is
// encoder.json, a NUL byte, then vocab.bpe. Invariants on accepted pairs: the files'
// own bytes round-trip through encode and decode, and <|endoftext|> is in the vocabulary.
#include "fuzz_bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t elen = nul ? (size_t)(nul - data) : size;
    const uint8_t *vocab = nul ? nul + 1 : data + size;
    size_t vlen = size - elen - (nul ? 1 : 0);
    const char *enc = fuzz_file(0, data, elen);
    const char *voc = fuzz_file(1, vocab, vlen);
    bpe_tokenizer *tok = NULL;
    bg_clear_error();
    if (bpe_load_gpt2(&tok, enc, voc) != BG_OK) {
        fuzz_check_error("/proc/self/fd/");
        FUZZ_CHECK(tok == NULL);
        return 0;
    }
    FUZZ_CHECK(bpe_eot_token(tok) < (uint32_t)bpe_vocab_size(tok));
    fuzz_bpe_roundtrip(tok, NULL, data, size);
    bpe_free(tok);
    return 0;
}
