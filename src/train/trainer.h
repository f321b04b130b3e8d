#ifndef BG_TRAIN_TRAINER_H
#define BG_TRAIN_TRAINER_H
// The step loop: batch → forward → backward → clip → AdamW, with metrics and eval.
#include <stdint.h>

#include "core/dtype.h"

typedef struct {
    const char *config_path;
    const char *data_path;
    const char *val_path;       // NULL: no evaluation
    const char *log_path;       // NULL: no JSON Lines log
    int batch_size, seq_len;
    long steps;
    float lr, min_lr;           // cosine decays from lr to min_lr
    long warmup;
    float weight_decay, beta1, beta2, eps, clip;
    uint64_t seed;
    int threads;
    long eval_every;            // 0: only at the start and the end (when val_path)
    int eval_batches;           // batches of validation windows per evaluation
    const char *save_dir;       // NULL: no checkpoints
    long save_every;            // 0: only at the end (and on SIGINT/SIGTERM)
    int keep_last;              // 0: keep every checkpoint
    const char *resume;         // NULL, a checkpoint directory, or "latest" (in save_dir)
    int fallback;               // resume latest: fall back to an older checkpoint if corrupt
    // Parallel layout (ignored on one process): expert-parallel degree (0 = the
    // largest valid), ranks per emulated node (0 = real nodes), all-to-all algorithm
    // and chunks.
    int expert_parallel;
    int ranks_per_node;
    int a2a_hierarchical;
    int a2a_chunks;
    // Mixed precision: the GEMMs' operand precision (fp32, bf16, fp16); master
    // weights, AdamW state and everything outside the GEMMs stay fp32.
    // fp16 scales the loss dynamically: starts at loss_scale_init, halves on every
    // step whose gradients overflow (the step is skipped), doubles after
    // loss_scale_window good steps in a row.
    bg_dtype dtype;
    float loss_scale_init;
    long loss_scale_window;
    // Set (by a signal handler) to ask for a checkpoint at the next step boundary
    // and a clean stop; NULL: never.
    volatile int *stop_requested;
} train_options;

// trainer_run's result, the process exit code: bad input (config, data, flags, a
// corrupt or mismatched checkpoint) is 2; a failure while running (a save that
// could not be written, divergence) is 1.
enum { TRAIN_OK = 0, TRAIN_FAILED = 1, TRAIN_BAD_INPUT = 2 };

void train_options_defaults(train_options *o);

// A training run in progress: what a checkpoint will capture.
#include "data/loader.h"
#include "data/shard.h"
#include "model/model.h"
#include "train/adamw.h"

typedef struct {
    train_options opt;
    model_config cfg;
    dist_layout layout;         // the ranks of this run (one, without MPI)
    int has_layout;
    model_parallel par;         // used when layout.world_size > 1
    int rank, world;            // this rank, and ranks sharing the global batch
    int report_error;           // after a failed init: this rank prints the error
    model m;
    adamw_state adam;
    adamw_hparams hp;
    token_shard train_shard, val_shard;
    data_loader train, val;
    int has_val;
    long step;                  // steps completed
    uint64_t samples;           // global samples consumed: the data loader's position
                                // (the global batch is batch_size x world)
    float min_lr;
    int *inputs, *targets;      // (B,T) batch buffers
    double last_grad_norm;      // of the true (unscaled) gradient; inf on a skipped step
    float last_lr;
    float loss_scale;           // 1 unless fp16
    long good_steps;            // fp16: steps since the scale last changed or a skip
    long skipped_steps;         // fp16: steps skipped for overflow in this process
    float skipped_at;           // the last step was skipped at this loss scale; 0: applied
} trainer;

// Loads config and data and initializes the model: BG_OK or BG_ERR with bg_error set.
int trainer_init(trainer *tr, const train_options *o);
// One optimizer step on the next batch; returns the batch's mean cross-entropy.
// = trainer_compute_grads + trainer_apply_grads.
double trainer_step(trainer *tr);
// Forward and backward on the next batch: m.grads holds the global batch's gradient
// (times the loss scale). Returns the batch's mean cross-entropy.
double trainer_compute_grads(trainer *tr);
// Clips and applies the gradients, and counts the step. Under fp16, gradients that
// overflowed (a non-finite norm) skip the update and halve the loss scale instead;
// returns 0 then, 1 when the step was applied.
int trainer_apply_grads(trainer *tr);
// The smallest loss scale: below 1 it would shrink gradients into fp16's underflow.
#define LOSS_SCALE_MIN 1.0f
// Mean cross-entropy over eval_batches batches of validation windows in file order.
double trainer_evaluate(trainer *tr);
void trainer_free(trainer *tr);
// Validates options and inputs, resumes if asked, trains, saves, reports.
// Returns TRAIN_OK, or TRAIN_BAD_INPUT / TRAIN_FAILED with bg_error set. In a
// parallel run every rank returns the same code; *report is 1 on the rank that
// should print the error (rank 0, or the rank that failed when rank 0 did not).
int trainer_run(const train_options *o, int *report);
#endif
