// MPI backend: one measurement of the links at start, for dist_a2a_choose. Ping-pong
// of a small message (latency: half the round trip) and of a large one (bandwidth:
// bytes over half the round trip less the latency), and a burst of small messages
// answered once (gap: what each further message adds), between rank 0 and the first
// rank of node 1 (inter) and rank 1 of node 0 (intra). The other ranks sleep
// meanwhile, so that the pair measures the link and not the scheduler; the fastest of
// several repetitions counts. What the scheduler costs a phase where every rank takes
// part (sync_s) is measured apart, by a tiny all-to-all of all ranks.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // sched_getaffinity, CPU_COUNT
#endif
#ifdef BG_HAVE_MPI
#include "core/timer.h"
#include "comm/dist_impl.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { LINK_TAG = 7303, SMALL_REPS = 20, BIG_REPS = 3, BIG_BYTES = 2 << 20, BURST = 32, SYNC_REPS = 9 };

// Half the fastest round trip over reps: `n` messages of `bytes` there, one back.
static double half_rtt(dist_comm *c, int peer, char *buf, int bytes, int n, int reps) {
    int me = c->rank;
    double best = 1e30;
    MPI_Request r[BURST];
    for (int i = 0; i < reps; i++) {
        double t0 = bg_now();
        if (me == 0) {
            for (int k = 0; k < n; k++)
                DIST_MPI(MPI_Isend(buf, bytes, MPI_BYTE, peer, LINK_TAG, c->comm, &r[k]));
            DIST_MPI(MPI_Waitall(n, r, MPI_STATUSES_IGNORE));
            DIST_MPI(MPI_Recv(buf, bytes, MPI_BYTE, peer, LINK_TAG, c->comm, MPI_STATUS_IGNORE));
        } else {
            for (int k = 0; k < n; k++)
                DIST_MPI(MPI_Recv(buf, bytes, MPI_BYTE, 0, LINK_TAG, c->comm, MPI_STATUS_IGNORE));
            DIST_MPI(MPI_Send(buf, bytes, MPI_BYTE, 0, LINK_TAG, c->comm));
        }
        double t = bg_now() - t0;
        best = t < best ? t : best;
    }
    return best / 2;
}

// Latency, gap and bandwidth between rank 0 and peer (known on rank 0 only).
static void pair(dist_comm *c, int peer, double *lat, double *gap, double *bw) {
    if (c->rank != 0 && c->rank != peer) return;
    char *buf = bg_calloc(BIG_BYTES, 1);
    half_rtt(c, peer, buf, 8, 1, 2);  // connections up first
    double l = half_rtt(c, peer, buf, 8, 1, SMALL_REPS);
    double burst = half_rtt(c, peer, buf, 8, BURST, SMALL_REPS);
    double t = half_rtt(c, peer, buf, BIG_BYTES, 1, BIG_REPS);
    free(buf);
    *lat = l;
    *gap = burst > l ? 2 * (burst - l) / (BURST - 1) : 0;
    *bw = BIG_BYTES / (t > l ? t - l : t);
}

// A barrier the ranks outside a measurement wait in asleep (a spinning rank would take
// the core of a measuring one where ranks outnumber cores).
static void sleeping_barrier(dist_comm *c) {
    MPI_Request r;
    int done = 0;
    DIST_MPI(MPI_Ibarrier(c->comm, &r));
    for (;;) {
        DIST_MPI(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
        if (done) break;
        nanosleep(&(struct timespec){0, 200000}, NULL);
    }
}

// The slowest rank's median time of one phase of the flat exchange: a float to every
// other rank, all posted at once (as the flat all-to-all does; MPI_Alltoall may take
// log P rounds for tiny blocks), all ranks.
static double tiny_a2a_s(dist_comm *c) {
    int P = c->size;
    float *send = bg_calloc((size_t)P, sizeof(float)), *recv = bg_calloc((size_t)P, sizeof(float));
    MPI_Request *r = bg_malloc(sizeof(MPI_Request) * 2 * P);
    double t[SYNC_REPS];
    for (int i = -1; i < SYNC_REPS; i++) {  // the first warms the connections up
        DIST_MPI(MPI_Barrier(c->comm));
        double t0 = bg_now();
        int n = 0;
        for (int j = 0; j < P; j++)
            if (j != c->rank) DIST_MPI(MPI_Irecv(&recv[j], 1, MPI_FLOAT, j, LINK_TAG, c->comm, &r[n++]));
        for (int j = 0; j < P; j++)
            if (j != c->rank) DIST_MPI(MPI_Isend(&send[j], 1, MPI_FLOAT, j, LINK_TAG, c->comm, &r[n++]));
        DIST_MPI(MPI_Waitall(n, r, MPI_STATUSES_IGNORE));
        double dt = bg_now() - t0;
        DIST_MPI(MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, c->comm));
        if (i >= 0) t[i] = dt;
    }
    free(send), free(recv), free(r);
    for (int i = 1; i < SYNC_REPS; i++)  // insertion sort: a handful of values
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1], t[j - 1] = x;
        }
    return t[SYNC_REPS / 2];
}

// A hash of the kernel's boot id: equal on ranks of one machine, whatever network or
// UTS namespace (emulated node) they run in; 0 where it cannot be read.
static int32_t machine_key(void) {
    char id[64] = {0};
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(id, sizeof id, f)) id[0] = 0;
        fclose(f);
    }
    uint32_t h = 2166136261u;  // FNV-1a
    for (const char *p = id; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return (int32_t)(h & 0x7fffffff);
}

// The most ranks per core on any machine of the job: ranks of c on each machine, times
// the groups like c (the job's ranks over c's), over the cores a rank may run on.
static double ranks_per_core(dist_comm *c) {
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    int32_t mine[2] = {machine_key(), cores > 0 ? cores : 1}, *all = bg_malloc(sizeof(int32_t) * 2 * c->size);
    // Not dist_allgather_i32: a probe, kept out of the exchange's traffic counters.
    DIST_MPI(MPI_Allgather(mine, 2, MPI_INT32_T, all, 2, MPI_INT32_T, c->comm));
    int world = c->size;
    DIST_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world));
    double worst = 0;
    for (int i = 0; i < c->size; i++) {
        int same = 0;
        for (int j = 0; j < c->size; j++) same += all[2 * j] == all[2 * i];
        double r = (double)same * world / c->size / all[2 * i + 1];
        worst = r > worst ? r : worst;
    }
    free(all);
    return worst > 1 ? worst : 1;
}

void dist_link_measure(dist_comm *c, dist_a2a_cost_in *io) {
    io->nodes = c->n_nodes;
    io->ranks_per_node = c->size / c->n_nodes;
    io->ranks_per_core = 1;
    if (c->local) return;
    double v[7] = {io->inter_lat, io->inter_gap, io->inter_bw, io->intra_lat, io->intra_gap, io->intra_bw, 0};
    dist_watch_begin("measuring the links");
    io->ranks_per_core = ranks_per_core(c);
    sleeping_barrier(c);
    if (c->n_nodes > 1) pair(c, c->members[c->node_start[1]], &v[0], &v[1], &v[2]);
    sleeping_barrier(c);
    if (c->node_start[1] > 1) pair(c, c->members[1], &v[3], &v[4], &v[5]);
    sleeping_barrier(c);
    double tiny = tiny_a2a_s(c);
    dist_watch_end();
    dist_bcast(c, v, sizeof v, 0);
    io->inter_lat = v[0], io->inter_gap = v[1], io->inter_bw = v[2];
    io->intra_lat = v[3], io->intra_gap = v[4], io->intra_bw = v[5];
    // sync_s: the tiny all-to-all's time beyond what the links' own figures give it.
    dist_a2a_cost_in link = *io;
    link.bytes_per_rank = 0, link.sync_s = 0;
    double own = dist_a2a_cost(&link, DIST_A2A_FLAT);
    io->sync_s = tiny > own ? tiny - own : 0;
}
#endif
