#ifndef BG_DIST_DIST_IMPL_H
#define BG_DIST_DIST_IMPL_H
// Private to src/comm/*.c: the communicator struct and the helpers the two backends
// share. Never include it from another module — it pulls in mpi.h.
#include "core/error.h"
#include "comm/dist.h"

#ifdef BG_HAVE_MPI
#include <mpi.h>
#endif

// Scratch buffers a communicator keeps between calls (grow-only), so a training step
// does not map and unmap tens of megabytes per exchange. One slot per purpose: an
// all-reduce may run while a chunked exchange is in flight on the same communicator.
enum {
    DIST_SCR_REDUCE = 0,
    DIST_SCR_HIER_PACK,    // my rows for other nodes, before the gather to the leader
    DIST_SCR_HIER_GATHER,  // leader: the node's rows for other nodes, by source
    DIST_SCR_HIER_XSEND,   // leader: the same rows ordered by destination node
    DIST_SCR_HIER_XRECV,   // leader: rows from other nodes for this node
    DIST_SCR_HIER_SSEND,   // leader: the same rows ordered by local destination
    DIST_SCR_HIER_SRECV,   // my rows from other nodes, before unpacking
    DIST_SCR_2D_P1SEND,    // 2d: my rows ordered by destination local index, then node
    DIST_SCR_2D_P1RECV,    // 2d: rows from my node for my index on every node, by source
    DIST_SCR_2D_P2SEND,    // 2d: the same rows ordered by destination node
    DIST_SCR_2D_P2RECV,    // 2d: rows from my index on other nodes, before unpacking
    DIST_SCR_GRAD,         // the overlapped gradient reduction's receive slots
    DIST_SCR_COUNT
};

struct dist_comm {
    int rank, size;
    int node_key;  // equal keys = same node (lowest world rank of the node, or r / R)
    // Node map, identical on every rank: nodes numbered by their lowest rank here;
    // members lists ranks node by node, ascending inside a node.
    int n_nodes;
    int *node_of;     // [size]
    int *local_rank;  // [size] position inside its node
    int *node_start;  // [n_nodes + 1] into members
    int *members;     // [size]
    int local;  // one rank and no MPI behind it (dist_local.c)
    size_t bucket_bytes;
    dist_traffic traffic;
    void *scratch[DIST_SCR_COUNT];
    size_t scratch_bytes[DIST_SCR_COUNT];
#ifdef BG_HAVE_MPI
    MPI_Comm comm;
    MPI_Comm node_comm;    // this communicator's ranks on my node, ordered by rank
    MPI_Comm leader_comm;  // lowest rank of every node (rank = node index); else NULL
    // Ranks with my position inside their node, one per node (rank = node index); NULL
    // unless there are several nodes, all of one size (the 2d exchange needs it).
    MPI_Comm cross_comm;
#endif
};

// Builds the node map from every rank's node key (keys[r] for rank r) and sets the
// defaults; backends call it when they create a communicator.
void dist_comm_setup(dist_comm *c, int rank, int size, const int *keys);
// Frees what dist_comm_setup allocated and the scratch buffers (not c itself).
void dist_comm_release(dist_comm *c);

void *dist_scratch(dist_comm *c, int slot, size_t bytes);
// Elements per all-reduce bucket (an int for MPI), and per reduce-scatter piece: the
// allocating code and the scratch size functions of dist.h share them.
size_t dist_bucket_elems(size_t bucket_bytes, size_t elem_bytes);
size_t dist_shard_piece_elems(int P, size_t n, size_t bucket_bytes);
// out = ((x0 + x1) + x2) + ... over the ranks' parts (x_r = parts + r·stride, or own for
// r == me when own is not NULL; out may be own): the one order every reduction sums in,
// so all give the same bits.
void dist_sum_rank_order_f32(float *out, const float *parts, size_t stride, int P, int me,
                             const float *own, size_t n);
// The overlapped gradient reduction (dist_grad_reduce.c) receives into DIST_GRAD_SLOTS
// slots of P pieces: a reduce-scatter piece cut in DIST_GRAD_SLOTS, so its scratch is
// about the reduce-scatter's while that many buckets can be in flight.
enum { DIST_GRAD_SLOTS = 8 };
size_t dist_grad_piece_elems(int P, size_t n, size_t bucket_bytes);

// A world of one rank with no MPI behind it, and its row exchange (a copy).
dist_comm *dist_local_comm(void);
void dist_local_alltoallv(dist_comm *c, const float *send, const int *send_counts, float *recv,
                          const int *recv_counts, size_t width);
// Traffic accounting of one transfer between this rank and `peer`; empty transfers
// and transfers to oneself are not messages.
void dist_count_send(dist_comm *c, int peer, uint64_t bytes);
void dist_count_recv(dist_comm *c, int peer, uint64_t bytes);
// A blocking operation that started at t0 (bg_now) and ends now: its time is all
// exposed.
void dist_count_time(dist_comm *c, double t0);

#ifdef BG_HAVE_MPI
// Every MPI call goes through this: on failure print which call failed and why, and
// take the job down (communication errors leave ranks out of step; nothing to resume).
void dist_mpi_check(int rc, const char *call);
#define DIST_MPI(call) dist_mpi_check((call), #call)

// The watchdog (dist_set_timeout): every wait of the MPI backend goes through these.
// Waits for reqs[0..n) (MPI_REQUEST_NULL entries are done). With a timeout, a wait in
// which no request completes for that long prints one line naming `op` and the peer
// (rank of c, peers[i] for request i; NULL or -1: not known, a collective) and exits
// the process: MPI_Abort cannot reach ranks behind a cut link.
void dist_wait_reqs(dist_comm *c, int n, MPI_Request *reqs, const int *peers, const char *op);
// 1 when every request is done (advances them); never blocks.
int dist_test_reqs(int n, MPI_Request *reqs);
// A blocking MPI call begins / ends: the watchdog thread times it (op: what it does).
void dist_watch_begin(const char *op);
void dist_watch_end(void);
double dist_timeout(void);
// With the skew probe on: a timed barrier on c, counted in c's traffic.skew.
void dist_probe_skew(dist_comm *c);
// Point-to-point form of MPI_Alltoallv (pure data movement, so the same bytes): posts
// receives and sends into reqs[0..2n) and peers[0..2n); the own block is copied.
void dist_p2p_post(dist_comm *c, const void *send, const int *scnt, const int *sdsp, void *recv,
                   const int *rcnt, const int *rdsp, MPI_Datatype type, size_t type_bytes,
                   MPI_Request *reqs, int *peers);
// Posts and waits (the watchdog names the peer a rank waits for).
void dist_p2p_exchange(dist_comm *c, const void *send, const int *scnt, const int *sdsp,
                       void *recv, const int *rcnt, const int *rdsp, MPI_Datatype type,
                       size_t type_bytes, const char *op);

// Chunked exchange state, shared by the flat and hierarchical algorithms.
typedef struct dist_hier dist_hier;
struct dist_a2a {
    dist_comm *c;
    enum dist_a2a_algo algo;
    int n_chunks;
    int posted;                      // chunks whose sends are final (dist_a2a_post)
    int all_done;                    // completion of the last chunk was seen
    double t_open;                   // for traffic.seconds: open to completion
    size_t width;
    const float *send;
    float *recv;
    int *send_counts, *recv_counts;  // copies: [size] each
    int *send_displs, *recv_displs;  // row offsets of each rank's block
    MPI_Datatype row;                // `width` contiguous floats
    // flat: per chunk point-to-point receives and sends ([2][size] requests and
    // peers), its counts and displacements ([4][size])
    MPI_Request *reqs;
    int *peers;
    int *chunk_args;
    dist_hier *hier;
    struct dist_2d *d2;
};
dist_hier *dist_hier_begin(dist_a2a *h);
// Advances chunk k as far as it can (blocking: to completion; chunks before k must be
// complete then). Returns 1 when chunk k is complete.
int dist_hier_step(dist_a2a *h, int k, int blocking);
void dist_hier_free(dist_hier *s);
// The same for the two-dimensional exchange (dist_alltoall_2d.c).
struct dist_2d *dist_2d_begin(dist_a2a *h);
int dist_2d_step(dist_a2a *h, int k, int blocking);
void dist_2d_free(struct dist_2d *s);
#endif

// dist_abort's first act: the host's handler (dist_set_abort_handler), if any.
void dist_abort_call_handler(int code);
#endif
