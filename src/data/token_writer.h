#ifndef BG_DATA_TOKEN_WRITER_H
#define BG_DATA_TOKEN_WRITER_H
// Where `prepare` puts its tokens, streaming: documents arrive one piece at a time and
// go to train or val shards by the split of data/documents.h, decided without holding
// the corpus: a document's side is known at its start once 2/F documents were seen;
// until then (and for a corpus of fewer documents, where each document's last F of
// tokens goes to val) the tokens wait in a spool, in memory up to
// TOKEN_SPOOL_MEMORY tokens and in an unlinked temporary file beyond.
//
// Shards: DIR/train.bin and DIR/val.bin, or with shard_tokens > 0 numbered shards
// DIR/train_000000.bin, ... of at most shard_tokens tokens each (a document may
// continue in the next train shard; none is split between train and val). Each
// document starts with the end-of-text token (llm.c's layout).
#include <stddef.h>
#include <stdint.h>

#define TOKEN_SPOOL_MEMORY ((size_t)32 << 20)

typedef struct token_writer token_writer;

int token_writer_open(token_writer **out, const char *dir, int version, size_t shard_tokens, double val_fraction,
                      uint32_t eot);
// The tokens of the current document (a new one after token_writer_end_doc).
int token_writer_add(token_writer *w, const uint32_t *ids, size_t n);
int token_writer_end_doc(token_writer *w);
// Flushes the spool, closes the shards and removes stale numbered shards of an
// earlier run. Counts: documents, train and val tokens, train and val shards.
int token_writer_finish(token_writer *w, size_t *docs, size_t *ntrain, size_t *nval, int *train_shards,
                        int *val_shards);
void token_writer_free(token_writer *w);
#endif
