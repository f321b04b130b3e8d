// Streaming train/val shards for `prepare` (token_writer.h).
#include "data/token_writer.h"
#include "core/error.h"
#include "data/documents.h"
#include "data/shard.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// One side's shards: the open file and its token count.
typedef struct {
    const char *name;  // "train" or "val"
    FILE *f;
    size_t count, total;
    int index;         // shards opened so far
    char path[4096];
} side;

struct token_writer {
    const char *dir;
    int version;
    size_t shard_tokens;
    double f;
    uint32_t eot;
    side train, val;
    // The spool while the split is undecided: documents' spans over its tokens.
    int deciding;
    uint32_t *mem;
    size_t mem_count;
    FILE *spill;        // tokens past TOKEN_SPOOL_MEMORY
    size_t spooled;
    documents docs;
    size_t doc_begin;   // spool position of the current document
    size_t ndocs;       // non-empty documents seen
    side *cur;          // decided: the current document's side (NULL: no token yet)
    int doc_has_tokens;
};

static int side_close(token_writer *w, side *s) {
    if (!s->f) return BG_OK;
    int32_t header[SHARD_HEADER_INTS] = {SHARD_MAGIC, w->version, (int32_t)s->count};
    int ok = fseek(s->f, 0, SEEK_SET) == 0 && fwrite(header, sizeof header, 1, s->f) == 1;
    if (fclose(s->f) != 0) ok = 0;
    s->f = NULL;
    if (!ok) return bg_error("%s: write failed (%s)", s->path, strerror(errno));
    return BG_OK;
}

static int side_open(token_writer *w, side *s) {
    if (w->shard_tokens) snprintf(s->path, sizeof s->path, "%s/%s_%06d.bin", w->dir, s->name, s->index);
    else snprintf(s->path, sizeof s->path, "%s/%s.bin", w->dir, s->name);
    s->index++;
    s->count = 0;
    s->f = fopen(s->path, "wb");
    if (!s->f) return bg_error("%s: cannot create (%s)", s->path, strerror(errno));
    int32_t header[SHARD_HEADER_INTS] = {SHARD_MAGIC, w->version, 0};
    if (fwrite(header, sizeof header, 1, s->f) != 1) return bg_error("%s: write failed (%s)", s->path, strerror(errno));
    return BG_OK;
}

static int side_write(token_writer *w, side *s, const uint32_t *ids, size_t n) {
    while (n > 0) {
        if (!s->f || (w->shard_tokens && s->count == w->shard_tokens)) {
            if (side_close(w, s) != BG_OK || side_open(w, s) != BG_OK) return BG_ERR;
        }
        size_t room = w->shard_tokens ? w->shard_tokens - s->count : (size_t)INT32_MAX - s->count;
        if (room == 0) return bg_error("%s: more than %d tokens for one file: use --shard-tokens", s->path, INT32_MAX);
        size_t k = n < room ? n : room;
        uint16_t buf16[4096];
        for (size_t i = 0; i < k;) {
            size_t m = k - i < 4096 ? k - i : 4096;
            int ok;
            if (w->version == SHARD_VERSION_U16) {
                for (size_t j = 0; j < m; j++) buf16[j] = (uint16_t)ids[i + j];
                ok = fwrite(buf16, 2, m, s->f) == m;
            } else {
                ok = fwrite(ids + i, 4, m, s->f) == m;
            }
            if (!ok) return bg_error("%s: write failed (%s)", s->path, strerror(errno));
            i += m;
        }
        s->count += k;
        s->total += k;
        ids += k;
        n -= k;
    }
    return BG_OK;
}

int token_writer_open(token_writer **out, const char *dir, int version, size_t shard_tokens, double val_fraction,
                      uint32_t eot) {
    token_writer *w = bg_calloc(1, sizeof *w);
    w->dir = dir;
    w->version = version;
    w->shard_tokens = shard_tokens;
    w->f = val_fraction;
    w->eot = eot;
    w->train.name = "train";
    w->val.name = "val";
    w->deciding = val_fraction > 0;  // no val: every document goes to train as it comes
    w->mem = w->deciding ? bg_malloc(sizeof(uint32_t) * TOKEN_SPOOL_MEMORY) : NULL;
    *out = w;
    return BG_OK;
}

static int spool_add(token_writer *w, const uint32_t *ids, size_t n) {
    size_t k = w->mem_count < TOKEN_SPOOL_MEMORY ? TOKEN_SPOOL_MEMORY - w->mem_count : 0;
    if (k > n) k = n;
    memcpy(w->mem + w->mem_count, ids, k * sizeof *ids);
    w->mem_count += k;
    if (k < n) {
        if (!w->spill && !(w->spill = tmpfile()))
            return bg_error("cannot create a temporary file for prepare's spool (%s)", strerror(errno));
        if (fwrite(ids + k, sizeof *ids, n - k, w->spill) != n - k)
            return bg_error("prepare's spool: write failed (%s)", strerror(errno));
    }
    w->spooled += n;
    return BG_OK;
}

// Spool tokens [b, e) to a side, in pieces.
static int spool_copy(token_writer *w, side *s, size_t b, size_t e) {
    uint32_t buf[8192];
    while (b < e) {
        if (b < w->mem_count) {
            size_t m = (e < w->mem_count ? e : w->mem_count) - b;
            if (side_write(w, s, w->mem + b, m) != BG_OK) return BG_ERR;
            b += m;
            continue;
        }
        size_t m = e - b < 8192 ? e - b : 8192;
        if (fseeko(w->spill, (off_t)((b - w->mem_count) * sizeof *buf), SEEK_SET) != 0 ||
            fread(buf, sizeof *buf, m, w->spill) != m)
            return bg_error("prepare's spool: read failed (%s)", strerror(errno));
        if (side_write(w, s, buf, m) != BG_OK) return BG_ERR;
        b += m;
    }
    return BG_OK;
}

static side *side_of(token_writer *w, size_t d) {
    return floor((double)(d + 1) * w->f) > floor((double)d * w->f) ? &w->val : &w->train;
}

// Enough documents for the whole-document split: the spool goes out, in order.
static int decide(token_writer *w) {
    w->deciding = 0;
    for (size_t d = 0; d < w->docs.count; d++) {
        side *s = side_of(w, d);
        if (side_write(w, s, &w->eot, 1) != BG_OK ||
            spool_copy(w, s, w->docs.spans[d].begin, w->docs.spans[d].end) != BG_OK)
            return BG_ERR;
    }
    free(w->mem);
    w->mem = NULL;
    if (w->spill) fclose(w->spill);
    w->spill = NULL;
    documents_free(&w->docs);
    return BG_OK;
}

int token_writer_add(token_writer *w, const uint32_t *ids, size_t n) {
    if (n == 0) return BG_OK;
    if (w->deciding) {
        w->doc_has_tokens = 1;
        return spool_add(w, ids, n);
    }
    if (!w->cur) {  // the document's first token: its index, and so its side, is known
        w->cur = w->f > 0 ? side_of(w, w->ndocs) : &w->train;
        w->ndocs++;
        if (side_write(w, w->cur, &w->eot, 1) != BG_OK) return BG_ERR;
    }
    return side_write(w, w->cur, ids, n);
}

int token_writer_end_doc(token_writer *w) {
    if (!w->deciding) {
        w->cur = NULL;
        return BG_OK;
    }
    if (!w->doc_has_tokens) return BG_OK;  // an empty document
    w->doc_has_tokens = 0;
    if (documents_push(&w->docs, w->doc_begin, w->spooled) != BG_OK) return BG_ERR;
    w->doc_begin = w->spooled;
    w->ndocs++;
    return documents_split_whole(w->ndocs, w->f) ? decide(w) : BG_OK;
}

int token_writer_finish(token_writer *w, size_t *docs, size_t *ntrain, size_t *nval, int *train_shards,
                        int *val_shards) {
    int rc = BG_OK;
    if (w->deciding) {  // few documents: each one's last F of tokens goes to val
        for (size_t d = 0; d < w->docs.count && rc == BG_OK; d++) {
            size_t b = w->docs.spans[d].begin, e = w->docs.spans[d].end;
            size_t k = (size_t)llround((double)(e - b) * w->f);
            if (e - k > b)
                rc = side_write(w, &w->train, &w->eot, 1) != BG_OK ? BG_ERR : spool_copy(w, &w->train, b, e - k);
            if (rc == BG_OK && k > 0)
                rc = side_write(w, &w->val, &w->eot, 1) != BG_OK ? BG_ERR : spool_copy(w, &w->val, e - k, e);
        }
    }
    if (rc == BG_OK) rc = side_close(w, &w->train);
    if (rc == BG_OK) rc = side_close(w, &w->val);
    // Stale files of an earlier run would join a glob of these shards.
    char path[4096];
    for (int i = w->train.index;; i++) {
        snprintf(path, sizeof path, "%s/train_%06d.bin", w->dir, i);
        if (unlink(path) != 0) break;
    }
    for (int i = w->val.index;; i++) {
        snprintf(path, sizeof path, "%s/val_%06d.bin", w->dir, i);
        if (unlink(path) != 0) break;
    }
    if (w->val.index == 0) {  // no val tokens: a val.bin left from an earlier run would mislead
        snprintf(path, sizeof path, "%s/val.bin", w->dir);
        if (!w->shard_tokens) unlink(path);
    }
    *docs = w->ndocs;
    *ntrain = w->train.total;
    *nval = w->val.total;
    *train_shards = w->train.index;
    *val_shards = w->val.index;
    return rc;
}

void token_writer_free(token_writer *w) {
    if (!w) return;
    if (w->train.f) fclose(w->train.f);
    if (w->val.f) fclose(w->val.f);
    if (w->spill) fclose(w->spill);
    free(w->mem);
    documents_free(&w->docs);
    free(w);
}
