// Reduce-scatter and all-gather (ZeRO-1's halves of the all-reduce): rank r's segment
// [n·r/P, n·(r+1)/P) after the reduce-scatter must be bitwise the all-reduce's value of
// those elements, the rest of the buffer untouched; the all-gather must then rebuild
// the whole all-reduced buffer. Bucket sizes from one element per piece (many rounds)
// to the default; traffic (P-1)/P of the buffer per rank and direction, each.
#include "dist_fixture.h"

static float value(int rank, size_t i) { return comm_test_value(rank, i, 11, 0) * (float)(1 + i % 5); }

static void check(dist_comm *c, size_t n, size_t bucket_bytes) {
    int P = dist_size(c), me = dist_rank(c);
    size_t m = n ? n : 1;
    float *buf = malloc(sizeof(float) * m), *want = malloc(sizeof(float) * m);
    for (size_t i = 0; i < n; i++) buf[i] = want[i] = value(me, i);
    dist_comm_set_bucket_bytes(c, 64 << 20);
    dist_allreduce_sum_f32(c, want, n);
    dist_comm_set_bucket_bytes(c, bucket_bytes);
    dist_reduce_scatter_sum_f32(c, buf, n);
    size_t lo = n * me / P, hi = n * (me + 1) / P;
    int seg_ok = 1, rest_ok = 1;
    for (size_t i = 0; i < n; i++) {
        if (i >= lo && i < hi) seg_ok &= !memcmp(&buf[i], &want[i], sizeof(float));
        else {
            float own = value(me, i);
            rest_ok &= !memcmp(&buf[i], &own, sizeof(float));
        }
    }
    TU_CHECK(seg_ok, "P=%d n=%zu bucket %zu: reduce-scatter segment differs from the all-reduce", P, n,
             bucket_bytes);
    TU_CHECK(rest_ok, "P=%d n=%zu bucket %zu: reduce-scatter changed elements outside the segment", P,
             n, bucket_bytes);
    dist_allgather_f32(c, buf, n);
    TU_CHECK(n == 0 || !memcmp(buf, want, n * sizeof(float)),
             "P=%d n=%zu bucket %zu: all-gather is not the all-reduced buffer", P, n, bucket_bytes);
    free(buf);
    free(want);
}

static void check_traffic(dist_comm *c) {
    int P = dist_size(c);
    size_t n = 10007;
    float *b = calloc(n, sizeof(float));
    dist_comm_set_bucket_bytes(c, 4096);
    for (int op = 0; op < 2; op++) {
        dist_traffic_reset(c);
        if (op == 0) dist_reduce_scatter_sum_f32(c, b, n);
        else dist_allgather_f32(c, b, n);
        dist_traffic t;
        dist_traffic_get(c, &t);
        int64_t moved[2] = {(int64_t)(t.bytes_sent_intra + t.bytes_sent_inter),
                            (int64_t)(t.bytes_recv_intra + t.bytes_recv_inter)};
        dist_allreduce_sum_i64(c, moved, 2);
        int64_t want = (int64_t)(P - 1) * (int64_t)n * 4;
        TU_CHECK(moved[0] == want && moved[1] == want, "%s moved %lld/%lld bytes, want %lld",
                 op ? "all-gather" : "reduce-scatter", (long long)moved[0], (long long)moved[1],
                 (long long)want);
        TU_CHECK(t.calls == 1, "one call counted");
    }
    free(b);
}

// One element per piece over 100003 elements is ~25k rounds of messages: too slow for
// the suite; many rounds are covered at 1000 elements.
static int bucket_small(size_t b) { return b < 4096; }

static void run_suite(dist_comm *c) {
    int P = dist_size(c);
    size_t sizes[] = {0, 1, (size_t)P - 1, (size_t)P + 1, 1000, 100003};
    size_t buckets[] = {4, 64, 4096, 64 << 20};
    for (int si = 0; si < 6; si++)
        for (int bi = 0; bi < 4; bi++)
            if (!(sizes[si] > 1000 && bucket_small(buckets[bi]))) check(c, sizes[si], buckets[bi]);
    check_traffic(c);
}

int main(int argc, char **argv) {
    comm_test_args a = comm_test_start(&argc, &argv);
    dist_comm *world = dist_comm_world(a.ranks_per_node);
    run_suite(world);
    // The communicators ZeRO-1 uses: dense over the world, experts over EDP groups.
    int P = dist_size(world);
    for (int ep = 1; ep <= P; ep++) {
        if (P % ep) continue;
        dist_layout L;
        TU_CHECK(dist_layout_init(&L, ep, ep, a.ranks_per_node) == 0, "layout EP=%d", ep);
        run_suite(L.edp_comm);
        dist_layout_free(&L);
    }
    int rc = comm_test_finish(world, "comm/test_reduce_scatter");
    dist_comm_free(world);
    dist_finalize();
    return rc;
}
