// Every gate under expert parallelism (EP = P), with capacity: one MoE layer on the
// same global batch and weights. Every rank also runs the one-process layer on the
// whole batch; the integer outcomes must match exactly: expert ids after the drops, the
// batch's drops, the rows each worker receives. That holds for topk, switch (with input
// jitter), gshard, noisy_topk and bias (sigmoid scores, a nonzero bias); the random
// draws of switch, gshard and noisy_topk are keyed by the global token, so a draw keyed
// any other way shows here. swipe balances per worker, so its one-process run stands in
// for the P workers (routing.virtual_workers = P). Then a skewed router (every token
// prefers expert 0): dropless grows rank 0's buffers past the balanced share and reports
// its high-water mark; with capacity (k = 1) every rank stays within its bound; and a
// dropless limit below the need stops the forward on every rank with the
// --max-expert-rows error.
#include "core/arena.h"
#include "core/error.h"
#include "dist_fixture.h"
#include "kernels/kernels.h"
#include "moe/capacity.h"
#include "moe/moe_layer.h"

#include <string.h>

enum { NG = 64, C = 8, E = 8, F = 4, G = 8 };

typedef struct {
    bg_arena ar;
    moe_acts acts;
    moe_scratch scr;
} layer;

static void layer_init(layer *l, const moe_shape *s, int N) {
    bg_arena m;
    bg_arena_init(&m, 0);
    moe_acts_layout(&l->acts, &m, s, N);
    moe_scratch_layout(&l->scr, &m, s, N);
    bg_arena_init(&l->ar, m.used);
    moe_acts_layout(&l->acts, &l->ar, s, N);
    moe_scratch_layout(&l->scr, &l->ar, s, N);
}

static void layer_free(layer *l) {
    moe_acts_free(&l->acts);
    moe_scratch_free(&l->scr);
    bg_arena_free(&l->ar);
}

// The layer's inputs and weights, the same on every rank; skewed: every token prefers
// expert 0. The gate holds noisy_topk's noise weights after the E gate rows.
static float gate[2 * E * C], w_in[E * F * C], w_out[E * C * F], inp[NG * C], out[NG * C],
    bias[E];

static void fill(int skew) {
    for (int i = 0; i < 2 * E * C; i++) gate[i] = comm_test_value(1, i, 0, 0);
    for (int i = 0; i < E * F * C; i++) w_in[i] = 0.3f * comm_test_value(2, i, 0, 0);
    for (int i = 0; i < E * C * F; i++) w_out[i] = 0.3f * comm_test_value(3, i, 0, 0);
    for (int i = 0; i < NG * C; i++) inp[i] = comm_test_value(4, i, 0, 0);
    for (int e = 0; e < E; e++) bias[e] = 0.05f * comm_test_value(5, e, 0, 0);
    if (skew) {
        gate[0] = 60.0f;
        for (int t = 0; t < NG; t++) inp[t * C] = 1.0f + 0.01f * t;
    }
}

int main(int argc, char **argv) {
    comm_test_args a = comm_test_start(&argc, &argv);
    dist_comm *world = dist_comm_world(a.ranks_per_node);
    const int P = dist_size(world), me = dist_rank(world), N = NG / P, El = E / P;
    kernel_ctx *kc = kernel_ctx_create(BG_FP32);
    moe_parallel par = {.ep_comm = world, .ep_size = P, .ep_rank = me, .a2a_chunks = 1};
    par.dispatcher = moe_dispatcher_for(&par);
    moe_params p_all = {gate, w_in, w_out, NULL, NULL};
    moe_params p_mine = {gate, w_in + (size_t)me * El * F * C, w_out + (size_t)me * El * C * F, NULL, NULL};
    moe_router_ctx rc1 = {.seed = 11, .step = 5, .layer = 3, .state = bias},
                   rcp = {.comm = world, .seed = 11, .step = 5, .layer = 3,
                          .first_token = (long)me * N, .state = bias};

    const moe_router *gates[] = {&moe_router_topk, &moe_router_switch, &moe_router_gshard,
                                 &moe_router_noisy_topk, &moe_router_bias, &moe_router_swipe};
    for (size_t g = 0; g < sizeof gates / sizeof *gates; g++)
        for (int skew = 0; skew < 2; skew++)
            for (int k = 1; k <= 2; k++)
                for (int pol = 0; pol < 2; pol++) {
                    const moe_router *gt = gates[g];
                    if ((gt == &moe_router_switch && k != 1) || (gt == &moe_router_gshard && k != 2))
                        continue;
                    fill(skew);
                    moe_shape s1 = {.C = C, .E = E, .k = k, .F = F, .act = FFN_GELU, .norm_topk_prob = 1,
                                    .router = gt,
                                    .routing = {.groups = 1, .topk_groups = 1, .capacity_factor = 1.0f,
                                                .drop_policy = (moe_drop_policy)pol, .group_tokens = G}};
                    if (gt == &moe_router_switch) s1.routing.jitter = 0.3f;
                    if (gt == &moe_router_bias) s1.routing.score = MOE_SCORE_SIGMOID;
                    moe_shape sp = s1;
                    sp.par = P > 1 ? &par : NULL;
                    if (gt == &moe_router_swipe) s1.routing.virtual_workers = P;
                    layer ref, mine;
                    layer_init(&ref, &s1, NG);
                    layer_init(&mine, &sp, N);
                    TU_CHECK(moe_forward(kc, out, &ref.acts, inp, &p_all, &rc1, &s1, NG) == BG_OK, "ref");
                    TU_CHECK(moe_forward(kc, out, &mine.acts, inp + (size_t)me * N * C, &p_mine, &rcp, &sp,
                                         N) == BG_OK, "parallel forward");
                    const int *ri = ref.acts.router.topk_idx + (size_t)me * N * k;
                    int bad = 0;
                    for (int i = 0; i < N * k; i++) bad += mine.acts.router.topk_idx[i] != ri[i];
                    TU_CHECK(!bad, "%s skew %d k %d policy %d: rank %d: %d ids after drops differ from P=1",
                             gt->name, skew, k, pol, me, bad);
                    TU_CHECK(mine.acts.router.dropped_global == ref.acts.router.dropped_global,
                             "%s skew %d k %d: drops %g vs %g", gt->name, skew, k,
                             mine.acts.router.dropped_global, ref.acts.router.dropped_global);
                    long want_rows = 0;
                    for (int e = me * El; e < (me + 1) * El; e++) want_rows += ref.acts.dispatch.counts[e];
                    long rows = P > 1 ? mine.acts.exchange.rows_local : mine.acts.dispatch.offsets[E];
                    TU_CHECK(rows == want_rows, "%s skew %d k %d: rows %ld, want %ld", gt->name, skew, k,
                             rows, want_rows);
                    size_t bound = moe_expert_rows_bound(&sp, N);
                    TU_CHECK(bound > 0 && (size_t)rows <= bound, "rows %ld over bound %zu", rows, bound);
                    if (skew && k == 1 && gt != &moe_router_swipe)
                        TU_CHECK(ref.acts.router.dropped_global > 0, "%s: skew dropped nothing", gt->name);
                    layer_free(&ref), layer_free(&mine);
                }

    fill(1);
    // Dropless, skewed, k = 1: rank 0 receives every token; its buffers grow to it.
    moe_shape sd = {.C = C, .E = E, .k = 1, .F = F, .act = FFN_GELU, .router = &moe_router_topk,
                    .routing = {.groups = 1, .topk_groups = 1}, .par = P > 1 ? &par : NULL};
    layer d;
    layer_init(&d, &sd, N);
    par.max_rows = 8L * N;
    TU_CHECK(moe_forward(kc, out, &d.acts, inp + (size_t)me * N * C, &p_mine, &rcp, &sd, N) == BG_OK,
             "dropless forward");
    long hwm = d.acts.experts.rows_hwm;
    TU_CHECK(hwm == (me == 0 ? NG : 0), "rank %d high-water mark %ld", me, hwm);
    if (P > 1 && me == 0)
        TU_CHECK(d.acts.experts.grown && d.acts.experts.rows_alloc >= (size_t)NG &&
                 d.acts.exchange.rows_alloc >= (size_t)NG, "rank 0 did not grow its buffers");
    if (P > 1) {  // a limit below the need: every rank stops, with the same message
        par.max_rows = NG - 1;
        int st = moe_forward(kc, out, &d.acts, inp + (size_t)me * N * C, &p_mine, &rcp, &sd, N);
        TU_CHECK(st == BG_ERR, "the limit did not stop rank %d", me);
        TU_CHECK(strstr(bg_last_error(), "--max-expert-rows 63") && strstr(bg_last_error(), "layer 3") &&
                 strstr(bg_last_error(), "capacity_factor") && strstr(bg_last_error(), "swipe"),
                 "message: %s", bg_last_error());
        if (me == 0) printf("%s\n", bg_last_error());
    }
    layer_free(&d);
    kernel_ctx_free(kc);
    int rc = comm_test_finish(world, "comm/test_capacity_layout");
    dist_comm_free(world);
    dist_finalize();
    return rc;
}
