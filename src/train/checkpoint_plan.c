#include "train/checkpoint_plan.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ckpt_plan_model_file(char *out, size_t n, int rank, int world) {
    snprintf(out, n, "model-%05d-of-%05d.safetensors", rank + 1, world);
}
void ckpt_plan_optimizer_file(char *out, size_t n, int rank, int world) {
    snprintf(out, n, "optimizer-%05d-of-%05d.safetensors", rank + 1, world);
}

typedef struct {
    size_t numel;
    int index;
} by_size;

// Largest first; equal sizes in table order, so the deal is deterministic.
static int cmp_size_desc(const void *a, const void *b) {
    const by_size *x = a, *y = b;
    if (x->numel != y->numel) return x->numel < y->numel ? 1 : -1;
    return (x->index > y->index) - (x->index < y->index);
}

// The writer of every dense tensor (index into the table's dense prefix), dealt over P
// ranks after the expert bytes each already writes.
static void deal_dense(const param_table *t, int P, const size_t *expert_load, int *owner) {
    size_t *load = bg_calloc((size_t)P, sizeof *load);
    memcpy(load, expert_load, sizeof *load * (size_t)P);
    int nd = 0;
    while (nd < t->count && t->tensors[nd].expert < 0) nd++;
    for (int i = nd; i < t->count; i++) BG_ASSERT(t->tensors[i].expert >= 0);  // dense first
    by_size *order = bg_calloc((size_t)nd + 1, sizeof *order);
    for (int i = 0; i < nd; i++) order[i] = (by_size){t->tensors[i].numel, i};
    qsort(order, (size_t)nd, sizeof *order, cmp_size_desc);
    for (int k = 0; k < nd; k++) {
        int best = 0;
        for (int r = 1; r < P; r++)
            if (load[r] < load[best]) best = r;
        owner[order[k].index] = best;
        load[best] += order[k].numel;
    }
    free(order);
    free(load);
}

// The expert bytes rank r of P writes: the k-th expert tensor of an EP rank goes to
// replica k mod S, and every EP rank holds the same sizes, so one table tells all.
static size_t *expert_loads(const param_table *t, int P, int ep) {
    size_t *load = bg_calloc((size_t)P, sizeof *load);
    int S = P / ep;
    for (int i = 0, k = 0; i < t->count; i++) {
        if (t->tensors[i].expert < 0) continue;
        for (int q = 0; q < ep; q++) load[(k % S) * ep + q] += t->tensors[i].numel;
        k++;
    }
    return load;
}

int *ckpt_plan_deal(const model_config *cfg, int P, int ep) {
    if (ep < 1) ep = 1;
    int per = cfg->num_local_experts / ep;
    param_table t;
    param_table_build_local(&t, cfg, 0, per);
    size_t *load = expert_loads(&t, P, ep);
    int *owner = bg_calloc((size_t)t.count + 1, sizeof *owner);
    deal_dense(&t, P, load, owner);
    free(load);
    param_table_free(&t);
    return owner;
}

void ckpt_plan_make(ckpt_plan *p, const model_config *cfg, int P, int ep, int zero_on, int rank) {
    int *dealt = ckpt_plan_deal(cfg, P, ep);
    ckpt_plan_make_dealt(p, cfg, P, ep, zero_on, rank, dealt);
    free(dealt);
}

void ckpt_plan_make_dealt(ckpt_plan *p, const model_config *cfg, int P, int ep, int zero_on, int rank,
                          const int *dealt) {
    memset(p, 0, sizeof *p);
    if (ep < 1) ep = 1;
    BG_ASSERT(P >= 1 && P % ep == 0 && rank >= 0 && rank < P);
    p->rank = rank;
    p->world = P;
    int E = cfg->num_local_experts, per = E / ep, S = P / ep;
    int ep_rank = rank % ep, edp_rank = rank / ep;
    param_table_build_local(&p->table, cfg, ep_rank * per, per);
    const param_table *t = &p->table;
    p->zero = zero_shard_make(zero_on, t->dense_numel, t->numel, rank, P, edp_rank, S);
    // Expert tensors: the k-th of an EP rank goes to replica k mod S; dense ones as dealt.
    int *owner = bg_calloc((size_t)t->count + 1, sizeof *owner);
    for (int i = 0, k = 0; i < t->count; i++) {
        if (t->tensors[i].expert >= 0) owner[i] = (k++ % S) * ep + ep_rank;
        else owner[i] = dealt[i];
    }
    p->model = bg_calloc((size_t)t->count + 1, sizeof *p->model);
    for (int i = 0; i < t->count; i++)
        if (owner[i] == rank) p->model[p->n_model++] = i;
    free(owner);
    p->state = rank == 0;
    // Optimizer pieces: the owned slices cut at tensor boundaries (off: the model's).
    p->opt = bg_calloc((size_t)t->count * 2 + 1, sizeof *p->opt);
    if (!zero_on) {
        for (int k = 0; k < p->n_model; k++)
            p->opt[p->n_opt++] = (ckpt_piece){p->model[k], 0, t->tensors[p->model[k]].numel};
        return;
    }
    const size_t lo[2] = {p->zero.dense_lo, p->zero.expert_lo}, hi[2] = {p->zero.dense_hi, p->zero.expert_hi};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < t->count; i++) {
            size_t a = t->tensors[i].offset, b = a + t->tensors[i].numel;
            size_t x = a > lo[s] ? a : lo[s], y = b < hi[s] ? b : hi[s];
            if (x < y) p->opt[p->n_opt++] = (ckpt_piece){i, x - a, y - x};
        }
}

void ckpt_plan_free(ckpt_plan *p) {
    param_table_free(&p->table);
    free(p->model);
    free(p->opt);
    memset(p, 0, sizeof *p);
}

size_t ckpt_plan_floats(const ckpt_plan *p, size_t state_numel) {
    size_t n = p->state ? state_numel : 0;
    for (int k = 0; k < p->n_model; k++) n += p->table.tensors[p->model[k]].numel;
    for (int k = 0; k < p->n_opt; k++) n += 2 * p->opt[k].count;
    return n;
}

void ckpt_plan_piece_key(char *out, size_t n, const ckpt_plan *p, const ckpt_piece *c, int kind) {
    const param_tensor *t = &p->table.tensors[c->tensor];
    const char *suffix = kind ? "exp_avg_sq" : "exp_avg";
    if (c->offset == 0 && c->count == t->numel) snprintf(out, n, "%s.%s", t->name, suffix);
    else snprintf(out, n, "%s.%s.%zu", t->name, suffix, c->offset);
}
