// bagualu prepare --tokenizer gpt2|tok.json --out DIR [--val-fraction F] FILES...
//
// Text files -> DIR/train.bin and DIR/val.bin, token shards in llm.c's layout
// (data/shard.h): uint16 tokens (version 1), or uint32 (version 2) for vocabularies
// over 65,536. Every document starts with the end-of-text token, as in llm.c's
// preparation scripts, so the model sees where documents meet.
//
// Documents: each file, split further at literal "<|endoftext|>" markers (the form
// many corpora ship in). The validation split is deterministic (data/documents.h).
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/gpt2_fetch.h"
#include "core/error.h"
#include "core/timer.h"
#include "data/bpe.h"
#include "data/documents.h"
#include "data/shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    int tty;
    double start, last;
    size_t total, done;
} progress;

static void progress_show(progress *p, int final) {
    if (!p->tty) return;
    double now = bg_now();
    if (!final && now - p->last < 0.1) return;
    p->last = now;
    double frac = p->total ? (double)p->done / (double)p->total : 1.0;
    char bar[31];
    int fill = (int)(frac * 30);
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    double el = now - p->start;
    fprintf(stderr, "\r  tokenizing [%s] %3.0f%%  %.1f/%.1f MB  %.1f MB/s ", bar, frac * 100, p->done / 1e6,
            p->total / 1e6, el > 0 ? p->done / el / 1e6 : 0.0);
    if (final) fprintf(stderr, "\n");
}

// Writes dir/name: for each document, <|endoftext|> then its part (documents.h).
static int write_split(const char *dir, const char *name, const uint32_t *all, const documents *docs,
                       doc_part which, double cut, uint32_t eot, int version, size_t *count) {
    bpe_ids out = {0};
    int rc = documents_gather(&out, all, docs, which, cut, eot);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    *count = out.count;
    if (rc == BG_OK) rc = shard_write(path, out.ids, out.count, version);
    bpe_ids_free(&out);
    return rc;
}

int cmd_prepare(int argc, char **argv) {
    const char *spec = NULL, *dir = NULL;
    float val_fraction = 0.05f;
    const arg_spec specs[] = {
        {"tokenizer", ARG_STR, &spec, 1, "gpt2, a tok.json, or a directory with encoder.json + vocab.bpe"},
        {"out", ARG_STR, &dir, 1, "directory for train.bin and val.bin (created if missing)"},
        {"val-fraction", ARG_FLOAT, &val_fraction, 0, "share of the text for validation, 0..0.5 (default 0.05)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "prepare",
                  "Tokenize text files into train and val token shards: prepare [flags] FILES..."))
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
    else if (cli_tokenizer_load(&tok, spec) != BG_OK) rc = 2;
    progress p = {isatty(2), bg_now(), 0, 0, 0};
    for (int i = 0; i < nfiles && !rc; i++) {  // sizes first, for the progress bar; and fail early
        struct stat st;
        if (stat(files[i], &st) != 0) rc = (bg_error("%s: cannot open (%s)", files[i], strerror(errno)), 2);
        else p.total += (size_t)st.st_size;
    }
    if (!rc && mkdir(dir, 0777) != 0 && errno != EEXIST)
        rc = (bg_error("%s: cannot create directory (%s)", dir, strerror(errno)), 1);
    if (rc) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        bpe_free(tok);
        free(files);
        return rc;
    }

    bpe_encoder *enc = bpe_encoder_new(tok);
    bpe_ids all = {0};
    documents docs = {0};
    for (int i = 0; i < nfiles && !rc; i++) {
        uint8_t *text;
        size_t len;
        if (bpe_read_text_file(files[i], &text, &len) != BG_OK) {
            rc = 2;
            break;
        }
        for (size_t pos = 0, next; pos < len && !rc; pos = next) {
            size_t end = bpe_next_document(text, len, pos, &next);
            size_t begin = all.count;
            // Encoded a megabyte at a time so that the bar moves inside big files.
            for (size_t at = 0; at < end - pos && !rc;) {
                size_t was = at;
                if (bpe_encode_part(enc, text + pos, end - pos, &at, (size_t)1 << 20, &all) != BG_OK) rc = 1;
                p.done += at - was;
                progress_show(&p, 0);
            }
            p.done += next - end;  // the marker
            if (rc || all.count == begin) continue;  // an empty document
            if (documents_push(&docs, begin, all.count) != BG_OK) rc = 1;
        }
        free(text);
    }
    size_t ndocs = docs.count;
    if (!rc && ndocs == 0) rc = (bg_error("prepare: the input files hold no text"), 2);
    size_t ntrain = 0, nval = 0;
    int vocab = bpe_vocab_size(tok);
    int version = vocab > 65536 ? SHARD_VERSION_U32 : SHARD_VERSION_U16;
    if (!rc) {
        progress_show(&p, 1);
        double f = val_fraction;
        uint32_t eot = bpe_eot_token(tok);
        if (documents_split_whole(ndocs, f)) {
            documents train = {0}, val = {0};
            if (documents_split(&docs, f, &train, &val) != BG_OK ||
                write_split(dir, "train.bin", all.ids, &train, DOC_WHOLE, 0, eot, version, &ntrain) != BG_OK ||
                write_split(dir, "val.bin", all.ids, &val, DOC_WHOLE, 0, eot, version, &nval) != BG_OK)
                rc = 1;
            documents_free(&train);
            documents_free(&val);
        } else {
            if (f == 0) {  // no val split: a val.bin left from an earlier run would mislead
                char old[4096];
                snprintf(old, sizeof old, "%s/val.bin", dir);
                unlink(old);
            }
            if (write_split(dir, "train.bin", all.ids, &docs, DOC_HEAD, f, eot, version, &ntrain) != BG_OK ||
                (f > 0 && write_split(dir, "val.bin", all.ids, &docs, DOC_TAIL, f, eot, version, &nval) != BG_OK))
                rc = 1;
        }
    }
    if (rc) {
        if (p.tty && p.done > 0) fputc('\n', stderr);  // end the progress bar's line first
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
    } else {
        double el = bg_now() - p.start;
        printf("prepared %zu document%s, %.1f MB of text, in %.1f s (vocabulary %d, %s tokens)\n", ndocs,
               ndocs == 1 ? "" : "s", p.total / 1e6, el, vocab, version == SHARD_VERSION_U16 ? "uint16" : "uint32");
        printf("  %s/train.bin  %zu tokens\n", dir, ntrain);
        if (val_fraction > 0) printf("  %s/val.bin    %zu tokens\n", dir, nval);
    }
    documents_free(&docs);
    bpe_ids_free(&all);
    bpe_encoder_free(enc);
    bpe_free(tok);
    free(files);
    return rc;
}
