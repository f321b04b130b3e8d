#ifndef BG_TESTS_DIST_FIXTURE_H
#define BG_TESTS_DIST_FIXTURE_H
// Shared by the tests/comm programs. Each runs under mpirun with any rank count and
// also alone (CTest runs it as one process). Options:
//   --ranks-per-node R   emulate nodes of R ranks (0: the real nodes)
//   --backend            print the build's backend ("mpi" or "single") and exit
#include "comm/dist.h"
#include "test_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int ranks_per_node;
} comm_test_args;

static inline comm_test_args comm_test_start(int *argc, char ***argv) {
    comm_test_args a = {0};
    for (int i = 1; i < *argc; i++) {
        if (!strcmp((*argv)[i], "--backend")) {
            printf("%s\n", dist_backend());
            exit(0);
        }
        if (!strcmp((*argv)[i], "--ranks-per-node") && i + 1 < *argc)
            a.ranks_per_node = atoi((*argv)[++i]);
    }
    dist_init(argc, argv);
    return a;
}

// Every rank's failures count: the verdict is the same on all ranks, rank 0 prints it.
static inline int comm_test_finish(dist_comm *world, const char *name) {
    int64_t f = tu_failures;
    dist_allreduce_sum_i64(world, &f, 1);
    int rank = dist_rank(world), P = dist_size(world);
    if (rank == 0) {
        if (f)
            fprintf(stderr, "%s (P=%d): %lld check(s) failed\n", name, P, (long long)f);
        else
            printf("%s (P=%d): all checks passed\n", name, P);
    }
    return f ? 1 : 0;
}

// A finite float made from a hash of its coordinates: every row of every exchange is
// distinct, so a row delivered to the wrong place or in the wrong order shows.
static inline float comm_test_value(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
                 (c + 0x85EBCA77C2B2AE63ull) * 0x94D049BB133111EBull ^
                 (d + 1) * 0xD6E8FEB86659FD93ull;
    z ^= z >> 31;
    z *= 0x9E3779B97F4A7C15ull;
    z ^= z >> 29;
    uint32_t bits = 0x3f800000u | (uint32_t)(z & 0x7fffff);  // [1, 2)
    float f;
    memcpy(&f, &bits, sizeof f);
    return (z >> 40) & 1 ? -f : f;
}

#endif
