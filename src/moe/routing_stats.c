// Routing health fields from the router's global statistics (routing_stats.h).
#include "moe/routing_stats.h"

#include <math.h>

void moe_routing_stats_compute(moe_routing_stats *r, const int *counts, int E, int k,
                               double n_tokens, double dropped, double entropy_sum) {
    *r = (moe_routing_stats){0};
    if (E <= 0) return;
    double sum = 0, mn = counts[0], mx = counts[0];
    for (int i = 0; i < E; i++) {
        sum += counts[i];
        mn = counts[i] < mn ? counts[i] : mn;
        mx = counts[i] > mx ? counts[i] : mx;
    }
    double mean = sum / E, var = 0;
    for (int i = 0; i < E; i++) var += (counts[i] - mean) * (counts[i] - mean);
    var /= E;
    r->load_min = mn;
    r->load_max = mx;
    r->load_mean = mean;
    // No load at all: nothing is unbalanced, so CV and max/mean are 0, not 0/0.
    r->load_cv = mean > 0 ? sqrt(var) / mean : 0;
    r->max_over_mean = mean > 0 ? mx / mean : 0;
    r->drop_frac = n_tokens > 0 && k > 0 ? dropped / (n_tokens * k) : 0;
    r->router_entropy = n_tokens > 0 ? entropy_sum / n_tokens : 0;
}

void moe_routing_node_rows(double *off_node, double *total, const int *send_rows,
                           const int *dest_node, int n, int node) {
    double off = 0, all = 0;
    for (int q = 0; q < n; q++) {
        all += send_rows[q];
        if (dest_node[q] != node) off += send_rows[q];
    }
    *off_node = off;
    *total = all;
}
