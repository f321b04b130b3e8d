// MPI backend: the two halves of the deterministic all-reduce as collectives of their
// own, for ZeRO-1 (sharded optimizer state). The buffer's rank segments are those of
// the whole buffer, [n·r/P, n·(r+1)/P), not of a bucket: they must coincide with the
// optimizer's shard (model/zero_shard.h) however large the buffer.
//
// Rounds bound the scratch like the all-reduce's buckets: in round k every rank
// handles piece k (at most `chunk` elements) of every segment. Pieces travel by
// point-to-point messages addressed by pointer, so no count or displacement is an int
// offset into the buffer and buffers of 2^31 elements or more are fine.
#ifdef BG_HAVE_MPI
#include "core/timer.h"
#include "comm/dist_impl.h"

#include <string.h>

enum { SHARD_TAG = 7301 };  // apart from any other point-to-point traffic on the comm

static size_t seg_lo(size_t n, int j, int P) { return n * (size_t)j / (size_t)P; }

// Elements per piece of an n-element buffer: the bucket split over the ranks, at most
// the longest segment, at least 1, an int for MPI.
static size_t piece_elems(const dist_comm *c, size_t n) { return dist_shard_piece_elems(c->size, n, c->bucket_bytes); }

// Piece k of segment j: [*lo, *lo + return value) (0 when the segment is shorter).
static size_t piece(size_t n, int j, int P, size_t k, size_t chunk, size_t *lo) {
    size_t a = seg_lo(n, j, P), b = seg_lo(n, j + 1, P);
    *lo = a + k * chunk;
    if (*lo >= b) return 0;
    return b - *lo < chunk ? b - *lo : chunk;
}

// Rounds: enough pieces for the longest segment (the same on every rank).
static size_t rounds(size_t n, int P, size_t chunk) {
    size_t longest = n / (size_t)P + (n % (size_t)P != 0);
    return (longest + chunk - 1) / chunk;
}

// One peer's transfers of a round: receive rcnt floats into rbuf, send scnt from sbuf
// (either may be empty), counted as traffic and remembered for the watchdog.
static void post_peer(dist_comm *c, int j, float *rbuf, size_t rcnt, const float *sbuf,
                      size_t scnt, MPI_Request *req, int *peer, int *nreq) {
    if (rcnt) {
        DIST_MPI(MPI_Irecv(rbuf, (int)rcnt, MPI_FLOAT, j, SHARD_TAG, c->comm, &req[*nreq]));
        peer[(*nreq)++] = j;
        dist_count_recv(c, j, (uint64_t)rcnt * sizeof(float));
    }
    if (scnt) {
        DIST_MPI(MPI_Isend(sbuf, (int)scnt, MPI_FLOAT, j, SHARD_TAG, c->comm, &req[*nreq]));
        peer[(*nreq)++] = j;
        dist_count_send(c, j, (uint64_t)scnt * sizeof(float));
    }
}

void dist_reduce_scatter_sum_f32(dist_comm *c, float *buf, size_t n) {
    double t0 = bg_now();
    c->traffic.calls++;
    int P = c->size, me = c->rank;
    if (P > 1 && n > 0) {
        size_t chunk = piece_elems(c, n), R = rounds(n, P, chunk);
        float *parts = dist_scratch(c, DIST_SCR_REDUCE, (size_t)P * chunk * sizeof(float));
        MPI_Request *req = bg_malloc(sizeof(MPI_Request) * 2 * (size_t)P);
        int *peer = bg_malloc(sizeof(int) * 2 * (size_t)P);  // for the watchdog
        for (size_t k = 0; k < R; k++) {
            size_t mlo, mine = piece(n, me, P, k, chunk, &mlo);
            int nreq = 0;
            for (int j = 0; j < P; j++) {
                if (j == me) continue;
                size_t lo, cnt = piece(n, j, P, k, chunk, &lo);
                post_peer(c, j, parts + (size_t)j * chunk, mine, buf + lo, cnt, req, peer, &nreq);
            }
            dist_wait_reqs(c, nreq, req, peer, "a reduce-scatter");
            if (!mine) continue;
            // ((x0 + x1) + x2) + ...: the all-reduce's order, so the same bits.
            float *o = buf + mlo;
            dist_sum_rank_order_f32(o, parts, chunk, P, me, o, mine);
        }
        free(req);
        free(peer);
    }
    dist_count_time(c, t0);
}

void dist_allgather_f32(dist_comm *c, float *buf, size_t n) {
    double t0 = bg_now();
    c->traffic.calls++;
    int P = c->size, me = c->rank;
    if (P > 1 && n > 0) {
        size_t chunk = piece_elems(c, n), R = rounds(n, P, chunk);
        MPI_Request *req = bg_malloc(sizeof(MPI_Request) * 2 * (size_t)P);
        int *peer = bg_malloc(sizeof(int) * 2 * (size_t)P);  // for the watchdog
        for (size_t k = 0; k < R; k++) {
            size_t mlo, mine = piece(n, me, P, k, chunk, &mlo);
            int nreq = 0;
            for (int j = 0; j < P; j++) {
                if (j == me) continue;
                size_t lo, cnt = piece(n, j, P, k, chunk, &lo);
                post_peer(c, j, buf + lo, cnt, buf + mlo, mine, req, peer, &nreq);
            }
            dist_wait_reqs(c, nreq, req, peer, "an all-gather");
        }
        free(req);
        free(peer);
    }
    dist_count_time(c, t0);
}
#endif
