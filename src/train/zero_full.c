#include "train/zero_full.h"
#include "comm/dist.h"
#include "core/error.h"

#include <string.h>

// Owned slices between the sharded layout (packed) and the whole block (in place).
static void copy_owned(const zero_shard *z, float *whole, float *packed, int to_whole) {
    size_t nd = z->dense_hi - z->dense_lo, ne = z->expert_hi - z->expert_lo;
    float *w[2] = {whole + z->dense_lo, whole + z->expert_lo}, *p[2] = {packed, packed + nd};
    size_t n[2] = {nd, ne};
    for (int i = 0; i < 2; i++)
        if (n[i]) memcpy(to_whole ? w[i] : p[i], to_whole ? p[i] : w[i], n[i] * sizeof(float));
}

void zero_full_expand(trainer *tr, zero_full_keep *keep) {
    memset(keep, 0, sizeof *keep);
    if (!tr->zero.on) return;
    const dist_layout *L = &tr->layout;
    size_t numel = tr->m.table.numel, dense = tr->m.table.dense_numel;
    keep->m = tr->adam.m, keep->v = tr->adam.v, keep->numel = tr->adam.numel;
    float *whole[2];
    float *packed[2] = {keep->m, keep->v};
    for (int i = 0; i < 2; i++) {
        whole[i] = bg_aligned_alloc(numel * sizeof(float));
        memset(whole[i], 0, numel * sizeof(float));
        copy_owned(&tr->zero, whole[i], packed[i], 1);
        dist_allgather_f32(L->world, whole[i], dense);
        if (numel > dense && L->edp_size > 1) dist_allgather_f32(L->edp_comm, whole[i] + dense, numel - dense);
    }
    tr->adam.m = whole[0], tr->adam.v = whole[1], tr->adam.numel = numel;
}

void zero_full_shrink(trainer *tr, zero_full_keep *keep) {
    if (!tr->zero.on) return;
    copy_owned(&tr->zero, tr->adam.m, keep->m, 0);
    copy_owned(&tr->zero, tr->adam.v, keep->v, 0);
    free(tr->adam.m);
    free(tr->adam.v);
    tr->adam.m = keep->m, tr->adam.v = keep->v, tr->adam.numel = keep->numel;
    memset(keep, 0, sizeof *keep);
}
