#include "model/generate_text.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

int gen_prompt_ids(const bpe_tokenizer *tok, const char *text, int **ids, int *n) {
    bpe_ids enc = {0};
    int rc = bpe_ids_push(&enc, bpe_eot_token(tok));
    if (text && rc == BG_OK) {
        bpe_encoder *e = bpe_encoder_new(tok);
        rc = bpe_encode(e, (const uint8_t *)text, strlen(text), &enc);
        bpe_encoder_free(e);
    }
    if (rc != BG_OK) {
        bpe_ids_free(&enc);
        return BG_ERR;
    }
    *n = (int)enc.count;
    *ids = bg_malloc(sizeof(int) * enc.count);
    for (size_t i = 0; i < enc.count; i++) (*ids)[i] = (int)enc.ids[i];
    bpe_ids_free(&enc);
    return BG_OK;
}

const uint8_t *gen_token_text(const bpe_tokenizer *tok, int id, size_t *len) {
    static const uint8_t replacement[] = "\xEF\xBF\xBD";
    if (id < 0 || id >= bpe_vocab_size(tok)) {
        *len = 3;
        return replacement;
    }
    return bpe_token_bytes(tok, (uint32_t)id, len);
}
