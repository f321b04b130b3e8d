#ifndef BG_MOE_CAPACITY_H
#define BG_MOE_CAPACITY_H
// Expert capacity: each expert takes at most C = ceil(cf·G·k/E) of a routing group's
// G·k assignments; the overflow is dropped (topk_idx -1, topk_w 0) and the token's
// residual carries it. Applied once between the gate and the dispatch plan, so every
// gate gets it. A rank's N tokens are whole groups, so a group never spans ranks and
// the outcome does not depend on the layout.
#include <stddef.h>
#include <stdint.h>

#include "moe/moe_types.h"

// G: routing.group_tokens, or the whole local batch N when 0.
int moe_routing_group_tokens(const moe_shape *s, int N);
// C for a group of G tokens: ceil(cf·G·k/E), the product taken in double and shrunk by
// a relative 1e-7 first so that a float cf such as 1.1f does not round 11 up to 12.
long moe_capacity_per_group(const moe_shape *s, int G);
// Rows this rank's experts can receive in a step when that is bounded by the routing:
// capacity E·(N/G)·C (independent of EP), a balanced gate N·k, one process N·k; the
// dropless worst case N·min(k,El)·EP caps them. 0: unbounded (dropless expert
// parallelism), the receive buffers grow with the rows actually exchanged.
size_t moe_expert_rows_bound(const moe_shape *s, int N);
// Whether the receive buffers may grow past that bound onto the heap: dropless (no
// bound), and a balanced gate without a capacity, whose bound holds only in training
// (SWIPE evaluates with plain top-k).
int moe_expert_rows_growable(const moe_shape *s, int N);
// Drops the overflow of every group in place and returns the assignments dropped.
// Entries already -1 (a gate's own) are skipped. keys: workspace of G·k. The rules:
//   position:    slots in order j = 0..k-1, within a slot tokens in group order; an
//                assignment is kept while its expert has kept fewer than C (first
//                choices before second choices, as GShard and Switch do);
//   probability: per expert, its assignments by gate weight topk_w, highest first, ties
//                to the lower token index; the first C are kept.
long moe_capacity_apply(int *topk_idx, float *topk_w, uint64_t *keys, const moe_shape *s, int N);
#endif
