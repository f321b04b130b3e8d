// Failure behaviour: run exchanges in a loop; with two or more ranks, rank 1 kills
// itself (SIGKILL, no chance to clean up) in the middle of a chunked exchange. The
// survivors are then blocked in MPI waits; the job must still end, non-zero, well
// within 60 s (test_kill.sh times mpirun). Alone (as CTest runs it) nobody dies and
// the loop just has to work.
#include "dist_fixture.h"

#include <signal.h>

#include "core/timer.h"

int main(int argc, char **argv) {
    comm_test_args a = comm_test_start(&argc, &argv);
    dist_comm *world = dist_comm_world(a.ranks_per_node);
    int P = dist_size(world), me = dist_rank(world);
    const size_t width = 256;
    const int rows = 64;
    int *counts = malloc(sizeof(int) * P);
    for (int j = 0; j < P; j++) counts[j] = rows;
    float *send = calloc((size_t)P * rows * width, sizeof(float));
    float *recv = calloc((size_t)P * rows * width, sizeof(float));
    float *grad = calloc(1 << 16, sizeof(float));
    double t0 = bg_now();
    // Survivors give up after 120 s: long past the 60 s the test allows, so a hang
    // still fails the test instead of blocking the suite forever.
    for (int it = 0; it < 20 || (P > 1 && bg_now() - t0 < 120); it++) {
        enum dist_a2a_algo algo = it % 2 ? DIST_A2A_HIER : DIST_A2A_FLAT;
        dist_a2a *h = dist_a2a_begin(world, algo, send, counts, recv, counts, width, 2);
        if (P > 1 && me == 1 && it == 10) {
            fprintf(stderr, "test_kill_exchange: rank 1 raising SIGKILL mid-exchange\n");
            raise(SIGKILL);
        }
        dist_a2a_wait_chunk(h, 0);
        dist_a2a_end(h);
        dist_allreduce_sum_f32(world, grad, 1 << 16);
    }
    if (P > 1 && me == 0) fprintf(stderr, "test_kill_exchange: survivors were never stopped\n");
    free(send);
    free(recv);
    free(grad);
    free(counts);
    int rc = comm_test_finish(world, "comm/test_kill_exchange");
    dist_comm_free(world);
    dist_finalize();
    return P > 1 ? 1 : rc;  // surviving the kill would be the failure
}
