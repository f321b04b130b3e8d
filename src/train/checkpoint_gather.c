#include "train/checkpoint_gather.h"

#include <string.h>

#include "core/error.h"
#include "comm/dist.h"

void ckpt_full_free(ckpt_full_state *full) {
    param_table_free(&full->table);
    free(full->params), free(full->m), free(full->v);
    memset(full, 0, sizeof *full);
}

// Copies the tensors of `local` (a rank's table, its blocks at src) that exist in
// `full` into the full blocks; experts sit after the dense part in both.
static void place(ckpt_full_state *full, const param_table *local, const float *const src[3],
                  int experts_only, size_t src_base) {
    float *dst[3] = {full->params, full->m, full->v};
    for (int i = 0; i < local->count; i++) {
        const param_tensor *p = &local->tensors[i];
        if (experts_only && p->expert < 0) continue;
        const param_tensor *f = param_table_find(&full->table, p->name);
        BG_ASSERT(f && f->numel == p->numel);
        for (int b = 0; b < 3; b++)
            memcpy(dst[b] + f->offset, src[b] + (p->offset - src_base), p->numel * sizeof(float));
    }
}

void ckpt_gather_full(ckpt_full_state *full, const trainer *tr) {
    memset(full, 0, sizeof *full);
    const model *m = &tr->m;
    const dist_layout *L = m->par ? m->par->layout : NULL;
    int rank = L ? L->world_rank : 0;
    int ep = L ? L->ep : 1;
    // Only expert-parallel group 0 takes part; its members hold every expert once
    // (the other groups hold bitwise-equal replicas).
    if (L && L->ep_group != 0) return;
    size_t dense = m->table.dense_numel, mine = m->table.numel - dense;
    float *recv[3] = {NULL, NULL, NULL};
    if (ep > 1) {
        // One gather per block through the all-to-all-v: everyone sends its expert
        // rows to rank 0 of the group. Counts are in floats, so a rank's expert
        // share must stay under 2^31 floats (8 GiB), far above what a rank holds.
        BG_ASSERT(mine < (size_t)1 << 31);
        int *send_counts = bg_calloc((size_t)ep, sizeof(int)), *recv_counts = bg_calloc((size_t)ep, sizeof(int));
        send_counts[0] = (int)mine;
        if (rank == 0)
            for (int q = 0; q < ep; q++) recv_counts[q] = (int)mine;  // equal shares
        const float *blocks[3] = {m->params + dense, tr->adam.m + dense, tr->adam.v + dense};
        for (int b = 0; b < 3; b++) {
            recv[b] = rank == 0 ? bg_malloc(mine * ep * sizeof(float) + 1) : NULL;
            dist_alltoallv(L->ep_comm, DIST_A2A_FLAT, blocks[b], send_counts, recv[b], recv_counts, 1);
        }
        free(send_counts), free(recv_counts);
    }
    if (rank != 0) return;

    param_table_build(&full->table, &m->cfg);
    full->params = bg_aligned_alloc(full->table.numel * sizeof(float));
    full->m = bg_aligned_alloc(full->table.numel * sizeof(float));
    full->v = bg_aligned_alloc(full->table.numel * sizeof(float));
    const float *own[3] = {m->params, tr->adam.m, tr->adam.v};
    place(full, &m->table, own, 0, 0);  // dense tensors and rank 0's experts
    for (int q = 1; q < ep; q++) {
        param_table t;
        param_table_build_local(&t, &m->cfg, q * m->n_experts, m->n_experts);
        BG_ASSERT(t.numel - t.dense_numel == mine);
        const float *src[3] = {recv[0] + q * mine, recv[1] + q * mine, recv[2] + q * mine};
        place(full, &t, src, 1, t.dense_numel);
        param_table_free(&t);
    }
    for (int b = 0; b < 3; b++) free(recv[b]);
}
