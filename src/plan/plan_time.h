#ifndef BG_PLAN_PLAN_TIME_H
#define BG_PLAN_PLAN_TIME_H
// The analytic step time (docs/PLANNER.md): every term of plan_result's times from the
// model's shapes, the layout and the cluster's rates. Internal to src/plan/.
#include "model/config.h"
#include "plan/plan_types.h"

#include <stddef.h>

// Fills r's times, FLOPs, traffic, imbalance and throughput; dense/numel are one
// rank's parameter block (dense part, total), owned the optimizer's elements.
void plan_time(plan_result *r, const model_config *c, const plan_cluster *cl,
               const plan_layout *l, size_t dense, size_t numel, size_t owned);

// The time of one exchange step of `bytes` per rank among n ranks, m of them on each
// node (ring-equivalent volume 2(n-1)/n; used for the gradient all-reduce and TP), its
// intra-node part at intra_bw bytes/s per rank (the link's, or the bulk rate for
// buffers past the caches), and the waits of its two phases (R ranks per node).
double plan_allreduce_s(const plan_cluster *cl, double intra_bw, int R, double bytes, int n, int m);

// The routing's cost (docs/PLANNER.md, load variation, imbalance, kept): for EP ranks
// of an expert group among dp data-parallel ranks, N tokens per rank of sequences of T,
// capacity factor cf (0: dropless) and the experts' load variation cv over the global
// batch (train's load_cv; 0: independent uniform routing): imb, the slowest rank's
// expert rows over the mean rank's kept rows, keep, the fraction of assignments kept
// after the capacity, and rows_cv (may be NULL), the variation of the kept rows over a
// rank's experts (each expert's rows gathered from its EP group's tokens).
void plan_routing_cost(const model_config *c, int ep, int dp, double N, double T, float cf, double cv,
                       double *imb, double *keep, double *rows_cv);
#endif
