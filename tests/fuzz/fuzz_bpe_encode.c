// libFuzzer target: the BPE encoder on arbitrary bytes (data/bpe_encode.c,
// data/bpe_pretokenize.c). Tokenizers trained once on a fixed text: a small one
// (vocabulary 300) and a larger one whose merges span words and white space. Every
// input must round-trip: decode(encode(x)) == x, stepwise encoding equal to whole.
#include "fuzz_bpe.h"

static bpe_tokenizer *tokenizers[2];
static bpe_encoder *encoders[2];  // kept: their caches see many inputs, as in `prepare`

static bpe_tokenizer *trained(int vocab) {
    static const char text[] =
        "In the beginning God created the heaven and the earth. And the earth was without form,\n"
        "and void; and darkness was upon the face of the deep.  It's 1234 o'clock, isn't it?\n"
        "\t\tTabs,   spaces\r\n and 'quotes' \xc3\xa9t\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 123abc!!\n";
    bpe_trainer *tr = bpe_trainer_new();
    for (int i = 0; i < 3; i++) FUZZ_CHECK(bpe_trainer_add_text(tr, (const uint8_t *)text, sizeof text - 1) == BG_OK);
    bpe_tokenizer *tok = NULL;
    FUZZ_CHECK(bpe_train(tr, vocab, &tok, NULL, NULL) == BG_OK);
    bpe_trainer_free(tr);
    return tok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static unsigned long calls;
    calls++;
    if (!tokenizers[0]) {
        tokenizers[0] = trained(300);
        tokenizers[1] = trained(420);
        for (int i = 0; i < 2; i++) encoders[i] = bpe_encoder_new(tokenizers[i]);
    }
    for (int i = 0; i < 2; i++) {
        fuzz_bpe_roundtrip(tokenizers[i], encoders[i], data, size);
        if (calls % 256 == 1) fuzz_bpe_roundtrip(tokenizers[i], NULL, data, size < 64 ? size : 64);  // cold
    }
    return 0;
}
