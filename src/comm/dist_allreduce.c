// MPI backend: deterministic in-place all-reduce in bounded buckets.
//
// MPI_Allreduce lets the library pick the reduction tree by message size and rank
// count, and MPI does not promise every rank the same bits. We want a fixed layout to
// be bitwise reproducible and equal on all ranks, so we order the sum ourselves:
//   1. reduce-scatter by exchange: rank i receives segment i of every rank's bucket
//      (MPI_Alltoallv: pure data movement, no arithmetic inside MPI);
//   2. rank i sums its segment over ranks in rank order: ((x0 + x1) + x2) + ...;
//   3. all-gather the summed segments (pure data movement again).
// Each element is thus always the same left-to-right sum, whatever the bucket size or
// MPI's algorithms. Bytes moved per rank: 2 (P-1)/P of the buffer, as a ring all-reduce.
#ifdef BG_HAVE_MPI
#include "core/timer.h"
#include "comm/dist_impl.h"

#include <math.h>
#include <string.h>

enum red_kind { SUM_F32, SUM_F64, SUM_I64, MAX_F64 };

static size_t elem_size(enum red_kind k) { return k == SUM_F32 ? 4 : 8; }

static MPI_Datatype elem_type(enum red_kind k) {
    switch (k) {
    case SUM_F32: return MPI_FLOAT;
    case SUM_I64: return MPI_INT64_T;
    default: return MPI_DOUBLE;
    }
}

// out[i] = parts[0][i] (op) parts[1][i] (op) ... left to right, parts `stride` apart.
static void combine(enum red_kind k, void *out, const void *parts, size_t n, size_t stride, int P) {
    switch (k) {
    case SUM_F32: {
        dist_sum_rank_order_f32(out, parts, stride, P, 0, NULL, n);
        break;
    }
    case SUM_F64: {
        double *o = out;
        const double *p = parts;
        memcpy(o, p, n * sizeof *o);
        for (int r = 1; r < P; r++)
            for (size_t i = 0; i < n; i++) o[i] += p[r * stride + i];
        break;
    }
    case SUM_I64: {
        int64_t *o = out;
        const int64_t *p = parts;
        memcpy(o, p, n * sizeof *o);
        for (int r = 1; r < P; r++)
            for (size_t i = 0; i < n; i++) o[i] += p[r * stride + i];
        break;
    }
    case MAX_F64: {
        double *o = out;
        const double *p = parts;
        memcpy(o, p, n * sizeof *o);
        for (int r = 1; r < P; r++)
            for (size_t i = 0; i < n; i++) {
                double v = p[r * stride + i];
                if (v > o[i] || isnan(v)) o[i] = v;  // NaN wins: a bad statistic must show
            }
        break;
    }
    }
}

// One bucket of n elements (n fits an int): segment j is [n*j/P, n*(j+1)/P).
static void allreduce_bucket(dist_comm *c, enum red_kind k, char *buf, size_t n) {
    int P = c->size, me = c->rank;
    size_t es = elem_size(k);
    int *args = bg_malloc(sizeof(int) * 4 * P);
    int *scnt = args, *sdsp = args + P, *rcnt = args + 2 * P, *rdsp = args + 3 * P;
    int seg = 0;  // the longest segment: received parts are laid out `seg` apart
    for (int j = 0; j < P; j++) {
        size_t lo = n * j / P, hi = n * (j + 1) / P;
        scnt[j] = (int)(hi - lo);
        sdsp[j] = (int)lo;
        if (scnt[j] > seg) seg = scnt[j];
    }
    int mine = scnt[me];
    for (int j = 0; j < P; j++) {
        rcnt[j] = mine;
        rdsp[j] = j * seg;
    }
    // What dist_allreduce_scratch_bytes predicts for a first bucket of n.
    char *parts = dist_scratch(c, DIST_SCR_REDUCE, (size_t)P * seg * es);
    MPI_Datatype t = elem_type(k);
    if (dist_timeout() > 0) {  // point to point, so the watchdog can name a peer
        dist_p2p_exchange(c, buf, scnt, sdsp, parts, rcnt, rdsp, t, es, "an all-reduce");
        combine(k, buf + (size_t)sdsp[me] * es, parts, (size_t)mine, (size_t)seg, P);
        // The all-gather: my segment to every rank, theirs into place.
        int *mcnt = bg_malloc(sizeof(int) * 2 * P), *mdsp = mcnt + P;
        for (int j = 0; j < P; j++) mcnt[j] = mine, mdsp[j] = sdsp[me];
        dist_p2p_exchange(c, buf, mcnt, mdsp, buf, scnt, sdsp, t, es, "an all-reduce");
        free(mcnt);
    } else {
        DIST_MPI(MPI_Alltoallv(buf, scnt, sdsp, t, parts, rcnt, rdsp, t, c->comm));
        combine(k, buf + (size_t)sdsp[me] * es, parts, (size_t)mine, (size_t)seg, P);
        DIST_MPI(MPI_Allgatherv(MPI_IN_PLACE, 0, t, buf, scnt, sdsp, t, c->comm));
    }
    for (int j = 0; j < P; j++) {  // exchange, then all-gather
        dist_count_send(c, j, (uint64_t)scnt[j] * es);
        dist_count_recv(c, j, (uint64_t)mine * es);
        dist_count_send(c, j, (uint64_t)mine * es);
        dist_count_recv(c, j, (uint64_t)scnt[j] * es);
    }
    free(args);
}

static void allreduce(dist_comm *c, enum red_kind k, void *buf, size_t n) {
    double t0 = bg_now();
    c->traffic.calls++;
    if (c->size > 1) {
        size_t es = elem_size(k);
        size_t bucket = dist_bucket_elems(c->bucket_bytes, es);
        for (size_t off = 0; off < n; off += bucket)
            allreduce_bucket(c, k, (char *)buf + off * es, n - off < bucket ? n - off : bucket);
    }
    dist_count_time(c, t0);
}

void dist_allreduce_sum_f32(dist_comm *c, float *buf, size_t n) { allreduce(c, SUM_F32, buf, n); }
void dist_allreduce_sum_f64(dist_comm *c, double *buf, size_t n) { allreduce(c, SUM_F64, buf, n); }
void dist_allreduce_sum_i64(dist_comm *c, int64_t *buf, size_t n) { allreduce(c, SUM_I64, buf, n); }
void dist_allreduce_max_f64(dist_comm *c, double *buf, size_t n) { allreduce(c, MAX_F64, buf, n); }
#endif
