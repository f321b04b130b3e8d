// MPI backend: two-dimensional all-to-all-v (Tutel's 2DH), chunked and non-blocking.
//
// Rank (a, l) is local rank l of node a; all nodes have m ranks. Two hops:
//   P1 inside node a (node communicator): rank (a, i) hands local rank l every row it
//      has for rank (b, l) of any node b;
//   P2 between the ranks of index l of every node (cross communicator, rank = node):
//      (a, l) sends (b, l) the rows of every (a, i) for (b, l), in one message per node.
// Rows for my own node arrive in P1 already. Each rank sends N-1 inter-node messages
// (flat: m(N-1)), and every rank carries an equal share (the hierarchical leader
// carries its whole node's). Pure data movement, so the result is bitwise the flat one.
// Block order in each buffer (all ascending):
//   p1send (rank (a,i)): chunk, local destination l, node b      -> rows (a,i)->(b,l)
//   p1recv (rank (a,l)): chunk, local source i, node b           -> rows (a,i)->(b,l)
//   p2send (rank (a,l)): chunk, node b != a, local source i
//   p2recv (rank (b,l)): chunk, node a != b, local source i      -> unpacked into recv
// Chunks: every rank posts P1 for every chunk at the start; P2 of chunk k goes once
// its P1 is in and P2 of chunk k-1 was posted, so collectives on each communicator are
// issued in one order everywhere.
#ifdef BG_HAVE_MPI
#include "comm/dist_impl.h"

#include <limits.h>
#include <string.h>

typedef struct {
    MPI_Request p1, p2;
    int p2_posted, unpacked;
    int *p1_args;  // [4][m]
    int *p2_args;  // [4][N]
} chunk2d;

struct dist_2d {
    int m, N, a, l;
    int *T;                // [m][N] rows (a,i) sends (b,l): T[i*N + b]
    size_t *off;           // [4][C+1] chunk offsets (rows) of p1send, p1recv, p2send, p2recv
    float *p1send, *p1recv, *p2send, *p2recv;
    int *args;
    chunk2d *ch;
};

static int chunk_rows(int cnt, int k, int C) {
    return dist_chunk_lo(cnt, k + 1, C) - dist_chunk_lo(cnt, k, C);
}

static int rank_at(const dist_comm *c, int node, int l) { return c->members[c->node_start[node] + l]; }

static void copy_rows(float *to, const float *from, int rows, size_t width) {
    if (rows > 0) memcpy(to, from, rows * width * sizeof(float));
}

struct dist_2d *dist_2d_begin(dist_a2a *h) {
    dist_comm *c = h->c;
    int me = c->rank, C = h->n_chunks;
    size_t w = h->width;
    uint64_t row_bytes = w * sizeof(float);
    struct dist_2d *s = bg_calloc(1, sizeof *s);
    s->N = c->n_nodes;
    s->a = c->node_of[me];
    s->l = c->local_rank[me];
    s->m = c->node_start[s->a + 1] - c->node_start[s->a];
    int m = s->m, N = s->N;

    // T: what every rank of my node sends rank l of each node (N ints per pair).
    int *mine = bg_malloc(sizeof(int) * m * N);
    for (int l = 0; l < m; l++)
        for (int b = 0; b < N; b++) mine[l * N + b] = h->send_counts[rank_at(c, b, l)];
    s->T = bg_malloc(sizeof(int) * m * N);
    MPI_Request r;
    DIST_MPI(MPI_Ialltoall(mine, N, MPI_INT, s->T, N, MPI_INT, c->node_comm, &r));
    dist_wait_reqs(c, 1, &r, NULL, "the 2d all-to-all's counts");
    free(mine);
    for (int q = 0; q < m; q++) {
        dist_count_send(c, rank_at(c, s->a, q), (uint64_t)N * sizeof(int));
        dist_count_recv(c, rank_at(c, s->a, q), (uint64_t)N * sizeof(int));
    }

    s->off = bg_calloc(4 * (size_t)(C + 1), sizeof(size_t));
    size_t *o1s = s->off, *o1r = o1s + C + 1, *o2s = o1r + C + 1, *o2r = o2s + C + 1;
    for (int k = 0; k < C; k++) {
        size_t p1s = 0, p1r = 0, p2s = 0, p2r = 0;
        for (int j = 0; j < c->size; j++) p1s += chunk_rows(h->send_counts[j], k, C);
        for (int i = 0; i < m; i++)
            for (int b = 0; b < N; b++) {
                int rows = chunk_rows(s->T[i * N + b], k, C);
                p1r += rows;
                if (b != s->a) p2s += rows;
            }
        for (int j = 0; j < c->size; j++)
            if (c->node_of[j] != s->a) p2r += chunk_rows(h->recv_counts[j], k, C);
        BG_ASSERT(p1r <= INT_MAX && p2s <= INT_MAX);
        o1s[k + 1] = o1s[k] + p1s;
        o1r[k + 1] = o1r[k] + p1r;
        o2s[k + 1] = o2s[k] + p2s;
        o2r[k + 1] = o2r[k] + p2r;
    }
    s->p1send = dist_scratch(c, DIST_SCR_2D_P1SEND, o1s[C] * row_bytes);
    s->p1recv = dist_scratch(c, DIST_SCR_2D_P1RECV, o1r[C] * row_bytes);
    s->p2send = dist_scratch(c, DIST_SCR_2D_P2SEND, o2s[C] * row_bytes);
    s->p2recv = dist_scratch(c, DIST_SCR_2D_P2RECV, o2r[C] * row_bytes);

    int per_chunk = 4 * m + 4 * N;
    s->args = bg_calloc((size_t)per_chunk * C, sizeof(int));
    s->ch = bg_calloc(C, sizeof(chunk2d));
    for (int k = 0; k < C; k++) {
        chunk2d *ch = &s->ch[k];
        ch->p1_args = s->args + (size_t)per_chunk * k;
        ch->p2_args = ch->p1_args + 4 * m;
        ch->p2 = MPI_REQUEST_NULL;
        int *scnt = ch->p1_args, *sdsp = scnt + m, *rcnt = scnt + 2 * m, *rdsp = scnt + 3 * m;
        size_t at = o1s[k];
        for (int l = 0; l < m; l++) {
            sdsp[l] = (int)(at - o1s[k]);
            for (int b = 0; b < N; b++) {
                int j = rank_at(c, b, l);
                int rows = chunk_rows(h->send_counts[j], k, C);
                size_t from = h->send_displs[j] + dist_chunk_lo(h->send_counts[j], k, C);
                copy_rows(s->p1send + at * w, h->send + from * w, rows, w);
                at += rows;
            }
            scnt[l] = (int)(at - o1s[k]) - sdsp[l];
            dist_count_send(c, rank_at(c, s->a, l), scnt[l] * row_bytes);
        }
        int rat = 0;
        for (int i = 0; i < m; i++) {
            rdsp[i] = rat;
            for (int b = 0; b < N; b++) rat += chunk_rows(s->T[i * N + b], k, C);
            rcnt[i] = rat - rdsp[i];
            dist_count_recv(c, rank_at(c, s->a, i), rcnt[i] * row_bytes);
        }
        DIST_MPI(MPI_Ialltoallv(s->p1send + o1s[k] * w, scnt, sdsp, h->row,
                                s->p1recv + o1r[k] * w, rcnt, rdsp, h->row, c->node_comm,
                                &ch->p1));
    }
    return s;
}

// Chunk k's rows for other nodes, re-ordered by destination node, go to my peers of
// the same index there.
static void post_p2(dist_a2a *h, int k) {
    dist_comm *c = h->c;
    struct dist_2d *s = h->d2;
    int m = s->m, N = s->N, C = h->n_chunks;
    size_t w = h->width, *o1r = s->off + (C + 1), *o2s = o1r + (C + 1), *o2r = o2s + (C + 1);
    uint64_t row_bytes = w * sizeof(float);
    chunk2d *ch = &s->ch[k];
    const int *p1dsp = ch->p1_args + 3 * m;
    const float *p1 = s->p1recv + o1r[k] * w;
    float *p2 = s->p2send + o2s[k] * w;
    int *scnt = ch->p2_args, *sdsp = scnt + N, *rcnt = scnt + 2 * N, *rdsp = scnt + 3 * N;
    int at = 0;
    for (int b = 0; b < N; b++) {
        sdsp[b] = at;
        if (b != s->a)
            for (int i = 0; i < m; i++) {
                int skip = 0;  // rows of (a,i) for nodes before b inside its P1 block
                for (int b2 = 0; b2 < b; b2++) skip += chunk_rows(s->T[i * N + b2], k, C);
                int rows = chunk_rows(s->T[i * N + b], k, C);
                copy_rows(p2 + (size_t)at * w, p1 + (size_t)(p1dsp[i] + skip) * w, rows, w);
                at += rows;
            }
        scnt[b] = at - sdsp[b];
        dist_count_send(c, rank_at(c, b, s->l), scnt[b] * row_bytes);
    }
    at = 0;
    for (int a = 0; a < N; a++) {
        int rows = 0;
        if (a != s->a)
            for (int i = 0; i < m; i++) rows += chunk_rows(h->recv_counts[rank_at(c, a, i)], k, C);
        rcnt[a] = rows;
        rdsp[a] = at;
        at += rows;
        dist_count_recv(c, rank_at(c, a, s->l), rows * row_bytes);
    }
    DIST_MPI(MPI_Ialltoallv(p2, scnt, sdsp, h->row, s->p2recv + o2r[k] * w, rcnt, rdsp, h->row,
                            c->cross_comm, &ch->p2));
    ch->p2_posted = 1;
}

// Chunk k's rows into recv: my node's from P1, the others' from P2.
static void unpack(dist_a2a *h, int k) {
    dist_comm *c = h->c;
    struct dist_2d *s = h->d2;
    int m = s->m, N = s->N, C = h->n_chunks;
    size_t w = h->width, *o1r = s->off + (C + 1), *o2r = o1r + 2 * (C + 1);
    const int *p1dsp = s->ch[k].p1_args + 3 * m;
    size_t at = o2r[k];
    for (int a = 0; a < N; a++)
        for (int i = 0; i < m; i++) {
            int src = rank_at(c, a, i);
            int rows = chunk_rows(h->recv_counts[src], k, C);
            size_t to = h->recv_displs[src] + dist_chunk_lo(h->recv_counts[src], k, C);
            if (a == s->a) {
                int skip = 0;
                for (int b2 = 0; b2 < s->a; b2++) skip += chunk_rows(s->T[i * N + b2], k, C);
                copy_rows(h->recv + to * w, s->p1recv + (o1r[k] + p1dsp[i] + skip) * w, rows, w);
            } else {
                copy_rows(h->recv + to * w, s->p2recv + at * w, rows, w);
                at += rows;
            }
        }
    BG_ASSERT(at == o2r[k + 1]);
}

static int req_done(dist_comm *c, MPI_Request *r, int blocking) {
    if (*r == MPI_REQUEST_NULL) return 1;
    if (blocking) {
        dist_wait_reqs(c, 1, r, NULL, "the 2d all-to-all");
        return 1;
    }
    return dist_test_reqs(1, r);
}

int dist_2d_step(dist_a2a *h, int k, int blocking) {
    struct dist_2d *s = h->d2;
    chunk2d *ch = &s->ch[k];
    const chunk2d *prev = k > 0 ? &s->ch[k - 1] : NULL;
    if (!ch->p2_posted && (!prev || prev->p2_posted) && req_done(h->c, &ch->p1, blocking))
        post_p2(h, k);
    if (ch->p2_posted && !ch->unpacked && req_done(h->c, &ch->p2, blocking)) {
        unpack(h, k);
        ch->unpacked = 1;
    }
    return ch->unpacked;
}

void dist_2d_free(struct dist_2d *s) {
    if (!s) return;
    free(s->T);
    free(s->off);
    free(s->args);
    free(s->ch);
    free(s);
}
#endif
