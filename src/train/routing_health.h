#ifndef BG_TRAIN_ROUTING_HEALTH_H
#define BG_TRAIN_ROUTING_HEALTH_H
// Routing health per MoE layer, per step: load balance, drops, router entropy (from the
// router's global statistics, moe/routing_stats.h), dead experts over a window of steps
// (train/dead_experts.h) and the share of routed rows that leave their node. What the
// metrics log and the progress line report (train/metrics.c).
#include "comm/dist.h"
#include "model/model.h"
#include "moe/routing_stats.h"
#include "train/dead_experts.h"

typedef struct {
    moe_routing_stats stats;    // load min/max/mean/CV, max/mean, drop fraction, entropy
    int dead_experts;           // experts without a token over the last dead-window steps
    double leave_node_frac;     // the world's routed rows sent to a rank on another node,
                                // over all its routed rows; 0 without expert parallelism
    // The `bias` gate's per-expert selection bias (E floats, its router state), logged
    // when not NULL; NULL for every other gate.
    const float *bias;
} routing_layer_health;

typedef struct {
    int n_layers;               // MoE layers (0: a dense model, nothing to report)
    int experts;                // E
    int *layer_index;           // (n_layers) the model layer of each
    routing_layer_health *layers;  // (n_layers)
    dead_experts dead;
    int node;                   // this rank's node in the expert-parallel group
    int *dest_node;             // (ep) node of each expert-parallel rank; NULL: no exchange
    int ep;
    double *node_rows;          // (2·n_layers) off-node rows, all rows: one world all-reduce
    // The progress line's summary over layers.
    double worst_max_over_mean, worst_drop_frac;
    int dead_total;
} routing_health;

// For model m (prepared); layout NULL on one process. dead_window > 0 steps; tracking
// starts after first_step steps. Allocates everything it will need: BG_ERR on out of memory.
int routing_health_init(routing_health *h, const model *m, const dist_layout *layout,
                        long dead_window, long first_step);
// After a training step (`step` steps done): fills every layer's fields from the last
// forward. Collective over layout->world when it has more than one rank. No allocation.
void routing_health_update(routing_health *h, const model *m, const dist_layout *layout,
                           long step);
void routing_health_free(routing_health *h);
#endif
