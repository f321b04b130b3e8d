// The swipe gate across ranks (and the all-gather it uses): with a router skewed toward the experts of EP rank 0,
// every worker of an expert-parallel group receives exactly B·k rows, and the expert
// ids equal those of one process running the group's tokens as EP virtual workers.
// EP = P (one group) and, for even P > 2, EP = P/2 (two groups, each balanced alone).
#include "core/arena.h"
#include "dist_fixture.h"
#include "kernels/kernels.h"
#include "moe/router.h"

#include <math.h>

enum { B = 5, C = 4, K = 2 };

// A router that sends nearly every token to experts 0 and 1 (EP rank 0's): inputs
// positive, those experts' gate rows shifted up, hashed noise for the rest.
static float input_value(int g, int c) { return 1.0f + 0.5f * comm_test_value(g, c, 7, 0); }
static float gate_value(int e, int c) {
    return 0.2f * comm_test_value(e, c, 8, 0) + (e == 0 ? 1.0f : e == 1 ? 0.8f : 0.0f);
}

typedef struct {
    bg_arena arena;
    moe_router_cache c;
} gate_run;

static void gate_forward(gate_run *g, kernel_ctx *kc, const moe_shape *s,
                         const moe_router_ctx *ctx, const float *inp, const float *gate, int N) {
    bg_arena m;
    bg_arena_init(&m, 0);
    moe_router_cache_layout(&g->c, &m, s, N);
    bg_arena_init(&g->arena, m.used);
    moe_router_cache_layout(&g->c, &g->arena, s, N);
    s->router->forward(kc, &g->c, ctx, inp, gate, s, N);
}

// One layout: EP groups of `ep` consecutive ranks.
static void check_ep(kernel_ctx *kc, dist_comm *world, int ep) {
    const int P = dist_size(world), me = dist_rank(world), E = 2 * P, El = E / ep;
    const int group = me / ep, ep_rank = me % ep, G = ep * B;  // G: the group's tokens
    dist_comm *ep_comm = dist_comm_split(world, group, me);
    float gate[E * C], *inp = malloc(sizeof(float) * G * C);
    for (int e = 0; e < E; e++)
        for (int c = 0; c < C; c++) gate[e * C + c] = gate_value(e, c);
    for (int t = 0; t < G; t++)
        for (int c = 0; c < C; c++) inp[t * C + c] = input_value(group * G + t, c);
    const float *mine = inp + (size_t)ep_rank * B * C;

    moe_parallel par = {.ep_comm = ep_comm, .ep_size = ep, .ep_rank = ep_rank};
    moe_shape s = {.C = C, .E = E, .k = K, .F = 1, .act = FFN_GELU, .par = &par,
                   .router = &moe_router_swipe};
    moe_router_ctx ctx = {.comm = world};
    gate_run d;
    gate_forward(&d, kc, &s, &ctx, mine, gate, B);

    // Rows every worker of the group receives, summed over the group's ranks.
    int64_t rows[64] = {0};
    for (int i = 0; i < B * K; i++) {
        int e = d.c.topk_idx[i];
        TU_CHECK(e >= 0 && e < E, "EP=%d rank %d: id %d out of range", ep, me, e);
        if (e >= 0 && e < E) rows[e / El]++;
    }
    dist_allreduce_sum_i64(ep_comm, rows, (size_t)ep);
    for (int w = 0; w < ep; w++)
        TU_CHECK(rows[w] == B * K, "EP=%d group %d: worker %d receives %lld rows, want %d", ep,
                 group, w, (long long)rows[w], B * K);

    // One process, the group's tokens as ep virtual workers: the same ids.
    moe_shape v = s;
    v.par = NULL;
    v.routing.virtual_workers = ep;
    moe_router_ctx one = {0};
    gate_run r;
    gate_forward(&r, kc, &v, &one, inp, gate, G);
    const int *want = r.c.topk_idx + (size_t)ep_rank * B * K;
    int bad = 0, moved = 0;
    for (int i = 0; i < B * K; i++) bad += d.c.topk_idx[i] != want[i];
    TU_CHECK(!bad, "EP=%d rank %d: %d ids differ from the virtual-worker run", ep, me, bad);
    float *gp = malloc(sizeof(float) * G * E), *gl = malloc(sizeof(float) * G),
          *gw = malloc(sizeof(float) * G * K);
    int *plain = malloc(sizeof(int) * G * K);
    moe_router_softmax_topk(gp, gl, plain, gw, r.c.logits, G, E, K, 0);
    for (int i = 0; i < G * K; i++) moved += r.c.topk_idx[i] != plain[i];
    TU_CHECK(ep == 1 || moved > 0, "EP=%d: nothing reassigned, the router is not skewed", ep);
    free(gp); free(gl); free(gw); free(plain);

    // Evaluation: no exchange, plain top-k on every rank.
    ctx.eval = 1;
    gate_run ev;
    gate_forward(&ev, kc, &s, &ctx, mine, gate, B);
    float probs[B * 64], lse[B], w[B * K];
    int ids[B * K];
    moe_router_softmax_topk(probs, lse, ids, w, ev.c.logits, B, E, K, 1);
    TU_CHECK(!memcmp(ids, ev.c.topk_idx, sizeof ids), "EP=%d rank %d: eval is not top-k", ep, me);

    bg_arena_free(&d.arena);
    bg_arena_free(&r.arena);
    bg_arena_free(&ev.arena);
    free(inp);
    dist_comm_free(ep_comm);
}

// dist_allgather_i32, which carries the count rows: rank r's n ints land at r·n on
// every rank.
static void check_allgather(dist_comm *world) {
    enum { n = 3 };
    const int P = dist_size(world), me = dist_rank(world);
    int32_t send[n], *recv = malloc(sizeof(int32_t) * n * P);
    for (int i = 0; i < n; i++) send[i] = 100 * me + i;
    dist_allgather_i32(world, send, recv, n);
    for (int r = 0; r < P; r++)
        for (int i = 0; i < n; i++)
            TU_CHECK(recv[r * n + i] == 100 * r + i, "all-gather: rank %d got %d from %d[%d]", me,
                     recv[r * n + i], r, i);
    free(recv);
}

int main(int argc, char **argv) {
    comm_test_args a = comm_test_start(&argc, &argv);
    dist_comm *world = dist_comm_world(a.ranks_per_node);
    const int P = dist_size(world);
    check_allgather(world);
    kernel_ctx *kc = kernel_ctx_create(BG_FP32);
    check_ep(kc, world, P);
    if (P > 2 && P % 2 == 0) check_ep(kc, world, P / 2);
    kernel_ctx_free(kc);
    int rc = comm_test_finish(world, "comm/test_swipe");
    dist_comm_free(world);
    dist_finalize();
    return rc;
}
