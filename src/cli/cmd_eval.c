// bagualu eval --checkpoint DIR --data val.bin [--batch-size B --seq-len T --batches K]
//
// Mean cross-entropy and perplexity of a checkpoint on a token shard. The windows are
// the data loader's (T+1)-token windows in file order, B per batch, as the trainer's
// own evaluation reads them, and the mean is taken the same way (the mean of the
// batches' mean losses), so `eval` on a checkpoint prints the number `train --val`
// printed for it with the same B, T and K.
#include "core/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "train/checkpoint_weights.h"
#include "train/evaluate.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int cmd_eval(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL;
    int B = 0, T = 0, batches = 0, threads = 0;
    const arg_spec specs[] = {
        {"checkpoint", ARG_STR, &ckpt, 1, "checkpoint step directory, or a save directory (uses latest)"},
        {"data", ARG_STR, &data, 1, "token shards to evaluate on: a file (e.g. val.bin from bagualu prepare), glob, directory, comma list or @list"},
        {"batch-size", ARG_INT, &B, 0, "sequences per batch (default: the training run's)"},
        {"seq-len", ARG_INT, &T, 0, "tokens per sequence (default: the training run's)"},
        {"batches", ARG_INT, &batches, 0, "batches to evaluate, from the start of the file (default: all)"},
        {"threads", ARG_INT, &threads, 0, "OpenMP threads (default: all cores)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "eval",
                  "Print a checkpoint's loss and perplexity on a token shard."))
        return 0;
    if (args_parse(specs, n, argc, argv, "eval") != BG_OK) goto bad_input;
    if (B < 0 || T < 0 || batches < 0) {
        bg_error("eval: --batch-size, --seq-len and --batches must be positive");
        goto bad_input;
    }
    bg_threads_set(threads);

    model m;
    ckpt_weights_info info;
    if (ckpt_load_weights(&m, ckpt, &info) != BG_OK) goto bad_input;
    const int ctx = m.cfg.max_position_embeddings;
    // Defaults: the shape the model was trained (and validated) with.
    if (!B) B = info.batch_size > 0 ? info.batch_size : 8;
    if (!T) T = info.seq_len > 0 && info.seq_len <= ctx ? info.seq_len : (ctx < 64 ? ctx : 64);
    if (T > ctx) {
        bg_error("eval: --seq-len %d exceeds the model's context of %d tokens", T, ctx);
        goto bad_model;
    }
    if (model_check_routing_groups(&m.cfg, B, T) != BG_OK) goto bad_model;
    m.opt.no_grad = 1;  // loss only, also while the activations are laid out
    model_prepare(&m, B, T);
    double loss, t0 = bg_now();
    if (eval_shard_loss(&m, data, B, T, &batches, &loss) != BG_OK) goto bad_model;
    double dt = bg_now() - t0;
    printf("eval: %s, step %ld, on %s: %d batches of %d x %d tokens (%.0f tokens/s)\n", info.dir, info.step,
           data, batches, B, T, (double)batches * B * T / dt);
    printf("loss %.6f  perplexity %.3f\n", loss, exp(loss));
    model_free(&m);
    return 0;

bad_model:
    model_free(&m);
bad_input:
    fprintf(stderr, "bagualu: %s\n", bg_last_error());
    return 2;
}
