#ifndef BG_TRAIN_TEST_HOOKS_H
#define BG_TRAIN_TEST_HOOKS_H
// Faults injected by tests and the fault campaign through the environment, read once
// per run here and nowhere else (unset: no effect, no cost):
//   BAGUALU_TEST_NAN_STEPS=A[-B]      steps A..B (1-based): rank 0 poisons one element of
//                                     its first local expert's gradient (the first
//                                     parameter of a dense model) with NaN
//   BAGUALU_TEST_SPIKE_SAMPLES=A-B    a global batch overlapping samples [A, B) reports
//                                     its loss times 100 (a "bad batch" spike)
#include <stdint.h>

typedef struct {
    long nan_lo, nan_hi;        // 0: off
    uint64_t spike_lo, spike_hi;  // lo == hi: off
} train_hooks;

void train_hooks_read(train_hooks *h);
#endif
