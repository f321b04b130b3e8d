// bagualu generate --checkpoint DIR [--prompt TEXT | --prompt-tokens "1 2 3"] [--max-tokens N]
//                  [--temperature T] [--top-k K] [--top-p P] [--seed S] [--tokenizer gpt2|tok.json]
//
// Text (the prompt, then the sampled continuation as it is produced) goes to stdout;
// one summary line (tokens, speed, why it stopped) to stderr. Without a tokenizer
// (--prompt-tokens on a model whose vocabulary is not GPT-2's) the ids are printed.
#include "core/args.h"
#include "cli/commands.h"
#include "cli/gpt2_fetch.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/bpe.h"
#include "model/generate.h"
#include "model/generate_text.h"
#include "train/checkpoint_weights.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPT2_VOCAB 50257

// "1 2 3" → ids (each in [0, V)); BG_ERR naming the bad entry.
static int parse_ids(const char *text, int V, int **ids, int *n) {
    size_t cap = strlen(text) / 2 + 1;
    *ids = bg_malloc(cap * sizeof(int));
    *n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v >= V || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != ',')) {
            free(*ids);
            *ids = NULL;
            return bg_error("generate: --prompt-tokens: \"%.*s\" is not a token id below the vocabulary size %d",
                            (int)strcspn(p, " \t\n,"), p, V);
        }
        (*ids)[(*n)++] = (int)v;
        p = end;
    }
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return bg_error("generate: --prompt-tokens holds no token ids");
    }
    return BG_OK;
}

typedef struct {
    const bpe_tokenizer *tok;  // NULL: print ids
    int eot;
    int last_newline;          // the last byte written was '\n'
} stream;

static void write_token(stream *s, int id) {
    if (!s->tok) {
        printf(" %d", id);
        s->last_newline = 0;
    } else {
        size_t len;
        const uint8_t *b = gen_token_text(s->tok, id, &len);
        fwrite(b, 1, len, stdout);
        if (len) s->last_newline = b[len - 1] == '\n';
    }
    fflush(stdout);
}

static int on_token(void *ctx, int id) {
    stream *s = ctx;
    if (id != s->eot) write_token(s, id);  // the end-of-text token ends the text, unprinted
    return 0;
}

int cmd_generate(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = NULL, *prompt_tokens = NULL, *tok_spec = NULL;
    int max_tokens = 200, top_k = 0, threads = 0;
    float temperature = 0.8f, top_p = 0.95f;
    uint64_t seed = 1337;
    const arg_spec specs[] = {
        {"checkpoint", ARG_STR, &ckpt, 1, "checkpoint step directory, or a save directory (uses latest)"},
        {"prompt", ARG_STR, &prompt, 0, "text to continue (default: empty, a new document)"},
        {"prompt-tokens", ARG_STR, &prompt_tokens, 0, "token ids to continue, e.g. \"464 3290\" (instead of --prompt)"},
        {"max-tokens", ARG_INT, &max_tokens, 0, "tokens to generate at most (default 200)"},
        {"temperature", ARG_FLOAT, &temperature, 0, "softmax temperature; 0 = greedy (default 0.8)"},
        {"top-k", ARG_INT, &top_k, 0, "sample among the K most likely tokens; 0 = all (default 0)"},
        {"top-p", ARG_FLOAT, &top_p, 0, "nucleus: the most likely tokens holding P of the mass (default 0.95)"},
        {"seed", ARG_U64, &seed, 0, "sampling seed (default 1337)"},
        {"tokenizer", ARG_STR, &tok_spec, 0, "gpt2, a tok.json, or a directory with encoder.json + vocab.bpe "
                                             "(default: gpt2 for a 50257-token vocabulary)"},
        {"threads", ARG_INT, &threads, 0, "OpenMP threads (default: 1 below 100M active parameters, else all cores)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "generate",
                  "Sample text from a checkpoint, one token at a time with a KV cache."))
        return 0;
    if (args_parse(specs, n, argc, argv, "generate") != BG_OK) goto bad_input;
    if (prompt && prompt_tokens) {
        bg_error("generate: give --prompt or --prompt-tokens, not both");
        goto bad_input;
    }
    if (max_tokens < 0) {
        bg_error("generate: --max-tokens must be >= 0");
        goto bad_input;
    }
    if (temperature < 0) {
        bg_error("generate: --temperature must be >= 0");
        goto bad_input;
    }
    if (top_k < 0) {
        bg_error("generate: --top-k must be >= 0");
        goto bad_input;
    }
    if (!(top_p > 0 && top_p <= 1)) {
        bg_error("generate: --top-p must be in (0, 1]");
        goto bad_input;
    }
    bg_threads_set(threads);

    model m;
    if (ckpt_load_weights(&m, ckpt, NULL) != BG_OK) goto bad_input;
    // One token is a few matrix-vector products: below ~100M active parameters the
    // work per parallel region is smaller than waking a second thread (measured: a
    // 6M-parameter model decodes ~700 tokens/s on 1 thread, slower on 2), so small
    // models decode on one thread unless asked otherwise.
    if (threads <= 0 && model_active_matmul_params(&m.cfg) < 1e8) bg_threads_set(1);
    const int V = m.cfg.vocab_size;
    bpe_tokenizer *tok = NULL;
    if (!tok_spec && V == GPT2_VOCAB) tok_spec = "gpt2";
    if (tok_spec) {
        if (cli_tokenizer_load(&tok, tok_spec) != BG_OK) goto bad_model;
        if (bpe_vocab_size(tok) > V) {
            bg_error("generate: the tokenizer %s has %d tokens, more than the model's vocabulary of %d",
                     tok_spec, bpe_vocab_size(tok), V);
            goto bad_tok;
        }
    } else if (!prompt_tokens) {
        bg_error("generate: the checkpoint's vocabulary has %d tokens, not GPT-2's %d: give --tokenizer "
                 "tok.json (or --prompt-tokens to work in ids)",
                 V, GPT2_VOCAB);
        goto bad_model;
    }

    // The prompt: ids as given, or the text after an end-of-text token (gen_prompt_ids).
    int *ids = NULL, n_ids = 0;
    if (prompt_tokens) {
        if (parse_ids(prompt_tokens, V, &ids, &n_ids) != BG_OK) goto bad_tok;
    } else if (gen_prompt_ids(tok, prompt, &ids, &n_ids) != BG_OK) {
        goto bad_tok;  // out of memory: main() makes the exit code 3
    }
    const int ctx = m.cfg.max_position_embeddings;
    if (n_ids > ctx) {
        bg_error("generate: the prompt is %d tokens; the model's context holds %d", n_ids, ctx);
        free(ids);
        goto bad_tok;
    }

    gen_state g;
    gen_init(&g, &m, ctx);
    int *out = bg_malloc(sizeof(int) * (size_t)(max_tokens > 0 ? max_tokens : 1));
    stream s = {.tok = tok, .eot = tok ? (int)bpe_eot_token(tok) : -1, .last_newline = 1};
    // Echo the prompt (its leading end-of-text token is not text).
    if (tok) {
        for (int i = 0; i < n_ids; i++)
            if (ids[i] != s.eot) write_token(&s, ids[i]);
    } else {
        printf("prompt:");
        for (int i = 0; i < n_ids; i++) printf(" %d", ids[i]);
        printf("\ngenerated:");
    }
    gen_sampling samp = {.temperature = temperature, .top_k = top_k, .top_p = top_p};
    double t0 = bg_now();
    int made = max_tokens > 0 ? gen_generate(&g, ids, n_ids, max_tokens, &samp, seed, s.eot, out, on_token, &s) : 0;
    double dt = bg_now() - t0;
    if (!s.last_newline) putchar('\n');
    fflush(stdout);
    const char *why = made > 0 && out[made - 1] == s.eot ? "end of text"
                      : made == max_tokens                ? "--max-tokens reached"
                                                          : "the context is full";
    fprintf(stderr, "[%d tokens in %.2f s, %.0f tokens/s (prompt %d tokens); stopped: %s]\n", made, dt,
            dt > 0 ? (made + n_ids) / dt : 0.0, n_ids, why);
    free(out);
    free(ids);
    gen_free(&g);
    bpe_free(tok);
    model_free(&m);
    return 0;

bad_tok:
    bpe_free(tok);
bad_model:
    model_free(&m);
bad_input:
    fprintf(stderr, "bagualu: %s\n", bg_last_error());
    return 2;
}
