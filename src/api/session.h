#ifndef BG_API_SESSION_H
#define BG_API_SESSION_H
// The handle behind include/bagualu.h: the train flags (the CLI's table), the model
// to evaluate and sample before a run exists, the run, and the last error.
#include "bagualu.h"
#include "data/bpe.h"
#include "model/model.h"
#include "train/train_flags.h"
#include "train/trainer.h"

struct bagualu {
    train_flags flags;          // every training option; flags.o is the run's
    arg_spec extra[8];          // the library's own options (session.c)
    int n_extra;
    char **strings;             // copies of option values and paths, freed at close
    int n_strings;
    model_config cfg;           // checked at open
    char *checkpoint;           // opened from a checkpoint: its step directory
    long checkpoint_step;       // and its step
    model *model;               // for evaluate/generate while no run exists (lazy)
    int model_B, model_T;       // the shape model was prepared for (0: not yet)
    train_run *run;             // from the first bagualu_train until close
    int run_failed;             // the run ended with an error (error holds it)
    const char *synthetic;      // "copy" or "count": a temporary shard instead of data
    char synth_dir[4096];       // its directory ("" when none)
    int quiet;
    const char *tokenizer_spec;
    bpe_tokenizer *tok;
    float temperature, top_p;
    int top_k;
    uint64_t sample_seed;
    double val_loss;            // the last evaluation (NaN before any)
    int unusable;               // ran out of memory in a call: only close is safe
    char error[1024];
};

// Runs fn(h, args) as one API call: h's error cleared, then set from bg_last_error()
// when fn fails. Running out of memory in a never-failing allocator, or dist_abort, on
// the calling thread jumps back here: BAGUALU_OUT_OF_MEMORY / BAGUALU_FAILED and h is
// marked unusable (the jump skipped every cleanup between). A NULL or unusable h:
// BAGUALU_UNUSABLE without calling fn.
int api_guard(bagualu *h, int (*fn)(bagualu *h, void *args), void *args);
// A copy of s owned by h (freed at close).
const char *api_keep(bagualu *h, const char *s);
// Records bg_last_error() as h's error and returns status.
int api_fail(bagualu *h, int status);
// The model to evaluate or sample: the run's, the checkpoint's, or one initialised
// from the config and "seed" now.
model *api_model(bagualu *h);
// Starts the run (bagualu_train's first call).
int api_run_begin(bagualu *h);
#endif
