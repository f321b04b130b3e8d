// The cost model behind --a2a auto (dist_a2a_cost, dist_a2a_choose) over synthetic link
// figures: what it must choose where the answer is clear, and the properties that keep
// its terms honest (more bandwidth never slower, shared cores and slow phases never
// favour the algorithms with more stages, the single leader never beats 2d).
#include "comm/dist.h"
#include "test_util.h"

#include <stdio.h>

// A cluster with a NIC per node: 100 Gbit/s, 5 us, 1 us per further message; shared
// memory inside a node; every rank on a core of its own.
static dist_a2a_cost_in nic(int nodes, int m, double bytes) {
    return (dist_a2a_cost_in){.nodes = nodes, .ranks_per_node = m, .bytes_per_rank = bytes,
                              .inter_bw = 12.5e9, .inter_lat = 5e-6, .inter_gap = 1e-6,
                              .intra_bw = 50e9, .intra_lat = 0.5e-6, .intra_gap = 0.2e-6,
                              .ranks_per_core = 1, .sync_s = 0};
}

static double cost(const dist_a2a_cost_in *in, enum dist_a2a_algo a) { return dist_a2a_cost(in, a); }

int main(void) {
    // One node: flat, whatever the figures.
    dist_a2a_cost_in in = nic(1, 8, 1 << 20);
    TU_CHECK(dist_a2a_choose(&in) == DIST_A2A_FLAT, "one node chose %s", dist_a2a_name(dist_a2a_choose(&in)));

    // One rank per node: the same messages, but 2d and hier pack and unpack: flat.
    in = nic(8, 1, 1 << 16);
    in.sync_s = 3e-3, in.ranks_per_core = 4;
    TU_CHECK(cost(&in, DIST_A2A_HIER) > cost(&in, DIST_A2A_FLAT) &&
                 cost(&in, DIST_A2A_2D) > cost(&in, DIST_A2A_FLAT) && dist_a2a_choose(&in) == DIST_A2A_FLAT,
             "one rank per node: %g %g %g", cost(&in, 0), cost(&in, 1), cost(&in, 2));

    // Many nodes, small messages: flat's 8 x 63 messages per rank cost more than 2d's
    // extra intra-node phase.
    in = nic(64, 8, 64 << 10);
    TU_CHECK(dist_a2a_choose(&in) == DIST_A2A_2D, "64 x 8, 64 KiB: chose %s (flat %g, 2d %g)",
             dist_a2a_name(dist_a2a_choose(&in)), cost(&in, 0), cost(&in, 2));

    // Large messages: the link bytes are the same, 2d copies more: flat.
    in = nic(2, 2, 64 << 20);
    TU_CHECK(dist_a2a_choose(&in) == DIST_A2A_FLAT, "2 x 2, 64 MiB: chose %s", dist_a2a_name(dist_a2a_choose(&in)));

    // Every phase waiting milliseconds for ranks to get a core (an oversubscribed
    // machine): 2d's second phase costs more than the messages it saves.
    in = nic(64, 8, 64 << 10);
    in.sync_s = 5e-3;
    TU_CHECK(dist_a2a_choose(&in) == DIST_A2A_FLAT, "sync 5 ms: chose %s", dist_a2a_name(dist_a2a_choose(&in)));

    // The figures measured on 2 emulated nodes x 2 ranks on 2 cores at 1 Gbit/s: flat.
    in = (dist_a2a_cost_in){.nodes = 2, .ranks_per_node = 2, .bytes_per_rank = 64 << 10,
                            .inter_bw = 1.3e8, .inter_lat = 270e-6, .inter_gap = 3e-6,
                            .intra_bw = 7e9, .intra_lat = 1e-6, .ranks_per_core = 2, .sync_s = 15e-3};
    TU_CHECK(dist_a2a_choose(&in) == DIST_A2A_FLAT, "emulated 2 x 2: chose %s", dist_a2a_name(dist_a2a_choose(&in)));

    // Shared cores: 2d's extra copies weigh more, never less, the more ranks share a core.
    double prev = -1e30;
    for (double s = 1; s <= 16; s *= 2) {
        in = nic(16, 4, 1 << 20);
        in.ranks_per_core = s;
        double d = cost(&in, DIST_A2A_2D) - cost(&in, DIST_A2A_FLAT);
        TU_CHECK(d > prev, "ranks per core %g: 2d - flat %g not above %g", s, d, prev);
        prev = d;
    }

    // Over a grid: the single leader never beats 2d (it copies (m-1)·off twice, serially);
    // more bandwidth never slower, more latency never faster; gap 0 means one latency.
    const int nodes[] = {2, 4, 8, 64}, ms[] = {2, 4, 8};
    const double bytes[] = {1 << 10, 1 << 16, 1 << 22, 1 << 26};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++) {
                in = nic(nodes[a], ms[b], bytes[c]);
                TU_CHECK(cost(&in, DIST_A2A_HIER) >= cost(&in, DIST_A2A_2D), "hier below 2d at %d x %d, %g B",
                         nodes[a], ms[b], bytes[c]);
                for (int k = 0; k < DIST_A2A_ALGOS; k++) {
                    dist_a2a_cost_in f = in;
                    f.inter_bw *= 2, f.intra_bw *= 2;
                    TU_CHECK(cost(&f, k) <= cost(&in, k), "%s slower with more bandwidth", dist_a2a_name(k));
                    f = in;
                    f.inter_lat *= 2, f.intra_lat *= 2;
                    TU_CHECK(cost(&f, k) >= cost(&in, k), "%s faster with more latency", dist_a2a_name(k));
                    f = in, f.inter_gap = 0;
                    dist_a2a_cost_in g = in;
                    g.inter_gap = in.inter_lat;
                    TU_CHECK(cost(&f, k) == cost(&g, k), "%s: gap 0 is not one latency", dist_a2a_name(k));
                }
            }
    return tu_finish("a2a_model");
}
