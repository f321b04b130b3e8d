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
// ZeRO-1's halves of grad_sync_grads. The reduce-scatter leaves the summed gradient
// (bitwise grad_sync_grads' values) only in this rank's slices of model/zero_shard.h
// (dense over the world, experts over the EDP group); the rest of m->grads holds this
// rank's own contribution. After the sharded AdamW update, grad_sync_gather_params
// copies every rank's updated slices to all ranks. Nothing on one process.
void grad_sync_reduce_scatter(model *m);
void grad_sync_gather_params(model *m);
// Global L2 norm of the (reduced) gradient, the same on every rank: each rank's Σ g²
// over its ZeRO-1 slices (model/zero_shard.h, dense and expert), summed over the world
// in rank order. Reads only the owned slices, so it holds after a reduce-scatter too.
double grad_sync_norm(const model *m);
#endif
