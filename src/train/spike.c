#include "train/spike.h"
#include "core/error.h"

#include <math.h>
#include <string.h>

int spike_observe(spike_state *s, double loss, int window, double z, int patience) {
    if (s->n >= window) {
        // Fixed order over the window: the same bits on every rank and every rerun.
        double mean = 0, var = 0;
        for (int i = 0; i < s->n; i++) mean += s->loss[i];
        mean /= s->n;
        for (int i = 0; i < s->n; i++) var += (s->loss[i] - mean) * (s->loss[i] - mean);
        double sd = sqrt(var / s->n);
        if (loss > mean + z * sd) return ++s->run >= patience;
        memmove(s->loss, s->loss + 1, (size_t)(s->n - 1) * sizeof s->loss[0]);
        s->n--;
    }
    s->run = 0;
    s->loss[s->n++] = loss;
    return 0;
}

void spike_trim(spike_state *s, int window) {
    if (s->n <= window) return;
    memmove(s->loss, s->loss + (s->n - window), (size_t)window * sizeof s->loss[0]);
    s->n = window;
}

int skip_ranges_add(skip_ranges *r, uint64_t lo, uint64_t hi) {
    if (lo >= hi) return bg_error("empty data range to skip [%llu, %llu)", (unsigned long long)lo,
                                  (unsigned long long)hi);
    if (r->n >= SKIP_RANGES_MAX)
        return bg_error("more than %d loss-spike rewinds: the data or the settings need a look",
                        SKIP_RANGES_MAX);
    r->lo[r->n] = lo, r->hi[r->n] = hi;
    r->n++;
    return BG_OK;
}

uint64_t skip_ranges_advance(const skip_ranges *r, uint64_t s, uint64_t batch) {
    for (int moved = 1; moved;) {  // ranges may abut or nest: repeat until none overlaps
        moved = 0;
        for (int i = 0; i < r->n; i++)
            if (s < r->hi[i] && s + batch > r->lo[i]) s = r->hi[i], moved = 1;
    }
    return s;
}
