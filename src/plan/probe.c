// The link probe of `bagualu plan --calibrate`, run under mpirun as the hidden verb
// `bagualu plan-probe [--ranks-per-node R]`: all-to-all times of tiny and large blocks
// on the world, the slowest rank's median, give latency and per-rank bandwidth.
#include "comm/dist.h"
#include "core/timer.h"
#include "plan/calibrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Median over iterations of the slowest rank's time for `rows` floats to every peer.
static double a2a_time(dist_comm *c, int rows, int iters) {
    int P = dist_size(c);
    float *send = calloc((size_t)rows * P + 1, sizeof(float)), *recv = calloc((size_t)rows * P + 1, sizeof(float));
    int *counts = malloc(sizeof(int) * P);
    for (int i = 0; i < P; i++) counts[i] = rows;
    double *t = malloc(sizeof(double) * iters);
    dist_alltoallv(c, DIST_A2A_FLAT, send, counts, recv, counts, 1);  // warm-up
    for (int i = 0; i < iters; i++) {
        dist_barrier(c);
        double t0 = bg_now();
        dist_alltoallv(c, DIST_A2A_FLAT, send, counts, recv, counts, 1);
        t[i] = bg_now() - t0;
        dist_allreduce_max_f64(c, &t[i], 1);
    }
    qsort(t, iters, sizeof(double), cmp_double);
    double med = t[iters / 2];
    free(send), free(recv), free(counts), free(t);
    return med;
}

int plan_probe(int argc, char **argv) {
    int rpn = 0;
    for (int i = 0; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--ranks-per-node")) rpn = atoi(argv[i + 1]);
    dist_comm *w = dist_comm_world(rpn);
    int P = dist_size(w);
    if (P < 2) {
        if (dist_rank(w) == 0) printf("0 0\n");
        dist_comm_free(w);
        return 0;
    }
    // A block of 2 floats: latency per peer message; 2 MiB blocks: bandwidth.
    double t_small = a2a_time(w, 2, 50), big = 1 << 19, t_big = a2a_time(w, (int)big, 7);
    double lat = t_small / (P - 1);
    double bw = (P - 1) * big * 4 / (t_big - t_small > 0 ? t_big - t_small : t_big);
    if (dist_rank(w) == 0) printf("%.6g %.6g\n", bw, lat);
    dist_comm_free(w);
    return 0;
}
