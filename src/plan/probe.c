// The link probe of `bagualu plan --calibrate`, run under mpirun as the hidden verb
// `bagualu plan-probe [--ranks-per-node R] [--links-only]`: the links as --a2a auto measures them
// (dist_link_measure: ping-pong latency and bandwidth and a burst's gap between two
// ranks while the others sleep). Rank 0 prints "bandwidth latency gap sync" of the
// inter-node link where the ranks span nodes, else of the intra-node one (sync 0:
// printed between nodes only). sync, the phase wait, is dist_link_measure's (measured
// as training meets it: count exchanges right after spells of compute, less what the
// compute and the links account for), per rank per node (the planner multiplies by
// the layout's): the probe may run at any ranks per node, and measures best at the one
// to be planned.
// Then, where the ranks span nodes, the inter-node link's rate while every rank exchanges
// at once ("exchange", last; 0 on one node): the planner prices the expert rows' trips at it.
// Then, unless --links-only, the gradient reduction as training runs it, every rank at
// once over a buffer past the caches: "bulk reduce", the all-gather's bytes received per
// rank per second and the rank-order sum's bytes (P parts read, 1 written) per second,
// the time the reduce-scatter takes beyond the all-gather's (the same transfers).
#include "comm/dist.h"
#include "core/error.h"
#include "core/timer.h"
#include "plan/calibrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { REDUCE_FLOATS = 32 << 20, REDUCE_ITERS = 9 };

// Median over REDUCE_ITERS of the slowest rank's seconds for f over buf.
static double median_s(dist_comm *w, void (*f)(dist_comm *, float *, size_t), float *buf, size_t n) {
    double t[REDUCE_ITERS];
    f(w, buf, n);  // first touch of the scratch and the peers' mappings
    for (int i = 0; i < REDUCE_ITERS; i++) {
        dist_barrier(w);
        double t0 = bg_now();
        f(w, buf, n);
        t[i] = bg_now() - t0;
        dist_allreduce_max_f64(w, &t[i], 1);
    }
    return bg_median(t, REDUCE_ITERS);
}

// bulk and reduce in bytes/s (reduce 0 where the sum's time is lost in the noise).
static void reduce_rates(dist_comm *w, double *bulk, double *reduce) {
    const size_t n = REDUCE_FLOATS;
    const int P = dist_size(w);
    float *buf = bg_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 1021) * 1e-3f;
    const double ag = median_s(w, dist_allgather_f32, buf, n);
    const double rs = median_s(w, dist_reduce_scatter_sum_f32, buf, n);
    free(buf);
    *bulk = (double)(P - 1) / P * 4.0 * (double)n / ag;
    *reduce = rs > 1.05 * ag ? 4.0 * (double)n / P * (P + 1) / (rs - ag) : 0;
}

// The inter-node link's bytes/s per node while every rank exchanges at once, as a
// flat all-to-all of training's does: where ranks share cores, the links' stack and the
// receivers compete with the spinning ranks (emulated nodes: BENCHMARKS.md, issue 17).
// EXCHANGE_BYTES per rank, spread evenly; the median over EXCHANGE_ITERS of the slowest
// rank's time, less one phase wait (sync_s). At most the lone pair's rate; 0 on one
// node and where every rank has a core (there training's trips ran at the pair's rate).
enum { EXCHANGE_BYTES = 2 << 20, EXCHANGE_WIDTH = 64, EXCHANGE_ITERS = 5 };
static double exchange_bw(dist_comm *w, const dist_a2a_cost_in *in) {
    const int P = dist_size(w), R = in->ranks_per_node;
    if (in->nodes < 2 || R < 1 || in->ranks_per_core <= 1) return 0;
    const int rows = EXCHANGE_BYTES / (4 * EXCHANGE_WIDTH) / P;
    float *send = bg_calloc((size_t)rows * P * EXCHANGE_WIDTH, sizeof(float));
    float *recv = bg_calloc((size_t)rows * P * EXCHANGE_WIDTH, sizeof(float));
    int *counts = bg_malloc(sizeof(int) * P);
    for (int j = 0; j < P; j++) counts[j] = rows;
    dist_alltoallv(w, DIST_A2A_FLAT, send, counts, recv, counts, EXCHANGE_WIDTH);  // connections up
    double t[EXCHANGE_ITERS];
    for (int i = 0; i < EXCHANGE_ITERS; i++) {
        dist_barrier(w);
        double t0 = bg_now();
        dist_alltoallv(w, DIST_A2A_FLAT, send, counts, recv, counts, EXCHANGE_WIDTH);
        t[i] = bg_now() - t0;
        dist_allreduce_max_f64(w, &t[i], 1);
    }
    free(send), free(recv), free(counts);
    // A node's bytes to the other nodes: its R ranks' rows to the P - R ranks elsewhere.
    const double node_bytes = (double)R * rows * (P - R) * EXCHANGE_WIDTH * 4;
    const double s = bg_median(t, EXCHANGE_ITERS) - in->sync_s;
    const double bw = s > 0 ? node_bytes / s : in->inter_bw;
    return bw < in->inter_bw ? bw : in->inter_bw;
}

int plan_probe(int argc, char **argv) {
    int rpn = 0, links_only = 0;
    for (int i = 0; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--ranks-per-node")) rpn = atoi(argv[i + 1]);
        links_only |= !strcmp(argv[i], "--links-only");
    }
    dist_comm *w = dist_comm_world(rpn);
    if (dist_size(w) < 2) {
        if (dist_rank(w) == 0) printf("0 0 0 0 0 0 0\n");
        dist_comm_free(w);
        return 0;
    }
    dist_a2a_cost_in in = {0};
    dist_link_measure(w, &in);  // sync_s, the phase wait, as --a2a auto weighs it too
    const double xbw = exchange_bw(w, &in);
    double bulk = 0, reduce = 0;
    if (!links_only) reduce_rates(w, &bulk, &reduce);
    if (dist_rank(w) == 0) {
        if (in.nodes > 1)
            printf("%.6g %.6g %.6g %.6g", in.inter_bw, in.inter_lat, in.inter_gap,
                   in.sync_s / in.ranks_per_node);
        else
            printf("%.6g %.6g %.6g 0", in.intra_bw, in.intra_lat, in.intra_gap);
        printf(" %.6g %.6g %.6g\n", bulk, reduce, xbw);
    }
    dist_comm_free(w);
    return 0;
}
