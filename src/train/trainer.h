#ifndef BG_TRAIN_TRAINER_H
#define BG_TRAIN_TRAINER_H
// The step loop: batch → forward → backward → clip → AdamW, with metrics and eval.
#include "model/memory_plan.h"
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
#endif
