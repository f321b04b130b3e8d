#ifndef BG_PLAN_CALIBRATE_H
#define BG_PLAN_CALIBRATE_H
// `bagualu plan --calibrate`: this machine's rates measured with the kernels the run
// uses. The GEMM curves are timed at the shapes a model's step calls (its projections,
// FFNs, experts at the balanced row count, LM head) plus a spread of squares; the
// memory bandwidth with a streaming pass over buffers larger than the caches. The
// links come from an MPI probe (plan_probe) the CLI runs under mpirun.
#include "model/config.h"
#include "plan/cluster.h"

// One timed GEMM shape (M,K)x(K,N), 2MKN FLOPs; own: one of the model's shapes.
typedef struct {
    double flops;
    int M, K, N;
    int own;
} plan_gemm_shape;
#define PLAN_CALIBRATE_SHAPES (3 * PLAN_GEMM_POINTS)

// The shapes calibration times, by increasing FLOPs: the model's (c may be NULL) and a
// spread of each class; of near-equal sizes in a class (within 5%) one, the model's own
// rather than the spread's, so the curve passes through the rates the step calls.
// v holds PLAN_CALIBRATE_SHAPES; returns the count.
int plan_calibrate_shapes(plan_gemm_shape *v, const model_config *c, int B, int T);

// c may be NULL (squares only); B, T the per-rank batch of the shapes; seconds the
// budget for all GEMM timings. Fills peak (the best rate seen), the curves of fp32,
// bf16 and fp16, mem_bw (on `threads`) and node_mem_bw (on every core), act_bw (the
// model's elementwise kernels on `threads`; 0 without a model),
// cores_per_rank = threads, memory_per_node from the system; with a model and at least
// twice `threads` cores, node_gemm_speedup and node_act_speedup (a rank on all of them).
int plan_calibrate_compute(plan_cluster *cl, const model_config *c, int B, int T, int threads,
                           double seconds);

// Under mpirun (the `plan-probe` verb): the links as --a2a auto measures them; rank 0
// prints "bandwidth latency gap sync" (B/s, s, s per further message, s per phase).
int plan_probe(int argc, char **argv);
#endif
