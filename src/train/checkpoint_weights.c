// Loading a checkpoint's weights for inference (see checkpoint_weights.h). The checks
// are ckpt_inspect's, so a checkpoint that `bagualu inspect` calls good loads here,
// and the optimizer files are not needed (their status is ignored).
#include "train/checkpoint_weights.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_inspect.h"

static int is_file(const char *dir, const char *name) {
    char path[4096 + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// The step directory a path means: a save directory's `latest`, or the path itself.
static int resolve_dir(const char *path, char *dir, size_t n) {
    struct stat st;
    if (stat(path, &st) != 0) return bg_error("%s: cannot open checkpoint (%s)", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return bg_error("%s: not a checkpoint directory", path);
    if (is_file(path, "latest")) {
        int found = 0;
        if (ckpt_latest(path, dir, n, &found) != BG_OK) return BG_ERR;
        if (found) return BG_OK;
    }
    if (!is_file(path, "trainer.json"))
        return bg_error("%s: not a checkpoint: holds neither trainer.json (a step directory) nor "
                        "latest (a save directory)",
                        path);
    if (strlen(path) >= n) return bg_error("%s: path too long", path);
    snprintf(dir, n, "%s", path);
    return BG_OK;
}

// The training run's batch shape, a convenience for defaults: ckpt_inspect has
// verified trainer.json already, and a missing or odd value just leaves 0.
static void read_training_shape(ckpt_weights_info *info) {
    char path[sizeof info->dir + 32];
    snprintf(path, sizeof path, "%s/trainer.json", info->dir);
    FILE *f = fopen(path, "rb");
    if (!f) return;
    const size_t cap = 1 << 20;  // trainer.json is a few kB
    char *text = bg_malloc(cap);
    size_t n = fread(text, 1, cap, f);
    fclose(f);
    cJSON *root = cJSON_ParseWithLength(text, n);
    free(text);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "training");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(t, "batch_size");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(t, "seq_len");
    if (cJSON_IsNumber(b) && b->valuedouble >= 1 && b->valuedouble < 1e9) info->batch_size = (int)b->valuedouble;
    if (cJSON_IsNumber(s) && s->valuedouble >= 1 && s->valuedouble < 1e9) info->seq_len = (int)s->valuedouble;
    cJSON_Delete(root);
}

int ckpt_load_weights(model *m, const char *path, ckpt_weights_info *info) {
    ckpt_weights_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    if (resolve_dir(path, info->dir, sizeof info->dir) != BG_OK) return BG_ERR;
    ckpt_report r;
    if (ckpt_inspect(info->dir, &r) != BG_OK) return BG_ERR;
    // The optimizer files are not needed for inference: their status is ignored.
    for (int i = 0; i < r.n_files; i++)
        if (!r.files[i].optimizer && r.files[i].status != CKPT_FILE_OK) {
            bg_error("%s", r.files[i].message);
            ckpt_report_free(&r);
            return BG_ERR;
        }
    ckpt_report_free(&r);
    info->step = r.step;
    read_training_shape(info);

    model tmp;
    model_init(&tmp, &r.cfg, 0);
    // The gates' state routes tokens at inference too (the bias gate's bias). Files are
    // read again, checksums verified on the mapping actually read: they may have
    // changed since ckpt_inspect hashed them.
    param_table st;
    model_router_state_table(&st, &r.cfg);
    int rc = ckpt_read_model(info->dir, &r.cfg, &tmp.table, tmp.params, &st, (float *)tmp.router_state);
    param_table_free(&st);
    if (rc != BG_OK) {
        model_free(&tmp);
        return BG_ERR;
    }
    // The views point into tmp's blocks, which move with the struct unchanged.
    *m = tmp;
    return BG_OK;
}
