#ifndef BG_TRAIN_CHECKPOINT_GATHER_H
#define BG_TRAIN_CHECKPOINT_GATHER_H
// Layout-free checkpoints: a rank of an expert-parallel run holds the dense tensors
// and its share of the experts. Saving gathers the experts of expert-parallel group 0
// (ranks 0..EP-1, which together hold every expert once) to rank 0, which then holds
// the one-process model, parameter for parameter, and writes it like a one-process
// run. Loading needs no gather: every rank reads its tensors by name from the full
// file, so a checkpoint saved at any layout loads at any other.
#include "model/params.h"
#include "train/train_state.h"

typedef struct {
    param_table table;          // the one-process table (all experts)
    float *params, *m, *v;      // blocks in that table's layout (rank 0 only)
} ckpt_full_state;

// Collective over the trainer's layout (every rank calls it). On rank 0 fills
// `full` with the whole model and optimizer state; on other ranks leaves it empty.
void ckpt_gather_full(ckpt_full_state *full, const trainer *tr);
void ckpt_full_free(ckpt_full_state *full);
#endif
