// Gathers the routing health of every MoE layer after a step (routing_health.h).
#include "train/routing_health.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

int routing_health_init(routing_health *h, const model *m, const dist_layout *layout,
                        long dead_window, long first_step) {
    memset(h, 0, sizeof *h);
    const model_config *c = &m->cfg;
    int n = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) n += model_layer_is_moe(c, l);
    h->experts = c->num_local_experts;
    int parallel = layout && layout->world_size > 1 && layout->ep > 1;
    h->ep = parallel ? layout->ep : 0;
    h->layer_index = calloc(n ? n : 1, sizeof *h->layer_index);
    h->layers = calloc(n ? n : 1, sizeof *h->layers);
    h->node_rows = calloc(2 * (size_t)(n ? n : 1), sizeof *h->node_rows);
    h->dest_node = parallel ? calloc(layout->ep, sizeof *h->dest_node) : NULL;
    if (!h->layer_index || !h->layers || !h->node_rows || (parallel && !h->dest_node) ||
        dead_experts_init(&h->dead, n, h->experts, dead_window, first_step) != BG_OK) {
        routing_health_free(h);
        return bg_error("out of memory for the routing health metrics");
    }
    for (int l = 0, i = 0; l < c->num_hidden_layers; l++)
        if (model_layer_is_moe(c, l)) h->layer_index[i++] = l;
    h->n_layers = n;
    // The bias gate's state is its per-expert bias; gates without state have none.
    for (int i = 0; i < n; i++) h->layers[i].bias = model_router_state(m, h->layer_index[i]);
    if (parallel) {
        // Node numbers of one communicator are comparable with each other.
        for (int q = 0; q < layout->ep; q++) h->dest_node[q] = dist_node_of(layout->ep_comm, q);
        h->node = dist_node_of(layout->ep_comm, layout->ep_rank);
    }
    return BG_OK;
}

void routing_health_update(routing_health *h, const model *m, const dist_layout *layout,
                           long step) {
    if (h->n_layers == 0) return;
    moe_shape s = model_moe_shape(&m->cfg, NULL);  // E and k: the same on every layout
    for (int i = 0; i < h->n_layers; i++) {
        const moe_acts *a = &m->acts.layers[h->layer_index[i]].moe;
        const moe_router_cache *rt = &a->router;
        routing_layer_health *lh = &h->layers[i];
        moe_routing_stats_compute(&lh->stats, rt->counts_global, s.E, s.k, rt->n_tokens,
                                  rt->dropped_global, moe_router_entropy_sum(rt, &s));
        lh->dead_experts = dead_experts_update(&h->dead, i, step, rt->counts_global);
        double *nr = &h->node_rows[2 * i];
        nr[0] = nr[1] = 0;
        if (h->dest_node && a->exchange.send_rows)
            moe_routing_node_rows(&nr[0], &nr[1], a->exchange.send_rows, h->dest_node, h->ep,
                                  h->node);
    }
    // Every rank's rows: the world's fraction, the same on every rank.
    if (layout && layout->world_size > 1)
        dist_allreduce_sum_f64(layout->world, h->node_rows, 2 * (size_t)h->n_layers);
    h->worst_max_over_mean = h->worst_drop_frac = 0;
    h->dead_total = 0;
    for (int i = 0; i < h->n_layers; i++) {
        routing_layer_health *lh = &h->layers[i];
        const double *nr = &h->node_rows[2 * i];
        lh->leave_node_frac = nr[1] > 0 ? nr[0] / nr[1] : 0;
        if (lh->stats.max_over_mean > h->worst_max_over_mean)
            h->worst_max_over_mean = lh->stats.max_over_mean;
        if (lh->stats.drop_frac > h->worst_drop_frac) h->worst_drop_frac = lh->stats.drop_frac;
        h->dead_total += lh->dead_experts;
    }
}

void routing_health_free(routing_health *h) {
    free(h->layer_index);
    free(h->layers);
    free(h->node_rows);
    free(h->dest_node);
    if (h->dead.last_seen) dead_experts_free(&h->dead);
    memset(h, 0, sizeof *h);
}
