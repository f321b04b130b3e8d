// All-to-all of counts and of rows: flat against the definition, hierarchical and
// chunked (both algorithms) bitwise against flat, on the world and on expert-parallel
// groups, with uneven counts, empty blocks and ranks that send nothing; and the
// traffic counters against the messages each algorithm must issue.
// Tolerance: none. Exchanges only move bytes, so every comparison is exact (memcmp).
#include "core/timer.h"
#include "dist_fixture.h"

typedef struct {
    int n, me;
    int *cnt;  // [n][n] rows rank i sends rank j, known to every rank
    size_t width;
    float *send, *want;
    int *send_counts, *recv_counts;
    size_t n_send, n_recv;
} exchange;

// Counts from a generator every rank seeds alike. `sparsity` in [0,1): the share of
// empty blocks; rank `silent` (if >= 0) sends nothing at all.
static void exchange_make(exchange *x, dist_comm *c, size_t width, int max_rows, double sparsity,
                          int silent, uint64_t seed) {
    int n = dist_size(c), me = dist_rank(c);
    x->n = n;
    x->me = me;
    x->width = width;
    x->cnt = malloc(sizeof(int) * n * n);
    tu_seed(seed);
    for (int i = 0; i < n * n; i++) {
        int rows = 1 + (int)(tu_uniform() * max_rows);
        x->cnt[i] = tu_uniform() < sparsity ? 0 : rows;
        if (i / n == silent) x->cnt[i] = 0;
    }
    x->send_counts = malloc(sizeof(int) * n);
    x->recv_counts = malloc(sizeof(int) * n);
    x->n_send = x->n_recv = 0;
    for (int j = 0; j < n; j++) {
        x->send_counts[j] = x->cnt[me * n + j];
        x->recv_counts[j] = x->cnt[j * n + me];
        x->n_send += x->send_counts[j];
        x->n_recv += x->recv_counts[j];
    }
    // A rank with nothing to move passes NULL, as a caller with an empty batch may.
    x->send = x->n_send ? malloc(sizeof(float) * x->n_send * width) : NULL;
    x->want = x->n_recv ? malloc(sizeof(float) * x->n_recv * width) : NULL;
    size_t at = 0;
    for (int j = 0; j < n; j++)
        for (int t = 0; t < x->send_counts[j]; t++, at++)
            for (size_t f = 0; f < width; f++)
                x->send[at * width + f] = comm_test_value(me, j, t, f + seed);
    at = 0;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < x->recv_counts[i]; t++, at++)
            for (size_t f = 0; f < width; f++)
                x->want[at * width + f] = comm_test_value(i, me, t, f + seed);
}

static void exchange_free(exchange *x) {
    free(x->cnt);
    free(x->send_counts);
    free(x->recv_counts);
    free(x->send);
    free(x->want);
}

static float *recv_buffer(const exchange *x) {
    if (!x->n_recv) return NULL;
    float *r = malloc(sizeof(float) * x->n_recv * x->width);
    for (size_t i = 0; i < x->n_recv * x->width; i++) r[i] = -777.0f;  // poison
    return r;
}

static int same(const float *a, const float *b, size_t n) {
    return n == 0 || !memcmp(a, b, n * sizeof(float));
}

// Rows of chunk k of every source's block already hold their final values.
static int chunk_final(const exchange *x, const float *recv, int k, int C) {
    size_t at = 0;
    for (int i = 0; i < x->n; i++) {
        int lo = dist_chunk_lo(x->recv_counts[i], k, C),
            hi = dist_chunk_lo(x->recv_counts[i], k + 1, C);
        if (!same(recv + (at + lo) * x->width, x->want + (at + lo) * x->width,
                  (hi - lo) * x->width))
            return 0;
        at += x->recv_counts[i];
    }
    return 1;
}

static const char *algo_name(enum dist_a2a_algo a) { return dist_a2a_name(a); }

static void check_exchange(dist_comm *c, const exchange *x, const char *what) {
    // Counts travel first, as in the MoE layer.
    int32_t *got_counts = malloc(sizeof(int32_t) * x->n);
    dist_alltoall_i32(c, x->send_counts, got_counts, 1);
    for (int i = 0; i < x->n; i++)
        TU_CHECK(got_counts[i] == x->recv_counts[i], "%s: count from %d: %d, want %d", what, i,
                 got_counts[i], x->recv_counts[i]);
    free(got_counts);
    size_t n_floats = x->n_recv * x->width;
    float *flat = recv_buffer(x);
    dist_alltoallv(c, DIST_A2A_FLAT, x->send, x->send_counts, flat, x->recv_counts, x->width);
    TU_CHECK(same(flat, x->want, n_floats), "%s: flat differs from the definition", what);
    for (int algo = 1; algo < DIST_A2A_ALGOS; algo++) {
        float *hier = recv_buffer(x);
        dist_alltoallv(c, algo, x->send, x->send_counts, hier, x->recv_counts, x->width);
        TU_CHECK(same(hier, flat, n_floats), "%s: %s differs from flat", what, algo_name(algo));
        free(hier);
    }
    int chunks[] = {1, 2, 3, 5};
    for (int algo = 0; algo < DIST_A2A_ALGOS; algo++)
        for (int ci = 0; ci < 4; ci++) {
            int C = chunks[ci];
            float *got = recv_buffer(x);
            dist_a2a *h =
                dist_a2a_begin(c, algo, x->send, x->send_counts, got, x->recv_counts, x->width, C);
            for (int k = 0; k < C; k++) {
                dist_a2a_progress(h);  // where a caller would compute on chunk k-1
                dist_a2a_wait_chunk(h, k);
                TU_CHECK(chunk_final(x, got, k, C), "%s: %s chunk %d of %d not final after wait",
                         what, algo_name(algo), k, C);
            }
            dist_a2a_end(h);
            TU_CHECK(same(got, flat, n_floats), "%s: %s with %d chunks differs from flat", what,
                     algo_name(algo), C);
            free(got);
        }
    // Opened, then posted chunk by chunk (a return trip) with polling in between.
    for (int algo = 0; algo < DIST_A2A_ALGOS; algo++) {
        int C = 3;
        float *got = recv_buffer(x);
        dist_a2a *h =
            dist_a2a_open(c, algo, x->send, x->send_counts, got, x->recv_counts, x->width, C);
        for (int k = 0; k < C; k++) {
            dist_a2a_post(h, k);
            dist_a2a_progress(h);
        }
        dist_a2a_end(h);
        TU_CHECK(same(got, flat, n_floats), "%s: %s posted by chunks differs from flat", what,
                 algo_name(algo));
        free(got);
    }
    // Polling alone (no blocking wait) must bring every chunk home: that is what lets a
    // caller compute while chunks travel. 20 s is far beyond any exchange here.
    for (int algo = 0; algo < DIST_A2A_ALGOS; algo++) {
        int C = 3;
        float *got = recv_buffer(x);
        dist_a2a *h = dist_a2a_begin(c, algo, x->send, x->send_counts, got, x->recv_counts,
                                     x->width, C);
        double t0 = bg_now();
        int done = 0;
        while (!done && bg_now() - t0 < 20) {
            done = 1;
            for (int k = 0; k < C; k++) done &= dist_a2a_test_chunk(h, k);
        }
        TU_CHECK(done, "%s: %s chunks never completed by polling", what, algo_name(algo));
        for (int k = 0; done && k < C; k++)
            TU_CHECK(chunk_final(x, got, k, C), "%s: %s polled chunk %d not final", what,
                     algo_name(algo), k);
        dist_a2a_end(h);
        free(got);
    }
    // Waiting only for the last chunk (or only ending) must also finish everything.
    for (int algo = 0; algo < DIST_A2A_ALGOS; algo++) {
        float *got = recv_buffer(x);
        dist_a2a *h =
            dist_a2a_begin(c, algo, x->send, x->send_counts, got, x->recv_counts, x->width, 4);
        if (algo == DIST_A2A_FLAT) dist_a2a_wait_chunk(h, 3);
        dist_a2a_end(h);
        TU_CHECK(same(got, flat, n_floats), "%s: %s ended early differs from flat", what,
                 algo_name(algo));
        free(got);
    }
    free(flat);
}

// Messages and bytes each algorithm must issue, from the count matrix alone, summed
// over the communicator (only data rows: the count gather of the hierarchy is intra).
static void check_traffic(dist_comm *c, const exchange *x, const char *what) {
    int n = x->n;
    uint64_t rb = x->width * sizeof(float);
    int64_t flat_msgs = 0, flat_bytes = 0, hier_msgs = 0, d2_msgs = 0;
    int N = dist_n_nodes(c);
    // 2d: rank (a, l) sends rank (b, l) one message with every (a, i) -> (b, l) row,
    // when the nodes are of one size (else it runs flat).
    int equal = N > 1;
    for (int i = 0; i < n; i++) {
        int mi = 0, m0 = 0;
        for (int j = 0; j < n; j++) {
            mi += dist_node_of(c, j) == dist_node_of(c, i);
            m0 += dist_node_of(c, j) == 0;
        }
        equal &= mi == m0;
    }
    for (int p = 0; p < n && equal; p++)
        for (int b = 0; b < N; b++) {
            if (b == dist_node_of(c, p)) continue;
            int lp = 0;  // p's index in its node
            for (int j = 0; j < p; j++) lp += dist_node_of(c, j) == dist_node_of(c, p);
            int64_t rows = 0;
            for (int i = 0; i < n; i++) {
                if (dist_node_of(c, i) != dist_node_of(c, p)) continue;
                for (int j = 0, lj = 0; j < n; j++) {
                    if (dist_node_of(c, j) != b) continue;
                    if (lj++ == lp) rows += x->cnt[i * n + j];
                }
            }
            d2_msgs += rows > 0;
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (dist_node_of(c, i) != dist_node_of(c, j) && x->cnt[i * n + j]) {
                flat_msgs++;
                flat_bytes += x->cnt[i * n + j] * rb;
            }
    for (int a = 0; a < N; a++)
        for (int b = 0; b < N; b++) {
            int64_t rows = 0;
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++)
                    if (dist_node_of(c, i) == a && dist_node_of(c, j) == b)
                        rows += x->cnt[i * n + j];
            hier_msgs += a != b && rows > 0;
        }
    float *r = recv_buffer(x);
    int64_t got[DIST_A2A_ALGOS]
               [4];  // per algorithm: inter msgs sent, inter bytes sent, inter msgs/bytes received
    for (int algo = 0; algo < DIST_A2A_ALGOS; algo++) {
        dist_traffic_reset(c);
        dist_alltoallv(c, algo, x->send, x->send_counts, r, x->recv_counts, x->width);
        dist_traffic t;
        dist_traffic_get(c, &t);
        TU_CHECK(t.calls == 1 && t.seconds >= 0, "%s: %s counted %llu calls", what, algo_name(algo),
                 (unsigned long long)t.calls);
        got[algo][0] = t.msgs_sent_inter;
        got[algo][1] = t.bytes_sent_inter;
        got[algo][2] = t.msgs_recv_inter;
        got[algo][3] = t.bytes_recv_inter;
        dist_allreduce_sum_i64(c, got[algo], 4);
    }
    free(r);
    TU_CHECK(got[0][0] == flat_msgs && got[0][2] == flat_msgs,
             "%s: flat inter msgs %lld/%lld, want %lld", what, (long long)got[0][0],
             (long long)got[0][2], (long long)flat_msgs);
    TU_CHECK(got[1][0] == hier_msgs && got[1][2] == hier_msgs,
             "%s: hier inter msgs %lld, want %lld", what, (long long)got[1][0],
             (long long)hier_msgs);
    if (!equal) d2_msgs = flat_msgs;
    TU_CHECK(got[2][0] == d2_msgs && got[2][2] == d2_msgs, "%s: 2d inter msgs %lld, want %lld",
             what, (long long)got[2][0], (long long)d2_msgs);
    // The same rows cross node boundaries either way.
    for (int algo = 0; algo < DIST_A2A_ALGOS; algo++)
        TU_CHECK(got[algo][1] == flat_bytes && got[algo][3] == flat_bytes,
                 "%s: %s inter bytes %lld, want %lld", what, algo_name(algo),
                 (long long)got[algo][1], (long long)flat_bytes);
}

static void run_suite(dist_comm *c, const char *where) {
    char what[160];
    size_t widths[] = {1, 3, 17};
    double sparsity[] = {0.0, 0.3, 0.7};
    uint64_t seed = 1;
    for (int wi = 0; wi < 3; wi++)
        for (int si = 0; si < 3; si++) {
            int silent = si == 1 ? dist_size(c) - 1 : -1;  // some rank sends nothing
            exchange x;
            exchange_make(&x, c, widths[wi], 6, sparsity[si], silent, seed++);
            snprintf(what, sizeof what, "%s width %zu sparsity %.1f", where, widths[wi],
                     sparsity[si]);
            check_exchange(c, &x, what);
            check_traffic(c, &x, what);
            exchange_free(&x);
        }
    exchange x;  // nothing at all to move
    exchange_make(&x, c, 4, 3, 1.0, -1, seed++);
    snprintf(what, sizeof what, "%s empty", where);
    check_exchange(c, &x, what);
    exchange_free(&x);
    exchange_make(&x, c, 64, 300, 0.1, -1, seed++);  // larger blocks: many rows per chunk
    snprintf(what, sizeof what, "%s large", where);
    check_exchange(c, &x, what);
    exchange_free(&x);
}

int main(int argc, char **argv) {
    comm_test_args a = comm_test_start(&argc, &argv);
    dist_comm *world = dist_comm_world(a.ranks_per_node);
    int P = dist_size(world);
    run_suite(world, "world");
    // Nodes need not be runs of consecutive ranks (mpirun --map-by node deals ranks
    // round-robin): reverse the odd ranks' order to interleave the nodes.
    if (P > 2) {
        int me = dist_rank(world);
        dist_comm *mixed = dist_comm_split(world, 0, me % 2 ? P + (P - me) : me);
        run_suite(mixed, "interleaved nodes");
        dist_comm_free(mixed);
    }
    // Over expert-parallel groups, as the MoE layer uses it: EP = P and EP = P/2.
    for (int ep = P; ep >= 1; ep /= 2) {
        if (P % ep) continue;
        dist_layout L;
        TU_CHECK(dist_layout_init(&L, 2 * ep, ep, a.ranks_per_node) == 0, "layout EP=%d", ep);
        char where[64];
        snprintf(where, sizeof where, "EP=%d group %d", ep, L.ep_group);
        run_suite(L.ep_comm, where);
        dist_layout_free(&L);
        if (ep == 1) break;
    }
    int rc = comm_test_finish(world, "comm/test_alltoall");
    dist_comm_free(world);
    dist_finalize();
    return rc;
}
