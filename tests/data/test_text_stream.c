// data/text_stream.c cuts documents into segments that encode as the whole text does:
// the pre-tokens of the segments, each taken alone, must be the whole document's. The
// text is adversarial: random runs of letters, digits, punctuation, spaces, tabs,
// newlines, Unicode spaces (U+00A0, U+3000) and CJK, with stretches of over 1 MiB
// without a newline (cut by pre-token) and "<|endoftext|>" markers. Also: gzip input
// reads the same, and JSON Lines records are documents.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/error.h"
#include "data/bpe_internal.h"
#include "data/text_stream.h"
#include "test_util.h"

static const char *pieces[] = {"x", "word", " ", "  ", "\t", "\n", "\n\n", "7", "42", "!", "...", "'s", " the",
                               "\xc2\xa0", "\xe3\x80\x80", "\xe6\x97\xa5\xe6\x9c\xac", " \n", "\t\n"};
// Without newlines: many white-space pairs before a non-space, where a cut is unsafe.
static const char *no_nl[] = {"x", "word", " \t", "  ", "\t", "7", "!", "'s", "\xc2\xa0", "\xe3\x80\x80", " the", " \t"};

// newlines: 1 pieces, 0 no_nl, 2 "x \t" repeated.
static size_t gen(char *out, size_t n, int newlines, uint64_t *st) {
    size_t len = 0;
    while (len < n) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)((*st >> 33) % (newlines == 1 ? 18 : 12));
        const char *p = newlines == 1 ? pieces[k] : newlines == 0 ? no_nl[k] : "x \t";
        size_t m = strlen(p);
        memcpy(out + len, p, m);
        len += m;
    }
    return len;
}

// Pre-token ends of t[0, n) taken alone, appended (offset by base) to ends.
static size_t pretokens(const uint8_t *t, size_t n, size_t base, size_t *ends, size_t k) {
    for (size_t at = 0; at < n;) {
        at = bpe_pretoken_end(t, n, at);
        ends[k++] = base + at;
    }
    return k;
}

int main(void) {
    char dir[] = "/tmp/bagualu_ts_XXXXXX";
    BG_ASSERT(mkdtemp(dir));
    size_t cap = (size_t)12 << 20;
    char *text = malloc(cap);
    uint64_t st = 11;
    size_t n = 0;
    n += gen(text + n, 900000, 1, &st);
    n += gen(text + n, 1300000, 0, &st);  // over 1 MiB without a newline
    memcpy(text + n, "<|endoftext|>", 13), n += 13;
    n += gen(text + n, 1500000, 1, &st);
    size_t doc1 = n;
    memcpy(text + n, "<|endoftext|>", 13), n += 13;
    n += gen(text + n, 4500000, 2, &st);  // "x \t" repeated: a third of the pre-token ends unsafe
    char path[300], gzpath[300];
    snprintf(path, sizeof path, "%s/t.txt", dir);
    snprintf(gzpath, sizeof gzpath, "%s/t.txt.gz", dir);
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, n, f);
    fclose(f);
    gzFile g = gzopen(gzpath, "wb");
    gzwrite(g, text, (unsigned)n);
    gzclose(g);

    // The whole text's documents, and their pre-token ends (positions in the file).
    size_t docs[3][2] = {{0, 0}, {0, 0}, {0, 0}};
    size_t d0_end = 0;
    while (memcmp(text + d0_end, "<|endoftext|>", 13) != 0) d0_end++;
    docs[0][1] = d0_end;
    docs[1][0] = d0_end + 13, docs[1][1] = doc1;
    docs[2][0] = doc1 + 13, docs[2][1] = n;
    size_t *want = malloc(sizeof(size_t) * n), *got = malloc(sizeof(size_t) * n);
    size_t nw = 0;
    for (int d = 0; d < 3; d++)
        nw = pretokens((uint8_t *)text + docs[d][0], docs[d][1] - docs[d][0], docs[d][0], want, nw);

    for (int z = 0; z < 2; z++) {
        text_stream *ts;
        TU_CHECK(text_stream_open(&ts, z ? gzpath : path, NULL) == BG_OK, "open: %s", bg_last_error());
        text_segment seg;
        size_t ng = 0, at = 0, segments = 0;
        int d = 0, r;
        while ((r = text_stream_next(ts, &seg)) == 1) {
            if (seg.doc_start) at = docs[d][0];
            TU_CHECK(memcmp(seg.text, text + at, seg.len) == 0, "segment %zu is not the text at %zu", segments, at);
            ng = pretokens(seg.text, seg.len, at, got, ng);
            at += seg.len;
            segments++;
            if (seg.doc_end) {
                TU_CHECK(d < 3 && at == docs[d][1], "document %d ends at %zu, not %zu", d, at, d < 3 ? docs[d][1] : 0);
                d++;
            }
        }
        TU_CHECK(r == 0 && d == 3, "stream: %d documents, r %d (%s)", d, r, r ? bg_last_error() : "");
        TU_CHECK(segments >= 6, "only %zu segments: the cuts were not exercised", segments);
        TU_CHECK(text_stream_bytes(ts) == n, "bytes %zu of %zu", text_stream_bytes(ts), n);
        size_t i = 0;
        while (i < nw && i < ng && want[i] == got[i]) i++;
        TU_CHECK(ng == nw && i == nw, "%s: segments pre-tokenize differently from the whole text at %zu (%zu vs %zu)",
                 z ? "gzip" : "plain", i < nw ? want[i] : 0, ng, nw);
        text_stream_close(ts);
    }

    // JSON Lines: one document per line's field; other fields and blank lines ignored.
    snprintf(path, sizeof path, "%s/t.jsonl", dir);
    f = fopen(path, "wb");
    fprintf(f, "{\"id\": 1, \"text\": \"one\\ndoc\"}\n\n{\"text\": \"two\", \"n\": [1]}\n");
    fclose(f);
    text_stream *ts;
    text_stream_open(&ts, path, "text");
    text_segment a, b, c;
    TU_CHECK(text_stream_next(ts, &a) == 1 && a.len == 7 && !memcmp(a.text, "one\ndoc", 7) && a.doc_start && a.doc_end,
             "first record");
    TU_CHECK(text_stream_next(ts, &b) == 1 && b.len == 3 && !memcmp(b.text, "two", 3), "second record");
    TU_CHECK(text_stream_next(ts, &c) == 0, "end");
    text_stream_close(ts);
    free(text), free(want), free(got);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return tu_finish("text_stream");
}
