// Capacity and drops (moe/capacity.h) and the dispatch of dropped slots:
// 1. a hand-computed case, both policies, including an exact tie and a gate's own -1;
// 2. random cases: no expert over its capacity in any group, drops counted exactly,
//    each policy's rule, the same result twice;
// 3. the receive-buffer bounds: capacity independent of EP, balanced N·k, dropless 0;
// 4. the MoE layer with a capacity: dropped slots add nothing, kept ones what the
//    dropless layer adds, dropped_global the count, and the backward runs.
#include "core/arena.h"
#include "kernels/kernels.h"
#include "moe/capacity.h"
#include "moe/dispatch.h"
#include "moe/moe_layer.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static moe_shape shape(int E, int k, float cf, moe_drop_policy pol, int G) {
    return (moe_shape){.C = 8, .E = E, .k = k, .F = 4, .act = FFN_GELU,
                       .router = &moe_router_topk,
                       .routing = {.groups = 1, .topk_groups = 1, .capacity_factor = cf,
                                   .drop_policy = pol, .group_tokens = G}};
}

// E = 3, k = 2, groups of G = 4, cf 0.75: capacity ceil(0.75·4·2/3) = 2.
static void check_hand_case(void) {
    const int idx0[16] = {0, 1, 0, 2, 1, 0, 0, 1,    // group 0: t0..t3
                          2, 0, 2, 1, 2, 0, -1, 2};  // group 1: t4..t7 (t7's slot 0 the gate's -1)
    const float w0[16] = {.6f, .3f, .5f, .4f, .7f, .2f, .9f, .05f,
                          .5f, .1f, .5f, .1f, .5f, .1f, 0.f, .8f};
    // position: slot 0 in token order, then slot 1. Group 0: t3's 0 (expert 0 full), then
    // t2's 0 and t3's 1 (experts 0, 1 full). Group 1: t6's 2, t7's 2.
    const int want_pos[16] = {0, 1, 0, 2, 1, -1, -1, -1, 2, 0, 2, 1, -1, 0, -1, -1};
    // probability: expert 0 keeps .9 (t3), .6 (t0); expert 1 keeps .7 (t2), .3 (t0);
    // group 1: expert 2 keeps .8 (t7) and, of the tied .5s, the lower token t4.
    const int want_prob[16] = {0, 1, -1, 2, 1, -1, 0, -1, 2, 0, -1, 1, -1, 0, -1, 2};
    for (int pol = 0; pol < 2; pol++) {
        moe_shape s = shape(3, 2, 0.75f, (moe_drop_policy)pol, 4);
        TU_CHECK(moe_capacity_per_group(&s, 4) == 2, "capacity %ld, want 2", moe_capacity_per_group(&s, 4));
        int idx[16];
        float w[16];
        uint64_t keys[8];
        memcpy(idx, idx0, sizeof idx), memcpy(w, w0, sizeof w);
        long dropped = moe_capacity_apply(idx, w, keys, &s, 8);
        const int *want = pol == MOE_DROP_POSITION ? want_pos : want_prob;
        TU_CHECK(dropped == 5, "policy %d: %ld dropped, want 5", pol, dropped);
        for (int i = 0; i < 16; i++) {
            TU_CHECK(idx[i] == want[i], "policy %d: slot %d expert %d, want %d", pol, i, idx[i], want[i]);
            TU_CHECK(w[i] == (want[i] < 0 ? 0.f : w0[i]), "policy %d: slot %d weight %g", pol, i, w[i]);
        }
    }
    // A float factor whose product is an integer in decimal: 1.1·10 is 11, not 12.
    moe_shape s = shape(4, 2, 1.1f, MOE_DROP_POSITION, 20);
    TU_CHECK(moe_capacity_per_group(&s, 20) == 11, "cf 1.1: %ld", moe_capacity_per_group(&s, 20));
}

static void random_case(int N, int G, int E, int k, float cf, moe_drop_policy pol, uint64_t seed) {
    moe_shape s = shape(E, k, cf, pol, G);
    const size_t NK = (size_t)N * k;
    int *idx0 = malloc(sizeof(int) * NK), *idx = malloc(sizeof(int) * NK), *idx2 = malloc(sizeof(int) * NK);
    float *w0 = malloc(sizeof(float) * NK), *w = malloc(sizeof(float) * NK), *w2 = malloc(sizeof(float) * NK);
    uint64_t *keys = malloc(sizeof(uint64_t) * G * k);
    tu_seed(seed);
    long pre = 0;
    for (int t = 0; t < N; t++)
        for (int j = 0; j < k; j++) {
            int e;
            do {  // distinct experts per token, skewed toward the low ones
                double u = tu_uniform();
                e = (int)(u * u * E);
                int dup = 0;
                for (int i = 0; i < j; i++) dup |= idx0[t * k + i] == e;
                if (!dup) break;
            } while (1);
            idx0[t * k + j] = tu_uniform() < 0.05 ? -1 : e;  // a gate's own drops
            w0[t * k + j] = idx0[t * k + j] < 0 ? 0.f : (float)(int)(tu_uniform() * 8) / 8;  // ties
            pre += idx0[t * k + j] < 0;
        }
    memcpy(idx, idx0, sizeof(int) * NK), memcpy(w, w0, sizeof(float) * NK);
    long dropped = moe_capacity_apply(idx, w, keys, &s, N);
    memcpy(idx2, idx0, sizeof(int) * NK), memcpy(w2, w0, sizeof(float) * NK);
    TU_CHECK(moe_capacity_apply(idx2, w2, keys, &s, N) == dropped, "not deterministic");
    TU_CHECK(!memcmp(idx, idx2, sizeof(int) * NK) && !memcmp(w, w2, sizeof(float) * NK), "not deterministic");
    long cap = moe_capacity_per_group(&s, G), counted = 0;
    for (int g = 0; g < N / G; g++) {
        for (int e = 0; e < E; e++) {
            long kept = 0, over = 0;
            float min_kept = INFINITY, max_dropped = -INFINITY;
            int last_kept_t = -1, first_dropped_t = N;
            for (int t = g * G; t < (g + 1) * G; t++)
                for (int j = 0; j < k; j++) {
                    size_t i = (size_t)t * k + j;
                    if (idx0[i] != e) continue;
                    if (idx[i] == e) {
                        kept++;
                        TU_CHECK(w[i] == w0[i], "kept weight changed");
                        if (w0[i] < min_kept || (w0[i] == min_kept && t > last_kept_t))
                            min_kept = w0[i], last_kept_t = t;
                    } else {
                        over++;
                        TU_CHECK(idx[i] == -1 && w[i] == 0.f, "dropped slot not -1/0");
                        if (w0[i] > max_dropped || (w0[i] == max_dropped && t < first_dropped_t))
                            max_dropped = w0[i], first_dropped_t = t;
                    }
                }
            TU_CHECK(kept <= cap, "group %d expert %d keeps %ld > capacity %ld", g, e, kept, cap);
            TU_CHECK(over == 0 || kept == cap, "group %d expert %d dropped below capacity", g, e);
            if (pol == MOE_DROP_PROBABILITY && over && kept)
                TU_CHECK(min_kept > max_dropped || (min_kept == max_dropped && last_kept_t < first_dropped_t),
                         "group %d expert %d: a dropped slot outranks a kept one", g, e);
            counted += over;
        }
    }
    for (size_t i = 0; i < NK; i++)
        if (idx0[i] < 0) TU_CHECK(idx[i] == -1, "a gate's -1 changed");
    TU_CHECK(counted == dropped, "dropped %ld, counted %ld", dropped, counted);
    (void)pre;
    free(idx0), free(idx), free(idx2), free(w0), free(w), free(w2), free(keys);
}

static void check_bounds(void) {
    // N = 64 tokens, groups of 16, E = 8, k = 1, cf 1: capacity 2 per expert per group,
    // 8 experts x 4 groups x 2 = 64 = N·k·cf rows, whatever EP.
    for (int ep = 1; ep <= 8; ep *= 2) {
        moe_parallel par = {.ep_size = ep, .ep_rank = 0};
        moe_shape s = shape(8, 1, 1.0f, MOE_DROP_POSITION, 16);
        s.par = ep > 1 ? &par : NULL;
        size_t b = moe_expert_rows_bound(&s, 64);
        TU_CHECK(b == 64, "EP %d: capacity bound %zu, want 64", ep, b);
        s.routing.capacity_factor = 0;
        b = moe_expert_rows_bound(&s, 64);
        TU_CHECK(b == (ep > 1 ? 0 : 64), "EP %d dropless: bound %zu", ep, b);
        moe_router balanced = moe_router_topk;
        balanced.balanced_rows = 1;
        s.router = &balanced;
        TU_CHECK(moe_expert_rows_bound(&s, 64) == 64, "EP %d balanced: bound %zu", ep,
                 moe_expert_rows_bound(&s, 64));
    }
}

// The layer with a capacity against the same layer dropless on the same inputs.
static void check_layer(moe_drop_policy pol) {
    const int N = 16, C = 8, E = 4, k = 2, F = 4;
    moe_shape s = shape(E, k, 0.5f, pol, 8), s0 = s;
    s0.routing.capacity_factor = 0;
    tu_seed(7);
    float *gate = malloc(sizeof(float) * E * C), *w_in = malloc(sizeof(float) * E * F * C);
    float *w_out = malloc(sizeof(float) * E * C * F), *inp = malloc(sizeof(float) * N * C);
    tu_fill_normal(gate, (size_t)E * C, 1.0), tu_fill_normal(w_in, (size_t)E * F * C, 0.5);
    tu_fill_normal(w_out, (size_t)E * C * F, 0.5), tu_fill_normal(inp, (size_t)N * C, 1.0);
    moe_params p = {gate, w_in, w_out, NULL, NULL};
    float out[2][N * C];
    int ids[2][N * k];
    bg_arena ar[2];
    moe_acts acts[2];
    moe_scratch scr[2];
    kernel_ctx *kc = kernel_ctx_create(BG_FP32);
    moe_router_ctx rc = {0};
    for (int v = 0; v < 2; v++) {
        const moe_shape *sv = v ? &s : &s0;
        bg_arena m;
        bg_arena_init(&m, 0);
        moe_acts_layout(&acts[v], &m, sv, N);
        moe_scratch_layout(&scr[v], &m, sv, N);
        bg_arena_init(&ar[v], m.used);
        moe_acts_layout(&acts[v], &ar[v], sv, N);
        moe_scratch_layout(&scr[v], &ar[v], sv, N);
        TU_CHECK(moe_forward(kc, out[v], &acts[v], inp, &p, &rc, sv, N) == 0, "forward failed");
        memcpy(ids[v], acts[v].router.topk_idx, sizeof ids[v]);
    }
    // capacity ceil(0.5·8·2/4) = 2 per group of 8: at most 2·4·2 = 16 of 32 rows kept
    long dropped = 0;
    for (int i = 0; i < N * k; i++) dropped += ids[1][i] < 0;
    TU_CHECK(dropped >= 16, "only %ld dropped", dropped);
    TU_CHECK(acts[1].router.dropped_global == dropped && acts[1].dispatch.dropped == dropped,
             "dropped_global %g, dispatch %ld, counted %ld", acts[1].router.dropped_global,
             acts[1].dispatch.dropped, dropped);
    TU_CHECK(acts[0].router.dropped_global == 0, "dropless dropped_global %g", acts[0].router.dropped_global);
    TU_CHECK(acts[1].dispatch.offsets[E] == N * k - dropped, "rows %d", acts[1].dispatch.offsets[E]);
    for (int t = 0; t < N; t++) {
        // expected: Σ over kept slots of the dropless layer's weighted rows
        double want[C];
        for (int c = 0; c < C; c++) want[c] = 0;
        for (int j = 0; j < k; j++) {
            int i = t * k + j;
            if (ids[1][i] < 0) continue;
            TU_CHECK(ids[1][i] == ids[0][i], "kept slot changed expert");
            const float *y = acts[0].dispatch.y_perm + (size_t)acts[0].dispatch.row_of[i] * C;
            for (int c = 0; c < C; c++) want[c] += (double)acts[0].router.topk_w[i] * y[c];
        }
        for (int c = 0; c < C; c++)
            TU_CHECK(fabs(out[1][t * C + c] - want[c]) < 1e-5, "token %d: out %g, want %g", t,
                     out[1][t * C + c], want[c]);
    }
    // Backward: a dropped slot gets no weight gradient and the run completes.
    float *dout = malloc(sizeof(float) * N * C), *dinp = calloc((size_t)N * C, sizeof(float));
    float *g_gate = calloc((size_t)E * C, sizeof(float)), *g_in = calloc((size_t)E * F * C, sizeof(float));
    float *g_out = calloc((size_t)E * C * F, sizeof(float));
    tu_fill_normal(dout, (size_t)N * C, 1.0);
    moe_params g = {g_gate, g_in, g_out, NULL, NULL};
    moe_backward(kc, dinp, &g, &scr[1], dout, inp, &acts[1], &p, &rc, &s, N);
    for (int i = 0; i < N * k; i++)
        if (ids[1][i] < 0) TU_CHECK(scr[1].dtopk_w[i] == 0.f, "dropped slot %d has a weight gradient", i);
    for (int i = 0; i < N * C; i++) TU_CHECK(isfinite(dinp[i]), "dinp not finite");
    free(dout), free(dinp), free(g_gate), free(g_in), free(g_out);
    for (int v = 0; v < 2; v++) bg_arena_free(&ar[v]);
    kernel_ctx_free(kc);
    free(gate), free(w_in), free(w_out), free(inp);
}

int main(void) {
    check_hand_case();
    uint64_t seed = 1;
    for (int pol = 0; pol < 2; pol++) {
        random_case(64, 16, 8, 2, 1.0f, (moe_drop_policy)pol, seed++);
        random_case(60, 20, 5, 3, 1.25f, (moe_drop_policy)pol, seed++);
        random_case(32, 32, 4, 1, 0.5f, (moe_drop_policy)pol, seed++);
        random_case(48, 8, 6, 2, 2.0f, (moe_drop_policy)pol, seed++);
    }
    check_bounds();
    check_layer(MOE_DROP_POSITION);
    check_layer(MOE_DROP_PROBABILITY);
    return tu_finish("moe/test_capacity");
}
