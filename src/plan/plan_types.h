#ifndef BG_PLAN_PLAN_TYPES_H
#define BG_PLAN_PLAN_TYPES_H
// The planner's layout and result, shared by the planner (plan.h) and its time model
// (plan_time.h).
#include "model/memory_plan.h"
#include "plan/cluster.h"

typedef enum { PLAN_A2A_FLAT = 0, PLAN_A2A_HIER = 1, PLAN_A2A_2D = 2 } plan_a2a;

typedef struct {
    int P;                  // ranks
    int ep;                 // expert-parallel degree (0: bagualu's default, the largest valid)
    int ranks_per_node;     // 0: the cluster's
    int B, T;               // per-rank sequences (per micro-batch), tokens per sequence
    plan_dtype dtype;
    int zero;               // ZeRO-1 (-1: on when P > 1, as train)
    int recompute;          // model_recompute
    plan_a2a a2a;
    int a2a_chunks;         // 1: no overlap of the exchange with the experts
    float capacity;         // < 0: the config's capacity_factor
    double imbalance;       // 0: the gate's estimate (plan_time.c)
    double load_cv;         // the experts' load variation (train's load_cv; 0: uniform)
    // Analytic only (paper runs; bagualu itself runs tp = pp = 1): Megatron tensor
    // parallelism, a 1F1B pipeline of `micro` micro-batches, and the fraction of the
    // gradient reduction and of the exchange hidden behind compute by the framework.
    int tp, pp, micro;
    double overlap_grad, overlap_a2a;
    double a2a_elem_bytes;  // bytes per exchanged element (0: 4, bagualu's fp32 rows)
} plan_layout;

void plan_layout_defaults(plan_layout *l);

typedef struct {
    // Per step, per rank (the slowest rank: imbalance included)
    double gemm_dense_s, gemm_expert_s, gemm_head_s, attention_s, memory_bound_s;
    double a2a_s, a2a_hidden_s, grad_s, grad_hidden_s, optimizer_s, tp_s, bubble_s;
    double grad_sum_s;         // of grad_s: the reduction's summation passes
    double collectives_s;      // the step's all-reduces of a few scalars (loss, norm, routers')
    double compute_s, step_s;
    double flops_model;        // model FLOPs of the step per rank (PaLM's count)
    double flops_executed;     // with recomputation and the slowest rank's expert rows
    double a2a_bytes_inter, a2a_bytes_intra, grad_bytes;  // per rank per step
    double imbalance, keep;    // expert rows max/mean; kept fraction after capacity
    double tokens_per_s, mfu;
    memory_report mem;         // per rank, each component the largest over the ranks
    // mem.total with dropless EP's grown heap at mem_imbalance's rows instead of its
    // limit (8x the mean): what a run is likely to touch (peak RSS), where mem.total is
    // what it may allocate. Equal to mem.total without a grown heap. mem_imbalance: the
    // given (--imbalance, --load-cv) one, else the most skewed the routing groups allow.
    size_t mem_expected;
    double mem_imbalance;
    double mem_node;           // bytes per node
    int fits;
    int cache_resident;        // the node's ranks' state fits its cache (cluster.h)
    int ep, ranks_per_node, zero;
} plan_result;

#endif
