// Single-process backend, for builds without MPI: a world of one rank. Every
// collective is a copy or nothing, so the code above comm/ runs unchanged.
#ifndef BG_HAVE_MPI
#include "comm/dist_impl.h"

#include <string.h>

const char *dist_backend(void) { return "single"; }

void dist_init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
}

void dist_finalize(void) {}

int dist_launched(void) { return 0; }

_Noreturn void dist_abort(int code) {
    dist_abort_call_handler(code);
    fflush(stdout);
    fflush(stderr);
    exit(code);
}

dist_comm *dist_comm_world(int ranks_per_node) {
    if (ranks_per_node < 0)
        return bg_error("ranks per node must be >= 0 (0: real nodes), got %d", ranks_per_node),
               NULL;
    return dist_local_comm();
}

dist_comm *dist_comm_split(dist_comm *parent, int color, int key) {
    (void)parent;
    (void)color;
    (void)key;
    return dist_local_comm();
}

void dist_comm_free(dist_comm *c) {
    if (!c) return;
    dist_comm_release(c);
    free(c);
}

void dist_barrier(dist_comm *c) { c->traffic.calls++; }

void dist_bcast(dist_comm *c, void *buf, size_t bytes, int root) {
    (void)buf;
    (void)bytes;
    BG_ASSERT(root == 0);
    c->traffic.calls++;
}

void dist_allreduce_sum_f32(dist_comm *c, float *buf, size_t n) {
    (void)buf;
    (void)n;
    c->traffic.calls++;
}
void dist_allreduce_sum_f64(dist_comm *c, double *buf, size_t n) {
    (void)buf;
    (void)n;
    c->traffic.calls++;
}
void dist_allreduce_sum_i64(dist_comm *c, int64_t *buf, size_t n) {
    (void)buf;
    (void)n;
    c->traffic.calls++;
}
void dist_allreduce_max_f64(dist_comm *c, double *buf, size_t n) {
    (void)buf;
    (void)n;
    c->traffic.calls++;
}
void dist_reduce_scatter_sum_f32(dist_comm *c, float *buf, size_t n) {
    (void)buf;
    (void)n;
    c->traffic.calls++;
}
void dist_allgather_f32(dist_comm *c, float *buf, size_t n) {
    (void)buf;
    (void)n;
    c->traffic.calls++;
}

// One rank: nothing to sum, nothing in flight.
struct dist_grad_reduce {
    dist_comm *c;
};
dist_grad_reduce *dist_grad_reduce_new(dist_comm *c) {
    dist_grad_reduce *h = bg_malloc(sizeof *h);
    h->c = c;
    return h;
}
void dist_grad_reduce_free(dist_grad_reduce *h) { free(h); }
void dist_grad_reduce_begin(dist_grad_reduce *h, float *buf, size_t n, int scatter) {
    (void)buf;
    (void)n;
    (void)scatter;
    h->c->traffic.calls++;
}
void dist_grad_reduce_post(dist_grad_reduce *h, size_t lo, size_t hi) {
    (void)h;
    BG_ASSERT(lo <= hi);
}
void dist_grad_reduce_progress(dist_grad_reduce *h, size_t send_bytes) {
    (void)h;
    (void)send_bytes;
}
void dist_grad_reduce_end(dist_grad_reduce *h) { (void)h; }

void dist_alltoall_i32(dist_comm *c, const int32_t *send, int32_t *recv, int n_per_rank) {
    memcpy(recv, send, sizeof(int32_t) * n_per_rank);
    c->traffic.calls++;
}

void dist_allgather_i32(dist_comm *c, const int32_t *send, int32_t *recv, int n_per_rank) {
    memcpy(recv, send, sizeof(int32_t) * n_per_rank);
    c->traffic.calls++;
}

void dist_alltoallv(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                    const int *send_counts, float *recv, const int *recv_counts, size_t width) {
    (void)algo;
    dist_local_alltoallv(c, send, send_counts, recv, recv_counts, width);
}

// With one rank the exchange is a copy, done at once; the chunk calls have nothing
// left to wait for.
struct dist_a2a {
    int n_chunks, posted;
    dist_comm *c;
    const float *send;
    float *recv;
    int send_count, recv_count;
    size_t width;
};

dist_a2a *dist_a2a_open(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                        const int *send_counts, float *recv, const int *recv_counts, size_t width,
                        int n_chunks) {
    (void)algo;
    BG_ASSERT(n_chunks >= 1);
    dist_a2a *h = bg_malloc(sizeof *h);
    *h = (dist_a2a){.n_chunks = n_chunks, .c = c, .send = send, .recv = recv,
                    .send_count = send_counts[0], .recv_count = recv_counts[0], .width = width};
    return h;
}

void dist_a2a_post(dist_a2a *h, int k) {
    BG_ASSERT(k == h->posted && k < h->n_chunks);
    if (++h->posted == h->n_chunks)
        dist_local_alltoallv(h->c, h->send, &h->send_count, h->recv, &h->recv_count, h->width);
}

dist_a2a *dist_a2a_begin(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                         const int *send_counts, float *recv, const int *recv_counts, size_t width,
                         int n_chunks) {
    dist_a2a *h = dist_a2a_open(c, algo, send, send_counts, recv, recv_counts, width, n_chunks);
    for (int k = 0; k < n_chunks; k++) dist_a2a_post(h, k);
    return h;
}

void dist_set_timeout(double seconds) { (void)seconds; }
void dist_set_skew_probe(int on) { (void)on; }

void dist_link_measure(dist_comm *c, dist_a2a_cost_in *io) {
    (void)c;
    io->nodes = io->ranks_per_node = 1;
    io->ranks_per_core = 1;
}

void dist_a2a_wait_chunk(dist_a2a *h, int k) { BG_ASSERT(k >= 0 && k < h->n_chunks); }

void dist_a2a_progress(dist_a2a *h) { (void)h; }

int dist_a2a_test_chunk(dist_a2a *h, int k) {
    BG_ASSERT(k >= 0 && k < h->n_chunks);
    return 1;
}

void dist_a2a_end(dist_a2a *h) {
    while (h->posted < h->n_chunks) dist_a2a_post(h, h->posted);
    free(h);
}
#endif
