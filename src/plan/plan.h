#ifndef BG_PLAN_PLAN_H
#define BG_PLAN_PLAN_H
// The planner: one rank's memory (the memory report, model/memory_plan.h) and the
// analytic time of a training step (docs/PLANNER.md, term by term) for a model, a
// cluster and a layout; and the search over layouts.
#include "model/config.h"
#include "plan/plan_types.h"

const char *plan_a2a_name(plan_a2a a);

// BG_ERR with bg_error for a layout the model or the cluster cannot take.
int plan_run(plan_result *r, const model_config *c, const plan_cluster *cl, const plan_layout *l);

// Layouts of P ranks (EP, per-rank batch up to l->B, a2a, ZeRO, recompute, capacity)
// that fit the node's memory, best predicted tokens/s first; returns how many (<= max).
int plan_search(plan_layout *out, plan_result *res, int max, const model_config *c,
                const plan_cluster *cl, const plan_layout *base);
#endif
