// MPI backend: count exchanges (all-to-all, all-gather), flat all-to-all-v of rows, and
// the chunked exchange handle (flat chunks here; hierarchical chunks in
// dist_alltoall_hier.c).
#ifdef BG_HAVE_MPI
#include "core/timer.h"
#include "comm/dist_impl.h"

#include <limits.h>
#include <string.h>

void dist_alltoall_i32(dist_comm *c, const int32_t *send, int32_t *recv, int n_per_rank) {
    if (c->local) {
        memcpy(recv, send, sizeof(int32_t) * n_per_rank);
        c->traffic.calls++;
        return;
    }
    dist_probe_skew(c);
    double t0 = bg_now();
    if (dist_timeout() > 0) {  // the watchdog needs to know whom it waits for
        int n = c->size;
        int *args = bg_malloc(sizeof(int) * 2 * n);
        for (int j = 0; j < n; j++) args[j] = n_per_rank, args[n + j] = j * n_per_rank;
        dist_p2p_exchange(c, send, args, args + n, recv, args, args + n, MPI_INT32_T, 4,
                          "the token-count exchange");
        free(args);
    } else {
        DIST_MPI(
            MPI_Alltoall(send, n_per_rank, MPI_INT32_T, recv, n_per_rank, MPI_INT32_T, c->comm));
    }
    for (int j = 0; j < c->size; j++) {
        dist_count_send(c, j, (uint64_t)n_per_rank * 4);
        dist_count_recv(c, j, (uint64_t)n_per_rank * 4);
    }
    c->traffic.calls++;
    dist_count_time(c, t0);
}

void dist_allgather_i32(dist_comm *c, const int32_t *send, int32_t *recv, int n_per_rank) {
    if (c->local) {
        memcpy(recv, send, sizeof(int32_t) * n_per_rank);
        c->traffic.calls++;
        return;
    }
    double t0 = bg_now();
    MPI_Request r;
    DIST_MPI(MPI_Iallgather(send, n_per_rank, MPI_INT32_T, recv, n_per_rank, MPI_INT32_T, c->comm,
                            &r));
    dist_wait_reqs(c, 1, &r, NULL, "an all-gather");
    for (int j = 0; j < c->size; j++) {  // what it stands for: my ints to every rank
        dist_count_send(c, j, (uint64_t)n_per_rank * 4);
        dist_count_recv(c, j, (uint64_t)n_per_rank * 4);
    }
    c->traffic.calls++;
    dist_count_time(c, t0);
}

// Row offsets of every rank's block; totals must fit MPI's int displacements. Past
// them the job aborts (dist.h's failure policy): the peers already wait for this
// exchange, which no rank could leave alone by returning an error.
static void block_displs(const int *counts, int *displs, int n, const char *what) {
    int64_t total = 0;
    for (int j = 0; j < n; j++) {
        BG_ASSERT(counts[j] >= 0);
        displs[j] = (int)total;
        total += counts[j];
    }
    if (total > INT_MAX) {
        fprintf(stderr, "bagualu: all-to-all %s %lld rows: more than MPI's int offsets allow\n",
                what, (long long)total);
        dist_abort(4);
    }
}

dist_a2a *dist_a2a_open(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                        const int *send_counts, float *recv, const int *recv_counts, size_t width,
                        int n_chunks) {
    BG_ASSERT(n_chunks >= 1 && width >= 1 && width <= INT_MAX);
    double t0 = bg_now();
    int n = c->size;
    dist_a2a *h = bg_calloc(1, sizeof *h);
    h->c = c;
    // Where the hierarchy has nothing to aggregate (one node; 2d: unequal nodes) it is flat.
    if (c->n_nodes < 2 || (algo == DIST_A2A_2D && c->cross_comm == MPI_COMM_NULL))
        algo = DIST_A2A_FLAT;
    h->algo = algo;
    h->n_chunks = n_chunks;
    h->width = width;
    h->send = send;
    h->recv = recv;
    h->t_open = t0;
    h->send_counts = bg_malloc(sizeof(int) * 4 * n);
    h->recv_counts = h->send_counts + n;
    h->send_displs = h->send_counts + 2 * n;
    h->recv_displs = h->send_counts + 3 * n;
    memcpy(h->send_counts, send_counts, sizeof(int) * n);
    memcpy(h->recv_counts, recv_counts, sizeof(int) * n);
    block_displs(h->send_counts, h->send_displs, n, "sends");
    block_displs(h->recv_counts, h->recv_displs, n, "receives");
    if (c->local) return h;  // the copy happens at the last post (and counts the call)
    c->traffic.calls++;
    // Counting in rows of one derived type keeps MPI's int counts far from overflow.
    DIST_MPI(MPI_Type_contiguous((int)width, MPI_FLOAT, &h->row));
    DIST_MPI(MPI_Type_commit(&h->row));
    if (algo == DIST_A2A_FLAT) {
        h->reqs = bg_malloc(sizeof(MPI_Request) * 2 * n * n_chunks);
        h->peers = bg_malloc(sizeof(int) * 2 * n * n_chunks);
        h->chunk_args = bg_malloc(sizeof(int) * 4 * n * n_chunks);
        for (int i = 0; i < 2 * n * n_chunks; i++) h->reqs[i] = MPI_REQUEST_NULL;
    }
    c->traffic.exposed += bg_now() - t0;
    return h;
}

// Flat: chunk k's blocks go point to point (what MPI_Ialltoallv does inside, with the
// peers known to the watchdog). Messages between two ranks match in posting order, and
// every rank posts chunks (and exchanges) in one order.
static void post_flat(dist_a2a *h, int k) {
    dist_comm *c = h->c;
    int n = c->size, C = h->n_chunks;
    uint64_t row_bytes = h->width * sizeof(float);
    int *scnt = h->chunk_args + 4 * n * k, *sdsp = scnt + n, *rcnt = scnt + 2 * n,
        *rdsp = scnt + 3 * n;
    for (int j = 0; j < n; j++) {
        int slo = dist_chunk_lo(h->send_counts[j], k, C);
        int rlo = dist_chunk_lo(h->recv_counts[j], k, C);
        scnt[j] = dist_chunk_lo(h->send_counts[j], k + 1, C) - slo;
        sdsp[j] = h->send_displs[j] + slo;
        rcnt[j] = dist_chunk_lo(h->recv_counts[j], k + 1, C) - rlo;
        rdsp[j] = h->recv_displs[j] + rlo;
        dist_count_send(c, j, scnt[j] * row_bytes);
        dist_count_recv(c, j, rcnt[j] * row_bytes);
    }
    dist_p2p_post(c, h->send, scnt, sdsp, h->recv, rcnt, rdsp, h->row, row_bytes,
                  h->reqs + 2 * n * k, h->peers + 2 * n * k);
}

void dist_a2a_post(dist_a2a *h, int k) {
    BG_ASSERT(k == h->posted && k < h->n_chunks);  // in order, once each
    double t0 = bg_now();
    dist_comm *c = h->c;
    h->posted++;
    if (c->local) {
        if (h->posted == h->n_chunks)
            dist_local_alltoallv(c, h->send, h->send_counts, h->recv, h->recv_counts, h->width);
    } else if (h->algo == DIST_A2A_FLAT) {
        post_flat(h, k);
    } else if (h->posted == h->n_chunks) {
        if (h->algo == DIST_A2A_HIER) h->hier = dist_hier_begin(h);
        else h->d2 = dist_2d_begin(h);
    }
    c->traffic.exposed += bg_now() - t0;
}

dist_a2a *dist_a2a_begin(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                         const int *send_counts, float *recv, const int *recv_counts, size_t width,
                         int n_chunks) {
    // Not in open: a trip home opened between chunks' experts is not probed (its wait
    // for the peer stays exposed).
    dist_probe_skew(c);
    dist_a2a *h = dist_a2a_open(c, algo, send, send_counts, recv, recv_counts, width, n_chunks);
    for (int k = 0; k < n_chunks; k++) dist_a2a_post(h, k);
    return h;
}

// The last chunk seen complete: the exchange's span ends here.
static void note_done(dist_a2a *h, int k) {
    if (k == h->n_chunks - 1 && !h->all_done) {
        h->all_done = 1;
        h->c->traffic.seconds += bg_now() - h->t_open;
    }
}

// One step of chunk k of a hierarchical or 2d exchange.
static int step_chunk(dist_a2a *h, int k, int blocking) {
    return h->hier ? dist_hier_step(h, k, blocking) : dist_2d_step(h, k, blocking);
}

void dist_a2a_wait_chunk(dist_a2a *h, int k) {
    BG_ASSERT(k >= 0 && k < h->n_chunks && h->posted == h->n_chunks);
    if (h->c->local) return note_done(h, k);
    double t0 = bg_now();
    if (h->algo != DIST_A2A_FLAT) {
        for (int j = 0; j <= k; j++)  // chunks finish in order in the hierarchy
            while (!step_chunk(h, j, 1)) continue;
    } else {
        int n = h->c->size;
        dist_wait_reqs(h->c, 2 * n, h->reqs + 2 * n * k, h->peers + 2 * n * k,
                       "the token all-to-all");
    }
    h->c->traffic.exposed += bg_now() - t0;
    note_done(h, k);
}

void dist_a2a_progress(dist_a2a *h) {
    if (h->c->local) return;
    double t0 = bg_now();
    int n = h->c->size, last = 1;
    for (int k = 0; k < h->n_chunks; k++) {
        if (h->algo != DIST_A2A_FLAT) last = h->posted == h->n_chunks ? step_chunk(h, k, 0) : 0;
        else last = k < h->posted ? dist_test_reqs(2 * n, h->reqs + 2 * n * k) : 0;
    }
    h->c->traffic.exposed += bg_now() - t0;
    if (last) note_done(h, h->n_chunks - 1);
}

int dist_a2a_test_chunk(dist_a2a *h, int k) {
    BG_ASSERT(k >= 0 && k < h->n_chunks && h->posted == h->n_chunks);
    if (h->c->local) return 1;
    double t0 = bg_now();
    int done = 1;
    if (h->algo != DIST_A2A_FLAT) {
        for (int j = 0; j < h->n_chunks; j++) {  // in order: chunk j waits on chunk j-1
            int dj = step_chunk(h, j, 0);
            if (j <= k) done &= dj;
        }
    } else {
        int n = h->c->size;
        done = dist_test_reqs(2 * n, h->reqs + 2 * n * k);
    }
    h->c->traffic.exposed += bg_now() - t0;
    if (done) note_done(h, k);
    return done;
}

void dist_a2a_end(dist_a2a *h) {
    dist_comm *c = h->c;
    while (h->posted < h->n_chunks) dist_a2a_post(h, h->posted);
    if (c->local) {
        note_done(h, h->n_chunks - 1);
        free(h->send_counts);
        free(h);
        return;
    }
    for (int k = 0; k < h->n_chunks; k++) dist_a2a_wait_chunk(h, k);
    dist_hier_free(h->hier);
    dist_2d_free(h->d2);
    DIST_MPI(MPI_Type_free(&h->row));
    free(h->reqs);
    free(h->peers);
    free(h->chunk_args);
    free(h->send_counts);
    free(h);
}

void dist_alltoallv(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                    const int *send_counts, float *recv, const int *recv_counts, size_t width) {
    // The hierarchies, and the flat exchange under the watchdog, as one chunk.
    if (algo != DIST_A2A_FLAT || dist_timeout() > 0) {
        dist_a2a_end(dist_a2a_begin(c, algo, send, send_counts, recv, recv_counts, width, 1));
        return;
    }
    if (c->local) {
        dist_local_alltoallv(c, send, send_counts, recv, recv_counts, width);
        return;
    }
    // The flat reference: a single MPI_Alltoallv.
    BG_ASSERT(width >= 1 && width <= INT_MAX);
    dist_probe_skew(c);
    double t0 = bg_now();
    int n = c->size;
    int *displs = bg_malloc(sizeof(int) * 2 * n);
    block_displs(send_counts, displs, n, "sends");
    block_displs(recv_counts, displs + n, n, "receives");
    MPI_Datatype row;
    DIST_MPI(MPI_Type_contiguous((int)width, MPI_FLOAT, &row));
    DIST_MPI(MPI_Type_commit(&row));
    DIST_MPI(
        MPI_Alltoallv(send, send_counts, displs, row, recv, recv_counts, displs + n, row, c->comm));
    DIST_MPI(MPI_Type_free(&row));
    free(displs);
    uint64_t row_bytes = width * sizeof(float);
    for (int j = 0; j < n; j++) {
        dist_count_send(c, j, send_counts[j] * row_bytes);
        dist_count_recv(c, j, recv_counts[j] * row_bytes);
    }
    c->traffic.calls++;
    dist_count_time(c, t0);
}
#endif
