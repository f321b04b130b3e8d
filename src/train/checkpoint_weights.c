// Loading a checkpoint's weights for inference (see checkpoint_weights.h). The checks
// are ckpt_inspect's, so a checkpoint that `bagualu inspect` calls good loads here,
// and the optimizer file is not needed (its status is ignored).
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
#include "io/safetensors.h"

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
    if (r.model.status != CKPT_FILE_OK) return bg_error("%s", r.model.message);
    info->step = r.step;
    read_training_shape(info);

    char mpath[sizeof info->dir + 32];
    snprintf(mpath, sizeof mpath, "%s/model.safetensors", info->dir);
    st_file f;
    if (st_open(&f, mpath) != BG_OK) return BG_ERR;
    // Checked again on the mapping actually read: the file may have changed since
    // ckpt_inspect hashed it (XXH64 runs at memory speed, so this costs little).
    if (st_verify_checksum(&f, r.model.recorded) != BG_OK) {
        st_close(&f);
        return BG_ERR;
    }
    model tmp;
    model_init(&tmp, &r.cfg, 0);
    int rc = BG_OK;
    for (int i = 0; i < tmp.table.count && rc == BG_OK; i++) {
        const param_tensor *p = &tmp.table.tensors[i];
        rc = st_read_f32(&f, p->name, tmp.params + p->offset, p->ndim, p->shape);
    }
    // The gates' state routes tokens at inference too (the bias gate's bias).
    param_table st;
    model_router_state_table(&st, &r.cfg);
    for (int i = 0; i < st.count && rc == BG_OK; i++) {
        const param_tensor *p = &st.tensors[i];
        rc = st_read_f32(&f, p->name, (float *)tmp.router_state + p->offset, p->ndim, p->shape);
    }
    param_table_free(&st);
    st_close(&f);
    if (rc != BG_OK) {
        model_free(&tmp);
        return BG_ERR;
    }
    // The views point into tmp's blocks, which move with the struct unchanged.
    *m = tmp;
    return BG_OK;
}
