#ifndef BG_TRAIN_GRAD_SYNC_H
#define BG_TRAIN_GRAD_SYNC_H
// What the ranks of a parallel layout combine after a pass over their slices of the
// global batch: the loss, the gradients and the gradient's norm. On one process
// (m->par NULL) each is a no-op or a local computation; the model itself talks to
// the communication layer only through the MoE dispatcher.
#include "model/model.h"

// After model_forward with targets: m->loss and m->objective over the global batch
// (the token-order sums of the ranks summed in rank order, so every layout that holds
// the same tokens per rank gives the same bits). Collective over the world.
void grad_sync_loss(model *m);
// Sums gradients across ranks: dense over every rank, experts over their replicas
// (nothing on one process). After it every rank holds the global batch's gradient.
void grad_sync_grads(model *m);
// Global L2 norm of the (reduced) gradient, the same on every rank: each rank's Σ g²
// over its ZeRO-1 slices (model/zero_shard.h, dense and expert), summed over the world
// in rank order. Reads only the owned slices, so it holds after a reduce-scatter too.
double grad_sync_norm(const model *m);
#endif
