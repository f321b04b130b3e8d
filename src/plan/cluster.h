#ifndef BG_PLAN_CLUSTER_H
#define BG_PLAN_CLUSTER_H
// A cluster file (clusters/*.json): what the planner knows of a machine. Rates are per
// rank unless named per node; bytes and seconds throughout. docs/PLANNER.md lists the
// keys, and clusters/ has examples (a calibrated box and the paper runs' machines).

// The GEMM operand precisions the planner prices: bagualu's three plus fp8 (paper
// runs only: DeepSeek-V3's GEMMs).
typedef enum { PLAN_FP32 = 0, PLAN_BF16, PLAN_FP16, PLAN_FP8, PLAN_NDTYPES } plan_dtype;
const char *plan_dtype_name(plan_dtype d);
int plan_dtype_parse(const char *name, plan_dtype *d);  // BG_ERR (bg_error) if unknown

#define PLAN_GEMM_POINTS 16

// GEMM shape classes by arithmetic intensity MKN / (2(MK + KN + MN)) (FLOPs per byte
// of fp32 operands and result): skinny (< 20: few rows, e.g. an expert's or the
// router's), medium (< 60), square. Skinny GEMMs run far below square ones of the
// same FLOPs on CPUs and GPUs alike.
typedef enum { PLAN_GEMM_SKINNY = 0, PLAN_GEMM_MEDIUM, PLAN_GEMM_SQUARE, PLAN_GEMM_CLASSES } plan_gemm_class;
plan_gemm_class plan_gemm_class_of(double M, double K, double N);
// The arithmetic intensity that sorts shapes into classes: M·K·N / (2(MK + KN + MN)).
double plan_gemm_ai(double M, double K, double N);

// Achieved GEMM rate against the FLOPs of one call (2·M·K·N): the efficiency curve
// of a shape class, interpolated in log(flops), clamped at both ends. ai: each
// point's arithmetic intensity where known (calibrated curves), else 0; typical_ai:
// their geometric mean, 0 unless every point has one (plan_gemm_curve_finish).
// cached: the point's rate with its operands in the cache, as a model whose whole state
// fits there runs it (0: unknown, the rate).
typedef struct {
    int n;
    double flops[PLAN_GEMM_POINTS], rate[PLAN_GEMM_POINTS], ai[PLAN_GEMM_POINTS];
    double cached[PLAN_GEMM_POINTS];
    double typical_ai;
} plan_gemm_curve;
// Sets typical_ai once the points are in (not on every rate lookup).
void plan_gemm_curve_finish(plan_gemm_curve *g);

typedef struct {
    char name[96];
    int nodes, ranks_per_node, cores_per_rank;
    double peak[PLAN_NDTYPES];          // FLOP/s per rank (0: the dtype is not offered)
    plan_gemm_curve gemm[PLAN_NDTYPES][PLAN_GEMM_CLASSES];  // none: the nearest class's,
                                        // or peak · gemm_efficiency
    double gemm_efficiency;             // the flat fallback's fraction of peak
    double attention_rate[PLAN_NDTYPES];  // measured FLOP/s of the attention core (0: none)
    double attention_efficiency;        // else: its rate / the GEMM curve's at a tile
    double mem_per_node;                // bytes
    double mem_bw;                      // bytes/s per rank (memory-bound kernels)
    double node_mem_bw;                 // bytes/s of the whole node, every core streaming:
                                        // the ranks of a node share it (0: mem_bw x ranks)
    double act_bw;                      // bytes/s per rank of the elementwise kernels at
                                        // the model's shape (0: mem_bw)
    double opt_bw;                      // bytes/s per rank of the optimizer's passes
                                        // (zeroing, norm, AdamW; 0: mem_bw)
    double node_opt_bw;                 // the same with every core of the node (0: opt_bw
                                        // x ranks)
    // bytes/s per rank of mixed precision's rounding of GEMM operands (the bf16 path's
    // kernel over weight-sized blocks from memory, 6 bytes an element as the time model
    // counts them), and with every core of the node (0: mem_bw and node_mem_bw)
    double round_bw, node_round_bw;
    // Measured speedups of one rank on all the node's cores (ranks_per_node x
    // cores_per_rank) over cores_per_rank: the model's GEMMs, and its elementwise kernels
    // (0: ideal, ranks_per_node). Barriers and shared caches keep them under the ratio.
    double node_gemm_speedup, node_act_speedup;
    // Set by plan_cluster_scale_rates: the rank's cores, and how much faster than its
    // scaled GEMM rates it runs GEMMs one per thread (its experts, matmul_concurrent): the
    // cores' share over the threaded GEMMs' speedup, 1 where the rank has one core's share.
    double rank_cores, concurrent_gain;
    // The node's cache a model's whole state stays in between its passes (bytes: the
    // largest working set a stream runs at 1.5x memory_bandwidth or more), and the
    // stream's bytes/s per rank there (0: none measured).
    double cache_bytes, cache_bw;
    double intra_bw, intra_lat;         // per rank, inside a node
    // The gradient reduction's transfers (buffers past the caches, every rank of the node
    // at once), per rank (0: intra_bw), and its rank-order sum's bytes/s per rank, every
    // rank summing (0: mem_bw). One thread's work each: a rank with more cores gets no more.
    double intra_bulk_bw, reduce_bw;
    double inter_bw, inter_lat;         // per node (its links), between nodes
    // What each further message of a phase costs its sender (s); absent from a file:
    // the latency (messages priced one after another).
    double intra_gap, inter_gap;
    // What each phase of an exchange waits for its ranks to get a core (s), per rank
    // per node (a layout of R ranks per node waits R times as long), measured where
    // emulated nodes share a machine's cores; 0 elsewhere.
    double inter_sync;
    // A node's link rate while every rank exchanges at once (bytes/s; 0: inter_bw),
    // measured on emulated nodes, where the ranks' spinning slows the links' stack.
    double inter_xbw;
    int supernode_nodes;                // nodes under one non-blocking switch (0: all)
    double oversubscription;            // above a supernode (1: non-blocking)
} plan_cluster;

// A model whose ranks' state (r_bytes each, R on a node, none sharing a core) fits the
// node's cache: its GEMMs at their cached rates and its streaming passes at the cache's
// bandwidth. Returns whether it did.
int plan_cluster_cache_resident(plan_cluster *c, double r_bytes, int R);
// The inter-node rate the expert rows' trips run at: exchange_bandwidth, else bandwidth.
double plan_cluster_exchange_bw(const plan_cluster *c);

// Parses and validates; every problem is one bg_error line naming the file and key.
int plan_cluster_parse(plan_cluster *c, const char *json, const char *origin);
int plan_cluster_load(plan_cluster *c, const char *path);
// The cluster as JSON text (caller frees); parsing it gives the same cluster.
char *plan_cluster_to_json(const plan_cluster *c, const char *source_note);
// The GEMM rate (FLOP/s per rank) of one (M,K)x(K,N) call in dtype d.
// A rank given `share` times the cores the file states: every per-rank rate (peaks,
// GEMM curves, attention, memory and activation bandwidth) times share; above 1, the
// compute rates by the measured speedups instead, interpolated in the cores.
void plan_cluster_scale_rates(plan_cluster *c, double share);
double plan_gemm_rate(const plan_cluster *c, plan_dtype d, double M, double K, double N);
#endif
