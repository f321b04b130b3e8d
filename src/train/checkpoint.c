// Checkpoint policy: when and how a step directory is written, replaced, pruned and
// loaded (layout and atomicity in checkpoint.h). The files' contents are
// checkpoint_meta (trainer.json) and checkpoint_tensors (the safetensors files).
#include "train/checkpoint.h"
#include "core/error.h"
#include "comm/dist.h"
#include "io/file_sync.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_gather.h"
#include "train/checkpoint_meta.h"
#include "train/checkpoint_tensors.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ---- save --------------------------------------------------------------------------

// The state to write: the one-process table and blocks (on one process the trainer's
// own; in a parallel run the experts gathered to rank 0, checkpoint_gather.h).
typedef struct {
    const param_table *t;
    const float *params, *m, *v;
    const param_table *st;  // the gates' state (replicated: every rank's copy is the same)
    const float *state;
} save_source;

static int save_files(const trainer *tr, const save_source *src, const char *tmp) {
    char path[CKPT_PATH_MAX];
    uint64_t model_sum = 0, opt_sum = 0;
    if (ckpt_tensors_write(tmp, src->t, src->params, src->m, src->v, tr->adam.step, src->st,
                           (const float *)src->state, &model_sum, &opt_sum) != BG_OK)
        return BG_ERR;
    if (io_path_join(path, sizeof path, tmp, "trainer.json") != BG_OK) return BG_ERR;
    char *json = ckpt_meta_json(tr, model_sum, opt_sum);
    int rc = io_write_file_synced(path, json, strlen(json));
    free(json);
    return rc;
}

// Leftovers of saves, replacements and prunes that a crash cut short: .tmp-* directories
// and latest.tmp. None of them is ever read.
static void remove_stale_tmp(const char *save_dir) {
    DIR *d = opendir(save_dir);
    if (!d) return;
    struct dirent *e;
    char path[CKPT_PATH_MAX];
    while ((e = readdir(d))) {
        int dir = strncmp(e->d_name, ".tmp-", 5) == 0;
        if (!dir && strcmp(e->d_name, "latest.tmp") != 0) continue;
        if (io_path_join(path, sizeof path, save_dir, e->d_name) != BG_OK) continue;
        if (dir) io_remove_flat_dir(path);
        else unlink(path);
    }
    closedir(d);
}

// Puts tmp under its final name; a step saved again (a run resumed from an older
// checkpoint) swaps the two (io_replace_dir), so no final-named directory is ever partial.
static int move_into_place(const char *save_dir, const char *name, const char *tmp, const char *final) {
    char old[CKPT_PATH_MAX], oldname[80];
    snprintf(oldname, sizeof oldname, ".tmp-old-%s", name);
    if (io_path_join(old, sizeof old, save_dir, oldname) != BG_OK) return BG_ERR;
    return io_replace_dir(tmp, final, old);
}

static int save_step(const trainer *tr, const save_source *src, const char *save_dir,
                     const char *name) {
    char tmpname[80], tmp[CKPT_PATH_MAX], final[CKPT_PATH_MAX], latest[CKPT_PATH_MAX],
        latest_tmp[CKPT_PATH_MAX], text[80];
    snprintf(tmpname, sizeof tmpname, ".tmp-%s", name);
    if (io_path_join(tmp, sizeof tmp, save_dir, tmpname) != BG_OK ||
        io_path_join(final, sizeof final, save_dir, name) != BG_OK ||
        io_path_join(latest, sizeof latest, save_dir, "latest") != BG_OK ||
        io_path_join(latest_tmp, sizeof latest_tmp, save_dir, "latest.tmp") != BG_OK)
        return BG_ERR;
    if (mkdir(tmp, 0755) != 0)
        return bg_error("%s: cannot create checkpoint directory (%s)", tmp, strerror(errno));
    if (save_files(tr, src, tmp) != BG_OK || io_fsync_path(tmp) != BG_OK ||
        move_into_place(save_dir, name, tmp, final) != BG_OK) {
        io_remove_flat_dir(tmp);
        return BG_ERR;
    }
    // The directory entry must be durable before `latest` may name it.
    if (io_fsync_path(save_dir) != BG_OK) return BG_ERR;
    snprintf(text, sizeof text, "%s\n", name);
    if (io_write_file_synced(latest_tmp, text, strlen(text)) != BG_OK) return BG_ERR;
    if (rename(latest_tmp, latest) != 0) {
        int err = errno;
        unlink(latest_tmp);
        return bg_error("%s: cannot update (%s)", latest, strerror(err));
    }
    return io_fsync_path(save_dir);
}

static int save_on_this_rank(const trainer *tr, const save_source *src, const char *save_dir) {
    if (mkdir(save_dir, 0755) != 0 && errno != EEXIST)
        return bg_error("%s: cannot create save directory (%s)", save_dir, strerror(errno));
    remove_stale_tmp(save_dir);
    char name[64];
    snprintf(name, sizeof name, "step_%08ld", tr->step);
    if (save_step(tr, src, save_dir, name) == BG_OK) return BG_OK;
    // One line that says what was lost and what was not, then the cause.
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", bg_last_error());
    return bg_error("checkpoint %s/%s not saved (%s/latest is unchanged): %s", save_dir, name,
                    save_dir, cause);
}

int ckpt_save(const trainer *tr, const char *save_dir) {
    param_table st;
    model_router_state_table(&st, &tr->m.cfg);
    const float *state = (const float *)tr->m.router_state;
    if (!tr->m.par) {
        save_source src = {&tr->m.table, tr->m.params, tr->adam.m, tr->adam.v, &st, state};
        int rc = save_on_this_rank(tr, &src, save_dir);
        param_table_free(&st);
        return rc;
    }
    // Parallel: rank 0 writes the whole model after gathering the experts; every rank
    // learns the outcome, so all of them go on, or all stop.
    const dist_layout *L = tr->m.par->layout;
    ckpt_full_state full;
    ckpt_gather_full(&full, tr);
    int32_t ok = 1;
    char message[1024] = "";
    if (L->world_rank == 0) {
        save_source src = {&full.table, full.params, full.m, full.v, &st, state};
        if (save_on_this_rank(tr, &src, save_dir) != BG_OK) {
            ok = 0;
            snprintf(message, sizeof message, "%s", bg_last_error());
        }
    }
    ckpt_full_free(&full);
    param_table_free(&st);
    dist_bcast(L->world, &ok, sizeof ok, 0);
    dist_bcast(L->world, message, sizeof message, 0);
    return ok ? BG_OK : bg_error("%s", message);
}

int ckpt_init_dir(const char *save_dir) {
    if (mkdir(save_dir, 0755) != 0 && errno != EEXIST)
        return bg_error("%s: cannot create save directory (%s)", save_dir, strerror(errno));
    struct stat st;
    if (stat(save_dir, &st) != 0)
        return bg_error("%s: cannot use as save directory (%s)", save_dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return bg_error("%s: save directory is not a directory", save_dir);
    if (access(save_dir, W_OK | X_OK) != 0)
        return bg_error("%s: save directory is not writable (%s)", save_dir, strerror(errno));
    // Temporaries of a save or prune that a crash interrupted: nothing of this run is
    // in flight yet, so they can only be leftovers.
    remove_stale_tmp(save_dir);
    return BG_OK;
}

// ---- prune -------------------------------------------------------------------------

// A pruned directory is first renamed to .tmp-del-*, then emptied: a crash while deleting
// leaves a .tmp-* leftover (swept by the next save), never a half-deleted step directory
// under its final name. The directory `latest` names is never pruned, even if newer ones
// exist (left by a run that was later resumed from an older checkpoint).
int ckpt_prune(const char *save_dir, int keep_last) {
    if (keep_last <= 0) return BG_OK;
    char **dirs, latest[CKPT_PATH_MAX], doomed[CKPT_PATH_MAX], tmpname[80];
    int n, found = 0;
    if (ckpt_latest(save_dir, latest, sizeof latest, &found) != BG_OK) found = 0;
    if (ckpt_list(save_dir, &dirs, &n) != BG_OK) return BG_ERR;
    for (int i = 0; i < n; i++) {
        const char *base = strrchr(dirs[i], '/') + 1;
        if (i >= keep_last && !(found && strcmp(dirs[i], latest) == 0)) {
            snprintf(tmpname, sizeof tmpname, ".tmp-del-%.60s", base);
            if (io_path_join(doomed, sizeof doomed, save_dir, tmpname) == BG_OK &&
                rename(dirs[i], doomed) == 0)
                io_remove_flat_dir(doomed);
        }
        free(dirs[i]);
    }
    free(dirs);
    return BG_OK;
}

// ---- load --------------------------------------------------------------------------

// Everything is checked before anything is copied, so a failed load leaves the trainer
// as it was.
int ckpt_load(trainer *tr, const char *dir) {
    char path[CKPT_PATH_MAX], mpath[CKPT_PATH_MAX], opath[CKPT_PATH_MAX];
    if (ckpt_dir_paths(dir, path, mpath, opath) != BG_OK) return BG_ERR;
    ckpt_meta meta;
    if (ckpt_meta_read(&meta, path) != BG_OK) return BG_ERR;
    int rc = BG_ERR;
    st_file mf, of;
    memset(&mf, 0, sizeof mf), memset(&of, 0, sizeof of);
    // Files hold the one-process model; this rank reads its tensors by name (its
    // share of the experts in a parallel run), after checking the whole file.
    const param_table *t = &tr->m.table;
    param_table full, st;
    param_table_build(&full, &tr->cfg);
    model_router_state_table(&st, &tr->cfg);
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, tr->opt.seed);
    if (strcmp(meta.seed, seed) != 0) {
        bg_error("%s: the checkpoint's data seed %s differs from --seed %s", path, meta.seed, seed);
        goto done;
    }
    if (ckpt_meta_check_config(meta.model_config, &tr->cfg, path) != BG_OK) goto done;
    ckpt_meta_note_bf16_path(&meta, tr, path);
    if (ckpt_tensors_open(&mf, mpath, meta.model_sum, &full, &st, 0) != BG_OK) goto done;
    if (ckpt_tensors_open(&of, opath, meta.opt_sum, &full, NULL, 1) != BG_OK) goto done;
    int64_t step;
    // The gates' state is replicated: every rank reads all of it.
    if (ckpt_tensors_read(&mf, &of, t, tr->m.params, tr->adam.m, tr->adam.v, &st,
                          (float *)tr->m.router_state,
                          &step) != BG_OK)
        goto done;
    tr->adam.step = (long)step;
    tr->step = meta.step;
    tr->samples = meta.samples;
    // A run that switches to fp16 starts from its own initial scale; one that stays
    // in fp16 continues with the saved scale.
    if (tr->opt.dtype == BG_FP16 && meta.loss_scale >= LOSS_SCALE_MIN) {
        tr->loss_scale = (float)meta.loss_scale;
        tr->good_steps = meta.good_steps;
    }
    rc = BG_OK;
done:
    param_table_free(&full);
    param_table_free(&st);
    st_close(&mf);
    st_close(&of);
    ckpt_meta_free(&meta);
    return rc;
}
