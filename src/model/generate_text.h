#ifndef BG_MODEL_GENERATE_TEXT_H
#define BG_MODEL_GENERATE_TEXT_H
// Text in and out of generation (`bagualu generate` and the library's
// bagualu_generate_text), so both read a prompt and write tokens alike.
#include <stddef.h>
#include <stdint.h>

#include "data/bpe.h"

// The prompt's ids: an end-of-text token, because `bagualu prepare` starts every
// document with one and a prompt begins a document, then the text's (NULL: none).
// *ids is malloc'ed. BG_ERR only for running out of memory (bg_error set).
int gen_prompt_ids(const bpe_tokenizer *tok, const char *text, int **ids, int *n);
// A token's bytes. A model's vocabulary may be padded past the tokenizer's: such an id
// has no text and reads as U+FFFD, the replacement character.
const uint8_t *gen_token_text(const bpe_tokenizer *tok, int id, size_t *len);
#endif
