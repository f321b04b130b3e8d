// The cost model behind --a2a auto: modelled seconds of one exchange for each
// algorithm, from the shape of the job and the links' bandwidth, latency and gap (given
// or measured, never constants of one machine). Backend-independent.
//
// Per rank, B bytes leave per exchange, spread evenly over the ranks; off = B(N-1)/N
// of them leave the node, and a node's link carries its m ranks' share, m·off. The
// messages of one phase are posted together: a phase costs one latency (plus sync_s,
// the wait for every rank to get a core), and each message its sender one gap.
// Intra-node bytes are copies by the cores, s ranks sharing each (ranks_per_core).
//   flat  one phase: m(N-1) inter and m-1 intra messages, m·off over the link, the
//         direct intra rows B(m-1)/(mN);
//   2d    a phase for the counts inside the node, an intra phase (m-1 messages,
//         B(m-1)/m moved), then an inter phase of N-1 messages per rank carrying the
//         same link bytes; packing for each phase and unpacking copy B + 2·off;
//   hier  a phase for the counts, the leader gathers (m-1)·off, sends N-1 messages,
//         scatters (m-1)·off: the leader's copies serial, plus the direct intra rows;
//         every rank packs and unpacks its off, the leader reorders m·off twice.
// With one rank per node the three send the same messages; 2d and hier still pack.
#include "comm/dist.h"

static const char *const names[DIST_A2A_ALGOS] = {"flat", "hierarchical", "2d"};

const char *dist_a2a_name(enum dist_a2a_algo algo) {
    return (int)algo >= 0 && algo < DIST_A2A_ALGOS ? names[algo] : "?";
}

// Seconds to copy `bytes` inside a node: bandwidth shared by s ranks per core.
static double copy_s(const dist_a2a_cost_in *in, double bytes) {
    if (bytes <= 0) return 0;
    double s = in->ranks_per_core > 1 ? in->ranks_per_core : 1;
    return in->intra_bw > 0 ? bytes * s / in->intra_bw : 0;
}

double dist_a2a_cost(const dist_a2a_cost_in *in, enum dist_a2a_algo algo) {
    const double N = in->nodes, m = in->ranks_per_node, B = in->bytes_per_rank;
    const double sync = in->sync_s > 0 ? in->sync_s : 0;
    const double gi = in->intra_gap > 0 ? in->intra_gap : in->intra_lat;
    const double go = in->inter_gap > 0 ? in->inter_gap : in->inter_lat;
    const double intra_phase = m > 1 ? in->intra_lat + sync : 0;
    const double direct = gi * (m - 1) + copy_s(in, B / (N > 1 ? N : 1) * (m - 1) / m);
    if (N < 2) return intra_phase + direct;
    const double off = B * (N - 1) / N, link = in->inter_bw > 0 ? m * off / in->inter_bw : 0;
    const double inter_phase = in->inter_lat + sync + link;
    switch (algo) {
    case DIST_A2A_HIER:
        return inter_phase + go * (N - 1) + direct + 3 * intra_phase +
               2 * (copy_s(in, (m - 1) * off) + gi * (m - 1)) + copy_s(in, 2 * off + 2 * m * off);
    case DIST_A2A_2D:
        return 2 * intra_phase + gi * (m - 1) + copy_s(in, B * (m - 1) / m) + inter_phase + go * (N - 1) +
               copy_s(in, B + 2 * off);
    default:
        return inter_phase + go * m * (N - 1) + direct;
    }
}

enum dist_a2a_algo dist_a2a_choose(const dist_a2a_cost_in *in) {
    enum dist_a2a_algo best = DIST_A2A_FLAT;
    if (in->nodes < 2) return best;
    for (int a = 1; a < DIST_A2A_ALGOS; a++)
        if (dist_a2a_cost(in, a) < dist_a2a_cost(in, best)) best = a;
    return best;
}
