// The link probe of `bagualu plan --calibrate`, run under mpirun as the hidden verb
// `bagualu plan-probe [--ranks-per-node R]`: the links as --a2a auto measures them
// (dist_link_measure: ping-pong latency and bandwidth and a burst's gap between two
// ranks while the others sleep, and the phase wait sync of a tiny all-to-all of all
// ranks). Rank 0 prints "bandwidth latency gap sync" of the inter-node link where the
// ranks span nodes, else of the intra-node one (sync 0: measured between nodes only).
// sync is printed per rank per node (the planner multiplies by the layout's): the
// probe may run at any ranks per node, and measures best at the one to be planned.
#include "comm/dist.h"
#include "plan/calibrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int plan_probe(int argc, char **argv) {
    int rpn = 0;
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--ranks-per-node")) rpn = atoi(argv[i + 1]);
    dist_comm *w = dist_comm_world(rpn);
    if (dist_size(w) < 2) {
        if (dist_rank(w) == 0) printf("0 0 0 0\n");
        dist_comm_free(w);
        return 0;
    }
    dist_a2a_cost_in in = {0};
    dist_link_measure(w, &in);
    if (dist_rank(w) == 0) {
        if (in.nodes > 1)
            printf("%.6g %.6g %.6g %.6g\n", in.inter_bw, in.inter_lat, in.inter_gap,
                   in.sync_s / in.ranks_per_node);
        else
            printf("%.6g %.6g %.6g 0\n", in.intra_bw, in.intra_lat, in.intra_gap);
    }
    dist_comm_free(w);
    return 0;
}
