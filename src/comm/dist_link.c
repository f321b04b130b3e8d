// MPI backend: one measurement of the links at start, for dist_a2a_choose. Ping-pong
// of a small message (latency: half the round trip) and of a large one (bandwidth:
// bytes over half the round trip less the latency) between rank 0 and the first rank
// of node 1 (inter) and rank 1 of node 0 (intra). The fastest round trip of several
// counts: on a loaded or oversubscribed machine the others measure the scheduler.
#ifdef BG_HAVE_MPI
#include "core/timer.h"
#include "comm/dist_impl.h"

#include <string.h>

enum { LINK_TAG = 7303, SMALL_REPS = 20, BIG_REPS = 3, BIG_BYTES = 2 << 20 };

// Half the fastest round trip of `bytes` over reps; only on ranks 0 and peer.
static double half_rtt(dist_comm *c, int peer, char *buf, int bytes, int reps) {
    int me = c->rank;
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t0 = bg_now();
        if (me == 0) {
            DIST_MPI(MPI_Send(buf, bytes, MPI_BYTE, peer, LINK_TAG, c->comm));
            DIST_MPI(MPI_Recv(buf, bytes, MPI_BYTE, peer, LINK_TAG, c->comm, MPI_STATUS_IGNORE));
        } else {
            DIST_MPI(MPI_Recv(buf, bytes, MPI_BYTE, 0, LINK_TAG, c->comm, MPI_STATUS_IGNORE));
            DIST_MPI(MPI_Send(buf, bytes, MPI_BYTE, 0, LINK_TAG, c->comm));
        }
        double t = bg_now() - t0;
        best = t < best ? t : best;
    }
    return best / 2;
}

// Latency and bandwidth between rank 0 and peer (known on rank 0 only).
static void pair(dist_comm *c, int peer, double *lat, double *bw) {
    if (c->rank != 0 && c->rank != peer) return;
    char *buf = bg_calloc(BIG_BYTES, 1);
    half_rtt(c, peer, buf, 8, 2);  // connections up first
    double l = half_rtt(c, peer, buf, 8, SMALL_REPS);
    double t = half_rtt(c, peer, buf, BIG_BYTES, BIG_REPS);
    free(buf);
    *lat = l;
    *bw = BIG_BYTES / (t > l ? t - l : t);
}

void dist_link_measure(dist_comm *c, dist_a2a_cost_in *io) {
    io->nodes = c->n_nodes;
    io->ranks_per_node = c->size / c->n_nodes;
    if (c->local) return;
    double v[4] = {io->inter_lat, io->inter_bw, io->intra_lat, io->intra_bw};
    dist_watch_begin("measuring the links");
    if (c->n_nodes > 1) pair(c, c->members[c->node_start[1]], &v[0], &v[1]);
    if (c->node_start[1] > 1) pair(c, c->members[1], &v[2], &v[3]);
    dist_watch_end();
    dist_bcast(c, v, sizeof v, 0);
    io->inter_lat = v[0], io->inter_bw = v[1], io->intra_lat = v[2], io->intra_bw = v[3];
}
#endif
