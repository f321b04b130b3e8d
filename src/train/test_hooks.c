#include "train/test_hooks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_hooks_read(train_hooks *h) {
    memset(h, 0, sizeof *h);
    const char *nan = getenv("BAGUALU_TEST_NAN_STEPS");
    if (nan && sscanf(nan, "%ld-%ld", &h->nan_lo, &h->nan_hi) < 2) h->nan_hi = h->nan_lo;
    const char *spike = getenv("BAGUALU_TEST_SPIKE_SAMPLES");
    unsigned long long lo, hi;
    if (spike && sscanf(spike, "%llu-%llu", &lo, &hi) == 2 && lo < hi) h->spike_lo = lo, h->spike_hi = hi;
}
