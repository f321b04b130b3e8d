// MPI backend: the gradient reduction overlapped with the backward (dist.h,
// dist_grad_reduce_*). The backward finishes a model's gradients from its last layer to
// its first; each range the caller posts as final leaves at once as non-blocking
// point-to-point sends, and the caller's progress calls between blocks sum what has
// arrived and send the sums on. MPI runs FUNNELED: no thread of ours calls MPI, and a
// busy progress thread would take a core from the compute.
//
// A posted range is cut into buckets. A bucket has, per rank j, a segment (all-reduce:
// the bucket split P ways; reduce-scatter: the part of the bucket inside rank j's
// segment of the whole buffer, so one owner per bucket). Phase 1: every rank sends its
// values of segment j to rank j, which sums them in rank order ((x0 + x1) + x2) + ...
// (the blocking calls' order, so the same bits). Phase 2 (all-reduce only): rank j
// sends its summed segment to every rank. Tags carry the bucket's number and phase, so
// the phases of different buckets, posted at different moments on different ranks,
// never match each other's messages.
//
// A bucket's sends leave at a progress call that allows them: the caller bounds the
// bytes in flight, since a transfer shares its link (and, over TCP, its connection) with
// the caller's own exchanges, which queue behind it. Its receives (P parts of my
// segment) wait, in posting order, for room in a ring over the communicator's scratch
// (DIST_SCR_GRAD, dist_grad_reduce_scratch_bytes), freed as the sums are taken.
// Neither posting nor progress ever waits.
#ifdef BG_HAVE_MPI
#include "core/timer.h"
#include "comm/dist_impl.h"

#include <stdint.h>
#include <string.h>

enum {
    GRAD_TAG_BASE = 16384,  // [16384, 32767]: above the other point-to-point tags and
    GRAD_TAGS = 16384,      // within the MPI standard's least tag bound
};

// Where a bucket's receive space stands.
enum { RING_NONE, RING_WAITING, RING_HELD, RING_FREED };

typedef struct {
    size_t a, b;     // elements [a, b) of the buffer
    int owner;       // reduce-scatter: the rank whose segment holds [a, b); -1: all-reduce
    int phase;       // 1: sums under way, 2: sums being shared, 0: done
    int ring;        // RING_*
    size_t ring_off; // my parts: P x my segment's length, from here in the ring
    size_t send_bytes;  // what phase 1 sends
    int tag;         // phase p uses tag + p - 1
    MPI_Request *reqs;  // [2P]: receives from rank j at j, sends to rank j at P + j
    int *peers;         // [2P]
} grad_bucket;

struct dist_grad_reduce {
    dist_comm *c;
    float *buf;
    size_t n;
    int scatter;
    size_t piece;       // the most elements of one rank's segment in a bucket
    float *ring;        // ring_len floats
    size_t ring_len, head;
    int ring_front;     // the oldest bucket that may hold ring space
    int live;           // buckets holding ring space
    grad_bucket *b;
    int nb, cap, first_open;  // buckets of this reduction; the oldest not done
    int first_waiting;        // the oldest bucket whose receives may wait for room
    int first_unsent;         // the oldest bucket whose sends wait (progress releases them)
    int send_front;           // the oldest bucket whose sends may be in flight
    unsigned serial;          // buckets posted since the handle was made (for tags)
    double t_begin, exposed;
    int active;
};

dist_grad_reduce *dist_grad_reduce_new(dist_comm *c) {
    dist_grad_reduce *h = bg_calloc(1, sizeof *h);
    h->c = c;
    return h;
}

void dist_grad_reduce_free(dist_grad_reduce *h) {
    if (!h) return;
    BG_ASSERT(!h->active);
    for (int i = 0; i < h->cap; i++) free(h->b[i].reqs), free(h->b[i].peers);
    free(h->b);
    free(h);
}

void dist_grad_reduce_begin(dist_grad_reduce *h, float *buf, size_t n, int scatter) {
    BG_ASSERT(!h->active);
    dist_comm *c = h->c;
    h->buf = buf;
    h->n = n;
    h->scatter = scatter != 0;
    h->nb = h->first_open = h->first_waiting = h->ring_front = h->live = 0;
    h->first_unsent = h->send_front = 0;
    h->head = 0;
    h->exposed = 0;
    h->active = 1;
    c->traffic.calls++;
    if (c->size <= 1 || n == 0) return;
    h->piece = dist_grad_piece_elems(c->size, n, c->bucket_bytes);
    size_t bytes = dist_grad_reduce_scratch_bytes(c->size, n, c->bucket_bytes);
    h->ring = dist_scratch(c, DIST_SCR_GRAD, bytes);
    h->ring_len = bytes / sizeof(float);
}

// Rank j's segment of bucket k: [*lo, *lo + return value).
static size_t bucket_seg(const dist_grad_reduce *h, const grad_bucket *k, int j, size_t *lo) {
    if (k->owner >= 0) {
        *lo = k->a;
        return j == k->owner ? k->b - k->a : 0;
    }
    size_t m = k->b - k->a, P = (size_t)h->c->size;
    *lo = k->a + m * (size_t)j / P;
    return k->a + m * (size_t)(j + 1) / P - *lo;
}

// One transfer of bucket k with rank j, counted as traffic and kept for the watchdog.
static void bucket_xfer(dist_grad_reduce *h, grad_bucket *k, int send, int j, float *p, size_t cnt,
                        int tag) {
    dist_comm *c = h->c;
    if (!cnt) return;
    int i = send ? c->size + j : j;
    if (send) {
        DIST_MPI(MPI_Isend(p, (int)cnt, MPI_FLOAT, j, tag, c->comm, &k->reqs[i]));
        dist_count_send(c, j, (uint64_t)cnt * sizeof(float));
    } else {
        DIST_MPI(MPI_Irecv(p, (int)cnt, MPI_FLOAT, j, tag, c->comm, &k->reqs[i]));
        dist_count_recv(c, j, (uint64_t)cnt * sizeof(float));
    }
    k->peers[i] = j;
}

static void clear_reqs(const dist_comm *c, grad_bucket *k) {
    for (int i = 0; i < 2 * c->size; i++) k->reqs[i] = MPI_REQUEST_NULL, k->peers[i] = -1;
}

// Drops the oldest holders that are done with their room.
static void ring_release(dist_grad_reduce *h) {
    while (h->ring_front < h->first_waiting && h->b[h->ring_front].ring != RING_HELD) {
        if (h->b[h->ring_front].ring == RING_FREED) h->b[h->ring_front].ring = RING_NONE, h->live--;
        h->ring_front++;
    }
}

// Ring room for `need` floats after every held part, or 0 (*off unset) when there is
// none: held space runs from the oldest holder's offset to head, possibly wrapped.
static int ring_alloc(dist_grad_reduce *h, size_t need, size_t *off) {
    ring_release(h);  // the front: the oldest holder, when any
    if (!h->live) h->head = 0;
    size_t tail = h->live ? h->b[h->ring_front].ring_off : 0;
    if (!h->live || h->head > tail) {  // held: [tail, head)
        if (h->ring_len - h->head >= need) *off = h->head;
        else if (tail >= need) *off = 0;
        else return 0;
    } else {  // wrapped, held: [tail, ring_len) and [0, head)
        if (tail - h->head < need) return 0;
        *off = h->head;
    }
    h->head = *off + need;
    h->live++;
    return 1;
}

// Phase 1 done: my segment's sum in rank order, then (all-reduce) the sum to all.
static void bucket_phase1_done(dist_grad_reduce *h, int idx) {
    dist_comm *c = h->c;
    grad_bucket *k = &h->b[idx];
    int P = c->size, me = c->rank;
    size_t lo, mine = bucket_seg(h, k, me, &lo);
    if (mine) {
        float *parts = h->ring + k->ring_off, *o = h->buf + lo;
        dist_sum_rank_order_f32(o, parts, mine, P, me, o, mine);
        k->ring = RING_FREED;
        ring_release(h);
    }
    if (k->owner >= 0) {
        k->phase = 0;
        return;
    }
    clear_reqs(c, k);
    for (int s = 1; s < P; s++) {  // receives first, each rank from a different peer
        int j = (me + P - s) % P;
        size_t jlo, cnt = bucket_seg(h, k, j, &jlo);
        bucket_xfer(h, k, 0, j, h->buf + jlo, cnt, k->tag + 1);
    }
    for (int s = 1; s < P; s++) bucket_xfer(h, k, 1, (me + s) % P, h->buf + lo, mine, k->tag + 1);
    k->phase = 2;
}

// Advances bucket idx; blocking: until it is done (sums_only: until its sums are
// taken), and the watchdog names a stuck peer. Its receives must be posted.
static void bucket_step(dist_grad_reduce *h, int idx, int blocking, int sums_only) {
    grad_bucket *k = &h->b[idx];
    int n = 2 * h->c->size;
    while (k->phase == 1 || (k->phase == 2 && !sums_only)) {
        if (blocking) dist_wait_reqs(h->c, n, k->reqs, k->peers, "a gradient reduction");
        else if (!dist_test_reqs(n, k->reqs)) return;
        if (k->phase == 1) bucket_phase1_done(h, idx);
        else k->phase = 0;
    }
}

// Posts the receives of the buckets waiting for ring room, in order, while there is
// room; blocking: waits for the oldest holders' sums to make room.
static void start_receives(dist_grad_reduce *h, int blocking) {
    int P = h->c->size, me = h->c->rank;
    for (; h->first_waiting < h->nb; h->first_waiting++) {
        grad_bucket *k = &h->b[h->first_waiting];
        if (k->ring != RING_WAITING) continue;
        size_t lo, mine = bucket_seg(h, k, me, &lo), off;
        while (!ring_alloc(h, (size_t)P * mine, &off)) {
            if (!blocking) return;
            bucket_step(h, h->ring_front, 1, 1);
        }
        k = &h->b[h->first_waiting];
        k->ring = RING_HELD;
        k->ring_off = off;
        for (int s = 1; s < P; s++) {  // each rank from a different peer first
            int j = (me + P - s) % P;
            bucket_xfer(h, k, 0, j, h->ring + off + (size_t)j * mine, mine, k->tag);
        }
    }
}

// Phase 1's sends of the posted buckets, in order, while less than `limit` bytes of
// earlier ones are in flight (SIZE_MAX: all).
static void release_sends(dist_grad_reduce *h, size_t limit) {
    int P = h->c->size, me = h->c->rank;
    size_t flight = 0;
    for (int i = h->send_front; i < h->first_unsent && flight < limit; i++) {
        grad_bucket *k = &h->b[i];
        if (k->phase == 1 && !dist_test_reqs(P, k->reqs + P)) flight += k->send_bytes;
        else if (i == h->send_front) h->send_front++;
    }
    while (h->first_unsent < h->nb && flight < limit) {
        grad_bucket *k = &h->b[h->first_unsent++];
        for (int s = 1; s < P; s++) {
            int j = (me + s) % P;
            size_t jlo, cnt = bucket_seg(h, k, j, &jlo);
            bucket_xfer(h, k, 1, j, h->buf + jlo, cnt, k->tag);
        }
        flight += k->send_bytes;
    }
}

// Sums what has arrived in the ring (testing only its holders, in order, at most a
// bounded number: each test runs MPI's progress engine for every transfer in flight)
// and posts the receives that find room. Sends and shared sums need nothing from us
// until the end; one test at least, so a rank that receives nothing pushes its sends.
static void advance(dist_grad_reduce *h, size_t send_bytes) {
    int tested = 0, top = h->first_waiting < h->first_unsent ? h->first_waiting : h->first_unsent;
    for (int i = h->ring_front; i < top && tested < 2 * DIST_GRAD_SLOTS; i++)
        if (h->b[i].ring == RING_HELD) bucket_step(h, i, 0, 1), tested++;
    start_receives(h, 0);
    release_sends(h, send_bytes);
    while (h->first_open < h->first_unsent && !h->b[h->first_open].phase) h->first_open++;
    if (!tested && h->first_open < h->first_unsent && h->b[h->first_open].ring != RING_WAITING)
        bucket_step(h, h->first_open, 0, 0);
}

static grad_bucket *bucket_new(dist_grad_reduce *h) {
    int P = h->c->size;
    if (h->nb == h->cap) {  // grows in the first steps only: later steps post alike
        int cap = h->cap ? 2 * h->cap : 64;
        h->b = bg_realloc(h->b, sizeof *h->b * (size_t)cap);
        for (int i = h->cap; i < cap; i++) {
            h->b[i].reqs = bg_malloc(sizeof(MPI_Request) * 2 * (size_t)P);
            h->b[i].peers = bg_malloc(sizeof(int) * 2 * (size_t)P);
        }
        h->cap = cap;
    }
    grad_bucket *k = &h->b[h->nb++];
    k->tag = GRAD_TAG_BASE + (int)((2 * h->serial++) % GRAD_TAGS);
    return k;
}

// A bucket: its sends when progress releases them, its receives when the ring has room.
static void bucket_post(dist_grad_reduce *h, size_t a, size_t b, int owner) {
    dist_comm *c = h->c;
    int P = c->size, me = c->rank;
    if (h->nb == 0) h->t_begin = bg_now();  // in flight from the first post
    grad_bucket *k = bucket_new(h);
    k->a = a, k->b = b, k->owner = owner, k->phase = 1;
    clear_reqs(c, k);
    size_t lo, mine = bucket_seg(h, k, me, &lo);
    k->ring = mine ? RING_WAITING : RING_NONE;
    k->send_bytes = 0;
    for (int j = 0; j < P; j++) {
        size_t jlo;
        if (j != me) k->send_bytes += bucket_seg(h, k, j, &jlo) * sizeof(float);
    }
}

void dist_grad_reduce_post(dist_grad_reduce *h, size_t lo, size_t hi) {
    BG_ASSERT(h->active && lo <= hi && hi <= h->n);
    dist_comm *c = h->c;
    if (c->size <= 1 || lo == hi) return;
    double t0 = bg_now();
    int P = c->size;
    size_t q = h->piece;
    if (!h->scatter) {  // buckets of at most P pieces, split P ways
        size_t len = hi - lo, nb = (len + (size_t)P * q - 1) / ((size_t)P * q);
        for (size_t k = 0; k < nb; k++) bucket_post(h, lo + len * k / nb, lo + len * (k + 1) / nb, -1);
    } else {  // the range's part in each rank's segment of the whole buffer, in pieces
        for (int j = 0; j < P; j++) {
            size_t a = h->n * (size_t)j / (size_t)P, b = h->n * (size_t)(j + 1) / (size_t)P;
            if (a < lo) a = lo;
            if (b > hi) b = hi;
            if (a >= b) continue;
            size_t len = b - a, nb = (len + q - 1) / q;
            for (size_t k = 0; k < nb; k++) bucket_post(h, a + len * k / nb, a + len * (k + 1) / nb, j);
        }
    }
    h->exposed += bg_now() - t0;
}

void dist_grad_reduce_progress(dist_grad_reduce *h, size_t send_bytes) {
    if (!h->active || h->first_open == h->nb) return;
    double t0 = bg_now();
    advance(h, send_bytes);
    h->exposed += bg_now() - t0;
}

void dist_grad_reduce_end(dist_grad_reduce *h) {
    BG_ASSERT(h->active);
    double t0 = bg_now();
    release_sends(h, SIZE_MAX);
    start_receives(h, 1);
    for (int i = h->first_open; i < h->nb; i++) bucket_step(h, i, 1, 0);
    double t1 = bg_now();
    h->exposed += t1 - t0;
    if (h->nb) {
        h->c->traffic.seconds += t1 - h->t_begin;
        h->c->traffic.exposed += h->exposed;
    }
    h->active = 0;
}
#endif
