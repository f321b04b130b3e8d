#ifndef BG_CLI_GPT2_FETCH_H
#define BG_CLI_GPT2_FETCH_H
#include "data/bpe.h"

// bpe_load for the command line: for "gpt2" whose files are nowhere bpe_load looks,
// first fetches them into bpe_gpt2_cache_dir (saying so on stderr) with npm, as
// scripts/fetch_gpt2.sh does. Offline, or without npm, bpe_load's "not found" error.
int cli_tokenizer_load(bpe_tokenizer **out, const char *spec);
#endif
