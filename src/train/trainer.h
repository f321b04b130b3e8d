#ifndef BG_TRAIN_TRAINER_H
#define BG_TRAIN_TRAINER_H
// The step loop: batch → forward → backward → clip → AdamW, with metrics and eval.
#include "model/memory_plan.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/train_state.h"

// trainer_run's result, the process exit code: bad input (config, data, flags, a
// corrupt or mismatched checkpoint) is 2; a failure while running (a save that
// could not be written, divergence) is 1.
enum { TRAIN_OK = 0, TRAIN_FAILED = 1, TRAIN_BAD_INPUT = 2 };

void train_options_defaults(train_options *o);

// Loads config and data and initializes the model: BG_OK or BG_ERR with bg_error set.
int trainer_init(trainer *tr, const train_options *o);
// One optimizer step on the next batch; *loss = the batch's mean cross-entropy.
// = trainer_compute_grads + trainer_apply_grads. BG_ERR (bg_error set, the same on
// every rank) when the forward stopped: a dropless MoE layer needed more than
// --max-expert-rows rows on a rank; no update is applied then.
int trainer_step(trainer *tr, double *loss);
// Forward and backward on the next batch: m.grads holds the global batch's gradient
// (times the loss scale), *loss the batch's mean cross-entropy. BG_ERR as trainer_step.
int trainer_compute_grads(trainer *tr, double *loss);
// Clips and applies the gradients, and counts the step. Under fp16, gradients that
// overflowed (a non-finite norm) skip the update and halve the loss scale instead;
// returns 0 then, 1 when the step was applied.
int trainer_apply_grads(trainer *tr);
// *loss = mean cross-entropy over eval_batches batches of validation windows in file
// order (NAN without validation data). BG_ERR as trainer_step.
int trainer_evaluate(trainer *tr, double *loss);
void trainer_free(trainer *tr);
// This rank's memory report (model/memory_plan.h) for the run tr was set up for.
void trainer_memory_report(const trainer *tr, memory_report *r);
// Bytes of scratch this rank's communicators hold now (their high-water mark; 0 on
// one process): what the memory report's comm_scratch bounds.
size_t trainer_comm_scratch_held(const trainer *tr);
// Validates options and inputs, resumes if asked, trains, saves, reports.
// Returns TRAIN_OK, or TRAIN_BAD_INPUT / TRAIN_FAILED with bg_error set. In a
// parallel run every rank returns the same code; *report is 1 on the rank that
// should print the error (rank 0, or the rank that failed when rank 0 did not).
int trainer_run(const train_options *o, int *report);

// trainer_run in parts, for a caller that trains a few steps at a time (the library,
// src/api/): train_run_begin does everything before the first step (init, resume, the
// save directory, the log's first line, the memory report, the first evaluation);
// train_run_steps trains up to n more steps (never past o->steps, with the same
// metrics, evaluations and saves); train_run_end the rest (the last evaluation and
// note when o->steps was reached, the pending save) and frees everything.
// Codes as trainer_run. While r->open, the caller must end the run with
// train_run_end(r, the last code); begin and steps leave it closed (all freed) after a
// failure they cleaned up themselves, and begin when there is nothing to train.
typedef struct {
    trainer tr;
    int open;                   // a run in progress: train_run_end is due
    int stopped;                // a stop request ended the steps
    metrics_sink sink;
    routing_health health;
    ckpt_saver *saver;          // NULL without a save directory
    memory_report memory;
    double t_start, train_seconds, flops_per_step;
    long first_step;
    char *data_json;            // a blended run's per-dataset token counts, per line
    size_t data_json_cap;
    step_metrics last;          // the last step's metrics (step 0: none yet)
    double val_loss;            // the last evaluation's (NaN before any)
} train_run;
int train_run_begin(train_run *r, const train_options *o, int *report);
int train_run_steps(train_run *r, long n, int *report);
// A checkpoint of the current step in the run's save directory, now (waited for).
int train_run_save(train_run *r);
int train_run_end(train_run *r, int rc, int *report);
#endif
