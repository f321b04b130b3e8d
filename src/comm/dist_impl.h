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
#endif
};

// Builds the node map from every rank's node key (keys[r] for rank r) and sets the
// defaults; backends call it when they create a communicator.
void dist_comm_setup(dist_comm *c, int rank, int size, const int *keys);
// Frees what dist_comm_setup allocated and the scratch buffers (not c itself).
void dist_comm_release(dist_comm *c);

void *dist_scratch(dist_comm *c, int slot, size_t bytes);

// A world of one rank with no MPI behind it, and its row exchange (a copy).
dist_comm *dist_local_comm(void);
void dist_local_alltoallv(dist_comm *c, const float *send, const int *send_counts, float *recv,
                          const int *recv_counts, size_t width);
// Traffic accounting of one transfer between this rank and `peer`; empty transfers
// and transfers to oneself are not messages.
void dist_count_send(dist_comm *c, int peer, uint64_t bytes);
void dist_count_recv(dist_comm *c, int peer, uint64_t bytes);

#ifdef BG_HAVE_MPI
// Every MPI call goes through this: on failure print which call failed and why, and
// take the job down (communication errors leave ranks out of step; nothing to resume).
void dist_mpi_check(int rc, const char *call);
#define DIST_MPI(call) dist_mpi_check((call), #call)

// Chunked exchange state, shared by the flat and hierarchical algorithms.
typedef struct dist_hier dist_hier;
struct dist_a2a {
    dist_comm *c;
    enum dist_a2a_algo algo;
    int n_chunks;
    size_t width;
    const float *send;
    float *recv;
    int *send_counts, *recv_counts;  // copies: [size] each
    int *send_displs, *recv_displs;  // row offsets of each rank's block
    MPI_Datatype row;                // `width` contiguous floats
    // flat: one MPI_Ialltoallv per chunk, its counts and displacements ([4][size])
    MPI_Request *reqs;
    int *chunk_args;
    dist_hier *hier;
};
dist_hier *dist_hier_begin(dist_a2a *h);
// Advances chunk k as far as it can (blocking: to completion; chunks before k must be
// complete then). Returns 1 when chunk k is complete.
int dist_hier_step(dist_a2a *h, int k, int blocking);
void dist_hier_free(dist_hier *s);
#endif

#endif
