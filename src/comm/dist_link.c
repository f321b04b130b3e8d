// MPI backend: one measurement of the links at start, for dist_a2a_choose. Ping-pong
// of a small message (latency: half the round trip) and of a large one (bandwidth:
// bytes over half the round trip less the latency), and a burst of small messages
// answered once (gap: what each further message adds), between rank 0 and the first
// rank of node 1 (inter) and rank 1 of node 0 (intra). The other ranks sleep
// meanwhile, so that the pair measures the link and not the scheduler; the fastest of
// several repetitions counts. What the scheduler costs a phase where every rank takes
// part (sync_s) is measured apart, as training meets it (phase_wait_s).
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

enum { LINK_TAG = 7303, SMALL_REPS = 20, BIG_REPS = 3, BIG_BYTES = 2 << 20, BURST = 32, WAIT_BLOCKS = 5, WAIT_REPS = 20 };

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

// Arithmetic for `cpu` seconds of this thread's CPU time: where ranks share a core it
// takes longer on the wall clock, as a step's compute does.
static void compute_for(double cpu) {
    volatile double x = 1;
    for (double t0 = bg_thread_cpu_now(); bg_thread_cpu_now() - t0 < cpu;)
        for (int i = 0; i < 2000; i++) x = x * 0.999999 + 1e-6;
}

// The phase wait, per exchange, measured as a step meets it: WAIT_REPS spells of compute
// (0.5-2.5 ms of CPU time in turn, so that the exchanges meet the scheduler at varied
// points of its time slices), each followed by a count exchange (one int32 to every
// rank), back to back as a step's layers run; the slowest rank's wall time of the block,
// less the compute's wall time at its share of the cores and the exchanges' links
// (dist_a2a_cost without a wait), per exchange. The median of WAIT_BLOCKS blocks (a
// preempted block drops out). A tiny all-to-all right after a barrier, as before, read
// 3-4x the wait that training meets on emulated nodes (BENCHMARKS.md, issue 17).
static double phase_wait_s(dist_comm *c, const dist_a2a_cost_in *links) {
    const int P = c->size;
    dist_a2a_cost_in own = *links;
    own.bytes_per_rank = 0, own.sync_s = 0;
    const double link_s = dist_a2a_cost(&own, DIST_A2A_FLAT), share = links->ranks_per_core;
    int32_t *send = bg_calloc((size_t)P, sizeof(int32_t)), *recv = bg_calloc((size_t)P, sizeof(int32_t));
    double block[WAIT_BLOCKS];
    // Raw MPI, not dist_alltoall_i32: a probe, kept out of the exchange's traffic counters.
    DIST_MPI(MPI_Alltoall(send, 1, MPI_INT32_T, recv, 1, MPI_INT32_T, c->comm));  // connections up
    for (int b = 0; b < WAIT_BLOCKS; b++) {
        double cpu = 0, t0 = bg_now();
        for (int i = 0; i < WAIT_REPS; i++) {
            const double spell = 0.5e-3 * (1 + i % 5);
            compute_for(spell);
            DIST_MPI(MPI_Alltoall(send, 1, MPI_INT32_T, recv, 1, MPI_INT32_T, c->comm));
            cpu += spell;
        }
        double t = bg_now() - t0;
        DIST_MPI(MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, c->comm));
        block[b] = (t - cpu * share) / WAIT_REPS - link_s;
    }
    free(send), free(recv);
    const double m = bg_median(block, WAIT_BLOCKS);
    return m > 0 ? m : 0;
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
    dist_bcast(c, v, sizeof v, 0);
    io->inter_lat = v[0], io->inter_gap = v[1], io->inter_bw = v[2];
    io->intra_lat = v[3], io->intra_gap = v[4], io->intra_bw = v[5];
    io->sync_s = phase_wait_s(c, io);  // every rank computes the same median of maxima
    dist_watch_end();
}
#endif
