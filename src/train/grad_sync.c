#include "train/grad_sync.h"
#include "comm/dist.h"
#include "train/grad_norm.h"
#include "model/zero_shard.h"

#include <math.h>

void grad_sync_loss(model *m) {
    if (!m->par) return;
    const dist_layout *L = m->par->layout;
    double sum = m->loss_sum;
    dist_allreduce_sum_f64(L->world, &sum, 1);
    m->loss = sum / ((double)m->acts.N * L->world_size);
    m->objective = m->loss + m->router_objective;
}

void grad_sync_grads(model *m) {
    if (!m->par) return;
    const dist_layout *L = m->par->layout;
    size_t dense = m->table.dense_numel, experts = m->table.numel - dense;
    dist_allreduce_sum_f32(L->world, m->grads, dense);
    if (experts && L->edp_size > 1) dist_allreduce_sum_f32(L->edp_comm, m->grads + dense, experts);
}

void grad_sync_reduce_scatter(model *m) {
    if (!m->par) return;
    const dist_layout *L = m->par->layout;
    size_t dense = m->table.dense_numel, experts = m->table.numel - dense;
    // Segments of the whole ranges: the dense one over the world, the expert block over
    // the EDP group, exactly zero_shard's slices.
    dist_reduce_scatter_sum_f32(L->world, m->grads, dense);
    if (experts && L->edp_size > 1) dist_reduce_scatter_sum_f32(L->edp_comm, m->grads + dense, experts);
}

void grad_sync_gather_params(model *m) {
    if (!m->par) return;
    const dist_layout *L = m->par->layout;
    size_t dense = m->table.dense_numel, experts = m->table.numel - dense;
    dist_allgather_f32(L->world, m->params, dense);
    if (experts && L->edp_size > 1) dist_allgather_f32(L->edp_comm, m->params + dense, experts);
}

double grad_sync_norm(const model *m) {
    size_t dense = m->table.dense_numel, numel = m->table.numel;
    const dist_layout *L = m->par ? m->par->layout : NULL;
    // Each rank sums the squares of the slice it owns under ZeRO-1, whether or not the
    // optimizer is sharded: the slices cover every dense element once over the world
    // and every expert element once (EP groups x EDP ranks), so one world sum in rank
    // order gives the same bits with and without --zero.
    zero_shard z = L ? zero_shard_make(1, dense, numel, L->world_rank, L->world_size, L->edp_rank,
                                       L->edp_size)
                     : zero_shard_make(0, dense, numel, 0, 1, 0, 1);
    double sq[2] = {grad_sum_squares(m->grads + z.dense_lo, z.dense_hi - z.dense_lo),
                    grad_sum_squares(m->grads + z.expert_lo, z.expert_hi - z.expert_lo)};
    if (L) dist_allreduce_sum_f64(L->world, sq, 2);
    return sqrt(sq[0] + sq[1]);
}
