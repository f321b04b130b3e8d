#ifndef BG_TRAIN_SPIKE_H
#define BG_TRAIN_SPIKE_H
// Loss spikes (PaLM's remedy, --spike-rewind): the detector over recent losses, and the
// ranges of global samples a rewind skipped, which the data position jumps over. Both
// are plain values, copied into a checkpoint's progress and read back on resume.
#include <stdint.h>

#define SPIKE_WINDOW_MAX 1000  // --spike-window's bound: the window lives in trainer.json
#define SKIP_RANGES_MAX 64     // rewinds per run: each adds one range

// The last `n` losses of steps that were neither skipped nor spikes, oldest first, and
// how many steps in a row were spikes.
typedef struct {
    int n;
    int run;
    double loss[SPIKE_WINDOW_MAX];
} spike_state;

// Feeds one finite loss: 1 when it is the patience-th spike in a row, a spike being a
// loss above mean + z * std (population) of a full window of `window` losses. A spike
// is not added to the window; a normal loss is, and ends a run.
int spike_observe(spike_state *s, double loss, int window, double z, int patience);
// Keeps only the newest `window` losses (a resume with a smaller --spike-window).
void spike_trim(spike_state *s, int window);

// Global sample ranges [lo, hi) never trained on, in the order they were added.
typedef struct {
    int n;
    uint64_t lo[SKIP_RANGES_MAX], hi[SKIP_RANGES_MAX];
} skip_ranges;

// BG_ERR (bg_error) when full or lo >= hi.
int skip_ranges_add(skip_ranges *r, uint64_t lo, uint64_t hi);
// Where a global batch of `batch` samples starting at s may start: past every range it
// would overlap. Depends on global positions only, so on no rank count.
uint64_t skip_ranges_advance(const skip_ranges *r, uint64_t s, uint64_t batch);
#endif
