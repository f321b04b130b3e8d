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
    double t0 = bg_now();
    DIST_MPI(MPI_Alltoall(send, n_per_rank, MPI_INT32_T, recv, n_per_rank, MPI_INT32_T, c->comm));
    for (int j = 0; j < c->size; j++) {
        dist_count_send(c, j, (uint64_t)n_per_rank * 4);
        dist_count_recv(c, j, (uint64_t)n_per_rank * 4);
    }
    c->traffic.calls++;
    c->traffic.seconds += bg_now() - t0;
}

void dist_allgather_i32(dist_comm *c, const int32_t *send, int32_t *recv, int n_per_rank) {
    if (c->local) {
        memcpy(recv, send, sizeof(int32_t) * n_per_rank);
        c->traffic.calls++;
        return;
    }
    double t0 = bg_now();
    DIST_MPI(MPI_Allgather(send, n_per_rank, MPI_INT32_T, recv, n_per_rank, MPI_INT32_T, c->comm));
    for (int j = 0; j < c->size; j++) {  // what it stands for: my ints to every rank
        dist_count_send(c, j, (uint64_t)n_per_rank * 4);
        dist_count_recv(c, j, (uint64_t)n_per_rank * 4);
    }
    c->traffic.calls++;
    c->traffic.seconds += bg_now() - t0;
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

dist_a2a *dist_a2a_begin(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                         const int *send_counts, float *recv, const int *recv_counts, size_t width,
                         int n_chunks) {
    BG_ASSERT(n_chunks >= 1 && width >= 1 && width <= INT_MAX);
    double t0 = bg_now();
    int n = c->size;
    dist_a2a *h = bg_calloc(1, sizeof *h);
    h->c = c;
    h->algo = algo;
    h->n_chunks = n_chunks;
    h->width = width;
    h->send = send;
    h->recv = recv;
    if (c->local) {  // done at once; the chunk calls have nothing to wait for
        dist_local_alltoallv(c, send, send_counts, recv, recv_counts, width);
        return h;
    }
    h->send_counts = bg_malloc(sizeof(int) * 4 * n);
    h->recv_counts = h->send_counts + n;
    h->send_displs = h->send_counts + 2 * n;
    h->recv_displs = h->send_counts + 3 * n;
    memcpy(h->send_counts, send_counts, sizeof(int) * n);
    memcpy(h->recv_counts, recv_counts, sizeof(int) * n);
    block_displs(h->send_counts, h->send_displs, n, "sends");
    block_displs(h->recv_counts, h->recv_displs, n, "receives");
    // Counting in rows of one derived type keeps MPI's int counts far from overflow.
    DIST_MPI(MPI_Type_contiguous((int)width, MPI_FLOAT, &h->row));
    DIST_MPI(MPI_Type_commit(&h->row));
    uint64_t row_bytes = width * sizeof(float);
    if (algo == DIST_A2A_HIER && c->n_nodes > 1) {
        h->hier = dist_hier_begin(h);
    } else {
        // Flat (or one node, where the hierarchy has nothing to aggregate): one
        // MPI_Ialltoallv per chunk, all posted now; MPI completes them in order.
        h->reqs = bg_malloc(sizeof(MPI_Request) * n_chunks);
        h->chunk_args = bg_malloc(sizeof(int) * 4 * n * n_chunks);
        for (int k = 0; k < n_chunks; k++) {
            int *scnt = h->chunk_args + 4 * n * k, *sdsp = scnt + n, *rcnt = scnt + 2 * n,
                *rdsp = scnt + 3 * n;
            for (int j = 0; j < n; j++) {
                int slo = dist_chunk_lo(h->send_counts[j], k, n_chunks);
                int rlo = dist_chunk_lo(h->recv_counts[j], k, n_chunks);
                scnt[j] = dist_chunk_lo(h->send_counts[j], k + 1, n_chunks) - slo;
                sdsp[j] = h->send_displs[j] + slo;
                rcnt[j] = dist_chunk_lo(h->recv_counts[j], k + 1, n_chunks) - rlo;
                rdsp[j] = h->recv_displs[j] + rlo;
                dist_count_send(c, j, scnt[j] * row_bytes);
                dist_count_recv(c, j, rcnt[j] * row_bytes);
            }
            DIST_MPI(MPI_Ialltoallv(send, scnt, sdsp, h->row, recv, rcnt, rdsp, h->row, c->comm,
                                    &h->reqs[k]));
        }
    }
    c->traffic.calls++;
    c->traffic.seconds += bg_now() - t0;
    return h;
}

void dist_a2a_wait_chunk(dist_a2a *h, int k) {
    BG_ASSERT(k >= 0 && k < h->n_chunks);
    if (h->c->local) return;
    double t0 = bg_now();
    if (h->hier) {
        for (int j = 0; j <= k; j++)  // chunks finish in order in the hierarchy
            while (!dist_hier_step(h, j, 1)) continue;
    } else {
        DIST_MPI(MPI_Wait(&h->reqs[k], MPI_STATUS_IGNORE));
    }
    h->c->traffic.seconds += bg_now() - t0;
}

void dist_a2a_progress(dist_a2a *h) {
    if (h->c->local) return;
    double t0 = bg_now();
    for (int k = 0; k < h->n_chunks; k++) {
        if (h->hier) {
            dist_hier_step(h, k, 0);
        } else {
            int done;
            DIST_MPI(MPI_Test(&h->reqs[k], &done, MPI_STATUS_IGNORE));
        }
    }
    h->c->traffic.seconds += bg_now() - t0;
}

int dist_a2a_test_chunk(dist_a2a *h, int k) {
    BG_ASSERT(k >= 0 && k < h->n_chunks);
    if (h->c->local) return 1;
    double t0 = bg_now();
    int done = 1;
    if (h->hier) {
        for (int j = 0; j < h->n_chunks; j++) {  // in order: chunk j waits on chunk j-1
            int dj = dist_hier_step(h, j, 0);
            if (j <= k) done &= dj;
        }
    } else {
        DIST_MPI(MPI_Test(&h->reqs[k], &done, MPI_STATUS_IGNORE));
    }
    h->c->traffic.seconds += bg_now() - t0;
    return done;
}

void dist_a2a_end(dist_a2a *h) {
    if (h->c->local) {
        free(h);
        return;
    }
    dist_a2a_wait_chunk(h, h->n_chunks - 1);
    if (!h->hier)  // waiting on a completed (null) request returns at once
        for (int k = 0; k < h->n_chunks; k++) DIST_MPI(MPI_Wait(&h->reqs[k], MPI_STATUS_IGNORE));
    dist_hier_free(h->hier);
    DIST_MPI(MPI_Type_free(&h->row));
    free(h->reqs);
    free(h->chunk_args);
    free(h->send_counts);
    free(h);
}

void dist_alltoallv(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                    const int *send_counts, float *recv, const int *recv_counts, size_t width) {
    if (algo == DIST_A2A_HIER) {  // the hierarchy, as one chunk
        dist_a2a_end(dist_a2a_begin(c, algo, send, send_counts, recv, recv_counts, width, 1));
        return;
    }
    if (c->local) {
        dist_local_alltoallv(c, send, send_counts, recv, recv_counts, width);
        return;
    }
    // The flat reference: a single MPI_Alltoallv.
    BG_ASSERT(width >= 1 && width <= INT_MAX);
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
    c->traffic.seconds += bg_now() - t0;
}
#endif
