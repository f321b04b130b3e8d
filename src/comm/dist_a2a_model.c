// The cost model behind --a2a auto: modelled seconds of one exchange for each
// algorithm, from the shape of the job and the links' bandwidth and latency (given or
// measured, never constants of one machine). Backend-independent.
//
// Per rank, B bytes leave per exchange, spread evenly over the ranks; off = B(N-1)/N
// of them leave the node, and a node's link carries its m ranks' share, m·off. A
// message costs its sender one latency. Then
//   flat  m(N-1) inter messages per rank, m·off over the link, direct intra rows;
//   hier  the leader gathers and scatters (m-1)·off inside the node on top, serially,
//         and sends N-1 inter messages;
//   2d    one intra all-to-all of B(m-1)/m per rank, then N-1 inter messages per rank.
#include "comm/dist.h"

static const char *const names[DIST_A2A_ALGOS] = {"flat", "hierarchical", "2d"};

const char *dist_a2a_name(enum dist_a2a_algo algo) {
    return (int)algo >= 0 && algo < DIST_A2A_ALGOS ? names[algo] : "?";
}

double dist_a2a_cost(const dist_a2a_cost_in *in, enum dist_a2a_algo algo) {
    const double N = in->nodes, m = in->ranks_per_node, B = in->bytes_per_rank;
    const double off = B * (N - 1) / N, link = m * off / in->inter_bw;
    const double intra_direct = B / N * (m - 1) / m / in->intra_bw + in->intra_lat * (m - 1);
    if (N < 2) return intra_direct;
    switch (algo) {
    case DIST_A2A_HIER:
        return in->inter_lat * (N - 1) + link + intra_direct +
               2 * ((m - 1) * off / in->intra_bw + in->intra_lat * (m - 1));
    case DIST_A2A_2D:
        return in->inter_lat * (N - 1) + link + B * (m - 1) / m / in->intra_bw +
               in->intra_lat * (m - 1);
    default:
        return in->inter_lat * m * (N - 1) + link + intra_direct;
    }
}

enum dist_a2a_algo dist_a2a_choose(const dist_a2a_cost_in *in) {
    enum dist_a2a_algo best = DIST_A2A_FLAT;
    if (in->nodes < 2) return best;
    for (int a = 1; a < DIST_A2A_ALGOS; a++)
        if (dist_a2a_cost(in, a) < dist_a2a_cost(in, best)) best = a;
    return best;
}
