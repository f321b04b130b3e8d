// The handle's life: open (from a config or a checkpoint), options, errors, close, and
// the guard every call runs under, which turns the library's never-returning failure
// paths (out of memory in a workspace, a job abort) into a returned error.
#include "api/session.h"
#include "comm/dist.h"
#include "core/error.h"
#include "train/checkpoint_weights.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local jmp_buf *g_jump;  // the running call's entry, NULL outside calls
static _Thread_local int g_jump_status;
static _Thread_local char g_open_error[1024];

// Outside a call (or on another thread, e.g. an OpenMP worker) the handler returns and
// the allocator aborts as it would without one: there is no entry to go back to.
static void on_out_of_memory(size_t bytes) {
    if (!g_jump) return;
    bg_error_out_of_memory("out of memory allocating %zu bytes", bytes);
    g_jump_status = BAGUALU_OUT_OF_MEMORY;
    longjmp(*g_jump, 1);
}

static void on_abort(int code) {
    if (!g_jump) return;
    bg_error("a collective operation failed (a job would have ended with code %d)", code);
    g_jump_status = BAGUALU_FAILED;
    longjmp(*g_jump, 1);
}

static void install_handlers(void) {
    bg_set_out_of_memory_handler(on_out_of_memory);
    dist_set_abort_handler(on_abort);
}

int api_fail(bagualu *h, int status) {
    snprintf(h->error, sizeof h->error, "%s", bg_last_error());
    return status;
}

int api_guard(bagualu *h, int (*fn)(bagualu *h, void *args), void *args) {
    if (!h) {
        snprintf(g_open_error, sizeof g_open_error, "bagualu: a NULL handle");
        return BAGUALU_UNUSABLE;
    }
    if (h->unusable) return BAGUALU_UNUSABLE;  // the error that made it so stays
    jmp_buf entry;
    jmp_buf *outer = g_jump;
    if (setjmp(entry)) {
        g_jump = outer;
        h->unusable = 1;
        return api_fail(h, g_jump_status);
    }
    g_jump = &entry;
    bg_clear_error();
    h->error[0] = '\0';
    int rc = fn(h, args);
    g_jump = outer;
    if (rc != BAGUALU_OK && !h->error[0]) api_fail(h, rc);
    return rc;
}

const char *api_keep(bagualu *h, const char *s) {
    char *copy = bg_malloc(strlen(s) + 1);
    strcpy(copy, s);
    h->strings = bg_realloc(h->strings, sizeof(char *) * (size_t)(h->n_strings + 1));
    h->strings[h->n_strings++] = copy;
    return copy;
}

const char *bagualu_version(void) {
#define BG_STR2(x) #x
#define BG_STR(x) BG_STR2(x)
    return BG_STR(BAGUALU_VERSION_MAJOR) "." BG_STR(BAGUALU_VERSION_MINOR) "." BG_STR(BAGUALU_VERSION_PATCH);
}

const char *bagualu_open_error(void) { return g_open_error; }

const char *bagualu_last_error(const bagualu *h) { return h ? h->error : g_open_error; }

static bagualu *session_new(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_handlers);
    bagualu *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    train_flags_init(&h->flags);
    h->quiet = 1;
    h->temperature = 0.8f;  // bagualu generate's defaults
    h->top_p = 0.95f;
    h->sample_seed = 1337;
    h->val_loss = NAN;
    const arg_spec extra[] = {
        {"synthetic", ARG_STR, &h->synthetic, 0, "copy or count"},
        {"quiet", ARG_SWITCH, &h->quiet, 0, "no progress lines"},
        {"tokenizer", ARG_STR, &h->tokenizer_spec, 0, "tok.json or a GPT-2 directory"},
        {"temperature", ARG_FLOAT, &h->temperature, 0, "sampling temperature"},
        {"top-k", ARG_INT, &h->top_k, 0, "sampling top-k"},
        {"top-p", ARG_FLOAT, &h->top_p, 0, "sampling top-p"},
        {"sample-seed", ARG_U64, &h->sample_seed, 0, "sampling seed"},
    };
    h->n_extra = (int)(sizeof extra / sizeof extra[0]);
    memcpy(h->extra, extra, sizeof extra);
    return h;
}

static void session_free(bagualu *h);

// Opens under the guard; a failure moves the message to the thread's open error.
static bagualu *session_open(int (*fn)(bagualu *h, void *args), const char *arg) {
    bagualu *h = session_new();
    if (!h) {
        snprintf(g_open_error, sizeof g_open_error, "bagualu: out of memory opening a handle");
        return NULL;
    }
    g_open_error[0] = '\0';
    int rc = api_guard(h, fn, (void *)arg);
    if (rc == BAGUALU_OK) return h;
    snprintf(g_open_error, sizeof g_open_error, "%s", h->error);
    if (!h->unusable) session_free(h);
    else free(h);  // an interrupted open: its allocations are not safe to free
    return NULL;
}

// A launcher's rank is refused (include/bagualu.h says why).
static int check_one_process(void) {
    if (dist_launched())
        return bg_error("bagualu library: this process is a rank of a launched job (mpirun, srun); the "
                        "library trains in one process: run `mpirun bagualu train` for several ranks");
    return BG_OK;
}

static int open_config(bagualu *h, void *args) {
    const char *config = args;
    if (!config) return bg_error("bagualu_open_config: no config given"), BAGUALU_BAD_INPUT;
    if (check_one_process() != BG_OK) return BAGUALU_BAD_INPUT;
    const char *p = config;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    train_options *o = &h->flags.o;
    if (*p == '{') {
        if (model_config_parse(&h->cfg, config, "config") != BG_OK) return BAGUALU_BAD_INPUT;
        o->config_json = api_keep(h, config);
    } else {
        if (model_config_load(&h->cfg, config) != BG_OK) return BAGUALU_BAD_INPUT;
        o->config_path = api_keep(h, config);
    }
    return BAGUALU_OK;
}

static int open_checkpoint(bagualu *h, void *args) {
    const char *path = args;
    if (!path) return bg_error("bagualu_open_checkpoint: no path given"), BAGUALU_BAD_INPUT;
    if (check_one_process() != BG_OK) return BAGUALU_BAD_INPUT;
    model *m = bg_calloc(1, sizeof *m);
    ckpt_weights_info info;
    if (ckpt_load_weights(m, path, &info) != BG_OK) {
        free(m);
        return BAGUALU_BAD_INPUT;
    }
    h->model = m;
    h->cfg = m->cfg;
    train_options *o = &h->flags.o;
    char *json = model_config_to_json(&m->cfg);
    if (!json) return bg_error_out_of_memory("out of memory writing the config"), BAGUALU_OUT_OF_MEMORY;
    o->config_json = api_keep(h, json);
    free(json);
    h->checkpoint = (char *)api_keep(h, info.dir);
    h->checkpoint_step = info.step;
    o->resume = h->checkpoint;
    if (info.batch_size > 0) o->batch_size = info.batch_size;
    if (info.seq_len > 0 && info.seq_len <= m->cfg.max_position_embeddings) o->seq_len = info.seq_len;
    return BAGUALU_OK;
}

bagualu *bagualu_open_config(const char *config) { return session_open(open_config, config); }

bagualu *bagualu_open_checkpoint(const char *path) { return session_open(open_checkpoint, path); }

typedef struct {
    const char *name, *value;
} option_args;

static int set_option(bagualu *h, void *args) {
    const option_args *a = args;
    if (!a->name || !a->value) return bg_error("bagualu_set_option: NULL name or value"), BAGUALU_BAD_INPUT;
    for (int i = 0; i < h->n_extra; i++) {
        if (strcmp(a->name, h->extra[i].name) != 0) continue;
        int training = !strcmp(a->name, "synthetic") || !strcmp(a->name, "quiet");
        if (training && h->run)
            return bg_error("%s: training options are fixed once training started", a->name), BAGUALU_BAD_INPUT;
        if (!strcmp(a->name, "tokenizer")) {  // loaded again on next use
            bpe_free(h->tok);
            h->tok = NULL;
        }
        return args_set(h->extra, h->n_extra, a->name, api_keep(h, a->value), "bagualu_set_option") == BG_OK
                   ? BAGUALU_OK : BAGUALU_BAD_INPUT;
    }
    if (!strcmp(a->name, "config"))
        return bg_error("config: give it to bagualu_open_config"), BAGUALU_BAD_INPUT;
    if (!strcmp(a->name, "comm-timeout"))
        return bg_error("comm-timeout: the library trains in one process (no collectives to watch)"),
               BAGUALU_BAD_INPUT;
    if (h->run) return bg_error("%s: training options are fixed once training started", a->name), BAGUALU_BAD_INPUT;
    if (args_set(h->flags.specs, h->flags.count, a->name, api_keep(h, a->value), "bagualu_set_option") != BG_OK)
        return BAGUALU_BAD_INPUT;
    return BAGUALU_OK;
}

int bagualu_set_option(bagualu *h, const char *name, const char *value) {
    option_args a = {name, value};
    return api_guard(h, set_option, &a);
}

static void session_free(bagualu *h) {
    if (h->run) {
        if (h->run->open) {
            int report;
            train_run_end(h->run, TRAIN_OK, &report);
        }
        free(h->run);
    }
    if (h->model) {
        model_free(h->model);
        free(h->model);
    }
    bpe_free(h->tok);
    if (h->synth_dir[0]) {
        char path[4200];
        snprintf(path, sizeof path, "%s/train.bin", h->synth_dir);
        unlink(path);
        rmdir(h->synth_dir);
    }
    for (int i = 0; i < h->n_strings; i++) free(h->strings[i]);
    free(h->strings);
    free(h);
}

// An unusable handle's state may be half-built by the interrupted call: only the
// handle itself is freed (include/bagualu.h).
void bagualu_close(bagualu *h) {
    if (!h) return;
    if (h->unusable) {
        free(h);
        return;
    }
    jmp_buf entry;
    jmp_buf *outer = g_jump;
    if (setjmp(entry)) {  // out of memory while closing: what is left leaks
        g_jump = outer;
        free(h);
        return;
    }
    g_jump = &entry;
    session_free(h);
    g_jump = outer;
}
