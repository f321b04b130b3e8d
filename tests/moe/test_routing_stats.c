// Routing health fields (moe/routing_stats.h) against values worked out by hand from
// known loads, one expert dead and some assignments dropped; the router's entropy slot
// (moe_router_balance_statistics) against −Σ p log p of crafted probabilities; the
// off-node rows of a send plan.
#include "moe/router.h"
#include "moe/routing_stats.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

// Every hand value below is a short exact fraction or a square root of one, computed in
// double: 1e-12 relative covers the rounding of a few operations and nothing more.
#define TOL 1e-12
static int close_to(double got, double want) { return fabs(got - want) <= TOL * (1 + fabs(want)); }
#define EXPECT(field, want)                                                                \
    TU_CHECK(close_to(field, want), "%s = %.17g, want %.17g", #field, (double)(field), \
             (double)(want))

static void check_hand_computed(void) {
    printf("routing stats from known loads (one dead expert, 8 drops)\n");
    // E = 4, k = 2, 20 tokens → 40 assignments; expert 3 gets none.
    // Loads 20, 10, 10, 0: mean 10, deviations 10, 0, 0, −10,
    // variance = (100 + 0 + 0 + 100) / 4 = 50; CV = √50 / 10; max/mean = 20 / 10 = 2.
    const int counts[4] = {20, 10, 10, 0};
    moe_routing_stats r;
    // 8 of the 40 assignments dropped → 0.2; entropy sum 20·ln 2 over 20 tokens → ln 2.
    moe_routing_stats_compute(&r, counts, 4, 2, 20, 8, 20 * log(2.0));
    EXPECT(r.load_min, 0);
    EXPECT(r.load_max, 20);
    EXPECT(r.load_mean, 10);
    EXPECT(r.load_cv, sqrt(50.0) / 10);
    EXPECT(r.max_over_mean, 2);
    EXPECT(r.drop_frac, 0.2);
    EXPECT(r.router_entropy, log(2.0));

    // Perfect balance: CV 0, max/mean 1, no drops.
    const int even[3] = {7, 7, 7};
    moe_routing_stats_compute(&r, even, 3, 1, 21, 0, 0);
    EXPECT(r.load_cv, 0);
    EXPECT(r.max_over_mean, 1);
    EXPECT(r.drop_frac, 0);
    EXPECT(r.load_min, 7);

    // An empty batch: zeros, not 0/0.
    const int none[2] = {0, 0};
    moe_routing_stats_compute(&r, none, 2, 1, 0, 0, 0);
    TU_CHECK(r.load_cv == 0 && r.max_over_mean == 0 && r.drop_frac == 0 && r.router_entropy == 0,
             "empty batch: cv %g max/mean %g drop %g entropy %g", r.load_cv, r.max_over_mean,
             r.drop_frac, r.router_entropy);
}

static void check_entropy_slot(void) {
    printf("router statistics: entropy slot\n");
    enum { N = 3, E = 4, K = 2 };
    // Token 0 uniform (ln 4), token 1 one-hot (0, with p = 0 entries), token 2 on two
    // experts (ln 2). All values exact in float except the logs.
    float probs[N * E] = {0.25f, 0.25f, 0.25f, 0.25f, 0, 1, 0, 0, 0.5f, 0, 0, 0.5f};
    float lse[N] = {0, 0, 0};
    int idx[N * K] = {0, 1, 1, 0, 0, 3};
    double stats[MOE_ROUTER_STATS(E)];
    int counts[E];
    moe_router_cache c = {.probs = probs, .lse = lse, .topk_idx = idx, .counts_global = counts,
                          .stats = stats};
    moe_shape s = {.E = E, .k = K};
    moe_router_ctx ctx = {0};
    moe_router_balance_statistics(&c, &ctx, &s, N);
    // logf of 0.25 and 0.5 is within an ulp of float: 1e-6 relative.
    double want = log(4.0) + log(2.0), got = moe_router_entropy_sum(&c, &s);
    TU_CHECK(fabs(got - want) <= 1e-6 * want, "entropy sum %.9g, want %.9g", got, want);
    TU_CHECK(counts[0] == 3 && counts[1] == 2 && counts[2] == 0 && counts[3] == 1,
             "counts %d %d %d %d", counts[0], counts[1], counts[2], counts[3]);
    TU_CHECK(c.n_tokens == N && c.dropped_global == 0, "n_tokens %g dropped %g", c.n_tokens,
             c.dropped_global);
    moe_routing_stats r;
    moe_routing_stats_compute(&r, counts, E, K, c.n_tokens, c.dropped_global, got);
    TU_CHECK(fabs(r.router_entropy - want / N) <= 1e-6, "mean entropy %g", r.router_entropy);
}

static void check_node_rows(void) {
    printf("off-node rows of a send plan\n");
    // 4 destinations on nodes 0, 0, 1, 1; this rank on node 0: rows to ranks 2, 3 leave.
    const int send[4] = {5, 3, 7, 1}, node[4] = {0, 0, 1, 1};
    double off, all;
    moe_routing_node_rows(&off, &all, send, node, 4, 0);
    TU_CHECK(off == 8 && all == 16, "off %g of %g, want 8 of 16", off, all);
    moe_routing_node_rows(&off, &all, send, node, 4, 1);
    TU_CHECK(off == 8 && all == 16, "node 1: off %g of %g, want 8 of 16", off, all);
    const int one[4] = {0, 0, 0, 0};
    moe_routing_node_rows(&off, &all, send, one, 4, 0);
    TU_CHECK(off == 0 && all == 16, "one node: off %g of %g", off, all);
}

int main(void) {
    check_hand_computed();
    check_entropy_slot();
    check_node_rows();
    return tu_finish("test_routing_stats");
}
