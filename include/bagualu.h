#ifndef BAGUALU_H
#define BAGUALU_H
/* bagualu as a library: train, evaluate and sample a Mixture-of-Experts language model
 * from a C program (or any language with a C foreign-function interface).
 *
 *   bagualu *h = bagualu_open_config("configs/tiny_moe.json");
 *   if (!h) { fprintf(stderr, "%s\n", bagualu_open_error()); return 1; }
 *   bagualu_set_option(h, "synthetic", "copy");   // or "data", "path/to/train.bin"
 *   bagualu_set_option(h, "steps", "20");
 *   if (bagualu_train(h, 20) != BAGUALU_OK) fprintf(stderr, "%s\n", bagualu_last_error(h));
 *   double loss; bagualu_metric(h, "loss", &loss);
 *   bagualu_close(h);
 *
 * The code is the `bagualu` command's own: training is `bagualu train` (the same steps,
 * bit for bit, the same JSON Lines log, checkpoints and run report), evaluation is
 * `bagualu eval`'s, generation `bagualu generate`'s.
 *
 * Errors. Every function that can fail returns a bagualu_status; BAGUALU_OK is 0 and
 * the others are the CLI's exit codes. The message (one line naming the problem) is
 * bagualu_last_error(h); a failed open returns NULL and its message is
 * bagualu_open_error(). The library never ends its host process: bad input, an
 * unreadable file, running out of memory, a failed collective are returned errors.
 * Running out of memory inside a call (a workspace the library sizes itself) leaves
 * that call by a jump back to its entry: the call returns BAGUALU_OUT_OF_MEMORY and the
 * handle becomes unusable (BAGUALU_UNUSABLE from every later call but
 * bagualu_last_error, bagualu_metric and bagualu_close); what the interrupted call had
 * allocated is not freed (it may leak), and bagualu_close then frees only the handle's
 * own bookkeeping. Other handles are unaffected. A failed training run (a forward that
 * stopped, --max-skips reached, a save that could not be written) ends the run: its
 * pending checkpoint is committed and the model freed, and later train, evaluate,
 * generate and save calls return BAGUALU_FAILED naming that error.
 * Internal invariants (BG_ASSERT: a bug, not an input) still abort().
 *
 * Processes. The library trains in one process (threads: the "threads" option; the
 * thread count is process-wide). A process that a launcher started as a rank of a job
 * (mpirun, srun) is refused at open: multi-rank training needs every rank to take the
 * same collective path and a failed rank ends the job (MPI_Abort, the --comm-timeout
 * watchdog), so it is `mpirun bagualu train`'s. For the same reason "comm-timeout" is
 * refused. Handles are independent but not thread-safe: one thread at a time per
 * handle, and one training run at a time per process (the thread count and the
 * out-of-memory handler are process-wide).
 */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BAGUALU_API __attribute__((visibility("default")))
#else
#define BAGUALU_API
#endif

#define BAGUALU_VERSION_MAJOR 0
#define BAGUALU_VERSION_MINOR 1
#define BAGUALU_VERSION_PATCH 0

typedef enum {
    BAGUALU_OK = 0,
    BAGUALU_FAILED = 1,         /* a failure while running (a save, divergence, a dead run) */
    BAGUALU_BAD_INPUT = 2,      /* a bad option, config, file or argument */
    BAGUALU_OUT_OF_MEMORY = 3,  /* the handle is unusable afterwards (see above) */
    BAGUALU_UNUSABLE = 4        /* a NULL handle, or one that ran out of memory before */
} bagualu_status;

typedef struct bagualu bagualu;

/* "0.1.0": the library's version (the header's is BAGUALU_VERSION_*). */
BAGUALU_API const char *bagualu_version(void);

/* A model from its config: a path to a JSON file, or the JSON text itself (a string
 * whose first non-blank character is '{'). The config is read and checked now. The
 * model's weights are initialised (from the "seed" option) when first needed. NULL on
 * failure: bagualu_open_error() says why. */
BAGUALU_API bagualu *bagualu_open_config(const char *config);
/* A model from a checkpoint: a step directory, or a save directory (its `latest`), as
 * `bagualu eval --checkpoint`. Its weights are loaded and checked now; training
 * resumes from it (optimizer state and data position), with "batch-size" and "seq-len"
 * defaulting to the run's. */
BAGUALU_API bagualu *bagualu_open_checkpoint(const char *path);
/* The message of this thread's last failed open ("" if none). */
BAGUALU_API const char *bagualu_open_error(void);
/* The message of h's last failed call ("" if none; for NULL, bagualu_open_error()). */
BAGUALU_API const char *bagualu_last_error(const bagualu *h);

/* One option, by the name of `bagualu train`'s flag without "--" and its value as
 * text, checked as the CLI checks it: "steps", "batch-size", "seq-len", "lr",
 * "min-lr", "warmup", "dtype" (fp32|bf16|fp16), "data" (token shards), "val", "seed",
 * "threads", "save-dir", "save-every", "keep-last", "log", "recompute", ... (every
 * flag of `bagualu train --help` but "config" and "comm-timeout"; a switch takes "0"
 * or "1"). Training options are fixed by the first bagualu_train. And the library's own:
 *   "synthetic"    copy | count: train on a synthetic token stream (data/synthetic.h,
 *                  100000 tokens written to a temporary file, removed at close) instead
 *                  of "data"
 *   "quiet"        1 (default): no progress lines on stdout; 0: the CLI's lines
 *   "tokenizer"    tok.json, or a directory with GPT-2's encoder.json + vocab.bpe:
 *                  for bagualu_generate_text (the library never downloads one)
 *   "temperature", "top-k", "top-p", "sample-seed": generation's sampling (defaults
 *                  0.8, 0, 0.95, 1337, as `bagualu generate`); these may change at
 *                  any time. */
BAGUALU_API int bagualu_set_option(bagualu *h, const char *name, const char *value);

/* Trains the next `steps` steps, never past the "steps" option (the LR schedule's
 * length; at its last step the run saves, when "save-dir" is set, and evaluates, when
 * "val" is). The first call sets the run up (data, optimizer, resume, log) and fixes
 * the options. BAGUALU_BAD_INPUT when the run already reached "steps". */
BAGUALU_API int bagualu_train(bagualu *h, long steps);
/* *loss = the model's mean cross-entropy on token shards `data` (NULL: the "val"
 * option's data, else the training data), `batches` batches of "batch-size" windows
 * of "seq-len" tokens from the start (0: all), as `bagualu eval`. */
BAGUALU_API int bagualu_evaluate(bagualu *h, const char *data, int batches, double *loss);
/* Feeds prompt[0..n_prompt) (n_prompt >= 1, ids below the vocabulary size) and samples
 * up to max_new tokens into out (room for max_new); *n_out = how many. Stops early at
 * the tokenizer's end-of-text token (written and counted) or when the context is full. */
BAGUALU_API int bagualu_generate(bagualu *h, const int *prompt, int n_prompt, int max_new,
                                 int *out, int *n_out);
/* The same from text with the "tokenizer" option: the prompt is encoded after an
 * end-of-text token (a new document), and the continuation's text (without the prompt
 * and the end-of-text token) is written to text, at most cap - 1 bytes and a NUL;
 * *len (may be NULL) = its full length in bytes (> cap - 1: it was cut). */
BAGUALU_API int bagualu_generate_text(bagualu *h, const char *prompt, int max_new, char *text,
                                      size_t cap, size_t *len);

/* A number about the model or the last trained step, by name: "step" (steps done),
 * "loss", "aux_loss", "z_loss", "lr", "grad_norm", "tokens_per_s", "gflops",
 * "step_seconds", "skipped" (1: the last step was skipped), "val_loss" (the last
 * evaluation: the run's or bagualu_evaluate's), "params" (parameter count),
 * "vocab_size", "context" (max_position_embeddings). The step's metrics are NaN
 * before the first step. BAGUALU_BAD_INPUT for an unknown name. */
BAGUALU_API int bagualu_metric(const bagualu *h, const char *name, double *value);

/* A checkpoint of the current step in "save-dir" (step_NNNNNNNN/ and latest), now;
 * needs a training run (after a bagualu_train). */
BAGUALU_API int bagualu_save(bagualu *h);
/* Ends the run (the last evaluation and note when "steps" was reached; a pending
 * asynchronous save is committed) and frees everything. NULL is allowed. */
BAGUALU_API void bagualu_close(bagualu *h);

#ifdef __cplusplus
}
#endif
#endif
