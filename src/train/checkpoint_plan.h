#ifndef BG_TRAIN_CHECKPOINT_PLAN_H
#define BG_TRAIN_CHECKPOINT_PLAN_H
// Who writes what in a checkpoint of format 2 (train/checkpoint.h): computed from the
// config and the layout alone, so every rank knows every other rank's part without a
// message (rank 0 writes the indexes from it) and the memory report can size the
// snapshot of an asynchronous save without allocating it.
//
// Model tensors: each expert tensor is written by ONE of the P/EP replicas that hold
// it (the k-th expert tensor of an EP rank by replica k mod P/EP); the dense tensors
// are then dealt, largest first, to the rank with the fewest bytes so far (ties: the
// lower rank); rank 0 adds the gates' state. Optimizer pieces: with ZeRO on, the
// rank's owned slices (model/zero_shard.h) cut at tensor boundaries; off, m and v of
// the tensors it writes in its model file.
#include <stddef.h>

#include "model/config.h"
#include "model/params.h"
#include "model/zero_shard.h"

typedef struct {
    int tensor;            // index into the plan's table
    size_t offset, count;  // elements within the tensor
} ckpt_piece;

typedef struct {
    int rank, world;
    param_table table;     // the rank's own table (dense tensors, then its experts)
    zero_shard zero;       // its optimizer slices (m, v hold exactly these elements)
    int n_model;
    int *model;            // indices into table of the whole tensors it writes, in order
    int n_opt;
    ckpt_piece *opt;       // its optimizer pieces, in block order
    int state;             // 1: it writes the gates' state (rank 0)
} ckpt_plan;

// The plan of `rank` in a world of P ranks with expert-parallel degree ep (1 for a
// dense model), ZeRO on or off. Allocates; ckpt_plan_free.
void ckpt_plan_make(ckpt_plan *p, const model_config *cfg, int P, int ep, int zero_on, int rank);
void ckpt_plan_free(ckpt_plan *p);
// The writer of every dense tensor (by index into the table's dense prefix, the same on
// every rank): computed once when many ranks' plans are made (rank 0's index), then
// given to ckpt_plan_make_dealt. malloc'd.
int *ckpt_plan_deal(const model_config *cfg, int P, int ep);
void ckpt_plan_make_dealt(ckpt_plan *p, const model_config *cfg, int P, int ep, int zero_on, int rank,
                          const int *dealt);
// Floats of the rank's part: its model tensors, the gates' state when it writes them
// (state_numel floats), and m and v of its pieces: an asynchronous save's snapshot.
size_t ckpt_plan_floats(const ckpt_plan *p, size_t state_numel);
// Element offset into m/v (zero layout) of a piece.
static inline size_t ckpt_piece_mv_index(const ckpt_plan *p, const ckpt_piece *c) {
    return zero_shard_index(&p->zero, p->table.tensors[c->tensor].offset + c->offset);
}
// A piece's key in the optimizer file: "<name>.exp_avg" (kind 0, m) or
// "<name>.exp_avg_sq" (kind 1, v) for a whole tensor (stored in its shape), with
// ".<offset>" appended for a part of one (stored 1-D).
void ckpt_plan_piece_key(char *out, size_t n, const ckpt_plan *p, const ckpt_piece *c, int kind);
// Files of rank r (1-based, Hugging Face's sharded names), into out (>= 64 bytes).
void ckpt_plan_model_file(char *out, size_t n, int rank, int world);
void ckpt_plan_optimizer_file(char *out, size_t n, int rank, int world);
#endif
