#ifndef BG_PLAN_CALIBRATE_H
#define BG_PLAN_CALIBRATE_H
// `bagualu plan --calibrate`: this machine's rates measured with the kernels the run
// uses. The GEMM curves are timed at the shapes a model's step calls (its projections,
// FFNs, experts at the balanced row count, LM head) plus a spread of squares; the
// memory bandwidth with a streaming pass over buffers larger than the caches. The
// links come from an MPI probe (plan_probe) the CLI runs under mpirun.
#include "model/config.h"
#include "plan/cluster.h"

// c may be NULL (squares only); B, T the per-rank batch of the shapes; seconds the
// budget for all GEMM timings. Fills peak (the best rate seen), the curves of fp32,
// bf16 and fp16, mem_bw, cores_per_rank = threads, memory_per_node from the system.
int plan_calibrate_compute(plan_cluster *cl, const model_config *c, int B, int T, int threads,
                           double seconds);

// Under mpirun (the `plan-probe` verb): the links as --a2a auto measures them; rank 0
// prints "bandwidth latency gap sync" (B/s, s, s per further message, s per phase).
int plan_probe(int argc, char **argv);
#endif
