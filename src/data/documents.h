#ifndef BG_DATA_DOCUMENTS_H
#define BG_DATA_DOCUMENTS_H
// Documents in one stream of tokens, and how `bagualu prepare` splits them into train
// and val deterministically: with many documents (at least 2/F for a val fraction F),
// every document whose index crosses a multiple of 1/F goes to val whole; with few
// (one book), the last F of each document's tokens does. In a shard every document
// starts with the end-of-text token, as in llm.c's preparation scripts, so the model
// sees where documents meet.
#include <stddef.h>
#include <stdint.h>

#include "data/bpe.h"

// One document's token range in the stream of all documents.
typedef struct {
    size_t begin, end;
} doc_span;

// A growable list of documents.
typedef struct {
    doc_span *spans;
    size_t count, capacity;
} documents;

// BG_ERR (out of memory, docs unchanged) when the list cannot grow.
int documents_push(documents *docs, size_t begin, size_t end);
void documents_free(documents *docs);

// Whether the val fraction f splits by whole documents (many of them) rather than
// cutting each one.
int documents_split_whole(size_t count, double f);
// Whole-document split: document d goes to val when floor((d + 1) f) > floor(d f), so
// that val documents are spread evenly; train and val must be empty lists.
int documents_split(const documents *all, double f, documents *train, documents *val);

// Which part of each document a shard gets: all of it, all but the last `cut` fraction
// of its tokens, or that fraction.
typedef enum { DOC_WHOLE, DOC_HEAD, DOC_TAIL } doc_part;

// Appends to out, for each document with tokens in its part: eot, then that part of
// tokens[begin..end). BG_ERR (out of memory) when out cannot grow.
int documents_gather(bpe_ids *out, const uint32_t *tokens, const documents *docs, doc_part which, double cut,
                     uint32_t eot);
#endif
