// The overlapped gradient reduction (dist_grad_reduce_*): a buffer posted range by
// range from its end to its start (as the backward finishes gradients), in ranges of
// every length (empty, one element, across rank segments and buckets), with progress
// calls between the posts, must give bitwise what the blocking calls give: every
// element after the all-reduce mode, rank r's segment after the reduce-scatter mode
// (the rest of the buffer left as it was). Bucket sizes from a few elements (many
// buckets: receives wait for ring room, which the end must make) to the default; the
// same handle reused, as the trainer does step after step. The communicator's
// scratch must then be what dist_grad_reduce_scratch_bytes says.
#include "dist_fixture.h"

static float value(int rank, size_t i, int round) {
    return comm_test_value(rank, i, 13, (uint64_t)round) * (float)(1 + i % 7);
}

static void check(dist_comm *c, dist_grad_reduce *h, size_t n, size_t bucket_bytes, int scatter,
                  int round) {
    int P = dist_size(c), me = dist_rank(c);
    size_t m = n ? n : 1;
    float *buf = malloc(sizeof(float) * m), *want = malloc(sizeof(float) * m);
    for (size_t i = 0; i < n; i++) buf[i] = want[i] = value(me, i, round);
    dist_comm_set_bucket_bytes(c, bucket_bytes);
    if (scatter) dist_reduce_scatter_sum_f32(c, want, n);
    else dist_allreduce_sum_f32(c, want, n);
    // Ranges of lengths 0, 1, 2, ... 11, 0, ... from the end: the same on every rank.
    dist_grad_reduce_begin(h, buf, n, scatter);
    size_t hi = n;
    for (int k = 0; hi > 0; k++) {
        size_t len = (size_t)(k * 7 % 12) * (1 + n / 97), lo = hi > len ? hi - len : 0;
        dist_grad_reduce_post(h, lo, hi);
        if (k % 3 == 0) dist_grad_reduce_progress(h, (size_t)(k % 4) * 100);  // 0: no sends
        hi = lo;
    }
    dist_grad_reduce_end(h);
    size_t lo = scatter ? n * me / P : 0, top = scatter ? n * (me + 1) / P : n;
    int ok = n == 0 || !memcmp(buf + lo, want + lo, (top - lo) * sizeof(float));
    TU_CHECK(ok, "P=%d n=%zu bucket %zu %s: the overlapped sums differ from the blocking call's", P,
             n, bucket_bytes, scatter ? "reduce-scatter" : "all-reduce");
    free(buf);
    free(want);
}

static void run_suite(dist_comm *c) {
    int P = dist_size(c);
    size_t sizes[] = {0, 1, (size_t)P + 1, 1000, 100003};
    size_t buckets[] = {16, 4096, 64 << 20};
    dist_grad_reduce *h = dist_grad_reduce_new(c);
    for (int scatter = 0; scatter < 2; scatter++)
        for (int si = 0; si < 5; si++)
            for (int bi = 0; bi < 3; bi++)
                if (!(sizes[si] > 1000 && buckets[bi] < 4096))  // ~10^4 buckets: too slow
                    for (int round = 0; round < 2; round++) check(c, h, sizes[si], buckets[bi], scatter, round);
    dist_grad_reduce_free(h);
    // A fresh communicator holds what the size function says, and its reduction slot.
    dist_comm *d = dist_comm_split(c, 0, dist_rank(c));
    h = dist_grad_reduce_new(d);
    check(d, h, 100003, 64 << 20, 1, 0);
    size_t want = dist_grad_reduce_scratch_bytes(P, 100003, 64 << 20),
           rs = dist_reduce_scatter_scratch_bytes(P, 100003, 64 << 20);
    TU_CHECK(dist_scratch_held(d) == want + rs, "P=%d: scratch held %zu, want %zu + %zu", P,
             dist_scratch_held(d), want, rs);
    dist_grad_reduce_free(h);
    dist_comm_free(d);
}

int main(int argc, char **argv) {
    comm_test_args a = comm_test_start(&argc, &argv);
    dist_comm *world = dist_comm_world(a.ranks_per_node);
    run_suite(world);
    int rc = comm_test_finish(world, "comm/test_grad_reduce");
    dist_comm_free(world);
    dist_finalize();
    return rc;
}
