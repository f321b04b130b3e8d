// All-reduce, broadcast and barrier. The all-reduce promises a fixed summation order
// (rank order, left to right) on every rank for any bucket size, so results are checked
// bitwise against that serial sum computed locally — tolerance zero. int64 sums are
// exact; max is exact.
#include "dist_fixture.h"

#include <math.h>

static float value_f32(int rank, size_t i) {
    return comm_test_value(rank, i, 7, 0) * (float)(1 + i % 13);
}
static double value_f64(int rank, size_t i) {
    return (double)comm_test_value(rank, i, 8, 0) * 1e-3 * (double)(i % 7 + 1);
}

static void check_f32(dist_comm *c, size_t n, size_t bucket_bytes) {
    int P = dist_size(c), me = dist_rank(c);
    float *buf = malloc(sizeof(float) * (n ? n : 1)), *want = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        buf[i] = value_f32(me, i);
        float s = value_f32(0, i);
        for (int r = 1; r < P; r++) s += value_f32(r, i);  // the promised order
        want[i] = s;
    }
    dist_comm_set_bucket_bytes(c, bucket_bytes);
    dist_allreduce_sum_f32(c, buf, n);
    TU_CHECK(n == 0 || !memcmp(buf, want, n * sizeof(float)),
             "f32 n=%zu bucket %zu: not the rank-order sum", n, bucket_bytes);
    free(buf);
    free(want);
}

static void check_f64_i64(dist_comm *c, size_t n) {
    int P = dist_size(c), me = dist_rank(c);
    double *d = malloc(sizeof(double) * (n + 1)), *dmax = malloc(sizeof(double) * (n + 1));
    int64_t *k = malloc(sizeof(int64_t) * (n + 1));
    for (size_t i = 0; i < n; i++) {
        d[i] = value_f64(me, i);
        dmax[i] = value_f64(me, i);
        k[i] = ((int64_t)me << 40) + (int64_t)i * 1000003 - 5;  // beyond int32
    }
    dist_allreduce_sum_f64(c, d, n);
    dist_allreduce_max_f64(c, dmax, n);
    dist_allreduce_sum_i64(c, k, n);
    for (size_t i = 0; i < n; i++) {
        double s = value_f64(0, i), m = value_f64(0, i);
        int64_t ks = 0;
        for (int r = 1; r < P; r++) {
            s += value_f64(r, i);
            m = fmax(m, value_f64(r, i));
        }
        for (int r = 0; r < P; r++) ks += ((int64_t)r << 40) + (int64_t)i * 1000003 - 5;
        TU_CHECK(d[i] == s, "f64 sum [%zu]", i);
        TU_CHECK(dmax[i] == m, "f64 max [%zu]", i);
        TU_CHECK(k[i] == ks, "i64 sum [%zu]: %lld, want %lld", i, (long long)k[i], (long long)ks);
    }
    free(d);
    free(dmax);
    free(k);
}

static void check_max_nan(dist_comm *c) {
    double v[2] = {dist_rank(c) == dist_size(c) - 1 ? NAN : 1.0, (double)dist_rank(c)};
    dist_allreduce_max_f64(c, v, 2);
    TU_CHECK(isnan(v[0]), "a NaN on one rank must reach the max everywhere");
    TU_CHECK(v[1] == dist_size(c) - 1, "max of ranks");
}

static void check_bcast(dist_comm *c) {
    int P = dist_size(c), me = dist_rank(c);
    for (int root = 0; root < P; root++) {
        size_t n = 1000 + 17 * root;
        unsigned char *b = malloc(n);
        for (size_t i = 0; i < n; i++) b[i] = me == root ? (unsigned char)(i * 31 + root) : 0;
        dist_bcast(c, b, n, root);
        int ok = 1;
        for (size_t i = 0; i < n; i++) ok &= b[i] == (unsigned char)(i * 31 + root);
        TU_CHECK(ok, "bcast from root %d", root);
        free(b);
    }
}

// Bytes the deterministic all-reduce moves: per rank 2 (P-1)/P of the buffer, i.e.
// over the world 2 (P-1) n elements sent and as many received.
static void check_traffic(dist_comm *c) {
    int P = dist_size(c);
    size_t n = 10007;
    float *b = calloc(n, sizeof(float));
    dist_comm_set_bucket_bytes(c, 64 << 20);
    dist_traffic_reset(c);
    dist_allreduce_sum_f32(c, b, n);
    dist_traffic t;
    dist_traffic_get(c, &t);
    int64_t moved[2] = {(int64_t)(t.bytes_sent_intra + t.bytes_sent_inter),
                        (int64_t)(t.bytes_recv_intra + t.bytes_recv_inter)};
    dist_allreduce_sum_i64(c, moved, 2);
    int64_t want = 2 * (int64_t)(P - 1) * (int64_t)n * 4;
    TU_CHECK(moved[0] == want && moved[1] == want, "all-reduce moved %lld/%lld bytes, want %lld",
             (long long)moved[0], (long long)moved[1], (long long)want);
    TU_CHECK(t.calls == 1, "one call counted");
    free(b);
}

static void run_suite(dist_comm *c) {
    int P = dist_size(c);
    // Bucket sizes from 16 floats (buckets of fewer elements than ranks' segments need
    // care) to the default; the big buffer spans several 40 kB buckets with a remainder.
    size_t sizes[] = {0, 1, (size_t)P - 1, (size_t)P + 1, 1000};
    size_t buckets[] = {64, 4096, 64 << 20};
    for (int si = 0; si < 5; si++)
        for (int bi = 0; bi < 3; bi++) check_f32(c, sizes[si], buckets[bi]);
    check_f32(c, 100003, 40000);
    check_f32(c, 100003, 64 << 20);
    dist_comm_set_bucket_bytes(c, 4096);
    check_f64_i64(c, 0);
    check_f64_i64(c, 3);
    check_f64_i64(c, 5000);
    check_max_nan(c);
    check_bcast(c);
    dist_barrier(c);
    check_traffic(c);
}

int main(int argc, char **argv) {
    comm_test_args a = comm_test_start(&argc, &argv);
    dist_comm *world = dist_comm_world(a.ranks_per_node);
    run_suite(world);
    // Gradient groups of the layout: dense over the world, experts over EDP groups.
    int P = dist_size(world);
    for (int ep = 1; ep <= P; ep++) {
        if (P % ep) continue;
        dist_layout L;
        TU_CHECK(dist_layout_init(&L, ep, ep, a.ranks_per_node) == 0, "layout EP=%d", ep);
        run_suite(L.edp_comm);
        run_suite(L.ep_comm);
        dist_layout_free(&L);
    }
    int rc = comm_test_finish(world, "comm/test_allreduce");
    dist_comm_free(world);
    dist_finalize();
    return rc;
}
