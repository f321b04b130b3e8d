// The swipe gate: (a) the balancing of one slot on a hand-computed case with rejection
// and reassignment; (b) the gate with V virtual workers against FastMoE's swipe_once
// transcribed here rank by rank (balancing.cu), on a skewed router: the same expert ids,
// every worker exactly B·k rows; (d) the backward against finite differences of a
// double reference; (e) evaluation is plain top-k.
#include "core/arena.h"
#include "kernels/kernels.h"
#include "moe/router.h"
#include "moe/swipe.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Weights are a softmax over k fp32 logits computed in double and rounded once: within
// a few 1e-7 of the double reference on the same logits; 1e-6 leaves margin, a wrong
// index or normalization is off by 1e-2 or more.
#define W_TOL 1e-6
// Backward vs centered FD (eps 1e-5) of the double reference: the float GEMMs and
// softmax backward err ~1e-6 on O(1) gradients, FD ~1e-9; as in test_router.
#define BWD_ATOL 1e-5
#define BWD_RTOL 1e-4
#define FD_EPS 1e-5

static kernel_ctx *g_kc;

// (a) W = 3 workers, one slot. Receiver 0 (cap 4) takes 2 of worker 0 and 2 of worker 1's
// 3, rejects worker 2's 2; receiver 1 (cap 2) takes worker 0's 1 and 1 of worker 2's 2;
// receiver 2 (cap 8) takes both. Spare: [0, 0, 6]; worker 1's 1 and worker 2's 3
// rejected tokens go to worker 2 (the pointer skips the full workers 0 and 1).
static void check_hand_case(void) {
    printf("swipe: hand-computed slot\n");
    enum { W = 3 };
    const int counts[W * W] = {2, 1, 1, 3, 0, 1, 2, 2, 0};
    int caps[W] = {4, 2, 8}, sends[W * W];
    moe_swipe_balance(sends, caps, counts, W);
    const int want_sends[W * W] = {2, 1, 1, 2, 0, 2, 0, 1, 3}, want_caps[W] = {0, 0, 2};
    for (int i = 0; i < W * W; i++)
        TU_CHECK(sends[i] == want_sends[i], "sends[%d][%d] = %d, want %d", i / W, i % W,
                 sends[i], want_sends[i]);
    for (int v = 0; v < W; v++)
        TU_CHECK(caps[v] == want_caps[v], "caps[%d] = %d, want %d", v, caps[v], want_caps[v]);

    // Worker 2 (El = 2, slot 1), experts [0,2,1,3] → receivers [0,1,0,1], row [0,1,3]:
    // token 1 keeps expert 2; tokens 0, 2, 3 move to worker 2's expert 2·2 + 1 % 2 = 5.
    int ids2[4] = {0, 2, 1, 3}, row[W];
    moe_swipe_count(row, ids2, 1, 4, W, 2);
    for (int v = 0; v < W; v++)
        TU_CHECK(row[v] == counts[2 * W + v], "count row of worker 2 [%d] = %d", v, row[v]);
    moe_swipe_assign(ids2, 1, 4, &sends[2 * W], W, 2, 1);
    const int want2[4] = {5, 2, 5, 5};
    // Worker 1, experts [1,0,4,0] → receivers [0,0,2,0], row [2,0,2]: the first two
    // keep theirs (receiver 0 took 2), expert 4 stays, the last 0 moves to expert 5.
    // Read with stride 2 to check the stride: slot 1 of (4,2) ids.
    int ids1[8] = {9, 1, 9, 0, 9, 4, 9, 0};
    moe_swipe_assign(ids1 + 1, 2, 4, &sends[1 * W], W, 2, 1);
    const int want1[8] = {9, 1, 9, 0, 9, 4, 9, 5};
    for (int t = 0; t < 4; t++)
        TU_CHECK(ids2[t] == want2[t], "worker 2 token %d: expert %d, want %d", t, ids2[t],
                 want2[t]);
    for (int i = 0; i < 8; i++)
        TU_CHECK(ids1[i] == want1[i], "worker 1 entry %d: %d, want %d", i, ids1[i], want1[i]);
}

// --- FastMoE's swipe_once (cuda/balancing.cu, NCCL path), one slot, P ranks simulated:
// every per-rank variable becomes an array over ranks, the collectives reads of the
// other ranks' arrays. Written from the CUDA source, independently of src/moe/swipe.c.
enum { PMAX = 8 };
static void ref_swipe_once(int *gidx[], long cap[], int P, int B, int stride, long n_expert,
                           long bias) {
    long lec[PMAX][PMAX] = {{0}}, gec[PMAX][PMAX], drop[PMAX][PMAX], gcap[PMAX][PMAX];
    long dsum[PMAX] = {0};
    for (int r = 0; r < P; r++)
        for (int i = 0; i < B; i++) ++lec[r][gidx[r][(size_t)i * stride] / n_expert];
    for (int r = 0; r < P; r++)  // fmoe_cuda_expert_exchange_impl: an all-to-all
        for (int i = 0; i < P; i++) gec[r][i] = lec[i][r];
    for (int r = 0; r < P; r++)
        for (int i = 0; i < P; i++) {
            if (cap[r] >= gec[r][i]) {
                drop[r][i] = 0;
                cap[r] -= gec[r][i];
            } else {
                drop[r][i] = gec[r][i] - cap[r];
                gec[r][i] = cap[r];
                cap[r] = 0;
            }
        }
    for (int r = 0; r < P; r++)  // limits sent back
        for (int j = 0; j < P; j++) lec[r][j] = gec[j][r];
    for (int r = 0; r < P; r++)  // all-reduce of drop counts, all-gather of capacities
        for (int i = 0; i < P; i++) dsum[i] += drop[r][i];
    for (int r = 0; r < P; r++)
        for (int j = 0; j < P; j++) gcap[r][j] = cap[j];
    for (int r = 0; r < P; r++) {
        long dc[PMAX];
        memcpy(dc, dsum, sizeof dc);
        long *gc = gcap[r];
#define UPDATE_COUNTERS(n)     \
    do {                       \
        if (i == r) lec[r][j] += (n); \
        if (j == r) {          \
            gec[r][i] += (n);  \
            cap[r] -= (n);     \
        }                      \
    } while (0)
        for (long i = 0, j = 0; i < P; ++i) {
            while (dc[i] > 0) {
                if (dc[i] > gc[j]) {
                    dc[i] -= gc[j];
                    UPDATE_COUNTERS(gc[j]);
                    ++j;
                } else {
                    gc[j] -= dc[i];
                    UPDATE_COUNTERS(dc[i]);
                    break;
                }
            }
        }
#undef UPDATE_COUNTERS
        int *g = gidx[r];
        for (long i = 0; i < B; ++i) {
            long widx = g[i * stride] / n_expert;
            if (lec[r][widx] > 0)
                --lec[r][widx];
            else
                g[i * stride] = -1;
        }
        for (long i = 0, k = 0; i < B; ++i) {
            if (g[i * stride] != -1) continue;
            for (; lec[r][k] == 0; ++k);
            --lec[r][k];
            g[i * stride] = (int)(k * n_expert + bias);
        }
    }
}

// Plain top-k of one row of logits by repeated selection, ties to the lower index.
static void ref_topk(int *idx, const float *l, int E, int k) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= idx[i] == e;
            if (!taken && (best < 0 || l[e] > l[best])) best = e;
        }
        idx[j] = best;
    }
}

// A router that sends nearly every token to experts 0 and 1 (both on worker 0): inputs
// positive, those experts' gate rows shifted up, noise to spread the rest.
static void skewed_router(float *inp, float *gate, int N, int C, int E) {
    for (int i = 0; i < N * C; i++) inp[i] = (float)(0.5 + tu_uniform());
    for (int e = 0; e < E; e++)
        for (int c = 0; c < C; c++)
            gate[e * C + c] = (float)(0.3 * tu_normal() + (e == 0 ? 1.0 : e == 1 ? 0.8 : 0.0));
}

typedef struct {
    bg_arena arena;
    moe_router_cache c;
    moe_router_scratch scr;
} gate_run;

static void gate_forward(gate_run *g, const moe_shape *s, const moe_router_ctx *ctx,
                         const float *inp, const float *gate, int N) {
    bg_arena m;
    bg_arena_init(&m, 0);
    moe_router_cache_layout(&g->c, &m, s, N);
    moe_router_scratch_layout(&g->scr, &m, s, N);
    bg_arena_init(&g->arena, m.used);
    moe_router_cache_layout(&g->c, &g->arena, s, N);
    moe_router_scratch_layout(&g->scr, &g->arena, s, N);
    s->router->forward(g_kc, &g->c, ctx, inp, gate, s, N);
}

// (b) and (e): V virtual workers of B tokens, E experts, k slots.
static void check_virtual(int V, int B, int E, int k, uint64_t seed) {
    printf("swipe: %d virtual workers, B=%d, E=%d, k=%d vs FastMoE's swipe_once\n", V, B, E, k);
    tu_seed(seed);
    const int C = 5, N = V * B, El = E / V;
    float *inp = malloc(sizeof(float) * N * C), *gate = malloc(sizeof(float) * E * C);
    skewed_router(inp, gate, N, C, E);
    moe_shape s = {.C = C, .E = E, .k = k, .F = 1, .act = FFN_GELU, .z_coef = 0.1f,
                   .router = &moe_router_swipe, .routing = {.virtual_workers = V}};
    moe_router_ctx ctx = {0};
    gate_run g;
    gate_forward(&g, &s, &ctx, inp, gate, N);

    // The reference on the gate's own logits: plain top-k, then swipe_once slot by slot
    // with each rank's capacity B·k carried, then softmax over the slots.
    int *ids = malloc(sizeof(int) * N * k);
    for (int t = 0; t < N; t++) ref_topk(&ids[t * k], &g.c.logits[t * E], E, k);
    int skewed = 0;
    for (int t = 0; t < N; t++) skewed += ids[t * k] / El == 0;
    TU_CHECK(skewed > B, "router not skewed: %d of %d tokens prefer worker 0", skewed, N);
    long cap[PMAX];
    int *rank_ids[PMAX];
    for (int r = 0; r < V; r++) {
        cap[r] = (long)B * k;
        rank_ids[r] = ids + (size_t)r * B * k;
    }
    int *slot_ids[PMAX];
    for (int j = 0; j < k; j++) {
        for (int r = 0; r < V; r++) slot_ids[r] = rank_ids[r] + j;
        ref_swipe_once(slot_ids, cap, V, B, k, El, j % El);
    }
    int bad = 0;
    for (int i = 0; i < N * k; i++) bad += g.c.topk_idx[i] != ids[i];
    TU_CHECK(!bad, "%d of %d expert ids differ from the reference", bad, N * k);
    for (int r = 0; r < V; r++) TU_CHECK(cap[r] == 0, "reference: rank %d left %ld", r, cap[r]);

    // Every worker receives exactly B·k rows; every id is a real expert (no drop).
    long rows[PMAX] = {0};
    for (int i = 0; i < N * k; i++) {
        int e = g.c.topk_idx[i];
        TU_CHECK(e >= 0 && e < E, "id %d out of range", e);
        if (e >= 0 && e < E) rows[e / El]++;
    }
    for (int w = 0; w < V; w++)
        TU_CHECK(rows[w] == (long)B * k, "worker %d receives %ld rows, want %d", w, rows[w], B * k);
    TU_CHECK(g.c.aux_loss == 0.0, "swipe has no aux loss, got %g", g.c.aux_loss);

    double *wref = malloc(sizeof(double) * N * k);
    for (int t = 0; t < N; t++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < k; j++) mx = fmax(mx, g.c.logits[t * E + ids[t * k + j]]);
        for (int j = 0; j < k; j++) sum += exp(g.c.logits[t * E + ids[t * k + j]] - mx);
        for (int j = 0; j < k; j++)
            wref[t * k + j] = exp(g.c.logits[t * E + ids[t * k + j]] - mx) / sum;
    }
    tu_expect_close("swipe weights", g.c.topk_w, wref, (size_t)N * k, W_TOL, 0);

    // (e) Evaluation: plain top-k, weights renormalized over the k (= norm_topk_prob).
    int *ids0 = malloc(sizeof(int) * N * k);
    float *probs = malloc(sizeof(float) * N * E), *lse = malloc(sizeof(float) * N),
          *w0 = malloc(sizeof(float) * N * k);
    moe_router_softmax_topk(probs, lse, ids0, w0, g.c.logits, N, E, k, 1);
    ctx.eval = 1;
    gate_run ge;
    gate_forward(&ge, &s, &ctx, inp, gate, N);
    TU_CHECK(!memcmp(ge.c.topk_idx, ids0, sizeof(int) * N * k), "eval: ids are not plain top-k");
    TU_CHECK(memcmp(g.c.topk_idx, ids0, sizeof(int) * N * k), "training ids equal plain top-k: "
                                                              "the case balances nothing");
    double *w0d = malloc(sizeof(double) * N * k);
    for (int i = 0; i < N * k; i++) w0d[i] = w0[i];
    tu_expect_close("eval weights vs renormalized top-k", ge.c.topk_w, w0d, (size_t)N * k, W_TOL,
                    0);
    bg_arena_free(&g.arena);
    bg_arena_free(&ge.arena);
    free(inp); free(gate); free(ids); free(wref); free(ids0); free(probs); free(lse); free(w0);
    free(w0d);
}

// One worker (no layout, no virtual workers): nothing to balance, plain top-k.
static void check_one_worker(void) {
    printf("swipe: one worker is plain top-k\n");
    tu_seed(3);
    enum { N = 10, C = 4, E = 6, K = 2 };
    float inp[N * C], gate[E * C], probs[N * E], lse[N], w[N * K];
    int ids[N * K];
    skewed_router(inp, gate, N, C, E);
    moe_shape s = {.C = C, .E = E, .k = K, .F = 1, .act = FFN_GELU, .router = &moe_router_swipe};
    moe_router_ctx ctx = {0};
    gate_run g;
    gate_forward(&g, &s, &ctx, inp, gate, N);
    moe_router_softmax_topk(probs, lse, ids, w, g.c.logits, N, E, K, 0);
    TU_CHECK(!memcmp(g.c.topk_idx, ids, sizeof ids), "one worker: ids are not plain top-k");
    bg_arena_free(&g.arena);
}

// Double reference of the objective Σ dw·w + z_coef·Σ lse²/N with the ids held fixed.
static double ref_objective(const double *inp, const double *gate, const int *ids,
                            const double *dw, int N, int C, int E, int k, double z_coef) {
    double obj = 0, z = 0, l[64];
    for (int t = 0; t < N; t++) {
        double mx = -INFINITY, se = 0, sk = 0, mk = -INFINITY;
        for (int e = 0; e < E; e++) {
            double a = 0;
            for (int c = 0; c < C; c++) a += inp[t * C + c] * gate[e * C + c];
            l[e] = a;
            mx = fmax(mx, a);
        }
        for (int e = 0; e < E; e++) se += exp(l[e] - mx);
        double lse = mx + log(se);
        z += lse * lse;
        for (int j = 0; j < k; j++) mk = fmax(mk, l[ids[t * k + j]]);
        for (int j = 0; j < k; j++) sk += exp(l[ids[t * k + j]] - mk);
        for (int j = 0; j < k; j++) obj += dw[t * k + j] * exp(l[ids[t * k + j]] - mk) / sk;
    }
    return obj + z_coef * z / N;
}

// (d) Backward, with the balanced ids of a skewed router (some reassigned, two tokens
// holding one expert twice) fixed: dinp and dgate against centered FD.
static void check_backward(void) {
    printf("swipe: backward vs finite differences\n");
    enum { V = 4, B = 3, N = V * B, C = 5, E = 4, K = 2 };
    const double z_coef = 0.3;
    float inp[N * C], gate[E * C], dw[N * K], dinp[N * C] = {0}, dgate[E * C] = {0};
    moe_shape s = {.C = C, .E = E, .k = K, .F = 1, .act = FFN_GELU, .z_coef = (float)z_coef,
                   .router = &moe_router_swipe, .routing = {.virtual_workers = V}};
    moe_router_ctx ctx = {0};
    gate_run g;
    tu_seed(21);
    skewed_router(inp, gate, N, C, E);
    gate_forward(&g, &s, &ctx, inp, gate, N);
    // Reassignment can give a token one expert in both slots; make sure two do.
    for (int t = 0; t < 2; t++) g.c.topk_idx[t * K + 1] = g.c.topk_idx[t * K];
    moe_swipe_weights(g.c.topk_w, g.c.logits, g.c.topk_idx, N, E, K);
    for (int i = 0; i < N * K; i++) dw[i] = (float)tu_normal();
    s.router->backward(g_kc, dinp, dgate, &g.scr, dw, inp, &g.c, &ctx, gate, &s, N);

    double xi[N * C], xg[E * C], ddw[N * K], want_inp[N * C], want_gate[E * C];
    for (int i = 0; i < N * C; i++) xi[i] = inp[i];
    for (int i = 0; i < E * C; i++) xg[i] = gate[i];
    for (int i = 0; i < N * K; i++) ddw[i] = dw[i];
    const int *ids = g.c.topk_idx;
    for (int i = 0; i < N * C; i++) {
        double keep = xi[i];
        xi[i] = keep + FD_EPS;
        double up = ref_objective(xi, xg, ids, ddw, N, C, E, K, z_coef);
        xi[i] = keep - FD_EPS;
        double dn = ref_objective(xi, xg, ids, ddw, N, C, E, K, z_coef);
        xi[i] = keep;
        want_inp[i] = (up - dn) / (2 * FD_EPS);
    }
    for (int i = 0; i < E * C; i++) {
        double keep = xg[i];
        xg[i] = keep + FD_EPS;
        double up = ref_objective(xi, xg, ids, ddw, N, C, E, K, z_coef);
        xg[i] = keep - FD_EPS;
        double dn = ref_objective(xi, xg, ids, ddw, N, C, E, K, z_coef);
        xg[i] = keep;
        want_gate[i] = (up - dn) / (2 * FD_EPS);
    }
    tu_expect_close("swipe dinp", dinp, want_inp, N * C, BWD_ATOL, BWD_RTOL);
    tu_expect_close("swipe dgate", dgate, want_gate, E * C, BWD_ATOL, BWD_RTOL);
    bg_arena_free(&g.arena);
}

int main(void) {
    g_kc = kernel_ctx_create(BG_FP32);
    TU_CHECK(moe_router_find("swipe") == &moe_router_swipe, "swipe is registered");
    TU_CHECK(moe_router_swipe.balanced_rows == 1 && moe_router_topk.balanced_rows == 0,
             "balanced_rows: swipe 1, topk 0");
    check_hand_case();
    check_virtual(4, 6, 8, 2, 1);  // El = 2
    check_virtual(4, 5, 8, 3, 2);  // k = 3: the capacity carried over three slots
    check_virtual(2, 7, 4, 2, 3);
    check_virtual(4, 3, 4, 2, 4);  // El = 1: every reassignment to a worker's one expert
    check_one_worker();
    check_backward();
    kernel_ctx_free(g_kc);
    return tu_finish("moe/test_swipe");
}
