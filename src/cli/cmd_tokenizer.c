// bagualu tokenizer train|encode|decode
//   train   --vocab-size V --out tok.json FILES...     learn merges (format: data/bpe_tokjson.c)
//   encode  --tokenizer T [--out F] [--stats] [FILES]  text -> ids, one line of ids per file
//   decode  --tokenizer T [--out F] [FILES]            ids (text, or a token shard) -> bytes
// FILES default to standard input for encode and decode. encode takes any bytes
// (decode(encode(x)) == x); train refuses empty and binary files.
#include "core/args.h"
#include "cli/commands.h"
#include "cli/gpt2_fetch.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/bpe.h"
#include "data/text_stream.h"
#include "data/shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fail(int code) {
    fprintf(stderr, "bagualu: %s\n", bg_last_error());
    return code;
}

// Reads a whole input (a path, or "-" for standard input) as bytes.
static int read_input(const char *path, uint8_t **data, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return bg_error("%s: cannot open (%s)", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = bg_malloc(cap + 1);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            uint8_t *b = realloc(buf, cap + 1);
            if (!b) {
                free(buf);
                if (f != stdin) fclose(f);
                return bg_error("%s: out of memory reading the input", path);
            }
            buf = b;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    int err = ferror(f);
    if (f != stdin) fclose(f);
    if (err) {
        free(buf);
        return bg_error("%s: read error (a directory?)", path);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return BG_OK;
}


static FILE *open_output(const char *out) {
    if (!out || !strcmp(out, "-")) return stdout;
    FILE *f = fopen(out, "wb");
    if (!f) bg_error("%s: cannot create (%s)", out, strerror(errno));
    return f;
}

static int close_output(FILE *f, const char *out) {
    int bad = ferror(f);
    bad |= f == stdout ? fflush(f) != 0 : fclose(f) != 0;
    if (bad) return bg_error("%s: write error", out && strcmp(out, "-") ? out : "standard output");
    return BG_OK;
}

static void train_progress(void *ctx, int done, int total) {
    double t0 = *(double *)ctx;
    fprintf(stderr, "\r  merges %d/%d  (%.1f s)", done, total, bg_now() - t0);
    if (done == total) fprintf(stderr, "\n");
}

// Segments waiting to be counted, their text in one arena.
typedef struct {
    bpe_trainer **trs;
    uint8_t *arena;
    size_t used, cap;
    bpe_job *seg;
    size_t n, max;
    int next, failed;
} count_batch;

static void count_range(void *p, size_t i0, size_t i1) {
    count_batch *b = p;
    bpe_trainer *tr = b->trs[__atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED)];
    for (size_t i = i0; i < i1; i++)
        if (bpe_trainer_add_text(tr, b->seg[i].text, b->seg[i].len) != BG_OK)
            __atomic_store_n(&b->failed, 1, __ATOMIC_RELAXED);
}

// Counts the batch's words, each thread into its own trainer.
static int count_flush(count_batch *b) {
    b->next = 0;
    bg_parallel_ranges(b->n, count_range, b);
    b->n = b->used = 0;
    return b->failed ? BG_ERR : BG_OK;
}

static int tokenizer_train(int argc, char **argv) {
    const char *out = NULL;
    int vocab = 0;
    const arg_spec specs[] = {
        {"vocab-size", ARG_INT, &vocab, 1, "tokens in the vocabulary: 256 bytes + merges + <|endoftext|>"},
        {"out", ARG_STR, &out, 1, "tokenizer file to write (tok.json)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "tokenizer train",
                  "Learn byte-level BPE merges from text (files, - for stdin, .gz too): tokenizer train [flags] FILES..."))
        return 0;
    char **files = bg_malloc(sizeof(char *) * ((size_t)argc + 1));
    int nfiles, rc = 0;
    int nflags = args_split_files(specs, n, argc, argv, files, &nfiles);
    if (args_parse(specs, n, nflags, argv, "tokenizer train") != BG_OK) rc = fail(2);
    else if (nfiles == 0) rc = (bg_error("tokenizer train: no input text files given"), fail(2));
    else if (vocab < 257 || vocab > 1 << 24)
        rc = (bg_error("tokenizer train: --vocab-size must be in 257..16777216 (256 bytes + merges + <|endoftext|>)"),
              fail(2));
    if (rc) {
        free(files);
        return rc;
    }
    double t0 = bg_now();
    // Streaming: segments of the inputs (data/text_stream.h) counted a batch at a time,
    // one trainer per thread, joined at the end; memory is the read buffer, one batch
    // and the distinct words.
    int nt = bg_threads_get();
    bpe_trainer **trs = bg_malloc(sizeof *trs * (size_t)nt);
    for (int i = 0; i < nt; i++) trs[i] = bpe_trainer_new();
    count_batch b = {.trs = trs, .cap = ((size_t)4 << 20) * (size_t)nt, .max = 16 * (size_t)nt};
    b.arena = bg_malloc(b.cap);
    b.seg = bg_calloc(b.max, sizeof *b.seg);
    size_t bytes = 0;
    for (int i = 0; i < nfiles && !rc; i++) {
        text_stream *ts;
        if (text_stream_open(&ts, files[i], NULL) != BG_OK) {
            rc = fail(2);
            break;
        }
        text_segment seg;
        int got;
        while ((got = text_stream_next(ts, &seg)) == 1 && !rc) {
            if ((b.n == b.max || b.used + seg.len > b.cap) && count_flush(&b) != BG_OK) rc = fail(1);
            if (seg.len > b.cap) {
                free(b.arena);
                b.arena = bg_malloc(b.cap = seg.len);
            }
            memcpy(b.arena + b.used, seg.text, seg.len);
            b.seg[b.n++] = (bpe_job){b.arena + b.used, seg.len, NULL};
            b.used += seg.len;
        }
        if (got == BG_ERR && !rc) rc = fail(2);
        bytes += text_stream_bytes(ts);
        text_stream_close(ts);
    }
    if (!rc && count_flush(&b) != BG_OK) rc = fail(1);
    bpe_trainer *tr = trs[0];
    for (int i = 1; i < nt; i++) {
        if (!rc && bpe_trainer_merge(tr, trs[i]) != BG_OK) rc = fail(1);
        bpe_trainer_free(trs[i]);
    }
    free(trs);
    free(b.arena);
    free(b.seg);
    bpe_tokenizer *tok = NULL;
    if (!rc) {
        int tty = isatty(2);
        fprintf(stderr, "read %.1f MB, %zu distinct words (%.1f s); learning %d merges\n", bytes / 1e6,
                bpe_trainer_unique_words(tr), bg_now() - t0, vocab - 257);
        if (bpe_train(tr, vocab, &tok, tty ? train_progress : NULL, &t0) != BG_OK) rc = fail(2);
    }
    bpe_trainer_free(tr);
    free(files);
    if (rc) return rc;
    int got = bpe_vocab_size(tok);
    if (bpe_save(tok, out) != BG_OK) rc = fail(1);
    else {
        if (got < vocab)
            fprintf(stderr, "note: the text allows only %d merges, so the vocabulary has %d tokens, not %d\n",
                    got - 257, got, vocab);
        printf("wrote %s: %d tokens (%d merges) learned from %.1f MB in %.1f s\n", out, got, got - 257, bytes / 1e6,
               bg_now() - t0);
    }
    bpe_free(tok);
    return rc;
}

static int tokenizer_encode(int argc, char **argv) {
    const char *spec = NULL, *out = NULL;
    int stats = 0;
    const arg_spec specs[] = {
        {"tokenizer", ARG_STR, &spec, 1, "gpt2, a tok.json, or a directory with encoder.json + vocab.bpe"},
        {"out", ARG_STR, &out, 0, "where to write the ids (default standard output)"},
        {"stats", ARG_SWITCH, &stats, 0, "print bytes, tokens and encoding speed on stderr"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "tokenizer encode",
                  "Text to token ids, one line of ids per input: tokenizer encode [flags] [FILES... | -]"))
        return 0;
    char **files = bg_malloc(sizeof(char *) * ((size_t)argc + 1));
    int nfiles;
    int nflags = args_split_files(specs, n, argc, argv, files, &nfiles);
    bpe_tokenizer *tok = NULL;
    if (args_parse(specs, n, nflags, argv, "tokenizer encode") != BG_OK || cli_tokenizer_load(&tok, spec) != BG_OK) {
        free(files);
        return fail(2);
    }
    if (nfiles == 0) files[nfiles++] = "-";
    FILE *f = open_output(out);
    int rc = f ? 0 : fail(1);
    bpe_encoder *enc = bpe_encoder_new(tok);
    bpe_ids ids = {0};
    size_t total_bytes = 0, total_tokens = 0;
    double seconds = 0, cpu_seconds = 0;
    for (int i = 0; i < nfiles && !rc; i++) {
        uint8_t *text;
        size_t len;
        if (read_input(files[i], &text, &len) != BG_OK) {
            rc = fail(2);
            break;
        }
        ids.count = 0;
        double t = bg_now(), c = bg_process_cpu_now();
        if (bpe_encode(enc, text, len, &ids) != BG_OK) {
            free(text);
            rc = fail(1);
            break;
        }
        seconds += bg_now() - t;
        cpu_seconds += bg_process_cpu_now() - c;
        total_bytes += len;
        total_tokens += ids.count;
        free(text);
        char num[16];
        for (size_t k = 0; k < ids.count; k++) {
            int m = snprintf(num, sizeof num, k ? " %u" : "%u", ids.ids[k]);
            fwrite(num, 1, (size_t)m, f);
        }
        fputc('\n', f);
    }
    if (f && close_output(f, out) != BG_OK && !rc) rc = fail(1);
    if (!rc && stats)
        fprintf(stderr, "encoded %zu bytes into %zu tokens (%.2f bytes/token) in %.3f s (%.3f s CPU): %.1f MB/s\n",
                total_bytes, total_tokens, total_tokens ? (double)total_bytes / (double)total_tokens : 0.0, seconds,
                cpu_seconds, seconds > 0 ? total_bytes / seconds / 1e6 : 0.0);
    bpe_ids_free(&ids);
    bpe_encoder_free(enc);
    bpe_free(tok);
    free(files);
    return rc;
}

// Ids from an input: a token shard (recognised by its magic number) or decimal numbers
// separated by white space.
static int read_ids(const char *path, const bpe_tokenizer *tok, bpe_ids *ids) {
    uint8_t *data;
    size_t len;
    if (read_input(path, &data, &len) != BG_OK) return BG_ERR;
    int32_t magic = 0;
    if (len >= 4) memcpy(&magic, data, 4);
    if (magic == SHARD_MAGIC && strcmp(path, "-") != 0) {
        free(data);
        token_shard s;
        if (shard_load(&s, path, bpe_vocab_size(tok)) != BG_OK) return BG_ERR;
        int rc = BG_OK;
        for (size_t i = 0; i < s.count && rc == BG_OK; i++) rc = bpe_ids_push(ids, shard_token(&s, i));
        shard_free(&s);
        return rc;
    }
    int rc = BG_OK;
    for (size_t i = 0; i < len;) {
        uint8_t c = data[i];
        if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            i++;
            continue;
        }
        if (c < '0' || c > '9') {
            rc = bg_error("%s: expected token ids (decimal numbers) or a token shard; found byte 0x%02x at offset %zu",
                          path, c, i);
            break;
        }
        uint64_t v = 0;
        while (i < len && data[i] >= '0' && data[i] <= '9' && v <= UINT32_MAX) v = v * 10 + (uint64_t)(data[i++] - '0');
        if (v >= (uint64_t)bpe_vocab_size(tok)) {
            rc = bg_error("%s: token id %s%llu is out of range (vocabulary of %d)", path, v > UINT32_MAX ? "above " : "",
                          (unsigned long long)(v > UINT32_MAX ? UINT32_MAX : v), bpe_vocab_size(tok));
            break;
        }
        if ((rc = bpe_ids_push(ids, (uint32_t)v)) != BG_OK) break;
    }
    free(data);
    return rc;
}

static int tokenizer_decode(int argc, char **argv) {
    const char *spec = NULL, *out = NULL;
    const arg_spec specs[] = {
        {"tokenizer", ARG_STR, &spec, 1, "gpt2, a tok.json, or a directory with encoder.json + vocab.bpe"},
        {"out", ARG_STR, &out, 0, "where to write the text (default standard output)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "tokenizer decode",
                  "Token ids (decimal text, or a token shard) to bytes: tokenizer decode [flags] [FILES... | -]"))
        return 0;
    char **files = bg_malloc(sizeof(char *) * ((size_t)argc + 1));
    int nfiles;
    int nflags = args_split_files(specs, n, argc, argv, files, &nfiles);
    bpe_tokenizer *tok = NULL;
    if (args_parse(specs, n, nflags, argv, "tokenizer decode") != BG_OK || cli_tokenizer_load(&tok, spec) != BG_OK) {
        free(files);
        return fail(2);
    }
    if (nfiles == 0) files[nfiles++] = "-";
    bpe_ids ids = {0};
    int rc = 0;
    for (int i = 0; i < nfiles && !rc; i++)
        if (read_ids(files[i], tok, &ids) != BG_OK) rc = fail(2);
    FILE *f = rc ? NULL : open_output(out);
    if (!rc && !f) rc = fail(1);
    if (!rc) {
        long long need = bpe_decode(tok, ids.ids, ids.count, NULL, 0);
        uint8_t *buf = bg_malloc((size_t)need + 1);
        bpe_decode(tok, ids.ids, ids.count, buf, (size_t)need);
        fwrite(buf, 1, (size_t)need, f);
        free(buf);
        if (close_output(f, out) != BG_OK) rc = fail(1);
    }
    bpe_ids_free(&ids);
    bpe_free(tok);
    free(files);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    const char *usage =
        "usage: bagualu tokenizer <train|encode|decode> [flags] [FILES...]\n"
        "  train   --vocab-size V --out tok.json FILES...   learn byte-level BPE merges\n"
        "  encode  --tokenizer gpt2|tok.json [FILES]        text to token ids\n"
        "  decode  --tokenizer gpt2|tok.json [FILES]        token ids (or a token shard) to text\n";
    if (argc < 1) {
        fprintf(stderr, "bagualu: tokenizer: missing subcommand (train, encode or decode)\n");
        return 2;
    }
    if (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h") || !strcmp(argv[0], "help")) {
        fputs(usage, stdout);
        return 0;
    }
    if (!strcmp(argv[0], "train")) return tokenizer_train(argc - 1, argv + 1);
    if (!strcmp(argv[0], "encode")) return tokenizer_encode(argc - 1, argv + 1);
    if (!strcmp(argv[0], "decode")) return tokenizer_decode(argc - 1, argv + 1);
    fprintf(stderr, "bagualu: tokenizer: unknown subcommand \"%s\" (train, encode or decode)\n", argv[0]);
    return 2;
}
