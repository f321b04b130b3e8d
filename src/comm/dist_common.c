// Backend-independent parts of a communicator: node map, scratch, traffic counters.
#include "comm/dist_impl.h"
#include "core/timer.h"

#include <stdint.h>
#include <string.h>

static dist_abort_handler g_abort_handler;

void dist_set_abort_handler(dist_abort_handler handler) { g_abort_handler = handler; }

void dist_abort_call_handler(int code) {
    if (g_abort_handler) g_abort_handler(code);
}

typedef struct {
    int key, rank;
} key_rank;

static int cmp_key_then_rank(const void *pa, const void *pb) {
    const key_rank *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

static int cmp_int(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    return (a > b) - (a < b);
}

void dist_comm_setup(dist_comm *c, int rank, int size, const int *keys) {
    c->rank = rank;
    c->size = size;
    c->node_key = keys[rank];
    c->bucket_bytes = DIST_BUCKET_BYTES_DEFAULT;
    c->node_of = bg_malloc(sizeof(int) * size);
    c->local_rank = bg_malloc(sizeof(int) * size);
    c->members = bg_malloc(sizeof(int) * size);
    // Number nodes in order of their lowest rank: the leader communicator, split with
    // key = rank, then has node a at rank a on every rank. Sorting keeps this
    // O(size log size) for worlds of many thousand ranks.
    key_rank *by_key = bg_malloc(sizeof(key_rank) * size);
    for (int r = 0; r < size; r++) by_key[r] = (key_rank){keys[r], r};
    qsort(by_key, size, sizeof(key_rank), cmp_key_then_rank);
    int *group_lowest = bg_malloc(sizeof(int) * size);  // lowest rank of each key group
    int n_nodes = 0;
    for (int i = 0; i < size; i++)
        if (i == 0 || by_key[i].key != by_key[i - 1].key) group_lowest[n_nodes++] = by_key[i].rank;
    qsort(group_lowest, n_nodes, sizeof(int), cmp_int);
    // group_lowest[a] is now node a's lowest rank; every other rank joins the node of
    // the rank before it in by_key (same key, and the group's lowest rank comes first).
    for (int a = 0; a < n_nodes; a++) c->node_of[group_lowest[a]] = a;
    for (int i = 1; i < size; i++)
        if (by_key[i].key == by_key[i - 1].key)
            c->node_of[by_key[i].rank] = c->node_of[by_key[i - 1].rank];
    free(group_lowest);
    free(by_key);
    c->n_nodes = n_nodes;
    c->node_start = bg_calloc((size_t)n_nodes + 1, sizeof(int));
    for (int r = 0; r < size; r++) c->node_start[c->node_of[r] + 1]++;
    for (int a = 0; a < n_nodes; a++) c->node_start[a + 1] += c->node_start[a];
    int *fill = bg_malloc(sizeof(int) * n_nodes);
    memcpy(fill, c->node_start, sizeof(int) * n_nodes);
    for (int r = 0; r < size; r++) {
        int a = c->node_of[r];
        c->local_rank[r] = fill[a] - c->node_start[a];
        c->members[fill[a]++] = r;
    }
    free(fill);
}

void dist_comm_release(dist_comm *c) {
    free(c->node_of);
    free(c->local_rank);
    free(c->node_start);
    free(c->members);
    for (int i = 0; i < DIST_SCR_COUNT; i++) free(c->scratch[i]);
}

void *dist_scratch(dist_comm *c, int slot, size_t bytes) {
    if (!c->scratch[slot] || bytes > c->scratch_bytes[slot]) {  // never NULL, even for 0
        free(c->scratch[slot]);  // contents need not survive: scratch is per call
        c->scratch[slot] = bg_aligned_alloc(bytes);
        c->scratch_bytes[slot] = bytes;
    }
    return c->scratch[slot];
}

size_t dist_scratch_held(const dist_comm *c) {
    size_t n = 0;
    for (int i = 0; i < DIST_SCR_COUNT; i++) n += c->scratch[i] ? c->scratch_bytes[i] : 0;
    return n;
}

size_t dist_bucket_elems(size_t bucket_bytes, size_t elem_bytes) {
    size_t b = bucket_bytes / elem_bytes;
    return b > (size_t)INT32_MAX ? (size_t)INT32_MAX : b;  // MPI counts are int
}

size_t dist_shard_piece_elems(int P, size_t n, size_t bucket_bytes) {
    size_t e = bucket_bytes / sizeof(float) / (size_t)P;
    // No longer than the longest segment: a small buffer holds no whole bucket.
    size_t longest = n / (size_t)P + (n % (size_t)P != 0);
    if (e > longest) e = longest;
    if (e < 1) e = 1;
    if (e > (size_t)INT32_MAX) e = INT32_MAX;
    return e;
}

// Block by block through an accumulator in L1, so that every part is read once and out
// written once: the sum is bound by memory traffic, which a copy and P - 1 passes over
// out (28 bytes an element for P = 2, against 12) multiplied.
static const float *rank_part(const float *parts, size_t stride, int r, int me, const float *own) {
    return own && r == me ? own : parts + (size_t)r * stride;
}

void dist_sum_rank_order_f32(float *out, const float *parts, size_t stride, int P, int me,
                             const float *own, size_t n) {
    enum { BLOCK = 8192 };  // 32 KiB; smaller blocks cut the prefetchers' streams short
    float acc[BLOCK];
    const float *x0 = rank_part(parts, stride, 0, me, own);
    const float *x1 = P > 1 ? rank_part(parts, stride, 1, me, own) : x0;
    for (size_t lo = 0; lo < n; lo += BLOCK) {
        const size_t m = n - lo < BLOCK ? n - lo : BLOCK;
        if (P == 1) memcpy(acc, x0 + lo, m * sizeof(float));
        else {
            #pragma omp simd
            for (size_t i = 0; i < m; i++) acc[i] = x0[lo + i] + x1[lo + i];
        }
        for (int r = 2; r < P; r++) {
            const float *x = rank_part(parts, stride, r, me, own) + lo;
            #pragma omp simd
            for (size_t i = 0; i < m; i++) acc[i] += x[i];
        }
        memcpy(out + lo, acc, m * sizeof(float));
    }
}

size_t dist_allreduce_scratch_bytes(int P, size_t n, size_t elem_bytes, size_t bucket_bytes) {
    if (P <= 1 || n == 0) return 0;
    size_t b = dist_bucket_elems(bucket_bytes, elem_bytes), m = n < b ? n : b;
    // The first bucket is the largest; its longest segment sets the parts' stride.
    size_t seg = m / (size_t)P + (m % (size_t)P != 0);
    return (size_t)P * seg * elem_bytes;
}

size_t dist_reduce_scatter_scratch_bytes(int P, size_t n, size_t bucket_bytes) {
    if (P <= 1 || n == 0) return 0;
    return (size_t)P * dist_shard_piece_elems(P, n, bucket_bytes) * sizeof(float);
}

size_t dist_grad_piece_elems(int P, size_t n, size_t bucket_bytes) {
    size_t q = dist_shard_piece_elems(P, n, bucket_bytes);
    return (q + DIST_GRAD_SLOTS - 1) / DIST_GRAD_SLOTS;
}

size_t dist_grad_reduce_scratch_bytes(int P, size_t n, size_t bucket_bytes) {
    if (P <= 1 || n == 0) return 0;
    return (size_t)DIST_GRAD_SLOTS * (size_t)P * dist_grad_piece_elems(P, n, bucket_bytes) *
           sizeof(float);
}

size_t dist_a2a_scratch_bound(enum dist_a2a_algo algo, int m, int nodes, size_t rows, size_t row_bytes) {
    if (nodes < 2 || algo == DIST_A2A_FLAT) return 0;
    // hierarchical: pack and receive (rows each), and the leader's gather, send by
    // node, receive and send by local rank (m ranks' rows each); 2d: both phases' send
    // and receive, the middle two holding m ranks' rows.
    size_t k = algo == DIST_A2A_HIER ? 2 + 4 * (size_t)m : 2 + 2 * (size_t)m;
    return k * rows * row_bytes;
}

int dist_rank(const dist_comm *c) { return c->rank; }
int dist_size(const dist_comm *c) { return c->size; }
int dist_node_of(const dist_comm *c, int r) { return c->node_of[r]; }
int dist_n_nodes(const dist_comm *c) { return c->n_nodes; }

void dist_comm_set_bucket_bytes(dist_comm *c, size_t bytes) {
    c->bucket_bytes = bytes < 64 ? 64 : bytes;
}

void dist_count_send(dist_comm *c, int peer, uint64_t bytes) {
    if (bytes == 0 || peer == c->rank) return;
    if (c->node_of[peer] == c->node_of[c->rank]) {
        c->traffic.bytes_sent_intra += bytes;
        c->traffic.msgs_sent_intra++;
    } else {
        c->traffic.bytes_sent_inter += bytes;
        c->traffic.msgs_sent_inter++;
    }
}

void dist_count_recv(dist_comm *c, int peer, uint64_t bytes) {
    if (bytes == 0 || peer == c->rank) return;
    if (c->node_of[peer] == c->node_of[c->rank]) {
        c->traffic.bytes_recv_intra += bytes;
        c->traffic.msgs_recv_intra++;
    } else {
        c->traffic.bytes_recv_inter += bytes;
        c->traffic.msgs_recv_inter++;
    }
}

void dist_count_time(dist_comm *c, double t0) {
    double dt = bg_now() - t0;
    c->traffic.seconds += dt;
    c->traffic.exposed += dt;
}

void dist_traffic_get(const dist_comm *c, dist_traffic *out) { *out = c->traffic; }

void dist_traffic_reset(dist_comm *c) { memset(&c->traffic, 0, sizeof c->traffic); }

void dist_traffic_add(dist_traffic *sum, const dist_traffic *t) {
    sum->bytes_sent_intra += t->bytes_sent_intra;
    sum->bytes_sent_inter += t->bytes_sent_inter;
    sum->bytes_recv_intra += t->bytes_recv_intra;
    sum->bytes_recv_inter += t->bytes_recv_inter;
    sum->msgs_sent_intra += t->msgs_sent_intra;
    sum->msgs_sent_inter += t->msgs_sent_inter;
    sum->msgs_recv_intra += t->msgs_recv_intra;
    sum->msgs_recv_inter += t->msgs_recv_inter;
    sum->calls += t->calls;
    sum->seconds += t->seconds;
    sum->exposed += t->exposed;
    sum->skew += t->skew;
}
