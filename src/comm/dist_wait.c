// MPI backend: the watchdog around every wait, and the point-to-point all-to-all the
// flat exchanges and the all-reduce use so that a stuck wait can name its peer.
//
// Without a timeout a wait is MPI_Waitall. With one, the wait polls (MPI_Testsome) and
// gives up when no request has completed for `timeout` seconds: a cut link leaves TCP
// retrying for minutes and MPI_Abort cannot reach the ranks behind it, so each rank
// must notice on its own, say which peer it was waiting for, and leave. The few
// blocking MPI calls left (creating communicators) are watched by a thread instead: it
// never calls MPI (the library runs FUNNELED), it only reads when such a call began.
#ifdef BG_HAVE_MPI
#include "core/timer.h"
#include "comm/dist_impl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { P2P_TAG = 7302 };  // apart from the shard rounds' point-to-point traffic

static double g_timeout;

static int g_rank = -1;  // for the thread's message: it may not call MPI
static _Atomic(const char *) g_blocking_op;  // the blocking call under way, or NULL
static _Atomic long long g_blocking_since_us;

static void *watch_thread(void *arg) {
    (void)arg;
    for (;;) {
        nanosleep(&(struct timespec){0, 200000000}, NULL);
        const char *op = atomic_load(&g_blocking_op);
        double since = atomic_load(&g_blocking_since_us) * 1e-6;
        if (op && bg_now() - since > g_timeout) {
            char host[64] = "?";
            gethostname(host, sizeof host - 1);
            fprintf(stderr, "bagualu: rank %d (%s): no progress in %s for %.0f s (a blocking MPI "
                    "call, peer unknown); exiting (--comm-timeout)\n", g_rank, host, op, g_timeout);
            fflush(stdout);
            fflush(stderr);
            _exit(5);
        }
    }
    return NULL;
}

void dist_set_timeout(double seconds) {
    static int started;
    g_timeout = seconds > 0 ? seconds : 0;
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    if (g_timeout > 0 && !started) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&t, &a, watch_thread, NULL) == 0;
        pthread_attr_destroy(&a);
    }
}
double dist_timeout(void) { return g_timeout; }

static int g_skew_probe;
void dist_set_skew_probe(int on) { g_skew_probe = on != 0; }
void dist_probe_skew(dist_comm *c) {
    if (!g_skew_probe || c->local) return;
    double t0 = bg_now();
    dist_watch_begin("the skew probe's barrier");
    DIST_MPI(MPI_Barrier(c->comm));
    dist_watch_end();
    c->traffic.skew += bg_now() - t0;
}

void dist_watch_begin(const char *op) {
    atomic_store(&g_blocking_since_us, (long long)(bg_now() * 1e6));
    atomic_store(&g_blocking_op, op);
}
void dist_watch_end(void) { atomic_store(&g_blocking_op, NULL); }

static int world_rank_of(dist_comm *c, int r) {
    MPI_Group g, w;
    int out = -1;
    if (MPI_Comm_group(c->comm, &g) != MPI_SUCCESS) return r;
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    MPI_Group_translate_ranks(g, 1, &r, w, &out);
    MPI_Group_free(&g);
    MPI_Group_free(&w);
    return out;
}

_Noreturn static void watchdog_fire(dist_comm *c, int n, const MPI_Request *reqs,
                                    const int *peers, const char *op) {
    int peer = -1;
    for (int i = 0; i < n && peer < 0; i++)
        if (reqs[i] != MPI_REQUEST_NULL && peers && peers[i] >= 0) peer = peers[i];
    int me = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    if (peer >= 0)
        fprintf(stderr, "bagualu: rank %d (%s): no progress in %s for %.0f s, waiting for rank %d; "
                "exiting (--comm-timeout)\n", me, host, op, g_timeout, world_rank_of(c, peer));
    else
        fprintf(stderr, "bagualu: rank %d (%s): no progress in %s for %.0f s, waiting for one of "
                "its %d ranks; exiting (--comm-timeout)\n", me, host, op, g_timeout, c->size);
    fflush(stdout);
    fflush(stderr);
    _exit(5);  // not exit(): MPI_Finalize would wait for the lost peers
}

void dist_wait_reqs(dist_comm *c, int n, MPI_Request *reqs, const int *peers, const char *op) {
    if (n <= 0) return;
    if (g_timeout <= 0) {
        DIST_MPI(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
        return;
    }
    int *idx = bg_malloc(sizeof(int) * n);
    double last = bg_now();
    for (;;) {
        int done = 0;
        DIST_MPI(MPI_Testsome(n, reqs, &done, idx, MPI_STATUSES_IGNORE));
        if (done == MPI_UNDEFINED) break;  // every request is done
        if (done > 0) {
            last = bg_now();
            continue;
        }
        if (bg_now() - last > g_timeout) watchdog_fire(c, n, reqs, peers, op);
        // Oversubscribed ranks must leave the core to the peer they wait for.
        nanosleep(&(struct timespec){0, 20000}, NULL);
    }
    free(idx);
}

int dist_test_reqs(int n, MPI_Request *reqs) {
    if (n <= 0) return 1;
    int flag = 0;
    DIST_MPI(MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE));
    return flag;
}

void dist_p2p_post(dist_comm *c, const void *send, const int *scnt, const int *sdsp, void *recv,
                   const int *rcnt, const int *rdsp, MPI_Datatype type, size_t type_bytes,
                   MPI_Request *reqs, int *peers) {
    int n = c->size, me = c->rank;
    for (int j = 0; j < 2 * n; j++) reqs[j] = MPI_REQUEST_NULL, peers[j] = j % n;
    // Receives first, from the next rank on: every rank starts with a different peer.
    for (int s = 1; s < n; s++) {
        int j = (me + n - s) % n;
        if (rcnt[j] > 0)
            DIST_MPI(MPI_Irecv((char *)recv + (size_t)rdsp[j] * type_bytes, rcnt[j], type, j,
                               P2P_TAG, c->comm, &reqs[j]));
    }
    for (int s = 1; s < n; s++) {
        int j = (me + s) % n;
        if (scnt[j] > 0)
            DIST_MPI(MPI_Isend((const char *)send + (size_t)sdsp[j] * type_bytes, scnt[j], type,
                               j, P2P_TAG, c->comm, &reqs[n + j]));
    }
    BG_ASSERT(scnt[me] == rcnt[me]);
    char *to = (char *)recv + (size_t)rdsp[me] * type_bytes;
    const char *from = (const char *)send + (size_t)sdsp[me] * type_bytes;
    if (scnt[me] > 0 && to != from) memmove(to, from, (size_t)scnt[me] * type_bytes);
}

void dist_p2p_exchange(dist_comm *c, const void *send, const int *scnt, const int *sdsp,
                       void *recv, const int *rcnt, const int *rdsp, MPI_Datatype type,
                       size_t type_bytes, const char *op) {
    int n = c->size;
    MPI_Request *reqs = bg_malloc(sizeof(MPI_Request) * 2 * n);
    int *peers = bg_malloc(sizeof(int) * 2 * n);
    dist_p2p_post(c, send, scnt, sdsp, recv, rcnt, rdsp, type, type_bytes, reqs, peers);
    dist_wait_reqs(c, 2 * n, reqs, peers, op);
    free(reqs);
    free(peers);
}
#endif
