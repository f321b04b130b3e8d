// Documents and the train/val split of `bagualu prepare` (format in documents.h).
#include "data/documents.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>

int documents_push(documents *docs, size_t begin, size_t end) {
    if (docs->count == docs->capacity) {
        size_t cap = docs->capacity ? docs->capacity * 2 : 256;
        doc_span *s = cap <= SIZE_MAX / sizeof *s ? realloc(docs->spans, cap * sizeof *s) : NULL;
        if (!s) return bg_error_out_of_memory("out of memory growing a document list to %zu documents", cap);
        docs->spans = s;
        docs->capacity = cap;
    }
    docs->spans[docs->count++] = (doc_span){begin, end};
    return BG_OK;
}

void documents_free(documents *docs) {
    free(docs->spans);
    docs->spans = NULL;
    docs->count = docs->capacity = 0;
}

int documents_split_whole(size_t count, double f) { return f > 0 && (double)count >= 2.0 / f; }

int documents_split(const documents *all, double f, documents *train, documents *val) {
    for (size_t d = 0; d < all->count; d++) {
        documents *to = floor((double)(d + 1) * f) > floor((double)d * f) ? val : train;
        if (documents_push(to, all->spans[d].begin, all->spans[d].end) != BG_OK) return BG_ERR;
    }
    return BG_OK;
}

int documents_gather(bpe_ids *out, const uint32_t *tokens, const documents *docs, doc_part which, double cut,
                     uint32_t eot) {
    for (size_t d = 0; d < docs->count; d++) {
        size_t b = docs->spans[d].begin, e = docs->spans[d].end;
        size_t k = (size_t)llround((double)(e - b) * cut);
        if (which == DOC_HEAD) e -= k;
        if (which == DOC_TAIL) b = e - k;
        if (b == e) continue;
        if (bpe_ids_push(out, eot) != BG_OK) return BG_ERR;
        for (size_t i = b; i < e; i++)
            if (bpe_ids_push(out, tokens[i]) != BG_OK) return BG_ERR;
    }
    return BG_OK;
}
