#include "train/rewind.h"
#include "core/error.h"
#include "train/checkpoint_dir.h"

#include <math.h>
#include <stdlib.h>

int rewind_validate(const train_options *o) {
    if (o->max_skips <= 0) return bg_error("--max-skips must be positive, got %ld", o->max_skips);
    if (!(o->spike_rewind >= 0) || !isfinite(o->spike_rewind))
        return bg_error("--spike-rewind must be a number >= 0 (0: off)");
    if (o->spike_window < 2 || o->spike_window > SPIKE_WINDOW_MAX)
        return bg_error("--spike-window must be in [2, %d], got %d", SPIKE_WINDOW_MAX, o->spike_window);
    if (o->spike_patience <= 0) return bg_error("--spike-patience must be positive, got %d", o->spike_patience);
    // A rewind goes back to a checkpoint: without periodic ones there is none to go to.
    if (o->spike_rewind > 0 && (!o->save_dir || o->save_every <= 0))
        return bg_error("--spike-rewind needs checkpoints to rewind to: give --save-dir and --save-every");
    return BG_OK;
}

int rewind_due(trainer *tr, double loss) {
    const train_options *o = &tr->opt;
    if (!(o->spike_rewind > 0) || !isfinite(loss)) return 0;
    return spike_observe(&tr->spike, loss, o->spike_window, o->spike_rewind, o->spike_patience);
}

// The newest step directory of a step before `before`.
static int find_target(const char *save_dir, long before, char *out, size_t n) {
    char **dirs;
    int count, found = 0;
    if (ckpt_list(save_dir, &dirs, &count) != BG_OK) return BG_ERR;
    for (int i = 0; i < count; i++) {
        if (!found && ckpt_dir_step(dirs[i]) < before) {
            snprintf(out, n, "%s", dirs[i]);
            found = 1;
        }
        free(dirs[i]);
    }
    free(dirs);
    if (!found)
        return bg_error("loss spike at step %ld: no checkpoint in %s before it to rewind to", before,
                        save_dir);
    return BG_OK;
}

int trainer_rewind(trainer *tr, ckpt_saver *saver, long *to_step, uint64_t *lo, uint64_t *hi) {
    if (ckpt_saver_poll(saver, 1) != BG_OK) return BG_ERR;  // the newest checkpoint on disk
    long first = tr->step - tr->spike.run + 1;  // the spike's first step
    char dir[CKPT_PATH_MAX];
    if (find_target(tr->opt.save_dir, first, dir, sizeof dir) != BG_OK) return BG_ERR;
    // The ranges skipped so far: the checkpoint records only those before it.
    skip_ranges skips = tr->skips;
    *hi = tr->samples;
    if (ckpt_load(tr, dir) != BG_OK) return BG_ERR;
    *lo = tr->samples;
    *to_step = tr->step;
    tr->skips = skips;
    if (skip_ranges_add(&tr->skips, *lo, *hi) != BG_OK) return BG_ERR;
    tr->skips_in_row = 0;
    tr->rewinds++;
    if (ckpt_saver_begin(saver) != BG_OK) return BG_ERR;
    return ckpt_saver_poll(saver, 1);
}
