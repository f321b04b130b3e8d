// bagualu prepare --tokenizer gpt2|tok.json --out DIR [--val-fraction F]
//                 [--shard-tokens N] [--jsonl-field NAME] INPUTS...
//
// Text -> token shards in llm.c's layout (data/shard.h): DIR/train.bin and DIR/val.bin,
// or numbered shards train_000000.bin, ... (--shard-tokens); uint16 tokens (version
// 1), or uint32 (version 2) for vocabularies over 65,536. Every document starts with
// the end-of-text token, as in llm.c's preparation scripts.
//
// Streaming: inputs (files, "-" for standard input, gzip read directly) are read in
// segments (data/text_stream.h), encoded a batch at a time on every thread, and written
// as they come (data/token_writer.h), so memory stays bounded whatever the corpus size:
// the read buffer, one batch of text and its ids (PREPARE_BATCH_BYTES per thread), the
// encoders' bounded caches, and the split's spool (TOKEN_SPOOL_MEMORY tokens).
// Documents: each text input, split further at literal "<|endoftext|>" markers; or one
// per line of JSON Lines (--jsonl-field). The validation split is documents.h's.
#include "core/args.h"
#include "cli/commands.h"
#include "cli/gpt2_fetch.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/bpe.h"
#include "data/shard.h"
#include "data/text_stream.h"
#include "data/token_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREPARE_BATCH_BYTES ((size_t)4 << 20)

// Segments waiting to be encoded: their text copied into one arena.
typedef struct {
    uint8_t *arena;
    size_t used, cap;
    bpe_job *jobs;
    bpe_ids *ids;
    int *doc_end;
    size_t n, max;
} batch;

typedef struct {
    int tty;
    double start, last;
    size_t total, done;  // total 0: unknown (standard input or gzip), no bar
} progress;

static void progress_show(progress *p, int final) {
    if (!p->tty) return;
    double now = bg_now();
    if (!final && now - p->last < 0.1) return;
    p->last = now;
    double el = now - p->start, rate = el > 0 ? p->done / el / 1e6 : 0.0;
    if (p->total) {
        double frac = final ? 1.0 : (double)p->done / (double)p->total;
        if (frac > 1) frac = 1;
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r  tokenizing [%s] %3.0f%%  %.1f/%.1f MB  %.1f MB/s ", bar, frac * 100, p->done / 1e6,
                p->total / 1e6, rate);
    } else {
        fprintf(stderr, "\r  tokenizing  %.1f MB  %.1f MB/s ", p->done / 1e6, rate);
    }
    if (final) fprintf(stderr, "\n");
}

// Encodes the batch on every thread, then hands its ids to the writer in order.
static int batch_flush(batch *b, bpe_encoder **encs, int nenc, token_writer *w) {
    for (size_t i = 0; i < b->n; i++) b->jobs[i].out = &b->ids[i];
    int rc = bpe_encode_jobs(encs, nenc, b->jobs, b->n);
    for (size_t i = 0; i < b->n && rc == BG_OK; i++) {
        rc = token_writer_add(w, b->ids[i].ids, b->ids[i].count);
        if (rc == BG_OK && b->doc_end[i]) rc = token_writer_end_doc(w);
    }
    b->n = 0;
    b->used = 0;
    return rc;
}

static int batch_add(batch *b, const text_segment *s, bpe_encoder **encs, int nenc, token_writer *w) {
    if ((b->n == b->max || b->used + s->len > b->cap) && b->n > 0 && batch_flush(b, encs, nenc, w) != BG_OK)
        return BG_ERR;
    if (s->len > b->cap) {  // a segment longer than the arena (a very long pre-token)
        free(b->arena);
        b->cap = s->len;
        b->arena = bg_malloc(b->cap);
    }
    if (s->len) memcpy(b->arena + b->used, s->text, s->len);
    b->jobs[b->n] = (bpe_job){b->arena + b->used, s->len, NULL};
    b->doc_end[b->n] = s->doc_end;
    b->used += s->len;
    b->n++;
    return BG_OK;
}

int cmd_prepare(int argc, char **argv) {
    const char *spec = NULL, *dir = NULL, *field = NULL;
    float val_fraction = 0.05f;
    long shard_tokens = 0;
    const arg_spec specs[] = {
        {"tokenizer", ARG_STR, &spec, 1, "gpt2, a tok.json, or a directory with encoder.json + vocab.bpe"},
        {"out", ARG_STR, &dir, 1, "directory for the shards (created if missing)"},
        {"val-fraction", ARG_FLOAT, &val_fraction, 0, "share of the text for validation, 0..0.5 (default 0.05)"},
        {"shard-tokens", ARG_LONG, &shard_tokens, 0, "write numbered shards train_000000.bin, ... of at most N tokens"},
        {"jsonl-field", ARG_STR, &field, 0, "inputs are JSON Lines: one document per line, its text in this field"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "prepare",
                  "Tokenize text (files, - for stdin, .gz too) into train and val token shards: prepare [flags] INPUTS..."))
        return 0;
    char **files = bg_malloc(sizeof(char *) * ((size_t)argc + 1));
    int nfiles;
    int nflags = args_split_files(specs, n, argc, argv, files, &nfiles);
    bpe_tokenizer *tok = NULL;
    int rc = 0;
    if (args_parse(specs, n, nflags, argv, "prepare") != BG_OK) rc = 2;
    else if (nfiles == 0) rc = (bg_error("prepare: no input text files given"), 2);
    else if (!(val_fraction >= 0 && val_fraction <= 0.5f))
        rc = (bg_error("prepare: --val-fraction must be in 0..0.5, got %g", val_fraction), 2);
    else if (shard_tokens < 0 || shard_tokens > INT32_MAX)
        rc = (bg_error("prepare: --shard-tokens must be in 1..%d, got %ld", INT32_MAX, shard_tokens), 2);
    else if (cli_tokenizer_load(&tok, spec) != BG_OK) rc = 2;
    size_t total = 0;
    int sized = 1;  // every input a plain file: the progress bar knows the total
    for (int i = 0; i < nfiles && !rc; i++) {  // fail early on a missing input
        struct stat st;
        size_t L = strlen(files[i]);
        if (strcmp(files[i], "-") == 0 || (L > 3 && !strcmp(files[i] + L - 3, ".gz"))) sized = 0;
        else if (stat(files[i], &st) != 0) rc = (bg_error("%s: cannot open (%s)", files[i], strerror(errno)), 2);
        else total += (size_t)st.st_size;
    }
    if (!rc && mkdir(dir, 0777) != 0 && errno != EEXIST)
        rc = (bg_error("%s: cannot create directory (%s)", dir, strerror(errno)), 1);
    if (rc) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        bpe_free(tok);
        free(files);
        return rc;
    }

    int vocab = bpe_vocab_size(tok);
    int version = vocab > 65536 ? SHARD_VERSION_U32 : SHARD_VERSION_U16;
    int nenc = bg_threads_get();
    bpe_encoder **encs = bg_malloc(sizeof *encs * (size_t)nenc);
    for (int i = 0; i < nenc; i++) encs[i] = bpe_encoder_new(tok);
    batch b = {.cap = PREPARE_BATCH_BYTES * (size_t)nenc, .max = 16 * (size_t)nenc};
    b.arena = bg_malloc(b.cap);
    b.jobs = bg_calloc(b.max, sizeof *b.jobs);
    b.ids = bg_calloc(b.max, sizeof *b.ids);
    b.doc_end = bg_calloc(b.max, sizeof *b.doc_end);
    token_writer *w;
    token_writer_open(&w, dir, version, (size_t)shard_tokens, val_fraction, bpe_eot_token(tok));
    progress p = {isatty(2), bg_now(), 0, sized ? total : 0, 0};
    size_t bytes = 0;
    for (int i = 0; i < nfiles && !rc; i++) {
        text_stream *ts;
        if (text_stream_open(&ts, files[i], field) != BG_OK) {
            rc = 2;
            break;
        }
        text_segment seg;
        int got;
        while ((got = text_stream_next(ts, &seg)) == 1)
            if (batch_add(&b, &seg, encs, nenc, w) != BG_OK) {
                rc = 1;
                break;
            } else {
                p.done = bytes + text_stream_bytes(ts);
                progress_show(&p, 0);
            }
        if (got == BG_ERR) rc = 2;
        bytes += text_stream_bytes(ts);
        text_stream_close(ts);
    }
    if (!rc && batch_flush(&b, encs, nenc, w) != BG_OK) rc = 1;
    size_t ndocs = 0, ntrain = 0, nval = 0;
    int train_shards = 0, val_shards = 0;
    if (!rc && token_writer_finish(w, &ndocs, &ntrain, &nval, &train_shards, &val_shards) != BG_OK) rc = 1;
    if (!rc && ndocs == 0) rc = (bg_error("prepare: the input files hold no text"), 2);
    if (rc) {
        if (p.tty && p.done > 0) fputc('\n', stderr);  // end the progress line first
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
    } else {
        progress_show(&p, 1);
        double el = bg_now() - p.start;
        printf("prepared %zu document%s, %.1f MB of text, in %.1f s (vocabulary %d, %s tokens; %.1f MB/s, %.0f tokens/s)\n",
               ndocs, ndocs == 1 ? "" : "s", bytes / 1e6, el, vocab, version == SHARD_VERSION_U16 ? "uint16" : "uint32",
               el > 0 ? bytes / el / 1e6 : 0.0, el > 0 ? (ntrain + nval) / el : 0.0);
        if (shard_tokens) {
            printf("  %s/train_%06d.bin .. train_%06d.bin  %zu tokens\n", dir, 0, train_shards - 1, ntrain);
            if (val_shards) printf("  %s/val_%06d.bin .. val_%06d.bin    %zu tokens\n", dir, 0, val_shards - 1, nval);
        } else {
            printf("  %s/train.bin  %zu tokens\n", dir, ntrain);
            if (val_fraction > 0) printf("  %s/val.bin    %zu tokens\n", dir, nval);
        }
    }
    token_writer_free(w);
    for (size_t i = 0; i < b.max; i++) bpe_ids_free(&b.ids[i]);
    free(b.arena), free(b.jobs), free(b.ids), free(b.doc_end);
    for (int i = 0; i < nenc; i++) bpe_encoder_free(encs[i]);
    free(encs);
    bpe_free(tok);
    free(files);
    return rc;
}
