// Token exchange benchmark: flat vs hierarchical vs 2d all-to-all-v (and chunked), on
// the expert-parallel communicator of the BaGuaLu layout. Prints, summed over all
// ranks, the messages and bytes that cross (emulated) node boundaries and those that
// stay inside a node, and the exchange time (median over iterations of the slowest
// rank). Then whether the exchange progresses while the caller computes: 4 chunks
// against a stand-in computation as long as the exchange, once testing the chunks
// between slices of computation (what the dispatcher does) and once not.
//   mpirun -np 4 bench_a2a [--ranks-per-node 2] [--rows 2048] [--width 1024] [--iters 20]
//                          [--progress 0]
// --rows: token rows each rank sends, spread evenly over the EP ranks (a balanced
// router); --width: floats per row (the hidden size).
#include "bench_util.h"
#include "comm/dist.h"
#include "core/timer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t v[8];  // inter msgs, intra msgs, inter bytes, intra bytes (sent), then received
    double ms;
} result;

// One exchange in `chunks` chunks (bench_slowest_ms's run), with `ms` of compute after
// each chunk, testing the exchange during it when `test` is set.
typedef struct {
    dist_comm *c;
    enum dist_a2a_algo algo;
    int chunks;
    const float *send;
    const int *counts;
    float *recv;
    size_t width;
    double ms;
    int test;
} exchange;
static void compute(double ms, dist_a2a *h);
static void run_exchange(void *ctx) {
    const exchange *x = ctx;
    dist_a2a *h = dist_a2a_begin(x->c, x->algo, x->send, x->counts, x->recv, x->counts, x->width, x->chunks);
    for (int k = 0; k < x->chunks; k++) {
        dist_a2a_wait_chunk(h, k);
        if (x->ms > 0) compute(x->ms, x->test ? h : NULL);
    }
    dist_a2a_end(h);
}

// Counters of one exchange, and `iters` timings appended at ms (slowest rank each).
static result measure(dist_comm *c, enum dist_a2a_algo algo, int chunks, const float *send,
                      const int *counts, float *recv, size_t width, int iters, double *ms) {
    result r;
    // One exchange for the counters (they do not depend on the iteration).
    dist_traffic_reset(c);
    dist_a2a_end(dist_a2a_begin(c, algo, send, counts, recv, counts, width, chunks));
    dist_traffic t;
    dist_traffic_get(c, &t);
    int64_t v[8] = {(int64_t)t.msgs_sent_inter,  (int64_t)t.msgs_sent_intra,
                    (int64_t)t.bytes_sent_inter, (int64_t)t.bytes_sent_intra,
                    (int64_t)t.msgs_recv_inter,  (int64_t)t.msgs_recv_intra,
                    (int64_t)t.bytes_recv_inter, (int64_t)t.bytes_recv_intra};
    dist_allreduce_sum_i64(c, v, 8);
    memcpy(r.v, v, sizeof v);
    exchange x = {c, algo, chunks, send, counts, recv, width, 0, 0};
    for (int i = 0; i < iters; i++) ms[i] = bench_slowest_ms(c, run_exchange, &x);
    r.ms = 0;
    return r;
}

// Busy for `ms` (a stand-in for expert GEMMs), testing the exchange every 50 us when
// h is given, as the dispatcher does between GEMMs.
static void compute(double ms, dist_a2a *h) {
    double t0 = bg_now(), next = t0;
    volatile float x = 1.0f;
    while ((bg_now() - t0) * 1e3 < ms) {
        for (int i = 0; i < 1000; i++) x = x * 0.999f + 1e-3f;
        if (h && bg_now() >= next) {
            dist_a2a_progress(h);
            next = bg_now() + 50e-6;
        }
    }
}

// Median (slowest rank) of: 4-chunk exchange with `ms` of compute after each chunk.
static double overlapped(dist_comm *c, const float *send, const int *counts, float *recv,
                         size_t width, int iters, double ms, int test) {
    double *t = malloc(sizeof(double) * iters);
    exchange x = {c, DIST_A2A_FLAT, 4, send, counts, recv, width, ms, test};
    for (int i = 0; i < iters; i++) t[i] = bench_slowest_ms(c, run_exchange, &x);
    double r = bg_median(t, iters);
    free(t);
    return r;
}

int main(int argc, char **argv) {
    int rpn = 2, rows = 2048, width = 1024, iters = 20, progress = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ranks-per-node"))
            rpn = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows"))
            rows = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--width"))
            width = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters"))
            iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--progress"))
            progress = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_a2a: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (rows < 0 || width < 1 || iters < 1 || rpn < 0) {
        fprintf(stderr, "bench_a2a: need rows >= 0, width >= 1, iters >= 1, ranks-per-node >= 0\n");
        return 2;
    }
    dist_init(&argc, &argv);
    int P;
    {
        dist_comm *w = dist_comm_world(rpn);
        P = dist_size(w);
        dist_comm_free(w);
    }
    dist_layout L;
    if (dist_layout_init(&L, 2 * P, P, rpn) != 0) {  // EP = P: one EP group, 2 experts each
        fprintf(stderr, "bench_a2a: layout\n");
        dist_abort(2);
    }
    dist_comm *c = L.ep_comm;
    int n = dist_size(c);
    int *counts = malloc(sizeof(int) * n);
    for (int j = 0; j < n; j++) counts[j] = rows / n + (j < rows % n);
    size_t total = (size_t)rows;
    float *send = malloc(sizeof(float) * (total ? total : 1) * width);
    float *recv = malloc(sizeof(float) * (total ? total : 1) * width);
    for (size_t i = 0; i < total * width; i++) send[i] = (float)(i % 1000) * 1e-3f;

    if (L.world_rank == 0)
        printf(
            "bench_a2a: backend %s, P=%d, EP=%d, %d node(s) of <=%d ranks, %d rows x %d floats "
            "(%.1f MB) sent per rank, %d iterations\n",
            dist_backend(), P, L.ep, L.n_nodes, rpn ? rpn : P, rows, width, total * width * 4 / 1e6,
            iters);
    struct {
        enum dist_a2a_algo algo;
        int chunks;
        const char *name;
    } cases[] = {{DIST_A2A_FLAT, 1, "flat"},
                 {DIST_A2A_HIER, 1, "hierarchical"},
                 {DIST_A2A_2D, 1, "2d"},
                 {DIST_A2A_FLAT, 4, "flat, 4 chunks"},
                 {DIST_A2A_HIER, 4, "hierarchical, 4 chunks"},
                 {DIST_A2A_2D, 4, "2d, 4 chunks"}};
    enum { N_CASES = 6 };
    result res[N_CASES];
    // Alternated rounds (the machine is shared): each case's median over all rounds.
    enum { ROUNDS = 3 };
    double *ms = malloc(sizeof(double) * N_CASES * ROUNDS * iters);
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i < N_CASES; i++)
            res[i] = measure(c, cases[i].algo, cases[i].chunks, send, counts, recv, width, iters,
                             ms + ((size_t)i * ROUNDS + r) * iters);
    for (int i = 0; i < N_CASES; i++) {
        double *m = ms + (size_t)i * ROUNDS * iters;
        res[i].ms = bg_median(m, ROUNDS * iters);
    }
    free(ms);
    if (L.world_rank == 0) {
        printf("%-24s %10s %10s %12s %12s %10s\n", "exchange (sum of ranks)", "inter msgs",
               "intra msgs", "inter MB", "intra MB", "time ms");
        for (int i = 0; i < N_CASES; i++)
            printf("%-24s %10lld %10lld %12.2f %12.2f %10.2f\n", cases[i].name,
                   (long long)res[i].v[0], (long long)res[i].v[1], res[i].v[2] / 1e6,
                   res[i].v[3] / 1e6, res[i].ms);
        if (res[1].v[0] > 0)
            printf(
                "hierarchical / flat: inter-node messages %.2fx, inter-node bytes %.2fx, "
                "intra-node bytes %.2fx, time %.2fx\n",
                (double)res[1].v[0] / res[0].v[0], (double)res[1].v[2] / res[0].v[2],
                res[0].v[3] ? (double)res[1].v[3] / res[0].v[3] : 0.0, res[1].ms / res[0].ms);
        if (res[2].v[0] > 0)
            printf("2d / flat: inter-node messages %.2fx, intra-node bytes %.2fx, time %.2fx\n",
                   (double)res[2].v[0] / res[0].v[0],
                   res[0].v[3] ? (double)res[2].v[3] / res[0].v[3] : 0.0, res[2].ms / res[0].ms);
    }
    // What --a2a auto would choose here: the trainer's link measurement and cost model.
    dist_a2a_cost_in in = {.bytes_per_rank = (double)rows * width * sizeof(float), .intra_bw = 1e12};
    dist_link_measure(c, &in);
    if (L.world_rank == 0 && in.nodes > 1) {
        int fast = 0;
        for (int i = 1; i < 3; i++)
            if (res[i].ms < res[fast].ms) fast = i;
        printf("auto: %s, measured fastest %s (links: inter-node %.3g Gbit/s, %.0f us, gap %.1f us; "
               "intra %.3g Gbit/s, %.0f us; sync %.0f us; %.2f ranks per core; modelled ms flat %.2f, "
               "hierarchical %.2f, 2d %.2f)\n",
               dist_a2a_name(dist_a2a_choose(&in)), cases[fast].name, in.inter_bw * 8e-9,
               in.inter_lat * 1e6, in.inter_gap * 1e6, in.intra_bw * 8e-9, in.intra_lat * 1e6,
               in.sync_s * 1e6, in.ranks_per_core,
               1e3 * dist_a2a_cost(&in, DIST_A2A_FLAT), 1e3 * dist_a2a_cost(&in, DIST_A2A_HIER),
               1e3 * dist_a2a_cost(&in, DIST_A2A_2D));
    }
    // Progress: compute as long as the exchange, in 4 slices after the chunks.
    double slice = res[3].ms / 4;
    double with_tests = progress ? overlapped(c, send, counts, recv, width, iters, slice, 1) : 0;
    double without = progress ? overlapped(c, send, counts, recv, width, iters, slice, 0) : 0;
    if (L.world_rank == 0 && progress)
        printf("progress (flat, 4 chunks, %.2f ms compute after each): exchange alone %.2f ms, "
               "compute alone %.2f ms; overlapped testing between slices %.2f ms, without tests "
               "%.2f ms\n", slice, res[3].ms, 4 * slice, with_tests, without);
    free(counts);
    free(send);
    free(recv);
    dist_layout_free(&L);
    dist_finalize();
    return 0;
}
