// The calls on an open handle: train, evaluate, generate, metrics, save. Each runs
// under api_guard (session.c), over the functions the CLI's verbs call.
#include "api/session.h"
#include "core/error.h"
#include "core/threads.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "model/generate.h"
#include "model/generate_text.h"
#include "train/evaluate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SYNTH_TOKENS = 100000, SYNTH_SPAN = 8 };  // bagualu synth's defaults

// "synthetic": the task's tokens in a temporary shard, as `bagualu synth` writes them.
static int write_synthetic(bagualu *h) {
    synth_task task;
    if (synth_task_parse(&task, h->synthetic) != BG_OK) return BG_ERR;
    const char *tmp = getenv("TMPDIR");
    char unique[7];  // mkdtemp replaces the template's last six letters, all 'X'
    memset(unique, 'X', 6), unique[6] = '\0';
    snprintf(h->synth_dir, sizeof h->synth_dir, "%s/bagualu-synth-%s", tmp && *tmp ? tmp : "/tmp", unique);
    if (!mkdtemp(h->synth_dir)) {
        h->synth_dir[0] = '\0';
        return bg_error("synthetic: cannot make a temporary directory under %s", tmp && *tmp ? tmp : "/tmp");
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/train.bin", h->synth_dir);
    uint32_t *buf = bg_malloc(sizeof(uint32_t) * SYNTH_TOKENS);
    synth_generate(buf, SYNTH_TOKENS, task, h->cfg.vocab_size, SYNTH_SPAN, h->flags.o.seed);
    int rc = shard_write(path, buf, SYNTH_TOKENS, h->cfg.vocab_size > 65536 ? SHARD_VERSION_U32 : SHARD_VERSION_U16);
    free(buf);
    if (rc != BG_OK) return BG_ERR;
    h->flags.o.data_path = api_keep(h, path);
    return BG_OK;
}

int api_run_begin(bagualu *h) {
    train_options *o = &h->flags.o;
    if (h->synthetic && (o->data_path || o->data_mix))
        return bg_error("synthetic: give \"synthetic\" or \"data\"/\"data-mix\", not both"), BAGUALU_BAD_INPUT;
    if (h->synthetic && !h->synth_dir[0] && write_synthetic(h) != BG_OK) return BAGUALU_BAD_INPUT;
    if (train_flags_finish(&h->flags) != BG_OK) return BAGUALU_BAD_INPUT;
    o->quiet = h->quiet;
    o->command_line = "bagualu library (bagualu_train)";
    h->run = bg_calloc(1, sizeof *h->run);
    int report;
    int rc = train_run_begin(h->run, o, &report);
    if (rc != TRAIN_OK) {
        free(h->run);
        h->run = NULL;  // options can be fixed and the call tried again
        return rc;
    }
    if (!h->run->open) {
        free(h->run);
        h->run = NULL;
        return bg_error("the checkpoint is at step %ld or later: nothing to train (raise \"steps\")", o->steps),
               BAGUALU_BAD_INPUT;
    }
    if (!isnan(h->run->val_loss)) h->val_loss = h->run->val_loss;  // the first evaluation's
    if (h->model) {  // the run holds the model from now on
        model_free(h->model);
        free(h->model);
        h->model = NULL;
    }
    return BAGUALU_OK;
}

static int dead_run(bagualu *h) {
    (void)h;
    return bg_error("the training run stopped after an error; open a new handle"), BAGUALU_FAILED;
}

static int train(bagualu *h, void *args) {
    long n = *(const long *)args;
    if (h->run_failed) return dead_run(h);
    if (n <= 0) return bg_error("bagualu_train: steps must be positive, got %ld", n), BAGUALU_BAD_INPUT;
    if (!h->run) {
        int rc = api_run_begin(h);
        if (rc != BAGUALU_OK) return rc;
    }
    train_run *r = h->run;
    if (r->tr.step >= r->tr.opt.steps)
        return bg_error("the run is at its last step (%ld, the \"steps\" option)", r->tr.step), BAGUALU_BAD_INPUT;
    int report;
    double val_before = r->val_loss;
    int rc = train_run_steps(r, n, &report);
    if (!(r->val_loss == val_before || (isnan(r->val_loss) && isnan(val_before)))) h->val_loss = r->val_loss;
    if (rc == TRAIN_OK && r->open) return BAGUALU_OK;
    // The run ended with an error: keep its message, end what is left of it.
    api_fail(h, rc);
    if (r->open) train_run_end(r, rc, &report);
    h->run_failed = 1;
    return rc;
}

int bagualu_train(bagualu *h, long steps) { return api_guard(h, train, &steps); }

model *api_model(bagualu *h) {
    if (h->run) return &h->run->tr.m;
    if (!h->model) {
        h->model = bg_calloc(1, sizeof *h->model);
        bg_threads_set(h->flags.o.threads);
        model_init(h->model, &h->cfg, h->flags.o.seed);
    }
    return h->model;
}

typedef struct {
    const char *data;
    int batches;
    double *loss;
} eval_args;

static int evaluate(bagualu *h, void *args) {
    eval_args *a = args;
    if (h->run_failed) return dead_run(h);
    if (!a->loss) return bg_error("bagualu_evaluate: loss is NULL"), BAGUALU_BAD_INPUT;
    if (a->batches < 0) return bg_error("bagualu_evaluate: batches must be >= 0"), BAGUALU_BAD_INPUT;
    const train_options *o = &h->flags.o;
    const char *data = a->data ? a->data : o->val_path ? o->val_path : o->data_path;
    if (!data)
        return bg_error("bagualu_evaluate: no data (give a token file, or set \"val\" or \"data\")"),
               BAGUALU_BAD_INPUT;
    int B = o->batch_size, T = o->seq_len;
    if (B <= 0 || T <= 0 || T > h->cfg.max_position_embeddings)
        return bg_error("bagualu_evaluate: batch-size %d x seq-len %d does not fit the model's context of %d",
                        B, T, h->cfg.max_position_embeddings), BAGUALU_BAD_INPUT;
    if (model_check_routing_groups(&h->cfg, B, T) != BG_OK) return BAGUALU_BAD_INPUT;
    model *m = api_model(h);
    if (!h->run && (h->model_B != B || h->model_T != T)) {
        m->opt.no_grad = 1;  // a model that is not trained: loss only
        model_prepare(m, B, T);
        h->model_B = B, h->model_T = T;
    }
    int batches = a->batches;
    if (eval_shard_loss(m, data, B, T, &batches, a->loss) != BG_OK) return BAGUALU_BAD_INPUT;
    h->val_loss = *a->loss;
    return BAGUALU_OK;
}

int bagualu_evaluate(bagualu *h, const char *data, int batches, double *loss) {
    eval_args a = {data, batches, loss};
    return api_guard(h, evaluate, &a);
}

typedef struct {
    const int *prompt;
    int n_prompt, max_new;
    int *out, *n_out;
} gen_args;

static int check_sampling(const bagualu *h) {
    if (!(h->temperature >= 0)) return bg_error("temperature must be >= 0");
    if (h->top_k < 0) return bg_error("top-k must be >= 0");
    if (!(h->top_p > 0 && h->top_p <= 1)) return bg_error("top-p must be in (0, 1]");
    return BG_OK;
}

// Samples after prompt; the model's context bounds the prompt.
static int run_generation(bagualu *h, const int *prompt, int n_prompt, int max_new, int *out, int *n_out) {
    if (h->run_failed) return dead_run(h);
    if (check_sampling(h) != BG_OK) return BAGUALU_BAD_INPUT;
    const int V = h->cfg.vocab_size, ctx = h->cfg.max_position_embeddings;
    if (!prompt || n_prompt < 1) return bg_error("generate: the prompt needs at least one token"), BAGUALU_BAD_INPUT;
    if (n_prompt > ctx)
        return bg_error("generate: the prompt is %d tokens; the model's context holds %d", n_prompt, ctx),
               BAGUALU_BAD_INPUT;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return bg_error("generate: prompt token %d is %d, not an id below the vocabulary size %d", i,
                            prompt[i], V), BAGUALU_BAD_INPUT;
    if (max_new < 0) return bg_error("generate: max_new must be >= 0"), BAGUALU_BAD_INPUT;
    if (max_new > 0 && !out) return bg_error("generate: out is NULL"), BAGUALU_BAD_INPUT;
    model *m = api_model(h);
    gen_state g;
    gen_init(&g, m, ctx);
    gen_sampling s = {.temperature = h->temperature, .top_k = h->top_k, .top_p = h->top_p};
    int eot = h->tok ? (int)bpe_eot_token(h->tok) : -1;
    *n_out = max_new > 0 ? gen_generate(&g, prompt, n_prompt, max_new, &s, h->sample_seed, eot, out, NULL, NULL) : 0;
    gen_free(&g);
    return BAGUALU_OK;
}

static int generate(bagualu *h, void *args) {
    gen_args *a = args;
    if (!a->n_out) return bg_error("bagualu_generate: n_out is NULL"), BAGUALU_BAD_INPUT;
    return run_generation(h, a->prompt, a->n_prompt, a->max_new, a->out, a->n_out);
}

int bagualu_generate(bagualu *h, const int *prompt, int n_prompt, int max_new, int *out, int *n_out) {
    gen_args a = {prompt, n_prompt, max_new, out, n_out};
    return api_guard(h, generate, &a);
}

typedef struct {
    const char *prompt;
    int max_new;
    char *text;
    size_t cap, *len;
} text_args;

static int generate_text(bagualu *h, void *args) {
    text_args *a = args;
    if (!h->tokenizer_spec)
        return bg_error("bagualu_generate_text: set the \"tokenizer\" option (tok.json or a GPT-2 directory)"),
               BAGUALU_BAD_INPUT;
    if (!a->text || a->cap == 0) return bg_error("bagualu_generate_text: no room for the text"), BAGUALU_BAD_INPUT;
    if (!h->tok) {
        if (bpe_load(&h->tok, h->tokenizer_spec) != BG_OK) return BAGUALU_BAD_INPUT;
        if (bpe_vocab_size(h->tok) > h->cfg.vocab_size) {
            bg_error("generate: the tokenizer %s has %d tokens, more than the model's vocabulary of %d",
                     h->tokenizer_spec, bpe_vocab_size(h->tok), h->cfg.vocab_size);
            bpe_free(h->tok);
            h->tok = NULL;
            return BAGUALU_BAD_INPUT;
        }
    }
    int *ids, n_ids;
    if (gen_prompt_ids(h->tok, a->prompt, &ids, &n_ids) != BG_OK) return BAGUALU_OUT_OF_MEMORY;
    int max_new = a->max_new > 0 ? a->max_new : 0, made = 0;
    int *out = bg_malloc(sizeof(int) * (size_t)(max_new > 0 ? max_new : 1));
    int rc = run_generation(h, ids, n_ids, max_new, out, &made);
    size_t len = 0;
    int eot = (int)bpe_eot_token(h->tok);
    for (int i = 0; rc == BAGUALU_OK && i < made; i++) {
        if (out[i] == eot) continue;
        size_t n;
        const uint8_t *b = gen_token_text(h->tok, out[i], &n);
        if (len < a->cap - 1) memcpy(a->text + len, b, n < a->cap - 1 - len ? n : a->cap - 1 - len);
        len += n;
    }
    a->text[len < a->cap - 1 ? len : a->cap - 1] = '\0';
    if (a->len) *a->len = len;
    free(out);
    free(ids);
    return rc;
}

int bagualu_generate_text(bagualu *h, const char *prompt, int max_new, char *text, size_t cap, size_t *len) {
    text_args a = {prompt, max_new, text, cap, len};
    return api_guard(h, generate_text, &a);
}

int bagualu_metric(const bagualu *h, const char *name, double *value) {
    if (!h) return BAGUALU_UNUSABLE;
    if (!name || !value) return BAGUALU_BAD_INPUT;
    const train_run *r = h->run;
    const step_metrics *s = r && r->last.step > 0 ? &r->last : NULL;
    const struct {
        const char *name;
        double v;
    } table[] = {
        {"step", r ? (double)r->tr.step : (double)h->checkpoint_step},
        {"loss", s ? s->loss : NAN},
        {"aux_loss", s ? s->aux_loss : NAN},
        {"z_loss", s ? s->z_loss : NAN},
        {"lr", s ? s->lr : NAN},
        {"grad_norm", s ? s->grad_norm : NAN},
        {"tokens_per_s", s ? s->tokens_per_s : NAN},
        {"gflops", s ? s->gflops : NAN},
        {"step_seconds", s ? s->step_seconds : NAN},
        {"skipped", s ? (double)s->skipped : NAN},
        {"val_loss", h->val_loss},
        {"params", (double)model_param_count(&h->cfg)},
        {"vocab_size", (double)h->cfg.vocab_size},
        {"context", (double)h->cfg.max_position_embeddings},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(name, table[i].name)) {
            *value = table[i].v;
            return BAGUALU_OK;
        }
    return BAGUALU_BAD_INPUT;
}

static int save(bagualu *h, void *args) {
    (void)args;
    if (h->run_failed) return dead_run(h);
    if (!h->run) return bg_error("bagualu_save: nothing to save before bagualu_train"), BAGUALU_BAD_INPUT;
    return train_run_save(h->run) == BG_OK ? BAGUALU_OK : BAGUALU_FAILED;
}

int bagualu_save(bagualu *h) { return api_guard(h, save, NULL); }
