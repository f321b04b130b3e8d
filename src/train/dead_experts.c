// Per-expert last step with a token; dead = none inside the window (dead_experts.h).
#include "train/dead_experts.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

int dead_experts_init(dead_experts *d, int layers, int experts, long window, long first_step) {
    BG_ASSERT(window > 0 && layers >= 0 && experts >= 0);
    memset(d, 0, sizeof *d);
    size_t n = (size_t)layers * experts;
    d->last_seen = malloc((n ? n : 1) * sizeof *d->last_seen);
    if (!d->last_seen) return bg_error("out of memory tracking dead experts");
    for (size_t i = 0; i < n; i++) d->last_seen[i] = first_step;
    d->layers = layers;
    d->experts = experts;
    d->window = window;
    d->first_step = first_step;
    return BG_OK;
}

void dead_experts_free(dead_experts *d) {
    free(d->last_seen);
    memset(d, 0, sizeof *d);
}

int dead_experts_update(dead_experts *d, int layer, long step, const int *counts) {
    BG_ASSERT(layer >= 0 && layer < d->layers && step > d->first_step);
    long *seen = d->last_seen + (size_t)layer * d->experts;
    // The window is steps (start, step]; an expert whose last token came at or before
    // start is dead.
    long start = step - d->window > d->first_step ? step - d->window : d->first_step;
    int dead = 0;
    for (int e = 0; e < d->experts; e++) {
        if (counts[e] > 0) seen[e] = step;
        dead += seen[e] <= start;
    }
    return dead;
}
