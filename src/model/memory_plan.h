#ifndef BG_MODEL_MEMORY_PLAN_H
#define BG_MODEL_MEMORY_PLAN_H
// The memory report: what one rank of a run allocates, by component, computed from the
// config, the batch, the options and the layout alone (it allocates nothing). The
// activation bytes come from the layout routine model_prepare allocates with
// (model_acts_layout), the optimizer's from the ZeRO-1 shard rule (zero_shard.h), so
// the report equals what the run allocates (tests/train/test_memory_report). The
// planner (src/plan/) calls it to predict a run.
#include <stddef.h>

#include "core/dtype.h"
#include "model/config.h"
#include "model/model.h"

typedef struct {
    int B, T;                   // this rank's batch
    model_options opt;          // as the run sets them (recompute, attention, LM head)
    bg_dtype dtype;             // GEMM operand precision
    int world_size, world_rank; // 1, 0: one process
    int ep;                     // expert-parallel degree (1: every rank holds every expert)
    int a2a_chunks;             // 1: one exchange per trip
    long max_expert_rows;       // dropless expert parallelism's limit (0: 8x the share)
    int zero;                   // ZeRO-1: AdamW state sharded (zero_shard_make)
    int grad_overlap;           // the gradient reduction overlaps the backward (its scratch)
    size_t snapshot_bytes;      // asynchronous saves' snapshot buffer (0: none)
    int a2a_algo;               // enum dist_a2a_algo of the MoE exchange (0: flat)
    int ranks_per_node;         // of the world's layout (0: all on one node)
    // > 0: dropless EP's heap sized for this many times a rank's mean rows (as the run
    // grows it: an eighth more than the peak seen) instead of for its limit; the planner's
    // expectation, never the report train prints.
    double heap_rows_factor;
} memory_plan_input;

typedef struct {
    size_t params;              // the parameter block and the gates' state
    size_t grads;               // the gradient block
    size_t optimizer;           // AdamW m and v over the owned elements
    size_t activations;         // the activation arena, less the exchange's part
    size_t moe_exchange;        // the MoE exchange's buffers in the arena, plus the
    size_t moe_exchange_heap;   //   bound of dropless EP's grown heap buffers (0: bounded)
    size_t workspaces;          // kernel scratch (rounded weight copies), the per-layer
                                // table and the batch buffers: an estimate
    size_t snapshot;            // asynchronous saves
    size_t comm_scratch;        // the communicators' scratch: the gradient reduction's
                                // buckets (world, expert-data-parallel) and a bound of the
                                // hierarchical / 2d exchange's buffers (comm/dist.h)
    size_t total;               // the sum
    size_t arena;               // activations + moe_exchange: model.arena's capacity
    size_t numel, owned;        // parameters held, optimizer elements owned
    long expert_rows;           // rows the receive buffers are sized for (0: dropless)
} memory_report;

void memory_plan(memory_report *r, const model_config *c, const memory_plan_input *in);
#endif
