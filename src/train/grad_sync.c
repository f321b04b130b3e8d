#include "train/grad_sync.h"
#include "comm/dist.h"
#include "train/grad_norm.h"

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

double grad_sync_norm(const model *m) {
    size_t dense = m->table.dense_numel, experts = m->table.numel - dense;
    double d = grad_global_norm(m->grads, dense), e = grad_global_norm(m->grads + dense, experts);
    double sq[2] = {d * d, e * e};
    // Each expert lives on one rank of an expert-parallel group: the group's sum of
    // expert norms covers all of them once; dense gradients are equal everywhere.
    if (m->par && m->par->layout->ep > 1) dist_allreduce_sum_f64(m->par->layout->ep_comm, &sq[1], 1);
    return sqrt(sq[0] + sq[1]);
}
