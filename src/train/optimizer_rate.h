#ifndef BG_TRAIN_OPTIMIZER_RATE_H
#define BG_TRAIN_OPTIMIZER_RATE_H
#include <stddef.h>
// The rate of a step's optimizer passes, as the trainer runs them: the gradients
// zeroed, their squared norm, the AdamW update (4 + 4 + 28 bytes an element, the
// planner's count), over n fp32 elements on `threads` threads: bytes/s, the median of
// 5 timed steps after a first one. What `bagualu plan --calibrate` records as
// optimizer_bandwidth: these passes run below a copy's rate (the update's square root
// and division, the norm's double sums).
double optimizer_bytes_per_s(size_t n, int threads);
#endif
