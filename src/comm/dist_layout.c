// The BaGuaLu layout: world, expert-parallel, expert-data-parallel and node-local
// communicators (groups described in dist.h). Backend-independent: it only splits.
#include "comm/dist_impl.h"

#include <string.h>

// Checks everything that depends only on the arguments and P, so every rank reaches
// the same verdict and no rank is left waiting in a collective.
static int layout_check(int P, int n_experts, int *ep, int ranks_per_node) {
    if (n_experts < 1) return bg_error("the number of experts must be >= 1, got %d", n_experts);
    if (ranks_per_node < 0)
        return bg_error("ranks per node must be >= 0 (0: real nodes), got %d", ranks_per_node);
    if (*ep < 0) return bg_error("expert-parallel degree must be >= 0 (0: automatic), got %d", *ep);
    if (*ep == 0) {
        // Largest EP <= P dividing both: fewest experts per rank, so the most memory
        // left for tokens. EP = 1 always qualifies.
        for (int d = P < n_experts ? P : n_experts; d >= 1; d--)
            if (P % d == 0 && n_experts % d == 0) {
                *ep = d;
                break;
            }
        return BG_OK;
    }
    if (*ep > P)
        return bg_error("expert-parallel degree %d exceeds the number of ranks %d", *ep, P);
    if (P % *ep != 0)
        return bg_error("expert-parallel degree %d must divide the number of ranks %d", *ep, P);
    if (n_experts % *ep != 0)
        return bg_error("expert-parallel degree %d must divide the number of experts %d", *ep,
                        n_experts);
    return BG_OK;
}

int dist_layout_init(dist_layout *L, int n_experts, int ep, int ranks_per_node) {
    memset(L, 0, sizeof *L);
    if (ranks_per_node < 0)  // before dist_comm_world, which would also refuse it
        return bg_error("ranks per node must be >= 0 (0: real nodes), got %d", ranks_per_node);
    dist_comm *world = dist_comm_world(ranks_per_node);
    if (!world) return BG_ERR;
    int P = dist_size(world), r = dist_rank(world);
    if (layout_check(P, n_experts, &ep, ranks_per_node) != BG_OK) {
        dist_comm_free(world);
        return BG_ERR;
    }
    L->world = world;
    L->world_size = P;
    L->world_rank = r;
    L->n_experts = n_experts;
    L->ep = ep;
    L->experts_per_rank = n_experts / ep;
    L->ep_rank = r % ep;
    L->ep_group = r / ep;
    L->edp_size = P / ep;
    L->edp_rank = r / ep;
    L->ep_comm = dist_comm_split(world, r / ep, r);
    L->edp_comm = dist_comm_split(world, r % ep, r);
    L->node_comm = dist_comm_split(world, world->node_of[r], r);
    L->n_nodes = world->n_nodes;
    L->node = world->node_of[r];
    L->node_rank = dist_rank(L->node_comm);
    L->node_size = dist_size(L->node_comm);
    BG_ASSERT(dist_size(L->ep_comm) == ep && dist_rank(L->ep_comm) == L->ep_rank);
    BG_ASSERT(dist_size(L->edp_comm) == L->edp_size && dist_rank(L->edp_comm) == L->edp_rank);
    return BG_OK;
}

void dist_layout_free(dist_layout *L) {
    dist_comm_free(L->node_comm);
    dist_comm_free(L->edp_comm);
    dist_comm_free(L->ep_comm);
    dist_comm_free(L->world);
    memset(L, 0, sizeof *L);
}

void dist_layout_traffic(const dist_layout *L, dist_traffic *out) {
    memset(out, 0, sizeof *out);
    const dist_comm *comms[4] = {L->world, L->ep_comm, L->edp_comm, L->node_comm};
    for (int i = 0; i < 4; i++) dist_traffic_add(out, &comms[i]->traffic);
}

void dist_layout_traffic_reset(dist_layout *L) {
    dist_comm *comms[4] = {L->world, L->ep_comm, L->edp_comm, L->node_comm};
    for (int i = 0; i < 4; i++) dist_traffic_reset(comms[i]);
}
