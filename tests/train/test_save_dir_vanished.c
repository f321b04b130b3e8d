// A save directory that vanishes during a run is never recreated: a checkpoint saver
// whose directory is gone fails (naming the cause, "vanished") in both its synchronous
// and asynchronous modes, and leaves no directory behind. The trainer also checks the
// directory before each save, but that check alone leaves a window in which the
// directory can go (a run stopped there and continued, test_checkpoint_disk.sh's CI
// failure of 2026-12-05): the saver itself must not create it.
// The one-off ckpt_save, by contrast, creates a missing directory (import and the tests
// save into fresh ones), and its checkpoint is complete.
// Why it can fail: a mkdir of the save directory inside the saver (an empty series of
// checkpoints starts where the old one was, perhaps on another disk).
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "train/checkpoint.h"
#include "train_fixture.h"

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int main(void) {
    train_fixture f;
    fixture_make(&f, 8);
    train_options o;
    fixture_options(&o, &f);
    o.steps = 2;
    o.threads = 1;
    trainer tr;
    BG_ASSERT(trainer_init(&tr, &o) == BG_OK);
    fixture_step(&tr);

    char gone[400];
    snprintf(gone, sizeof gone, "%s/gone", f.dir);
    for (int async = 0; async <= 1; async++) {
        BG_ASSERT(mkdir(gone, 0755) == 0);
        ckpt_saver *s = ckpt_saver_new(&tr, gone, 0, async);
        BG_ASSERT(rmdir(gone) == 0);  // vanishes after the run set it up
        int rc = ckpt_saver_begin(s);
        TU_CHECK(rc != BG_OK, "async=%d: a save into a vanished directory succeeded", async);
        TU_CHECK(rc == BG_OK || strstr(bg_last_error(), "vanished"), "async=%d: error names no cause: %s",
                 async, bg_last_error());
        TU_CHECK(!exists(gone), "async=%d: the vanished save directory was recreated", async);
        ckpt_saver_free(s);
        if (exists(gone)) {
            char cmd[500];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", gone);
            BG_ASSERT(system(cmd) == 0);
        }
    }

    char fresh[400], step[440];
    snprintf(fresh, sizeof fresh, "%s/fresh", f.dir);
    snprintf(step, sizeof step, "%s/step_%08ld", fresh, tr.step);
    TU_CHECK(ckpt_save(&tr, fresh) == BG_OK, "ckpt_save into a new directory: %s", bg_last_error());
    TU_CHECK(exists(step), "ckpt_save wrote no %s", step);
    trainer_free(&tr);

    char cmd[500];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fresh);
    BG_ASSERT(system(cmd) == 0);
    fixture_remove(&f);
    return tu_finish("save_dir_vanished");
}
