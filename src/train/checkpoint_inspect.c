#include "train/checkpoint_inspect.h"
#include "core/error.h"
#include "io/file_hash.h"
#include "model/model.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_meta.h"
#include "train/checkpoint_tensors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void inspect_file(ckpt_file_report *r, const char *path, uint64_t recorded, const param_table *t,
                         const param_table *state_t, int optimizer) {
    memset(r, 0, sizeof *r);
    r->recorded = recorded;
    r->tensors = -1;
    struct stat st;
    if (stat(path, &st) != 0) {
        r->status = CKPT_FILE_MISSING;
        snprintf(r->message, sizeof r->message, "%s: missing (%s)", path, strerror(errno));
        return;
    }
    if (io_file_xxh64(path, &r->actual) != BG_OK) {
        r->status = CKPT_FILE_INVALID;
        snprintf(r->message, sizeof r->message, "%s", bg_last_error());
        return;
    }
    if (r->actual != recorded) {
        r->status = CKPT_FILE_MISMATCH;
        snprintf(r->message, sizeof r->message,
                 "%s: checksum mismatch (xxh64 %016" PRIx64 ", recorded %016" PRIx64 "): the file is corrupt",
                 path, r->actual, recorded);
        return;
    }
    st_file f;
    if (ckpt_tensors_open(&f, path, recorded, t, state_t, optimizer) != BG_OK) {
        r->status = CKPT_FILE_INVALID;
        snprintf(r->message, sizeof r->message, "%s", bg_last_error());
    } else {
        r->status = CKPT_FILE_OK;
        r->tensors = f.count;
    }
    st_close(&f);
}

int ckpt_inspect(const char *dir, ckpt_report *r) {
    memset(r, 0, sizeof *r);
    char path[CKPT_PATH_MAX], mpath[CKPT_PATH_MAX], opath[CKPT_PATH_MAX];
    if (ckpt_dir_paths(dir, path, mpath, opath) != BG_OK) return BG_ERR;
    ckpt_meta meta;
    if (ckpt_meta_read(&meta, path) != BG_OK) return BG_ERR;
    char *text = cJSON_PrintUnformatted(meta.model_config);
    int rc = model_config_parse(&r->cfg, text, path);
    free(text);
    if (rc == BG_OK) {
        r->step = meta.step;
        r->total_steps = meta.total_steps;
        r->samples = meta.samples;
        param_table t, st;
        param_table_build(&t, &r->cfg);
        model_router_state_table(&st, &r->cfg);
        inspect_file(&r->model, mpath, meta.model_sum, &t, &st, 0);
        inspect_file(&r->optimizer, opath, meta.opt_sum, &t, NULL, 1);
        param_table_free(&t);
        param_table_free(&st);
    }
    ckpt_meta_free(&meta);
    return rc;
}
