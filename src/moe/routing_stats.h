#ifndef BG_MOE_ROUTING_STATS_H
#define BG_MOE_ROUTING_STATS_H
// Routing health of one MoE layer for one step, from the router's global statistics:
// how evenly the experts are loaded, how many assignments were dropped, how sure the
// router is. Pure arithmetic on numbers every rank already shares, so a test can work
// each field out by hand.

// One layer's fields. Load = assignments routed to an expert over the global batch
// (the router's counts, before any capacity drop).
typedef struct {
    double load_min, load_max;  // smallest and largest expert load
    double load_mean;           // Σ load / E
    double load_cv;             // coefficient of variation: population std / mean
    double max_over_mean;       // load_max / load_mean (1 = perfectly balanced)
    double drop_frac;           // dropped / (n_tokens·k)
    double router_entropy;      // mean over tokens of −Σ_i p_i log p_i (nats)
} moe_routing_stats;

// counts (E): load per expert; n_tokens: tokens of the global batch; dropped:
// assignments dropped for capacity; entropy_sum: Σ over tokens of the router
// probabilities' entropy. An empty batch (no load, no tokens) gives all zeros.
void moe_routing_stats_compute(moe_routing_stats *r, const int *counts, int E, int k,
                               double n_tokens, double dropped, double entropy_sum);

// Rows a rank sends to destinations on another node: send_rows (n) per destination,
// dest_node (n) the node of each, node this rank's. *off_node, *total WRITE.
void moe_routing_node_rows(double *off_node, double *total, const int *send_rows,
                           const int *dest_node, int n, int node);
#endif
