// MPI backend: hierarchical all-to-all-v (BaGuaLu / TA-MoE style), chunked and
// non-blocking.
//
// Rows for ranks on my own node go straight to them (MPI_Ialltoallv on the node
// communicator). Rows for other nodes take three hops:
//   G  gather: every rank sends its off-node rows to its node leader (lowest rank);
//   X  exchange: leaders send each other one message per node pair (leader comm);
//   S  scatter: the destination leader hands every local rank its rows.
// Inter-node messages drop from (ranks per node)^2 to 1 per node pair, at the price of
// two intra-node copies. Every hop only moves rows, so the result is bitwise the flat
// one. Block order at each hop (all ascending by rank):
//   pack   (rank):   chunk, destination j off-node, its rows
//   gather (leader): chunk, source q, destination j
//   xsend  (leader): chunk, destination node b, destination j in b, source q
//   xrecv  (leader): chunk, source node a, destination p here, source s in a
//   ssend  (leader): chunk, destination p here, source node a, source s in a
//   srecv  (rank):   chunk, source node a, source s in a  -> unpacked into recv
//
// Chunks: each (source, destination) block is cut as in dist.h, and every hop runs per
// chunk so chunk k+1 travels while the caller computes on chunk k. All ranks post
// their node-communicator collectives in one order — A and G for every chunk, then S
// for every chunk — and leaders post X and S for chunk k only after chunk k-1, as MPI
// requires collectives on a communicator to be issued in the same order everywhere.
#ifdef BG_HAVE_MPI
#include "comm/dist_impl.h"

#include <limits.h>
#include <string.h>

typedef struct {
    MPI_Request a, g, x, s;  // MPI_REQUEST_NULL once complete (or never needed)
    int x_posted, s_posted, unpacked;
    int *a_args;  // [4][m] counts/displs of the direct exchange on the node
    int *g_args;  // [2][m] leader: gather counts/displs
    int *x_args;  // [4][N] leader: exchange counts/displs between leaders
    int *s_args;  // [2][m] leader: scatter counts/displs
    int s_count;  // rows this rank receives in the scatter
} chunk_state;

struct dist_hier {
    int m, lr, leader, node, N;
    const int *mem;  // the m ranks of my node
    int *cnt_all;    // leader: [m][2n] send counts then receive counts of each local rank
    size_t *pack_off, *gath_off, *xrecv_off, *srecv_off;  // [C+1] row offsets of chunks
    float *pack, *gath, *xsend, *xrecv, *ssend, *srecv;
    int *args;
    chunk_state *ch;
};

static int chunk_rows(int cnt, int k, int C) {
    return dist_chunk_lo(cnt, k + 1, C) - dist_chunk_lo(cnt, k, C);
}

static int fits_int(size_t rows) { return rows <= (size_t)INT_MAX; }

static float *rows_at(float *base, size_t row, size_t width) { return base + row * width; }

// memcpy must not see NULL even for zero bytes; a rank with nothing to send may pass NULL.
static void copy_rows(float *to, const float *from, int rows, size_t width) {
    if (rows > 0) memcpy(to, from, rows * width * sizeof(float));
}

dist_hier *dist_hier_begin(dist_a2a *h) {
    dist_comm *c = h->c;
    int n = c->size, me = c->rank, C = h->n_chunks;
    size_t w = h->width;
    uint64_t row_bytes = w * sizeof(float);
    dist_hier *s = bg_calloc(1, sizeof *s);
    s->node = c->node_of[me];
    s->N = c->n_nodes;
    s->mem = c->members + c->node_start[s->node];
    s->m = c->node_start[s->node + 1] - c->node_start[s->node];
    s->lr = c->local_rank[me];
    s->leader = s->lr == 0;
    int m = s->m, N = s->N, lead = s->mem[0];

    // The leader learns every local rank's send and receive counts (2n ints each).
    int *mine = bg_malloc(sizeof(int) * 2 * n);
    memcpy(mine, h->send_counts, sizeof(int) * n);
    memcpy(mine + n, h->recv_counts, sizeof(int) * n);
    if (s->leader) s->cnt_all = bg_malloc(sizeof(int) * 2 * n * m);
    dist_watch_begin("the hierarchical all-to-all's counts");
    DIST_MPI(MPI_Gather(mine, 2 * n, MPI_INT, s->cnt_all, 2 * n, MPI_INT, 0, c->node_comm));
    dist_watch_end();
    free(mine);
    if (s->leader)
        for (int q = 1; q < m; q++) dist_count_recv(c, s->mem[q], 2 * n * sizeof(int));
    else
        dist_count_send(c, lead, 2 * n * sizeof(int));

    // Sizes of every chunk's region in each buffer.
    s->pack_off = bg_calloc(4 * (size_t)(C + 1), sizeof(size_t));
    s->gath_off = s->pack_off + (C + 1);
    s->xrecv_off = s->pack_off + 2 * (C + 1);
    s->srecv_off = s->pack_off + 3 * (C + 1);
    for (int k = 0; k < C; k++) {
        size_t pack = 0, gath = 0, xrecv = 0, srecv = 0;
        for (int j = 0; j < n; j++) {
            if (c->node_of[j] == s->node) continue;
            pack += chunk_rows(h->send_counts[j], k, C);
            srecv += chunk_rows(h->recv_counts[j], k, C);
            if (s->leader)
                for (int q = 0; q < m; q++) {
                    gath += chunk_rows(s->cnt_all[q * 2 * n + j], k, C);
                    xrecv += chunk_rows(s->cnt_all[q * 2 * n + n + j], k, C);
                }
        }
        BG_ASSERT(fits_int(gath) && fits_int(xrecv));  // node totals of int row counts
        s->pack_off[k + 1] = s->pack_off[k] + pack;
        s->gath_off[k + 1] = s->gath_off[k] + gath;
        s->xrecv_off[k + 1] = s->xrecv_off[k] + xrecv;
        s->srecv_off[k + 1] = s->srecv_off[k] + srecv;
    }
    s->pack = dist_scratch(c, DIST_SCR_HIER_PACK, s->pack_off[C] * row_bytes);
    s->srecv = dist_scratch(c, DIST_SCR_HIER_SRECV, s->srecv_off[C] * row_bytes);
    if (s->leader) {
        s->gath = dist_scratch(c, DIST_SCR_HIER_GATHER, s->gath_off[C] * row_bytes);
        s->xsend = dist_scratch(c, DIST_SCR_HIER_XSEND, s->gath_off[C] * row_bytes);
        s->xrecv = dist_scratch(c, DIST_SCR_HIER_XRECV, s->xrecv_off[C] * row_bytes);
        s->ssend = dist_scratch(c, DIST_SCR_HIER_SSEND, s->xrecv_off[C] * row_bytes);
    }

    // My off-node rows, chunk by chunk, destinations ascending.
    for (int k = 0; k < C; k++) {
        size_t at = s->pack_off[k];
        for (int j = 0; j < n; j++) {
            if (c->node_of[j] == s->node) continue;
            int rows = chunk_rows(h->send_counts[j], k, C);
            size_t from = h->send_displs[j] + dist_chunk_lo(h->send_counts[j], k, C);
            if (rows > 0) copy_rows(rows_at(s->pack, at, w), h->send + from * w, rows, w);
            at += rows;
        }
    }

    int per_chunk = 8 * m + 4 * N;
    s->args = bg_calloc((size_t)per_chunk * C, sizeof(int));
    s->ch = bg_calloc(C, sizeof(chunk_state));
    for (int k = 0; k < C; k++) {
        chunk_state *ch = &s->ch[k];
        ch->a_args = s->args + (size_t)per_chunk * k;
        ch->g_args = ch->a_args + 4 * m;
        ch->s_args = ch->g_args + 2 * m;
        ch->x_args = ch->s_args + 2 * m;
        ch->x = ch->s = MPI_REQUEST_NULL;
        // A: straight to the ranks of my node, including myself.
        int *scnt = ch->a_args, *sdsp = scnt + m, *rcnt = scnt + 2 * m, *rdsp = scnt + 3 * m;
        for (int q = 0; q < m; q++) {
            int j = s->mem[q];
            scnt[q] = chunk_rows(h->send_counts[j], k, C);
            sdsp[q] = h->send_displs[j] + dist_chunk_lo(h->send_counts[j], k, C);
            rcnt[q] = chunk_rows(h->recv_counts[j], k, C);
            rdsp[q] = h->recv_displs[j] + dist_chunk_lo(h->recv_counts[j], k, C);
            dist_count_send(c, j, scnt[q] * row_bytes);
            dist_count_recv(c, j, rcnt[q] * row_bytes);
        }
        DIST_MPI(MPI_Ialltoallv(h->send, scnt, sdsp, h->row, h->recv, rcnt, rdsp, h->row,
                                c->node_comm, &ch->a));
        // G: off-node rows to the leader.
        int gsend = (int)(s->pack_off[k + 1] - s->pack_off[k]);
        int *gcnt = ch->g_args, *gdsp = gcnt + m;
        if (s->leader) {
            int at = 0;
            for (int q = 0; q < m; q++) {
                int rows = 0;
                for (int j = 0; j < n; j++)
                    if (c->node_of[j] != s->node)
                        rows += chunk_rows(s->cnt_all[q * 2 * n + j], k, C);
                gcnt[q] = rows;
                gdsp[q] = at;
                at += rows;
                dist_count_recv(c, s->mem[q], rows * row_bytes);
            }
        } else {
            dist_count_send(c, lead, gsend * row_bytes);
        }
        float *gdst = s->leader ? rows_at(s->gath, s->gath_off[k], w) : NULL;
        DIST_MPI(MPI_Igatherv(rows_at(s->pack, s->pack_off[k], w), gsend, h->row, gdst, gcnt, gdsp,
                              h->row, 0, c->node_comm, &ch->g));
        ch->s_count = (int)(s->srecv_off[k + 1] - s->srecv_off[k]);
    }
    // Other ranks post every scatter now; the leader posts each once its rows arrive.
    if (!s->leader)
        for (int k = 0; k < C; k++) {
            chunk_state *ch = &s->ch[k];
            DIST_MPI(MPI_Iscatterv(NULL, NULL, NULL, h->row, rows_at(s->srecv, s->srecv_off[k], w),
                                   ch->s_count, h->row, 0, c->node_comm, &ch->s));
            dist_count_recv(c, lead, ch->s_count * row_bytes);
            ch->s_posted = 1;
        }
    return s;
}

// Leader: the node's gathered rows for chunk k, re-ordered by destination node, go to
// the other leaders in one message each; rows for this node come back the same way.
static void post_exchange(dist_a2a *h, int k) {
    dist_comm *c = h->c;
    dist_hier *s = h->hier;
    int n = c->size, m = s->m, N = s->N, C = h->n_chunks;
    size_t w = h->width;
    uint64_t row_bytes = w * sizeof(float);
    chunk_state *ch = &s->ch[k];
    const int *gdsp = ch->g_args + m;
    // goff[q*n + j]: row of (q -> j) inside the gathered chunk.
    int *goff = bg_malloc(sizeof(int) * m * n);
    for (int q = 0; q < m; q++) {
        int at = gdsp[q];
        for (int j = 0; j < n; j++) {
            if (c->node_of[j] == s->node) continue;
            goff[q * n + j] = at;
            at += chunk_rows(s->cnt_all[q * 2 * n + j], k, C);
        }
    }
    float *gath = rows_at(s->gath, s->gath_off[k], w),
          *xsend = rows_at(s->xsend, s->gath_off[k], w);
    int *scnt = ch->x_args, *sdsp = scnt + N, *rcnt = scnt + 2 * N, *rdsp = scnt + 3 * N;
    int at = 0;
    for (int b = 0; b < N; b++) {
        sdsp[b] = at;
        if (b != s->node)
            for (int i = c->node_start[b]; i < c->node_start[b + 1]; i++) {
                int j = c->members[i];
                for (int q = 0; q < m; q++) {
                    int rows = chunk_rows(s->cnt_all[q * 2 * n + j], k, C);
                    copy_rows(rows_at(xsend, at, w), rows_at(gath, goff[q * n + j], w), rows, w);
                    at += rows;
                }
            }
        scnt[b] = at - sdsp[b];
    }
    free(goff);
    at = 0;
    for (int a = 0; a < N; a++) {
        int rows = 0;
        if (a != s->node)
            for (int p = 0; p < m; p++)
                for (int i = c->node_start[a]; i < c->node_start[a + 1]; i++)
                    rows += chunk_rows(s->cnt_all[p * 2 * n + n + c->members[i]], k, C);
        rcnt[a] = rows;
        rdsp[a] = at;
        at += rows;
    }
    for (int b = 0; b < N; b++) {
        int peer = c->members[c->node_start[b]];  // leader of node b
        dist_count_send(c, peer, scnt[b] * row_bytes);
        dist_count_recv(c, peer, rcnt[b] * row_bytes);
    }
    DIST_MPI(MPI_Ialltoallv(xsend, scnt, sdsp, h->row, rows_at(s->xrecv, s->xrecv_off[k], w), rcnt,
                            rdsp, h->row, c->leader_comm, &ch->x));
    ch->x_posted = 1;
}

// Leader: rows from other nodes for chunk k, re-ordered by local destination, are
// scattered inside the node.
static void post_scatter(dist_a2a *h, int k) {
    dist_comm *c = h->c;
    dist_hier *s = h->hier;
    int n = c->size, m = s->m, N = s->N, C = h->n_chunks;
    size_t w = h->width;
    uint64_t row_bytes = w * sizeof(float);
    chunk_state *ch = &s->ch[k];
    const int *xdsp = ch->x_args + 3 * N;
    float *xrecv = rows_at(s->xrecv, s->xrecv_off[k], w),
          *ssend = rows_at(s->ssend, s->xrecv_off[k], w);
    // Inside node a's block the rows for destination p are one run (sources of a in
    // order); runs[p*N + a] is where it starts, lens[p*N + a] its length.
    int *runs = bg_malloc(sizeof(int) * 2 * m * N), *lens = runs + m * N;
    for (int a = 0; a < N; a++) {
        int at = xdsp[a];
        for (int p = 0; p < m; p++) {
            int rows = 0;
            if (a != s->node)
                for (int i = c->node_start[a]; i < c->node_start[a + 1]; i++)
                    rows += chunk_rows(s->cnt_all[p * 2 * n + n + c->members[i]], k, C);
            runs[p * N + a] = at;
            lens[p * N + a] = rows;
            at += rows;
        }
    }
    int *scnt = ch->s_args, *sdsp = scnt + m;
    int at = 0;
    for (int p = 0; p < m; p++) {
        sdsp[p] = at;
        for (int a = 0; a < N; a++) {
            copy_rows(rows_at(ssend, at, w), rows_at(xrecv, runs[p * N + a], w), lens[p * N + a],
                      w);
            at += lens[p * N + a];
        }
        scnt[p] = at - sdsp[p];
        dist_count_send(c, s->mem[p], scnt[p] * row_bytes);
    }
    free(runs);
    BG_ASSERT(scnt[0] == ch->s_count);  // my own share, as my receive counts predict
    DIST_MPI(MPI_Iscatterv(ssend, scnt, sdsp, h->row, rows_at(s->srecv, s->srecv_off[k], w),
                           ch->s_count, h->row, 0, c->node_comm, &ch->s));
    ch->s_posted = 1;
}

// Rows from other nodes for chunk k, ordered by source node then source, go to their
// places in recv.
static void unpack(dist_a2a *h, int k) {
    dist_comm *c = h->c;
    dist_hier *s = h->hier;
    int C = h->n_chunks;
    size_t w = h->width;
    size_t at = s->srecv_off[k];
    for (int a = 0; a < s->N; a++) {
        if (a == s->node) continue;
        for (int i = c->node_start[a]; i < c->node_start[a + 1]; i++) {
            int src = c->members[i];
            int rows = chunk_rows(h->recv_counts[src], k, C);
            size_t to = h->recv_displs[src] + dist_chunk_lo(h->recv_counts[src], k, C);
            if (rows > 0) copy_rows(h->recv + to * w, rows_at(s->srecv, at, w), rows, w);
            at += rows;
        }
    }
    BG_ASSERT(at == s->srecv_off[k + 1]);
}

static int req_done(dist_comm *c, MPI_Request *r, int blocking) {
    if (*r == MPI_REQUEST_NULL) return 1;
    if (blocking) {
        dist_wait_reqs(c, 1, r, NULL, "the hierarchical all-to-all");
        return 1;
    }
    int flag = 0;
    DIST_MPI(MPI_Test(r, &flag, MPI_STATUS_IGNORE));
    return flag;
}

int dist_hier_step(dist_a2a *h, int k, int blocking) {
    dist_hier *s = h->hier;
    chunk_state *ch = &s->ch[k];
    const chunk_state *prev = k > 0 ? &s->ch[k - 1] : NULL;
    int a_done = req_done(h->c, &ch->a, blocking);
    int g_done = req_done(h->c, &ch->g, blocking);
    if (s->leader) {
        if (!ch->x_posted && g_done && (!prev || prev->x_posted)) post_exchange(h, k);
        if (ch->x_posted && !ch->s_posted && req_done(h->c, &ch->x, blocking) &&
            (!prev || prev->s_posted))
            post_scatter(h, k);
    }
    if (ch->s_posted && !ch->unpacked && req_done(h->c, &ch->s, blocking)) {
        unpack(h, k);
        ch->unpacked = 1;
    }
    return a_done && g_done && ch->unpacked;
}

void dist_hier_free(dist_hier *s) {
    if (!s) return;
    free(s->cnt_all);
    free(s->pack_off);
    free(s->args);
    free(s->ch);
    free(s);
}
#endif
