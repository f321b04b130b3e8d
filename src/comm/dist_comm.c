// MPI backend: process start and end, communicators and their node maps, barrier,
// broadcast, and the one place MPI errors are turned into a job abort.
#ifdef BG_HAVE_MPI
#include <stdlib.h>
#include "core/timer.h"
#include "comm/dist_impl.h"

#include <string.h>

const char *dist_backend(void) { return "mpi"; }

// Whether a launcher started this process as a rank of a job: OpenMPI's mpirun, PMIx
// (OpenMPI 4+, Slurm), PMI-1/2 (MPICH's hydra, srun --mpi=pmi2). Without one, the
// process is a world of one and MPI is never started (dist_local.c says why).
static int launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int dist_launched(void) { return launched_by_mpi(); }

static int mpi_running(void) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    return inited && !finalized;
}

void dist_init(int *argc, char ***argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (!launched_by_mpi()) return;
        // FUNNELED: OpenMP threads compute, only the main thread calls MPI.
        int provided;
        MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    }
    // Errors come back as codes so dist_mpi_check can name the failed call before the
    // abort; communicators made later inherit this handler from the world.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

void dist_finalize(void) {
    if (mpi_running()) MPI_Finalize();
}

// The library reaches this only while MPI runs (dist_mpi_check; block_displs on a
// communicator that is not local): the other ranks then wait inside the collective, and
// an error returned on one rank would leave them blocked, so the job, not a call, fails.
// The exit() is for hosts that call dist_abort themselves in a process without MPI.
_Noreturn void dist_abort(int code) {
    dist_abort_call_handler(code);
    fflush(stdout);
    fflush(stderr);
    if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);  // MPI_Abort does not return; this is for a process without MPI running
}

void dist_mpi_check(int rc, const char *call) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0, rank = -1;
    MPI_Error_string(rc, msg, &len);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int name_len = (int)strcspn(call, "(");  // "MPI_Alltoallv(...)" -> "MPI_Alltoallv"
    fprintf(stderr, "bagualu: rank %d: %.*s failed: %.*s\n", rank, name_len, call, len, msg);
    dist_abort(4);
}

// Wraps an MPI communicator that this rank owns; my_key is this rank's node key.
static dist_comm *comm_wrap(MPI_Comm comm, int my_key) {
    dist_comm *c = bg_calloc(1, sizeof *c);
    int rank, size;
    DIST_MPI(MPI_Comm_rank(comm, &rank));
    DIST_MPI(MPI_Comm_size(comm, &size));
    int *keys = bg_malloc(sizeof(int) * size);
    DIST_MPI(MPI_Allgather(&my_key, 1, MPI_INT, keys, 1, MPI_INT, comm));
    dist_comm_setup(c, rank, size, keys);
    free(keys);
    c->comm = comm;
    DIST_MPI(MPI_Comm_split(comm, c->node_of[rank], rank, &c->node_comm));
    int leader = c->local_rank[rank] == 0;
    DIST_MPI(MPI_Comm_split(comm, leader ? 0 : MPI_UNDEFINED, rank, &c->leader_comm));
    if (leader) {
        int lr;
        DIST_MPI(MPI_Comm_rank(c->leader_comm, &lr));
        BG_ASSERT(lr == c->node_of[rank]);  // the hierarchical exchange relies on it
    }
    // The 2d exchange's second hop: one rank of each node, all at my local index.
    int equal = c->n_nodes > 1;
    for (int a = 0; a < c->n_nodes; a++)
        equal &= c->node_start[a + 1] - c->node_start[a] == c->node_start[1] - c->node_start[0];
    DIST_MPI(MPI_Comm_split(comm, equal ? c->local_rank[rank] : MPI_UNDEFINED, c->node_of[rank],
                            &c->cross_comm));
    return c;
}

static dist_comm *comm_world(int ranks_per_node);

dist_comm *dist_comm_world(int ranks_per_node) {
    dist_watch_begin("creating a communicator");
    dist_comm *c = comm_world(ranks_per_node);
    dist_watch_end();
    return c;
}

static dist_comm *comm_world(int ranks_per_node) {
    if (ranks_per_node < 0)
        return bg_error("ranks per node must be >= 0 (0: real nodes), got %d", ranks_per_node),
               NULL;
    // A launched program that never called dist_init (a test, a tool linking the
    // library) still gets its job's world: MPI starts on first use, ends at exit.
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && launched_by_mpi()) {
        dist_init(NULL, NULL);
        atexit(dist_finalize);
    }
    if (!mpi_running()) return dist_local_comm();
    int rank;
    DIST_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    int key;
    if (ranks_per_node > 0) {
        key = rank / ranks_per_node;
    } else {
        // A real node: the ranks that can share memory; named by its lowest world rank.
        MPI_Comm shared;
        DIST_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL,
                                     &shared));
        DIST_MPI(MPI_Allreduce(&rank, &key, 1, MPI_INT, MPI_MIN, shared));
        DIST_MPI(MPI_Comm_free(&shared));
    }
    MPI_Comm dup;
    DIST_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));  // private: no tag clashes with others
    return comm_wrap(dup, key);
}

dist_comm *dist_comm_split(dist_comm *parent, int color, int key) {
    if (parent->local) return dist_local_comm();
    dist_watch_begin("splitting a communicator");
    MPI_Comm comm;
    DIST_MPI(MPI_Comm_split(parent->comm, color, key, &comm));
    dist_comm *c = comm_wrap(comm, parent->node_key);
    dist_watch_end();
    return c;
}

void dist_comm_free(dist_comm *c) {
    if (!c) return;
    if (c->local) {
        dist_comm_release(c);
        free(c);
        return;
    }
    dist_watch_begin("freeing a communicator");
    if (c->leader_comm != MPI_COMM_NULL) DIST_MPI(MPI_Comm_free(&c->leader_comm));
    if (c->cross_comm != MPI_COMM_NULL) DIST_MPI(MPI_Comm_free(&c->cross_comm));
    DIST_MPI(MPI_Comm_free(&c->node_comm));
    DIST_MPI(MPI_Comm_free(&c->comm));
    dist_watch_end();
    dist_comm_release(c);
    free(c);
}

void dist_barrier(dist_comm *c) {
    double t0 = bg_now();
    if (!c->local) {
        MPI_Request r;
        DIST_MPI(MPI_Ibarrier(c->comm, &r));
        dist_wait_reqs(c, 1, &r, NULL, "a barrier");
    }
    c->traffic.calls++;
    dist_count_time(c, t0);
}

void dist_bcast(dist_comm *c, void *buf, size_t bytes, int root) {
    BG_ASSERT(root >= 0 && root < c->size);
    if (c->local) {
        c->traffic.calls++;
        return;
    }
    double t0 = bg_now();
    // MPI counts are int: send in pieces of 1 GiB.
    const size_t piece = (size_t)1 << 30;
    for (size_t off = 0; off < bytes; off += piece) {
        size_t n = bytes - off < piece ? bytes - off : piece;
        MPI_Request r;
        int peer = root;
        DIST_MPI(MPI_Ibcast((char *)buf + off, (int)n, MPI_BYTE, root, c->comm, &r));
        dist_wait_reqs(c, 1, &r, c->rank == root ? NULL : &peer, "a broadcast");
    }
    // Counted as the root sending to every rank directly.
    if (c->rank == root)
        for (int r = 0; r < c->size; r++) dist_count_send(c, r, bytes);
    else
        dist_count_recv(c, root, bytes);
    c->traffic.calls++;
    dist_count_time(c, t0);
}
#endif
