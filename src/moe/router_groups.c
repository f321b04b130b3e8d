// Top-k selection for every gate, with DeepSeek-V3's group-limited routing: the experts
// split into G contiguous groups, a token may use at most M of them (with G = nodes and
// experts placed by node, at most M nodes per token). Defined by the config, never by
// the machine, so the choice is the same on every layout.
#include "moe/router.h"

#include "core/error.h"

int moe_router_group_limited(const moe_routing *r) {
    return r && r->groups > 1 && r->topk_groups >= 1 && r->topk_groups < r->groups;
}

// The k largest keys among experts with allowed[e] (NULL: all), descending; repeated
// selection, O(k·E) (k is small); a strict '>' keeps the lower index on an exact tie,
// so the choice is deterministic and independent of the thread count.
static void select_topk(int *idx, const float *key, const unsigned char *allowed, int E, int k) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            if (allowed && !allowed[e]) continue;
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= idx[i] == e;
            if (taken) continue;
            if (best < 0 || key[e] > key[best]) best = e;
        }
        idx[j] = best;
    }
}

void moe_router_select_row(int *idx, const float *key, const float *score, int E, int k,
                           const moe_routing *r) {
    if (!moe_router_group_limited(r)) {
        select_topk(idx, key, NULL, E, k);
        return;
    }
    const int G = r->groups, M = r->topk_groups, per = E / G;
    BG_ASSERT(E % G == 0 && k <= M * per);  // model_config_validate checks both
    // Group score: the sum of the group's two best scores (DeepSeek-V3's
    // `topk(2).sum` per group), its one score when a group holds a single expert.
    float gscore[G];
    for (int g = 0; g < G; g++) {
        const float *sc = score + (size_t)g * per;
        float b1 = sc[0], b2 = 0.0f;
        int has2 = 0;
        for (int e = 1; e < per; e++) {
            if (sc[e] > b1) {
                b2 = b1;
                b1 = sc[e];
            } else if (!has2 || sc[e] > b2) {
                b2 = sc[e];
            }
            has2 = 1;
        }
        gscore[g] = has2 ? b1 + b2 : b1;
    }
    // The M best groups (ties → lower group), then top-k over their experts.
    int gidx[M];
    select_topk(gidx, gscore, NULL, G, M);
    unsigned char allowed[E];
    for (int e = 0; e < E; e++) allowed[e] = 0;
    for (int j = 0; j < M; j++)
        for (int e = gidx[j] * per; e < (gidx[j] + 1) * per; e++) allowed[e] = 1;
    select_topk(idx, key, allowed, E, k);
}
