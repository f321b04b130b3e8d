#ifndef BG_DIST_DIST_H
#define BG_DIST_DIST_H
// Communication layer: the only module that talks to MPI. Two implementations behind
// this header: MPI (built when BG_HAVE_MPI is defined) and a single-process one used
// by builds without MPI. No MPI type appears here; communicators are opaque.
//
// Failure policy: a communication error is not recoverable in a training step, so
// every MPI call runs under MPI_ERRORS_RETURN and a failed call prints one line naming
// the operation and aborts the whole job (MPI_Abort). When a rank dies (SIGKILL),
// OpenMPI's launcher tears the job down and mpirun exits non-zero; tests/comm/
// test_kill.sh checks that this happens within 60 s.
#include <stddef.h>
#include <stdint.h>

// ---- process ---------------------------------------------------------------------
// dist_init may be called more than once (only the first initialises MPI). A process
// not started by a launcher (mpirun, srun) is a world of one and never starts MPI.
void dist_init(int *argc, char ***argv);
void dist_finalize(void);
// Ends every rank of the job with `code`; never returns. A handler set by the host (the
// library, src/api/) runs first and may leave by longjmp instead, keeping its process.
_Noreturn void dist_abort(int code);
typedef void (*dist_abort_handler)(int code);
void dist_set_abort_handler(dist_abort_handler handler);
// Whether a launcher (mpirun, srun) started this process as a rank of a job.
int dist_launched(void);
// "mpi" or "single": what this build communicates with.
const char *dist_backend(void);

// ---- communicators ---------------------------------------------------------------
typedef struct dist_comm dist_comm;

// A private copy of the world. ranks_per_node > 0 groups world ranks r by r / R into
// emulated nodes (one machine acting as several); 0 uses the real shared-memory nodes.
// Collective over the world. NULL with bg_error() on a bad ranks_per_node.
dist_comm *dist_comm_world(int ranks_per_node);
// The parent's ranks with the same color, ordered by key (ties by parent rank); each
// keeps its node. Collective over the parent; the layout below is built from it.
dist_comm *dist_comm_split(dist_comm *parent, int color, int key);
void dist_comm_free(dist_comm *c);  // collective
int dist_rank(const dist_comm *c);
int dist_size(const dist_comm *c);
// Nodes as seen by this communicator: node index of rank r (0..n_nodes-1, numbered
// by their lowest rank), and how many nodes its ranks span.
int dist_node_of(const dist_comm *c, int r);
int dist_n_nodes(const dist_comm *c);

// ---- the BaGuaLu layout ----------------------------------------------------------
// World of P ranks, expert-parallel degree EP dividing P and the expert count E.
// Expert-parallel (EP) groups are runs of consecutive ranks: ranks r with the same
// r / EP form one group and together hold all E experts, rank r holding experts
// [(r % EP) * E/EP, (r % EP + 1) * E/EP). Consecutive ranks usually share a node, so
// most token traffic stays inside a node. Expert-data-parallel (EDP) groups are the
// P/EP ranks with the same r % EP: they hold the same experts and all-reduce their
// gradients. Dense parameters are all-reduced over the world.
typedef struct {
    int world_size, world_rank;
    int n_experts, ep, experts_per_rank;
    int ep_rank, ep_group;   // r % EP, r / EP
    int edp_size, edp_rank;  // P / EP, r / EP
    int n_nodes, node, node_rank, node_size;
    dist_comm *world, *ep_comm, *edp_comm, *node_comm;
} dist_layout;

// ep = 0 picks the largest EP <= P dividing both P and n_experts; ranks_per_node as
// for dist_comm_world. Collective over the world; on an invalid layout every rank
// returns BG_ERR with the same bg_error() message and nothing to free.
int dist_layout_init(dist_layout *L, int n_experts, int ep, int ranks_per_node);
void dist_layout_free(dist_layout *L);  // collective
// The EP rank that owns global expert e, and the first expert this rank owns.
static inline int dist_layout_expert_owner(const dist_layout *L, int e) {
    return e / L->experts_per_rank;
}
static inline int dist_layout_first_expert(const dist_layout *L) {
    return L->ep_rank * L->experts_per_rank;
}

// ---- simple collectives ----------------------------------------------------------
void dist_barrier(dist_comm *c);
void dist_bcast(dist_comm *c, void *buf, size_t bytes, int root);

// In-place sums. Deterministic: every element is summed in rank order
// ((x0 + x1) + x2) + ... on every rank (reduce-scatter by explicit exchange, then
// all-gather), never in the order MPI's algorithm picks. So results are bitwise the
// same on all ranks, across runs, and for any bucket size: a fixed layout is bitwise
// reproducible. Large buffers go in buckets of at most dist_comm_set_bucket_bytes
// (default 64 MiB) so scratch memory stays bounded: one call per gradient buffer,
// never one per tensor.
void dist_allreduce_sum_f32(dist_comm *c, float *buf, size_t n);
void dist_allreduce_sum_f64(dist_comm *c, double *buf, size_t n);
void dist_allreduce_sum_i64(dist_comm *c, int64_t *buf, size_t n);
void dist_allreduce_max_f64(dist_comm *c, double *buf, size_t n);
void dist_comm_set_bucket_bytes(dist_comm *c, size_t bytes);

// The all-reduce's two halves, for sharded optimizer state (ZeRO-1). Rank r's segment
// of an n-element buffer is [n·r/P, n·(r+1)/P) of the whole buffer, whatever the
// bucket size. After dist_reduce_scatter_sum_f32 rank r's segment holds the rank-order
// sum ((x0 + x1) + x2) + ..., bitwise what dist_allreduce_sum_f32 gives for those
// elements; the rest of buf still holds this rank's own input. dist_allgather_f32
// copies every rank's segment to all ranks (pure data movement). Scratch is bounded by
// the bucket size; n may exceed 2^31. Bytes moved per rank: (P-1)/P of the buffer each.
// On one process both leave buf as it is.
void dist_reduce_scatter_sum_f32(dist_comm *c, float *buf, size_t n);
void dist_allgather_f32(dist_comm *c, float *buf, size_t n);

// The same sums overlapped with the computation that produces them (the backward):
// dist_grad_reduce_begin names the buffer, dist_grad_reduce_post(lo, hi) says elements
// [lo, hi) are final, dist_grad_reduce_progress (never waits) sums what arrived, sends
// sums on and lets the posted ranges' sends leave in order while fewer than send_bytes
// are in flight (0: none: the link is wanted for something else now),
// dist_grad_reduce_end sends and waits for the rest (under the watchdog). scatter 0: every rank ends with every sum, as
// dist_allreduce_sum_f32; 1: only its segment of the whole buffer, as
// dist_reduce_scatter_sum_f32. Every element is the same rank-order sum, so the bits
// equal the blocking calls'. Every rank posts the same ranges in the same order (each
// element once); buf must stay untouched from its post until end, except by the caller
// writing elements not yet posted. Other traffic may run on c meanwhile (the tags
// differ). Scratch: dist_grad_reduce_scratch_bytes, held by c. traffic.seconds counts
// the first post to the end, traffic.exposed the time spent inside these calls.
typedef struct dist_grad_reduce dist_grad_reduce;
dist_grad_reduce *dist_grad_reduce_new(dist_comm *c);
void dist_grad_reduce_free(dist_grad_reduce *h);
void dist_grad_reduce_begin(dist_grad_reduce *h, float *buf, size_t n, int scatter);
void dist_grad_reduce_post(dist_grad_reduce *h, size_t lo, size_t hi);
void dist_grad_reduce_progress(dist_grad_reduce *h, size_t send_bytes);
void dist_grad_reduce_end(dist_grad_reduce *h);

// ---- all-to-all --------------------------------------------------------------------
// n_per_rank ints to every rank: send[j*n .. j*n+n) goes to rank j, recv[i*n ..) came
// from rank i. With n_per_rank = 1 this is the token-count exchange (MPI_Alltoall).
void dist_alltoall_i32(dist_comm *c, const int32_t *send, int32_t *recv, int n_per_rank);
// n_per_rank ints from every rank to every rank: recv[i*n .. i*n+n) is rank i's send,
// the same on all ranks (MPI_Allgather: pure data movement). SWIPE's count matrix.
void dist_allgather_i32(dist_comm *c, const int32_t *send, int32_t *recv, int n_per_rank);

enum dist_a2a_algo {
    DIST_A2A_FLAT = 0,  // MPI_Alltoallv: every rank sends straight to every rank
    // Rows for the own node go directly; rows for other nodes are gathered to the node
    // leader (lowest rank of the node), sent leader to leader in one message per node
    // pair, and scattered by the destination leader. Pure data movement: the result is
    // bitwise the flat one, with far fewer inter-node messages.
    DIST_A2A_HIER = 1,
    // Two-dimensional (Tutel's 2DH): an all-to-all inside each node hands local rank l
    // every row of the node bound for local rank l of any node, then one all-to-all
    // among the ranks of index l of every node delivers them. Each rank sends one
    // message per other node (not one per remote rank), no rank funnels its node's
    // traffic, and the result is bitwise the flat one. Needs nodes of equal size
    // (otherwise it runs flat).
    DIST_A2A_2D = 2,
};
#define DIST_A2A_ALGOS 3

// What the choice of algorithm (dist_a2a_choose) knows about an exchange and the
// machine. Bandwidths in bytes/s; a latency is what a phase of messages sent together
// waits for the first to arrive (half a round trip), a gap what each further message
// costs its sender (0: one latency, as if sent one after another).
typedef struct {
    int nodes, ranks_per_node;  // equal nodes assumed
    double bytes_per_rank;      // rows x width x 4 one rank sends in one exchange
    double inter_bw, inter_lat, inter_gap;  // the link between nodes, as seen by one node
    double intra_bw, intra_lat, intra_gap;  // inside a node
    // Ranks per core of the machine a rank runs on (below 1 counts as 1): above 1 where
    // nodes share a machine (emulated) or ranks outnumber cores; copies share cores.
    double ranks_per_core;
    // What each phase of an exchange waits beyond the link for all ranks to take part
    // (a rank waiting for its core), measured; 0 where every rank has a core.
    double sync_s;
} dist_a2a_cost_in;
// Modelled seconds of one exchange with `algo`, and the algorithm the model prefers
// (flat on one node). The one place that weighs the algorithms (a later planner owns it).
double dist_a2a_cost(const dist_a2a_cost_in *in, enum dist_a2a_algo algo);
enum dist_a2a_algo dist_a2a_choose(const dist_a2a_cost_in *in);
// Measures the inter- and intra-node links once by ping-pong between rank 0 and the
// first rank of node 1 (and rank 1 of node 0) while the other ranks sleep, counts the
// ranks per core (ranks that share a kernel boot id share a machine) and measures the
// phase wait sync_s as training meets it (count exchanges after spells of compute).
// Collective over c; every rank gets the same numbers. Fields not measurable (one node, one rank per node) are left as given.
void dist_link_measure(dist_comm *c, dist_a2a_cost_in *io);
const char *dist_a2a_name(enum dist_a2a_algo algo);

// Scratch a communicator keeps between calls (grow-only), sized by the functions below,
// which the code that allocates calls too; they need no communicator, so the memory
// report (model/memory_plan.c) and the planner predict it without MPI.
#define DIST_BUCKET_BYTES_DEFAULT ((size_t)64 << 20)
// The all-reduce of n elements of elem_bytes on P ranks: its largest bucket's parts.
size_t dist_allreduce_scratch_bytes(int P, size_t n, size_t elem_bytes, size_t bucket_bytes);
// The reduce-scatter's parts (f32) of a buffer of n elements; 0 when nothing moves.
size_t dist_reduce_scatter_scratch_bytes(int P, size_t n, size_t bucket_bytes);
// The overlapped gradient reduction's receive slots for a buffer of n floats (either mode).
size_t dist_grad_reduce_scratch_bytes(int P, size_t n, size_t bucket_bytes);
// A bound on a hierarchical or 2d all-to-all's scratch (a node leader's, the largest),
// for exchanges in which a rank sends and receives at most `rows` rows of row_bytes;
// m ranks per node on `nodes` nodes of the communicator (fewer than 2: flat, none).
size_t dist_a2a_scratch_bound(enum dist_a2a_algo algo, int m, int nodes, size_t rows, size_t row_bytes);
// Bytes of scratch c holds now: its high-water mark, as scratch only grows.
size_t dist_scratch_held(const dist_comm *c);

// Rows of `width` floats. send holds send_counts[j] rows for each rank j, grouped by
// j in rank order; recv receives recv_counts[i] rows from each rank i, grouped by i in
// rank order. recv_counts must be what the ranks send (exchange counts first).
void dist_alltoallv(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                    const int *send_counts, float *recv, const int *recv_counts, size_t width);

// Chunked, non-blocking exchange, so a caller computes on chunk k while chunk k+1 is
// in flight. Each (source, destination) block of cnt rows is cut into n_chunks pieces;
// chunk k carries rows dist_chunk_lo(cnt, k, C) .. dist_chunk_lo(cnt, k+1, C) of every
// block. After dist_a2a_wait_chunk(h, k) those rows of every source's block in recv
// are final. send and recv must stay untouched until dist_a2a_end. No other exchange
// may run on the same communicator meanwhile. The result equals dist_alltoallv.
typedef struct dist_a2a dist_a2a;
// dist_a2a_open posts nothing: the caller then calls dist_a2a_post(h, k) for k = 0, 1,
// .. in order once chunk k's rows of every block of send are final, so a return trip
// can leave chunk by chunk as they are computed. Flat sends each chunk as it is
// posted; hierarchical and 2d start the whole exchange at the last post (their hops
// order collectives across chunks), and no other exchange may then be in flight on c.
// dist_a2a_begin = open, then post every chunk.
dist_a2a *dist_a2a_open(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                        const int *send_counts, float *recv, const int *recv_counts, size_t width,
                        int n_chunks);
void dist_a2a_post(dist_a2a *h, int k);
dist_a2a *dist_a2a_begin(dist_comm *c, enum dist_a2a_algo algo, const float *send,
                         const int *send_counts, float *recv, const int *recv_counts, size_t width,
                         int n_chunks);
void dist_a2a_wait_chunk(dist_a2a *h, int k);
// Lets MPI advance the chunks in flight; call now and then during long computation
// (MPI makes progress only inside MPI calls).
void dist_a2a_progress(dist_a2a *h);
// 1 when chunk k is final, without waiting (it also advances every chunk in flight).
int dist_a2a_test_chunk(dist_a2a *h, int k);
void dist_a2a_end(dist_a2a *h);  // waits for every chunk, frees h
static inline int dist_chunk_lo(int cnt, int k, int n_chunks) {
    return (int)((int64_t)cnt * k / n_chunks);
}

// ---- watchdog ------------------------------------------------------------------------
// seconds > 0: a rank that waits that long in one exchange, all-reduce or other
// collective without any of its transfers completing prints one line naming the
// operation and the peer it waits for, and exits with status 5 (MPI_Abort cannot cross
// a cut link, and TCP notices one only after minutes). 0 (the default): wait forever.
// Must exceed the longest single transfer. Process-wide; set it before communicating.
void dist_set_timeout(double seconds);

// ---- skew probe (measuring only) -------------------------------------------------------
// on: every all-to-all (the count exchange and the row exchanges) starts with a timed
// barrier on its communicator, counted apart (dist_traffic.skew, not in seconds or
// exposed): the time this rank waited for its slowest peer to arrive, which no overlap
// can hide, separated from the exchange proper. Process-wide; off by default.
void dist_set_skew_probe(int on);

// ---- traffic counters ----------------------------------------------------------------
// What a communicator moved since the last reset. A message is one transfer of a
// non-empty payload to another rank as our algorithm issues it (inside a collective we
// count the direct rank-to-rank transfers it stands for, not MPI's internal tree or
// ring steps); a rank's copy to itself is neither a message nor traffic. Intra vs
// inter: whether the two ranks share a (possibly emulated) node.
typedef struct {
    uint64_t bytes_sent_intra, bytes_sent_inter;
    uint64_t bytes_recv_intra, bytes_recv_inter;
    uint64_t msgs_sent_intra, msgs_sent_inter;
    uint64_t msgs_recv_intra, msgs_recv_inter;
    uint64_t calls;  // operations issued on the communicator
    // Wall time the operations took: a blocking call's duration; a chunked exchange's
    // span from dist_a2a_open to the moment its last chunk was seen complete (the
    // caller's computation in between included: the exchange was in flight).
    double seconds;
    // Of that, the time the caller spent inside the calls (posting, copying, testing,
    // waiting): the communication that computation did not hide. Equal to seconds for
    // blocking calls.
    double exposed;
    // With the skew probe (dist_set_skew_probe): time in the barriers before exchanges.
    double skew;
} dist_traffic;

void dist_traffic_get(const dist_comm *c, dist_traffic *out);
void dist_traffic_reset(dist_comm *c);
void dist_traffic_add(dist_traffic *sum, const dist_traffic *t);
// Sum over the layout's four communicators, and reset of all four: read once per step.
void dist_layout_traffic(const dist_layout *L, dist_traffic *out);
void dist_layout_traffic_reset(dist_layout *L);

#endif
