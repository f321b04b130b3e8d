#include "moe/exchange.h"

#include <string.h>

#include "core/error.h"
#include "dist/dist.h"

void moe_exchange_plan(moe_acts *acts, const moe_shape *s) {
    const moe_parallel *par = s->par;
    const int P = par->ep_size, El = moe_local_experts(s);
    // counts is expert-ordered, so rank q's slice is counts[q·El, (q+1)·El): exactly
    // the all-to-all layout.
    dist_alltoall_i32(par->ep_comm, acts->counts, acts->recv_counts, El);
    for (int q = 0; q < P; q++) {
        int sent = 0, got = 0;
        for (int e = 0; e < El; e++) {
            sent += acts->counts[q * El + e];
            got += acts->recv_counts[q * El + e];
        }
        acts->send_rows[q] = sent;
        acts->recv_rows[q] = got;
    }
    acts->local_offsets[0] = 0;
    for (int e = 0; e < El; e++) {
        int n = 0;
        for (int q = 0; q < P; q++) n += acts->recv_counts[q * El + e];
        acts->local_offsets[e + 1] = acts->local_offsets[e] + n;
    }
    // Received row r (source q, expert e, i-th of that block) goes to local row
    // local_offsets[e] + (rows of e from sources before q) + i.
    int r = 0;
    for (int q = 0; q < P; q++) {
        for (int e = 0; e < El; e++) {
            int dst = acts->local_offsets[e];
            for (int q2 = 0; q2 < q; q2++) dst += acts->recv_counts[q2 * El + e];
            for (int i = 0; i < acts->recv_counts[q * El + e]; i++) acts->recv_to_local[r++] = dst + i;
        }
    }
    acts->rows_local = r;
    BG_ASSERT(r == acts->local_offsets[El]);
}

void moe_exchange_to_experts(float *recv, const float *send, const moe_acts *acts,
                             const moe_shape *s) {
    dist_alltoallv(s->par->ep_comm, (enum dist_a2a_algo)s->par->a2a_algo, send, acts->send_rows,
                   recv, acts->recv_rows, (size_t)s->C);
}

void moe_exchange_from_experts(float *recv, const float *send, const moe_acts *acts,
                               const moe_shape *s) {
    dist_alltoallv(s->par->ep_comm, (enum dist_a2a_algo)s->par->a2a_algo, send, acts->recv_rows,
                   recv, acts->send_rows, (size_t)s->C);
}

void moe_rows_recv_to_local(float *local, const float *recv, const moe_acts *acts, int C) {
    const int R = acts->rows_local;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++)
        memcpy(local + (size_t)acts->recv_to_local[r] * C, recv + (size_t)r * C, sizeof(float) * C);
}

void moe_rows_local_to_recv(float *recv, const float *local, const moe_acts *acts, int C) {
    const int R = acts->rows_local;
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++)
        memcpy(recv + (size_t)r * C, local + (size_t)acts->recv_to_local[r] * C, sizeof(float) * C);
}
