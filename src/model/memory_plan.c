// The memory report (memory_plan.h): the run's allocations replayed on measuring arenas.
#include "model/memory_plan.h"

#include "core/arena.h"
#include "comm/dist.h"
#include "kernels/kernels.h"
#include "model/zero_shard.h"
#include "moe/capacity.h"

#include <math.h>
#include <string.h>

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

// Bytes the exchange adds to one layer's cache (cache = 1) or to the backward workspace
// over what the one-process dispatcher lays out: the same layout routines, measured.
static size_t exchange_arena_bytes(const moe_shape *s, int N, int cache) {
    const moe_dispatcher *d = s->par ? s->par->dispatcher : &moe_dispatcher_local;
    moe_dispatch_cache dc;
    moe_exchange_cache xc;
    moe_dispatch_scratch ds;
    moe_exchange_scratch xs;
    bg_arena with, without;
    bg_arena_init(&with, 0);
    bg_arena_init(&without, 0);
    moe_shape local = *s;
    local.par = NULL;
    if (cache) {
        d->layout(&dc, &xc, &with, s, N);
        moe_dispatcher_local.layout(&dc, &xc, &without, &local, N);
    } else {
        d->scratch_layout(&ds, &xs, &with, s, N);
        moe_dispatcher_local.scratch_layout(&ds, &xs, &without, &local, N);
    }
    return align64(with.used) - align64(without.used);
}

// The scratch the communicators keep after a step (comm/dist.h's size functions): the
// world reduces the dense gradients, the expert-data-parallel group (P/EP ranks) the
// experts' (all-reduce, or reduce-scatter under ZeRO-1), and a hierarchical or 2d
// exchange over the EP group packs rows through node leaders. The scalar statistics'
// all-reduces (a few doubles) share the reduction slot and stay below these.
static size_t comm_scratch_bytes(const model_config *c, const memory_plan_input *in, const moe_parallel *mp,
                                 int P, int EP, size_t numel, size_t dense, long expert_rows, int N) {
    if (P <= 1) return 0;
    const size_t bucket = DIST_BUCKET_BYTES_DEFAULT;
    size_t experts = numel - dense, n = 0;
    int edp = P / EP;
    // Overlapped with the backward, either mode receives in dist_grad_reduce's slots.
    n += in->grad_overlap ? dist_grad_reduce_scratch_bytes(P, dense, bucket)
         : in->zero      ? dist_reduce_scatter_scratch_bytes(P, dense, bucket)
                         : dist_allreduce_scratch_bytes(P, dense, sizeof(float), bucket);
    if (edp > 1)
        n += in->grad_overlap ? dist_grad_reduce_scratch_bytes(edp, experts, bucket)
             : in->zero      ? dist_reduce_scatter_scratch_bytes(edp, experts, bucket)
                             : dist_allreduce_scratch_bytes(edp, experts, sizeof(float), bucket);
    if (EP > 1 && c->num_local_experts > 0) {
        // EP groups are consecutive ranks: min(EP, R) of a group share a node.
        int R = in->ranks_per_node > 0 && in->ranks_per_node < P ? in->ranks_per_node : P;
        int m = EP < R ? EP : R, nodes = (EP + m - 1) / m;
        // A trip sends this rank's routed rows and receives at most the expert rows.
        size_t sent = (size_t)N * (size_t)c->num_experts_per_tok;
        size_t got = expert_rows > 0 ? (size_t)expert_rows : (size_t)mp->max_rows + (size_t)mp->max_rows / 8;
        size_t rows = sent > got ? sent : got;
        n += dist_a2a_scratch_bound((enum dist_a2a_algo)in->a2a_algo, m, nodes, rows,
                                    (size_t)c->hidden_size * sizeof(float));
    }
    return n;
}

void memory_plan(memory_report *r, const model_config *c, const memory_plan_input *in) {
    memset(r, 0, sizeof *r);
    const int P = in->world_size > 0 ? in->world_size : 1, EP = in->ep > 0 ? in->ep : 1;
    const int rank = in->world_rank, N = in->B * in->T, E = c->num_local_experts;
    // The layout of comm/dist.h: EP groups of consecutive ranks; the P/EP ranks with the
    // same rank % EP replicate one share of the experts.
    int ep_rank = rank % EP, el = E > 0 ? E / EP : 0;
    moe_parallel mp = {.ep_size = EP, .ep_rank = ep_rank,
                       .a2a_chunks = in->a2a_chunks > 0 ? in->a2a_chunks : 1};
    mp.dispatcher = moe_dispatcher_for(&mp);
    long share = (long)N * c->num_experts_per_tok;
    mp.max_rows = in->max_expert_rows > 0 ? in->max_expert_rows : 8 * share;
    const moe_parallel *par = P > 1 ? &mp : NULL;

    size_t numel, dense;
    param_table_numel_local(c, ep_rank * el, el, &numel, &dense);
    size_t state = 0;
    if (E > 0) {
        moe_shape s = model_moe_shape(c, NULL);
        state = s.router->state_size(&s) * (size_t)c->num_hidden_layers;
    }
    zero_shard z = zero_shard_make(in->zero, dense, numel, rank, P, rank / EP, P / EP);
    r->numel = numel;
    r->owned = zero_shard_numel(&z);
    r->params = numel * sizeof(float) + state;
    r->grads = numel * sizeof(float);
    r->optimizer = 2 * r->owned * sizeof(float);

    model_acts a;
    memset(&a, 0, sizeof a);  // layers NULL: measure only
    bg_arena measure;
    bg_arena_init(&measure, 0);
    model_acts_layout(&a, &measure, c, &in->opt, par, in->B, in->T);
    r->arena = measure.used;
    int moe_layers = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) moe_layers += model_layer_is_moe(c, l);
    if (moe_layers && par) {
        moe_shape s = model_layer_moe_shape(c, &in->opt, par, in->T);
        int caches = a.recompute ? 1 : moe_layers;
        r->moe_exchange = (size_t)caches * exchange_arena_bytes(&s, N, 1) +
                          exchange_arena_bytes(&s, N, 0);
        r->expert_rows = (long)moe_expert_rows_bound(&s, N);
        if (r->expert_rows == 0) {  // grown up to the limit, an eighth more (exchange.c)
            size_t peak = in->heap_rows_factor > 0 ? (size_t)ceil(in->heap_rows_factor * (double)share)
                                                   : (size_t)mp.max_rows;
            if (peak > (size_t)mp.max_rows) peak = (size_t)mp.max_rows;
            size_t rows = peak + peak / 8;
            size_t cap = moe_expert_rows_cap(&s, N);
            r->moe_exchange_heap = moe_grown_bytes(&s, rows < cap ? rows : cap, caches);
        }
    } else if (moe_layers) {
        moe_shape s = model_layer_moe_shape(c, &in->opt, NULL, in->T);
        r->expert_rows = (long)moe_expert_rows_bound(&s, N);
    }
    r->activations = r->arena - r->moe_exchange;
    // Mixed precision rounds each weight once per step into a copy kept by the kernels,
    // in the operand format of this process's bf16 path (bf16 bits, or floats).
    size_t rounded = in->dtype == BG_FP32
                         ? 0
                         : numel * operand_format_bytes(operand_format_of(in->dtype, bf16_path_default()));
    r->workspaces = rounded + (size_t)c->num_hidden_layers * sizeof(layer_acts) +
                    2 * (size_t)N * sizeof(int);
    r->snapshot = in->snapshot_bytes;
    r->comm_scratch = comm_scratch_bytes(c, in, &mp, P, EP, numel, dense, r->expert_rows, N);
    r->total = r->params + r->grads + r->optimizer + r->activations + r->moe_exchange +
               r->moe_exchange_heap + r->workspaces + r->snapshot + r->comm_scratch;
}
