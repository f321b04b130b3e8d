// Gradient reduction benchmark: ZeRO-1's reduce-scatter and all-gather, and the
// all-reduce, of one buffer of floats (a model's gradients), and the rank-order sum
// alone (the reduce-scatter's arithmetic, on this rank's P parts). Each figure is the
// median over iterations of the slowest rank.
//   mpirun -np 2 bench_grad_reduce [--floats 23077384] [--iters 9]
// --floats: the buffer (default: M2 without experts, 23.1M parameters).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "core/timer.h"
#include "comm/dist.h"
#include "comm/dist_impl.h"

typedef void (*collective)(dist_comm *, float *, size_t);

// One call of a collective over buf (bench_slowest_ms's run).
typedef struct {
    dist_comm *c;
    collective f;
    float *buf;
    size_t n;
} call;
static void run_call(void *ctx) {
    call *k = ctx;
    k->f(k->c, k->buf, k->n);
}

// The sum alone, as a collective's signature: this rank's P parts (sum_parts, sum_seg
// floats apart) into buf.
static const float *sum_parts;
static size_t sum_seg;
static void sum_alone(dist_comm *c, float *buf, size_t n) {
    dist_sum_rank_order_f32(buf, sum_parts, sum_seg, dist_size(c), dist_rank(c), buf, n);
}

// Median (slowest rank) ms of `iters` calls of f over buf.
static double timed(dist_comm *c, collective f, float *buf, size_t n, int iters) {
    double *ms = malloc(sizeof(double) * iters);
    call k = {c, f, buf, n};
    for (int i = 0; i < iters; i++) ms[i] = bench_slowest_ms(c, run_call, &k);
    const double med = bg_median(ms, iters);
    free(ms);
    return med;
}

int main(int argc, char **argv) {
    dist_init(&argc, &argv);
    size_t n = 23077384;
    int iters = 9;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--floats")) n = (size_t)atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_grad_reduce: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (n == 0 || iters <= 0) {
        fprintf(stderr, "bench_grad_reduce: --floats and --iters must be positive\n");
        return 2;
    }
    dist_comm *c = dist_comm_world(0);
    const int P = dist_size(c), me = dist_rank(c);
    float *buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = (float)((i + (size_t)me) % 1013) * 1e-3f;
    // The sum alone: this rank's segment over P parts, as the reduce-scatter sums them.
    const size_t seg = n / (size_t)P;
    float *parts = malloc((size_t)P * seg * sizeof(float)), *out = malloc(seg * sizeof(float));
    for (size_t i = 0; i < (size_t)P * seg; i++) parts[i] = (float)(i % 977) * 1e-3f;
    memcpy(out, buf, seg * sizeof(float));
    sum_parts = parts, sum_seg = seg;
    const double sum = timed(c, sum_alone, out, seg, iters);
    const double rs = timed(c, dist_reduce_scatter_sum_f32, buf, n, iters);
    const double ag = timed(c, dist_allgather_f32, buf, n, iters);
    const double ar = timed(c, dist_allreduce_sum_f32, buf, n, iters);
    if (me == 0) {
        // Bytes a rank receives in each half: (P-1)/P of the buffer.
        const double half_gb = (double)(P - 1) / P * 4.0 * (double)n / 1e9;
        const double sum_gb = 4.0 * (double)seg * (P + 1) / 1e9;
        printf("P=%d, %zu floats (%.1f MB), median of %d (slowest rank):\n", P, n, 4e-6 * (double)n, iters);
        printf("  rank-order sum alone  %8.2f ms  %6.1f GB/s (P parts read, 1 written)\n",
               sum, sum_gb / (sum * 1e-3));
        printf("  reduce-scatter        %8.2f ms  %6.1f GB/s received per rank\n", rs, half_gb / (rs * 1e-3));
        printf("  all-gather            %8.2f ms  %6.1f GB/s received per rank\n", ag, half_gb / (ag * 1e-3));
        printf("  reduce-scatter + all-gather %.2f ms | all-reduce %.2f ms\n", rs + ag, ar);
    }
    free(buf), free(parts), free(out);
    dist_finalize();
    return 0;
}
