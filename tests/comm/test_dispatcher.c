// The dispatchers agree: local (every expert here), alltoall and chunked (1..3 chunks,
// flat and hierarchical) move the same rows to the same experts and back. The experts
// are a stand-in pass that scales each row by a function of its global expert and adds
// its column, elementwise: any dispatcher that delivers every row to the right expert
// and brings it back to the right place gives the same bits as the local one, forward
// (y_perm) and backward (dinp), so the comparison is exact.
#include "core/arena.h"
#include "core/error.h"
#include "dist_fixture.h"
#include "moe/dispatcher.h"

#include <stdlib.h>
#include <string.h>

enum { N = 13, C = 6, K = 2 };

typedef struct {
    int first_expert;  // global id of this pass's expert 0
} scale_pass;

static float expert_scale(int e) { return 0.5f + 0.25f * (float)e; }

static void scale_run(void *ctx, float *out, const float *in, const int *offsets, int n, int acc) {
    const scale_pass *sp = ctx;
    for (int e = 0; e < n; e++)
        for (int r = offsets[e]; r < offsets[e + 1]; r++)
            for (int c = 0; c < C; c++) {
                float v = in[(size_t)r * C + c] * expert_scale(sp->first_expert + e) + (float)c;
                out[(size_t)r * C + c] = acc ? out[(size_t)r * C + c] + v : v;
            }
}
static void scale_forward(void *ctx, float *out, const float *in, const int *offsets, int n) {
    scale_run(ctx, out, in, offsets, n, 0);
}
static void scale_backward(void *ctx, float *out, const float *in, const int *offsets, int n) {
    scale_run(ctx, out, in, offsets, n, 1);
}

// One forward and backward trip through dispatcher d: y_perm (N·k,C) and dinp (N,C).
static void trip(float *y_perm, float *dinp, const moe_dispatcher *d, const moe_shape *s,
                 const int *topk_idx, const float *inp, const float *dy_perm) {
    bg_arena m, ar;
    moe_dispatch_cache dc;
    moe_exchange_cache xc;
    moe_dispatch_scratch ds;
    moe_exchange_scratch xs;
    bg_arena_init(&m, 0);
    d->layout(&dc, &xc, &m, s, N);
    d->scratch_layout(&ds, &xs, &m, s, N);
    bg_arena_init(&ar, m.used);
    d->layout(&dc, &xc, &ar, s, N);
    d->scratch_layout(&ds, &xs, &ar, s, N);

    scale_pass sp = {moe_first_expert(s)};
    BG_ASSERT(d->plan(&dc, &xc, topk_idx, NULL, s, N) == BG_OK);
    d->to_experts(&dc, &xc, inp, &(moe_expert_pass){scale_forward, &sp, 0}, s, N);
    d->from_experts(&dc, &xc, s, N);
    memcpy(y_perm, dc.y_perm, sizeof(float) * N * K * C);

    memcpy(ds.dy_perm, dy_perm, sizeof(float) * N * K * C);
    d->from_experts_backward(&ds, &xs, &dc, &xc, &(moe_expert_pass){scale_backward, &sp, 1}, s, N);
    memset(dinp, 0, sizeof(float) * N * C);
    d->to_experts_backward(dinp, &ds, &xs, &dc, &xc, s, N);
    moe_exchange_cache_free(&xc);
    moe_exchange_scratch_free(&xs);
    bg_arena_free(&ar);
}

int main(int argc, char **argv) {
    comm_test_args a = comm_test_start(&argc, &argv);
    dist_comm *world = dist_comm_world(a.ranks_per_node);
    const int P = dist_size(world), me = dist_rank(world), E = 2 * P;

    // This rank's tokens: distinct experts per token, skewed so some experts get none.
    int topk_idx[N * K];
    float inp[N * C], dy_perm[N * K * C];
    for (int t = 0; t < N; t++) {
        int e0 = (t * 7 + me) % E, e1 = (e0 + 1 + t % (E - 1)) % E;
        topk_idx[t * K] = e0 % 2 ? e0 - 1 : e0;  // odd experts only as second choice
        topk_idx[t * K + 1] = e1 == topk_idx[t * K] ? (e1 + 1) % E : e1;
        for (int c = 0; c < C; c++) inp[t * C + c] = comm_test_value(me, t, c, 0);
    }
    // dy rows in permuted order: only their values matter, each row distinct
    for (int i = 0; i < N * K * C; i++) dy_perm[i] = comm_test_value(me, i, 1, 1);

    moe_shape local = {.C = C, .E = E, .k = K, .F = 1, .act = FFN_GELU};
    float y_ref[N * K * C], d_ref[N * C], y[N * K * C], d[N * C];
    TU_CHECK(moe_dispatcher_for(NULL) == &moe_dispatcher_local, "no layout: local dispatcher");
    trip(y_ref, d_ref, &moe_dispatcher_local, &local, topk_idx, inp, dy_perm);

    for (int algo = DIST_A2A_FLAT; algo <= DIST_A2A_HIER; algo++)
        for (int chunks = 1; chunks <= 3; chunks++) {
            moe_parallel par = {.ep_comm = world, .ep_size = P, .ep_rank = me, .a2a_algo = algo,
                                .a2a_chunks = chunks};
            par.dispatcher = moe_dispatcher_for(&par);
            TU_CHECK(par.dispatcher == (chunks > 1 ? &moe_dispatcher_chunked
                                                   : &moe_dispatcher_alltoall),
                     "dispatcher for %d chunks", chunks);
            moe_shape s = local;
            s.par = &par;
            trip(y, d, par.dispatcher, &s, topk_idx, inp, dy_perm);
            const char *name = par.dispatcher->name;
            TU_CHECK(!memcmp(y, y_ref, sizeof y), "%s (algo %d, %d chunks): y_perm differs",
                     name, algo, chunks);
            TU_CHECK(!memcmp(d, d_ref, sizeof d), "%s (algo %d, %d chunks): dinp differs",
                     name, algo, chunks);
        }
    int rc = comm_test_finish(world, "comm/test_dispatcher");
    dist_comm_free(world);
    dist_finalize();
    return rc;
}
