// MPI backend: the gradient reduction overlapped with the backward (dist.h,
// dist_grad_reduce_*). The backward finishes a model's gradients from its last layer to
// its first; each range the caller posts as final leaves at once as non-blocking
// point-to-point transfers, and the caller's progress calls between blocks sum what has
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
// A rank receives into DIST_GRAD_SLOTS slots of the communicator's scratch
// (DIST_SCR_GRAD), one bucket's parts each, taken round robin in posting order; a
// bucket whose slot is busy starts once the bucket before it there has its sums
// (a progress call, or the end). dist_grad_reduce_scratch_bytes is what they hold.
#ifdef BG_HAVE_MPI
#include "core/timer.h"
#include "comm/dist_impl.h"

#include <string.h>

enum {
    GRAD_TAG_BASE = 16384,  // [16384, 32767]: above the other point-to-point tags and
    GRAD_TAGS = 16384,      // within the MPI standard's least tag bound
    GRAD_WAITING = 3,       // a bucket that receives, waiting for a free slot
};

typedef struct {
    size_t a, b;     // elements [a, b) of the buffer
    int owner;       // reduce-scatter: the rank whose segment holds [a, b); -1: all-reduce
    int phase;       // 1: sums under way, 2: sums being shared, 0: done, or GRAD_WAITING
    int slot;        // the scratch slot of my parts, or -1
    int tag;         // phase p uses tag + p - 1
    MPI_Request *reqs;  // [2P]
    int *peers;         // [2P]
} grad_bucket;

struct dist_grad_reduce {
    dist_comm *c;
    float *buf;
    size_t n;
    int scatter;
    size_t piece;       // the most elements of one rank's segment in a bucket
    float *scratch;     // DIST_GRAD_SLOTS slots of P * piece floats
    int slot_user[DIST_GRAD_SLOTS];  // the bucket using each slot, or -1
    int next_slot;
    grad_bucket *b;
    int nb, cap, first_open;  // buckets of this reduction; the oldest not done
    int first_waiting;        // the oldest bucket not started
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
    h->nb = h->first_open = h->first_waiting = 0;
    h->exposed = 0;
    h->active = 1;
    c->traffic.calls++;
    if (c->size <= 1 || n == 0) return;
    h->piece = dist_grad_piece_elems(c->size, n, c->bucket_bytes);
    h->scratch = dist_scratch(c, DIST_SCR_GRAD, dist_grad_reduce_scratch_bytes(c->size, n, c->bucket_bytes));
    for (int s = 0; s < DIST_GRAD_SLOTS; s++) h->slot_user[s] = -1;
    h->next_slot = 0;
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
                        int tag, int *nreq) {
    dist_comm *c = h->c;
    if (!cnt) return;
    if (send) {
        DIST_MPI(MPI_Isend(p, (int)cnt, MPI_FLOAT, j, tag, c->comm, &k->reqs[*nreq]));
        dist_count_send(c, j, (uint64_t)cnt * sizeof(float));
    } else {
        DIST_MPI(MPI_Irecv(p, (int)cnt, MPI_FLOAT, j, tag, c->comm, &k->reqs[*nreq]));
        dist_count_recv(c, j, (uint64_t)cnt * sizeof(float));
    }
    k->peers[(*nreq)++] = j;
}

static void clear_reqs(const dist_comm *c, grad_bucket *k) {
    for (int i = 0; i < 2 * c->size; i++) k->reqs[i] = MPI_REQUEST_NULL, k->peers[i] = -1;
}

// Phase 1 done: my segment's sum in rank order, then (all-reduce) the sum to all.
static void bucket_phase1_done(dist_grad_reduce *h, int idx) {
    dist_comm *c = h->c;
    grad_bucket *k = &h->b[idx];
    int P = c->size, me = c->rank;
    size_t lo, mine = bucket_seg(h, k, me, &lo);
    if (mine) {
        float *parts = h->scratch + (size_t)k->slot * (size_t)P * h->piece, *o = h->buf + lo;
        memcpy(parts + (size_t)me * mine, o, mine * sizeof(float));
        memcpy(o, parts, mine * sizeof(float));
        for (int r = 1; r < P; r++) {
            const float *p = parts + (size_t)r * mine;
            for (size_t i = 0; i < mine; i++) o[i] += p[i];
        }
        h->slot_user[k->slot] = -1;
        k->slot = -1;
    }
    if (k->owner >= 0) {
        k->phase = 0;
        return;
    }
    clear_reqs(c, k);
    int nreq = 0;
    for (int s = 1; s < P; s++) {  // receives first, each rank from a different peer
        int j = (me + P - s) % P;
        size_t jlo, cnt = bucket_seg(h, k, j, &jlo);
        bucket_xfer(h, k, 0, j, h->buf + jlo, cnt, k->tag + 1, &nreq);
    }
    for (int s = 1; s < P; s++) bucket_xfer(h, k, 1, (me + s) % P, h->buf + lo, mine, k->tag + 1, &nreq);
    k->phase = 2;
}

// Phase 1 of bucket idx: my receives into its slot (taken by the caller), my sends.
static void bucket_start(dist_grad_reduce *h, int idx) {
    dist_comm *c = h->c;
    int P = c->size, me = c->rank;
    grad_bucket *k = &h->b[idx];
    size_t lo, mine = bucket_seg(h, k, me, &lo);
    float *parts = mine ? h->scratch + (size_t)k->slot * (size_t)P * h->piece : NULL;
    clear_reqs(c, k);
    int nreq = 0;
    for (int s = 1; s < P; s++) {  // receives first, each rank from a different peer
        int j = (me + P - s) % P;
        bucket_xfer(h, k, 0, j, parts + (size_t)j * mine, mine, k->tag, &nreq);
    }
    for (int s = 1; s < P; s++) {
        int j = (me + s) % P;
        size_t jlo, cnt = bucket_seg(h, k, j, &jlo);
        bucket_xfer(h, k, 1, j, h->buf + jlo, cnt, k->tag, &nreq);
    }
    k->phase = 1;
}

// Advances bucket idx; blocking: until it is done (sums_only: until its slot is free),
// and the watchdog names a stuck peer.
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

// Buckets that receive wait in order for a free slot (round robin), so posting never
// blocks; blocking: the oldest waiting bucket waits for its slot's previous user.
static void start_waiting(dist_grad_reduce *h, int blocking) {
    while (h->first_waiting < h->nb) {
        grad_bucket *k = &h->b[h->first_waiting];
        if (k->phase == GRAD_WAITING) {
            int s = h->next_slot;
            if (h->slot_user[s] >= 0) {
                if (!blocking) return;
                bucket_step(h, h->slot_user[s], 1, 1);
            }
            h->next_slot = (s + 1) % DIST_GRAD_SLOTS;
            k->slot = s;
            h->slot_user[s] = h->first_waiting;
            bucket_start(h, h->first_waiting);
        }
        h->first_waiting++;
    }
}

// Tests the oldest open buckets (a bounded number: each test runs MPI's progress
// engine), then starts the buckets waiting for a slot that has come free.
static void advance(dist_grad_reduce *h) {
    int tested = 0;
    for (int i = h->first_open; i < h->nb && tested < 64; i++) {
        if (h->b[i].phase == 1 || h->b[i].phase == 2) bucket_step(h, i, 0, 0), tested++;
    }
    start_waiting(h, 0);
    while (h->first_open < h->nb && !h->b[h->first_open].phase) h->first_open++;
}

static grad_bucket *bucket_new(dist_grad_reduce *h) {
    int P = h->c->size;
    if (h->nb == h->cap) {  // grows in the first step only: later steps post the same ranges
        int cap = h->cap ? 2 * h->cap : 64;
        h->b = bg_realloc(h->b, sizeof *h->b * (size_t)cap);
        for (int i = h->cap; i < cap; i++) {
            h->b[i].reqs = bg_malloc(sizeof(MPI_Request) * 2 * (size_t)P);
            h->b[i].peers = bg_malloc(sizeof(int) * 2 * (size_t)P);
        }
        h->cap = cap;
    }
    grad_bucket *k = &h->b[h->nb];
    k->tag = GRAD_TAG_BASE + (int)((2 * h->serial++) % GRAD_TAGS);
    return k;
}

static void bucket_post(dist_grad_reduce *h, size_t a, size_t b, int owner) {
    dist_comm *c = h->c;
    if (h->nb == 0) h->t_begin = bg_now();  // in flight from the first post
    grad_bucket *k = bucket_new(h);
    k->a = a, k->b = b, k->owner = owner, k->slot = -1;
    int idx = h->nb++;
    size_t lo, mine = bucket_seg(h, k, c->rank, &lo);
    if (mine) k->phase = GRAD_WAITING;  // started by start_waiting, in order
    else bucket_start(h, idx);         // sends only: at once
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
    advance(h);
    h->exposed += bg_now() - t0;
}

void dist_grad_reduce_progress(dist_grad_reduce *h) {
    if (!h->active || h->first_open == h->nb) return;
    double t0 = bg_now();
    advance(h);
    h->exposed += bg_now() - t0;
}

void dist_grad_reduce_end(dist_grad_reduce *h) {
    BG_ASSERT(h->active);
    double t0 = bg_now();
    start_waiting(h, 1);
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
