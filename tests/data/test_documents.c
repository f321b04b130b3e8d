// The train/val split of `bagualu prepare` (data/documents.h): which documents go to
// val whole, how each document is cut into head and tail, and that every gathered part
// starts with the end-of-text token. Exact integer checks: the split is deterministic.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/documents.h"
#include "test_util.h"

enum { EOT = 999 };

int main(void) {
    // Ten documents of 1..10 tokens in one stream; document d holds tokens 100 d + i.
    uint32_t tokens[55];
    documents all = {0};
    size_t at = 0;
    for (size_t d = 0; d < 10; d++) {
        size_t begin = at;
        for (size_t i = 0; i <= d; i++) tokens[at++] = (uint32_t)(100 * d + i);
        TU_CHECK(documents_push(&all, begin, at) == BG_OK, "push document %zu", d);
    }
    TU_CHECK(all.count == 10 && all.spans[9].begin == 45 && all.spans[9].end == 55, "ten spans over 55 tokens");

    // Whole documents once there are at least 2/F of them.
    TU_CHECK(documents_split_whole(10, 0.2) && !documents_split_whole(9, 0.2), "2/F = 10 documents at F = 0.2");
    TU_CHECK(!documents_split_whole(10, 0.0), "F = 0: no val split at all");

    // F = 0.25: val gets d where floor((d + 1) / 4) > floor(d / 4): d = 3 and 7.
    documents train = {0}, val = {0};
    TU_CHECK(documents_split(&all, 0.25, &train, &val) == BG_OK, "split");
    TU_CHECK(val.count == 2 && train.count == 8, "val 2, train 8 documents, got %zu and %zu", val.count, train.count);
    if (val.count == 2)
        TU_CHECK(val.spans[0].begin == all.spans[3].begin && val.spans[1].begin == all.spans[7].begin,
                 "val holds documents 3 and 7");
    bpe_ids ids = {0};
    TU_CHECK(documents_gather(&ids, tokens, &val, DOC_WHOLE, 0, EOT) == BG_OK, "gather val");
    static const uint32_t want_val[] = {EOT, 300, 301, 302, 303, EOT, 700, 701, 702, 703, 704, 705, 706, 707};
    TU_CHECK(ids.count == sizeof want_val / sizeof *want_val && !memcmp(ids.ids, want_val, sizeof want_val),
             "val shard: <|endoftext|> before each whole document");
    ids.count = 0;
    TU_CHECK(documents_gather(&ids, tokens, &train, DOC_WHOLE, 0, EOT) == BG_OK, "gather train");
    TU_CHECK(ids.count == 8 + 55 - 4 - 8, "train shard: 8 markers and the other 43 tokens, got %zu", ids.count);
    documents_free(&train);
    documents_free(&val);

    // Few documents: each is cut, the tail llround(len * F) tokens to val. At F = 0.25
    // document d (d + 1 tokens) gives llround((d + 1) / 4) = 0,1,1,1,1,2,2,2,2,3 (half
    // rounds away from zero); a document whose part is empty gets no marker either.
    ids.count = 0;
    TU_CHECK(documents_gather(&ids, tokens, &all, DOC_TAIL, 0.25, EOT) == BG_OK, "gather tails");
    static const uint32_t want_tail[] = {EOT, 101, EOT, 202, EOT, 303, EOT, 404, EOT, 504, 505, EOT, 605, 606,
                                         EOT, 706, 707, EOT, 807, 808, EOT, 907, 908, 909};
    TU_CHECK(ids.count == sizeof want_tail / sizeof *want_tail && !memcmp(ids.ids, want_tail, sizeof want_tail),
             "tails: the last quarter of each document, rounded to nearest");
    size_t tails = ids.count;
    ids.count = 0;
    TU_CHECK(documents_gather(&ids, tokens, &all, DOC_HEAD, 0.25, EOT) == BG_OK, "gather heads");
    TU_CHECK(ids.count == 10 + 55 - (tails - 9), "heads and tails share the tokens, got %zu", ids.count);
    TU_CHECK(ids.count >= 3 && ids.ids[0] == EOT && ids.ids[1] == 0 && ids.ids[2] == EOT,
             "document 0 (one token, no tail) stays whole in train");

    bpe_ids_free(&ids);
    documents_free(&all);
    TU_CHECK(all.spans == NULL && all.count == 0, "documents_free empties the list");
    return tu_finish("test_documents");
}
