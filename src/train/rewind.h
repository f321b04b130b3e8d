#ifndef BG_TRAIN_REWIND_H
#define BG_TRAIN_REWIND_H
// Loss-spike rewinds (--spike-rewind, PaLM's remedy): the detector fed with each step's
// loss, and the rewind itself: back to the newest checkpoint before the spike, the data
// consumed since then skipped for good (recorded in trainer.json, so a resume skips it
// too).
#include "train/checkpoint.h"
#include "train/train_state.h"

// The loss-spike and skip options: BG_ERR with a one-line bg_error when invalid.
int rewind_validate(const train_options *o);
// Feeds the loss of a step that was applied; 1 when a rewind is due (every rank alike:
// the loss is the global batch's).
int rewind_due(trainer *tr, double loss);
// Collective. Commits a pending save, loads the newest checkpoint older than the
// spike's first step, adds [its data position, the current one) to the skipped ranges
// and saves that state again under the same step (atomically replacing it), so a
// resume from it skips the same data. *to_step, *lo, *hi: what was done. BG_ERR
// (bg_error, every rank alike) when there is no such checkpoint or it fails to load
// or save; the trainer is then unchanged or at the loaded checkpoint.
int trainer_rewind(trainer *tr, ckpt_saver *saver, long *to_step, uint64_t *lo, uint64_t *hi);
#endif
