// Checkpoint policy: when and how a step directory is written, replaced, pruned and
// loaded (layout and atomicity in checkpoint.h). The files' contents are
// checkpoint_meta (trainer.json), checkpoint_index (the indexes, format 1 read as one),
// checkpoint_plan (who writes what) and checkpoint_shard (a rank's files, the writer).
#include "train/checkpoint.h"
#include "core/error.h"
#include "core/timer.h"
#include "comm/dist.h"
#include "io/file_sync.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_index.h"
#include "train/checkpoint_meta.h"
#include "train/checkpoint_shard.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// ---- save --------------------------------------------------------------------------

struct ckpt_saver {
    const trainer *tr;
    char save_dir[CKPT_PATH_MAX];
    int keep_last, async, pending;
    dist_comm *world;          // NULL on one process
    ckpt_shard shard;          // this rank's part (and the async snapshot)
    ckpt_progress progress;    // of the pending save
    ckpt_save_cost cost;       // of the last save committed
    char name[64], tmp[CKPT_PATH_MAX];
};

// Every rank learns whether any failed, and the first failing rank's message, so all
// go on or all stop with the same line.
static int agree_msg(dist_comm *w, int rc) {
    if (!w) return rc;
    int P = dist_size(w), r = dist_rank(w);
    double first = rc != BG_OK ? (double)(P - r) : 0;
    dist_allreduce_max_f64(w, &first, 1);
    if (first == 0) return BG_OK;
    char message[1024];
    snprintf(message, sizeof message, "%s", rc != BG_OK ? bg_last_error() : "");
    dist_bcast(w, message, sizeof message, P - (int)first);
    return bg_error("%s", message);
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

// Rank 0, once every shard is on disk: the indexes, trainer.json with the XXH64 of
// every file, then the directory under its final name and `latest` naming it.
static int finish_step(ckpt_saver *s, const uint64_t *shard_sums) {
    const trainer *tr = s->tr;
    int P = s->shard.plan.world, n = 2 * P + 2;
    char final[CKPT_PATH_MAX], latest[CKPT_PATH_MAX], latest_tmp[CKPT_PATH_MAX], path[CKPT_PATH_MAX], text[80];
    char (*names)[64] = bg_calloc((size_t)n, sizeof *names);
    const char **list = bg_calloc((size_t)n, sizeof *list);
    uint64_t *sums = bg_calloc((size_t)n, sizeof *sums);
    for (int r = 0; r < P; r++) {
        ckpt_plan_model_file(names[2 * r], 64, r, P);
        ckpt_plan_optimizer_file(names[2 * r + 1], 64, r, P);
        sums[2 * r] = shard_sums[2 * r], sums[2 * r + 1] = shard_sums[2 * r + 1];
    }
    snprintf(names[2 * P], 64, "%s", CKPT_MODEL_INDEX);
    snprintf(names[2 * P + 1], 64, "%s", CKPT_OPT_INDEX);
    for (int i = 0; i < n; i++) list[i] = names[i];
    int ep = P > 1 ? tr->layout.ep : 1;
    int rc = ckpt_index_write(s->tmp, &tr->cfg, P, ep, tr->zero.on, s->progress.adam_step, sums + 2 * P);
    if (rc == BG_OK) rc = io_path_join(path, sizeof path, s->tmp, "trainer.json");
    if (rc == BG_OK) {
        char *json = ckpt_meta_json(tr, &s->progress, list, sums, n);
        rc = io_write_file_synced(path, json, strlen(json));
        free(json);
    }
    free(names), free(list), free(sums);
    if (rc == BG_OK &&
        (io_path_join(final, sizeof final, s->save_dir, s->name) != BG_OK ||
         io_path_join(latest, sizeof latest, s->save_dir, "latest") != BG_OK ||
         io_path_join(latest_tmp, sizeof latest_tmp, s->save_dir, "latest.tmp") != BG_OK))
        rc = BG_ERR;
    if (rc == BG_OK) rc = io_fsync_path(s->tmp);
    if (rc == BG_OK) rc = move_into_place(s->save_dir, s->name, s->tmp, final);
    if (rc != BG_OK) return BG_ERR;
    // The directory entry must be durable before `latest` may name it.
    if (io_fsync_path(s->save_dir) != BG_OK) return BG_ERR;
    snprintf(text, sizeof text, "%s\n", s->name);
    if (io_write_file_synced(latest_tmp, text, strlen(text)) != BG_OK) return BG_ERR;
    if (rename(latest_tmp, latest) != 0) {
        int err = errno;
        unlink(latest_tmp);
        return bg_error("%s: cannot update (%s)", latest, strerror(err));
    }
    return io_fsync_path(s->save_dir);
}

// One line that says what was lost and what was not, then the cause.
static int not_saved(const ckpt_saver *s) {
    char cause[1024];
    snprintf(cause, sizeof cause, "%s", bg_last_error());
    return bg_error("checkpoint %s/%s not saved (%s/latest is unchanged): %s", s->save_dir, s->name, s->save_dir,
                    cause);
}

// Collective: every rank's writer has finished. Agrees on their outcome, gathers the
// checksums, and rank 0 commits (and prunes).
static int commit(ckpt_saver *s) {
    s->pending = 0;
    int P = s->shard.plan.world, r = s->shard.plan.rank;
    int rc = agree_msg(s->world, ckpt_shard_join(&s->shard));
    s->cost = (ckpt_save_cost){s->async, s->shard.block_s, s->shard.writer_s, s->shard.writer_cpu_s,
                               ckpt_shard_bytes(&s->shard)};
    if (rc != BG_OK) {
        if (r == 0) io_remove_flat_dir(s->tmp);
        return not_saved(s);
    }
    int64_t *sums = bg_calloc((size_t)2 * P, sizeof *sums);
    sums[2 * r] = (int64_t)s->shard.sums[0];
    sums[2 * r + 1] = (int64_t)s->shard.sums[1];
    if (s->world) dist_allreduce_sum_i64(s->world, sums, (size_t)2 * P);  // one nonzero each
    if (r == 0) {
        rc = finish_step(s, (const uint64_t *)sums);
        if (rc != BG_OK) {
            io_remove_flat_dir(s->tmp);
            not_saved(s);
        } else {
            rc = ckpt_prune(s->save_dir, s->keep_last);
        }
    }
    free(sums);
    return agree_msg(s->world, rc);
}

ckpt_saver *ckpt_saver_new(const trainer *tr, const char *save_dir, int keep_last, int async) {
    ckpt_saver *s = bg_calloc(1, sizeof *s);
    s->tr = tr;
    snprintf(s->save_dir, sizeof s->save_dir, "%s", save_dir);
    s->keep_last = keep_last;
    s->async = async;
    s->world = tr->world > 1 ? tr->layout.world : NULL;
    ckpt_shard_init(&s->shard, tr, async);
    return s;
}

void ckpt_saver_free(ckpt_saver *s) {
    if (!s) return;
    ckpt_shard_free(&s->shard);
    free(s);
}

int ckpt_saver_pending(const ckpt_saver *s) { return s->pending; }
long ckpt_saver_step(const ckpt_saver *s) { return s->progress.step; }

ckpt_save_cost ckpt_saver_cost(const ckpt_saver *s) { return s->cost; }

int ckpt_saver_poll(ckpt_saver *s, int wait) {
    if (!s->pending) return BG_OK;
    if (!wait) {
        double busy = !ckpt_shard_finished(&s->shard);
        if (s->world) dist_allreduce_max_f64(s->world, &busy, 1);
        if (busy) return BG_OK;
    }
    return commit(s);
}

int ckpt_saver_begin(ckpt_saver *s) {
    const trainer *tr = s->tr;
    if (s->pending && ckpt_saver_poll(s, 1) != BG_OK) return BG_ERR;
    s->progress = ckpt_progress_of(tr);
    snprintf(s->name, sizeof s->name, "step_%08ld", tr->step);
    char tmpname[80];
    snprintf(tmpname, sizeof tmpname, ".tmp-%s", s->name);
    int rc = io_path_join(s->tmp, sizeof s->tmp, s->save_dir, tmpname);
    // Rank 0 prepares the directory every rank writes into. The save directory itself
    // is never created here: one that vanished mid-run must stop the run, not come back
    // empty (a check before this call alone leaves a window for the directory to go).
    if (rc == BG_OK && s->shard.plan.rank == 0) {
        remove_stale_tmp(s->save_dir);
        if (mkdir(s->tmp, 0755) != 0)
            rc = errno == ENOENT ? bg_error("the save directory has vanished (%s)", strerror(errno))
                                 : bg_error("%s: cannot create checkpoint directory (%s)", s->tmp, strerror(errno));
    }
    if (agree_msg(s->world, rc) != BG_OK) return not_saved(s);
    s->pending = 1;
    if (!s->async) {
        const double t0 = bg_now();
        ckpt_shard_write_now(&s->shard, tr, s->tmp);
        s->shard.block_s = bg_now() - t0;
        s->shard.writer_s = s->shard.writer_cpu_s = 0;
        return commit(s);
    }
    ckpt_shard_start(&s->shard, tr, s->tmp);
    return BG_OK;
}

int ckpt_save(const trainer *tr, const char *save_dir) {
    ckpt_saver *s = ckpt_saver_new(tr, save_dir, 0, 0);
    int rc = BG_OK;
    if (tr->rank == 0 && mkdir(save_dir, 0755) != 0 && errno != EEXIST)
        rc = bg_error("%s: cannot create save directory (%s)", save_dir, strerror(errno));
    rc = agree_msg(s->world, rc);
    if (rc == BG_OK) rc = ckpt_saver_begin(s);
    ckpt_saver_free(s);
    return rc;
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

// This rank's owned elements of m and v (zero_shard) from the pieces that overlap them.
static int read_optimizer(ckpt_reader *rd, trainer *tr) {
    const param_table *t = &tr->m.table;
    const zero_shard *z = &tr->zero;
    const size_t lo[2] = {z->dense_lo, z->expert_lo}, hi[2] = {z->dense_hi, z->expert_hi};
    for (int i = 0; i < t->count; i++) {
        const param_tensor *p = &t->tensors[i];
        int first, n = ckpt_index_pieces(rd->x, p->name, &first);
        for (int s = 0; s < 2; s++) {
            size_t a = p->offset > lo[s] ? p->offset : lo[s], b = p->offset + p->numel < hi[s] ? p->offset + p->numel : hi[s];
            for (int k = 0; k < n && a < b; k++) {
                const ckpt_index_piece *c = &rd->x->opt[first + k];
                size_t x = p->offset + c->offset, y = x + c->count;
                if (x < a) x = a;
                if (y > b) y = b;
                if (x >= y) continue;
                const st_file *f = ckpt_reader_file(rd, c->file);
                if (!f) return BG_ERR;
                float *dst[2] = {tr->adam.m, tr->adam.v};
                for (int kind = 0; kind < 2; kind++) {
                    const st_tensor *st = st_find(f, c->key[kind]);
                    if (!st || st->dtype != ST_F32 || st->numel != c->count)
                        return bg_error("%s: tensor '%s' is missing or malformed", f->path, c->key[kind]);
                    const unsigned char *src = st_tensor_data(f, st);
                    memcpy(dst[kind] + zero_shard_index(z, x), src + (x - p->offset - c->offset) * sizeof(float),
                           (y - x) * sizeof(float));
                }
            }
        }
    }
    return BG_OK;
}

// Stage 1, on every rank: trainer.json and the indexes, checked against the run.
static int load_meta(trainer *tr, const char *dir, ckpt_meta *meta, ckpt_index *x, const param_table *full,
                     const param_table *st) {
    char path[CKPT_PATH_MAX];
    if (ckpt_dir_paths(dir, path) != BG_OK) return BG_ERR;
    if (ckpt_meta_read(meta, path) != BG_OK) return BG_ERR;
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, tr->opt.seed);
    int rc = BG_OK;
    if (strcmp(meta->seed, seed) != 0)
        rc = bg_error("%s: the checkpoint's data seed %s differs from --seed %s", path, meta->seed, seed);
    if (rc == BG_OK) rc = ckpt_meta_check_config(meta->model_config, &tr->cfg, path);
    if (rc == BG_OK && tr->rank == 0) ckpt_meta_note_bf16_path(meta, tr, path);
    if (rc == BG_OK) rc = ckpt_meta_check_data(meta, tr, path);
    if (rc == BG_OK) rc = ckpt_index_read(x, dir, meta, full, st);
    if (rc != BG_OK) ckpt_meta_free(meta);
    return rc;
}

// Stage 2: file i is verified (checksum, then every tensor against the index) by rank
// i mod P, so no rank hashes more than its share.
static int verify_files(const ckpt_index *x, const char *dir, int rank, int P, const param_table *full,
                        const param_table *st) {
    ckpt_reader rd;
    ckpt_reader_init(&rd, x, dir, 1);
    int rc = BG_OK;
    for (int i = rank; i < x->n_files && rc == BG_OK; i += P) {
        const st_file *f = ckpt_reader_file(&rd, i);
        rc = f ? ckpt_index_check_file(x, i, f, full, st) : BG_ERR;
    }
    ckpt_reader_close(&rd);
    return rc;
}

// Stage 3: this rank's tensors, its owned optimizer elements, the gates' state; only
// the byte ranges it needs are read from the mapped files.
static int read_state(trainer *tr, ckpt_reader *rd, const param_table *st, int64_t *adam_step) {
    const ckpt_index *x = rd->x;
    *adam_step = x->adam_step;
    if (x->version == 1) {  // format 1 keeps the step in the optimizer file
        const st_file *f = ckpt_reader_file(rd, 1);
        if (!f || st_read_raw(f, "step", ST_I64, adam_step, 0, NULL) != BG_OK) return BG_ERR;
    }
    if (*adam_step < 0) return bg_error("%s: negative optimizer step", rd->dir);
    const param_table *t = &tr->m.table;
    for (int i = 0; i < t->count; i++)
        if (ckpt_reader_tensor(rd, &t->tensors[i], tr->m.params + t->tensors[i].offset) != BG_OK) return BG_ERR;
    for (int i = 0; i < st->count; i++)
        if (ckpt_reader_tensor(rd, &st->tensors[i], (float *)tr->m.router_state + st->tensors[i].offset) != BG_OK)
            return BG_ERR;
    return read_optimizer(rd, tr);
}

// Collective in a parallel run (all ranks load the same directory). Everything is checked
// before anything is copied, so a failed load leaves the trainer as it was (short of a
// file changed under a running load).
int ckpt_load(trainer *tr, const char *dir) {
    dist_comm *w = tr->world > 1 ? tr->layout.world : NULL;
    int P = w ? tr->world : 1, rank = w ? tr->rank : 0;
    param_table full, st;
    param_table_build(&full, &tr->cfg);
    model_router_state_table(&st, &tr->cfg);
    ckpt_meta meta;
    ckpt_index x;
    int rc = agree_msg(w, load_meta(tr, dir, &meta, &x, &full, &st));
    if (rc == BG_OK) {
        rc = agree_msg(w, verify_files(&x, dir, rank, P, &full, &st));
        int64_t adam_step = 0;
        if (rc == BG_OK) {
            ckpt_reader rd;
            ckpt_reader_init(&rd, &x, dir, 0);
            rc = agree_msg(w, read_state(tr, &rd, &st, &adam_step));
            ckpt_reader_close(&rd);
        }
        if (rc == BG_OK) {
            tr->adam.step = (long)adam_step;
            tr->step = meta.step;
            tr->samples = meta.samples;
            // A run that switches to fp16 starts from its own initial scale; one that
            // stays in fp16 continues with the saved scale.
            if (tr->opt.dtype == BG_FP16 && meta.loss_scale >= LOSS_SCALE_MIN) {
                tr->loss_scale = (float)meta.loss_scale;
                tr->good_steps = meta.good_steps;
            }
            // Loss-spike rewinds: the data they skipped stays skipped; the detector
            // resumes its window (a run without --spike-rewind keeps none).
            tr->skips = meta.skips;
            memset(&tr->spike, 0, sizeof tr->spike);
            if (tr->opt.spike_rewind > 0) {
                tr->spike = meta.spike;
                spike_trim(&tr->spike, tr->opt.spike_window);
            }
        }
        ckpt_index_free(&x);
        ckpt_meta_free(&meta);
    }
    param_table_free(&full);
    param_table_free(&st);
    return rc;
}
