#ifndef BG_TRAIN_EVALUATE_H
#define BG_TRAIN_EVALUATE_H
// A model's loss on token shards, as `bagualu eval` and the library's bagualu_evaluate
// compute it: the data loader's (T+1)-token windows in file order, B per batch, and
// the mean of the batches' mean losses (the trainer's own evaluation takes the same
// mean, so the numbers agree for the same B, T and batches).
#include "model/model.h"

// m: one process (no expert parallelism), prepared for (B, T) (model_prepare).
// *batches: how many (0: all the data holds); set to the number evaluated.
// BG_ERR for data that cannot be read or holds fewer windows than one batch.
int eval_shard_loss(model *m, const char *data, int B, int T, int *batches, double *loss);
#endif
