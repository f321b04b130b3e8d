#include "train/checkpoint_inspect.h"
#include "core/error.h"
#include "io/file_hash.h"
#include "io/file_sync.h"
#include "model/model.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_index.h"
#include "train/checkpoint_meta.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void inspect_file(ckpt_file_report *r, const char *dir, const ckpt_index *x, int i, const param_table *t,
                         const param_table *st) {
    char path[CKPT_PATH_MAX];
    r->recorded = x->sums[i];
    r->tensors = -1;
    if (io_path_join(path, sizeof path, dir, x->files[i]) != BG_OK) {
        r->status = CKPT_FILE_INVALID;
        snprintf(r->message, sizeof r->message, "%s", bg_last_error());
        return;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        r->status = CKPT_FILE_MISSING;
        snprintf(r->message, sizeof r->message, "%.900s: missing (%s)", path, strerror(errno));
        return;
    }
    if (io_file_xxh64(path, &r->actual) != BG_OK) {
        r->status = CKPT_FILE_INVALID;
        snprintf(r->message, sizeof r->message, "%s", bg_last_error());
        return;
    }
    if (r->actual != r->recorded) {
        r->status = CKPT_FILE_MISMATCH;
        snprintf(r->message, sizeof r->message,
                 "%.900s: checksum mismatch (xxh64 %016" PRIx64 ", recorded %016" PRIx64 "): the file is corrupt",
                 path, r->actual, r->recorded);
        return;
    }
    st_file f;
    if (st_open(&f, path) != BG_OK || ckpt_index_check_file(x, i, &f, t, st) != BG_OK) {
        r->status = CKPT_FILE_INVALID;
        snprintf(r->message, sizeof r->message, "%s", bg_last_error());
    } else {
        r->status = CKPT_FILE_OK;
        r->tensors = f.count;
    }
    st_close(&f);
}

// trainer.json, the config and the indexes of dir.
static int open_meta(const char *dir, ckpt_meta *meta, model_config *cfg, ckpt_index *x, param_table *t,
                     param_table *st) {
    char path[CKPT_PATH_MAX];
    if (ckpt_dir_paths(dir, path) != BG_OK) return BG_ERR;
    if (ckpt_meta_read(meta, path) != BG_OK) return BG_ERR;
    char *text = cJSON_PrintUnformatted(meta->model_config);
    int rc = model_config_parse(cfg, text, path);
    free(text);
    if (rc != BG_OK) {
        ckpt_meta_free(meta);
        return BG_ERR;
    }
    param_table_build(t, cfg);
    model_router_state_table(st, cfg);
    if (ckpt_index_read(x, dir, meta, t, st) != BG_OK) {
        param_table_free(t), param_table_free(st);
        ckpt_meta_free(meta);
        return BG_ERR;
    }
    return BG_OK;
}

int ckpt_inspect(const char *dir, ckpt_report *r) {
    memset(r, 0, sizeof *r);
    ckpt_meta meta;
    ckpt_index x;
    param_table t, st;
    if (open_meta(dir, &meta, &r->cfg, &x, &t, &st) != BG_OK) return BG_ERR;
    r->step = meta.step;
    r->total_steps = meta.total_steps;
    r->samples = meta.samples;
    r->version = meta.version;
    r->optimizer_pieces = x.n_opt;
    r->n_files = x.n_files;
    r->files = bg_calloc((size_t)x.n_files + 1, sizeof *r->files);
    for (int i = 0; i < x.n_files; i++) {
        snprintf(r->files[i].name, sizeof r->files[i].name, "%s", x.files[i]);
        r->files[i].optimizer = strncmp(x.files[i], "optimizer", 9) == 0;
        inspect_file(&r->files[i], dir, &x, i, &t, &st);
    }
    ckpt_index_free(&x);
    param_table_free(&t), param_table_free(&st);
    ckpt_meta_free(&meta);
    return BG_OK;
}

void ckpt_report_free(ckpt_report *r) {
    free(r->files);
    r->files = NULL;
}

int ckpt_read_model(const char *dir, const model_config *cfg, const param_table *t, float *params,
                    const param_table *st, float *state) {
    ckpt_meta meta;
    ckpt_index x;
    model_config saved;
    param_table full, full_st;
    if (open_meta(dir, &meta, &saved, &x, &full, &full_st) != BG_OK) return BG_ERR;
    model_config reader = *cfg;  // num_key_value_heads 0 (built in code) is the heads
    reader.num_key_value_heads = model_kv_heads(cfg);
    int rc = memcmp(&saved, &reader, sizeof saved) == 0 ? BG_OK : bg_error("%s: config differs from the reader's", dir);
    ckpt_reader rd;
    ckpt_reader_init(&rd, &x, dir, 1);
    for (int i = 0; i < t->count && rc == BG_OK; i++)
        rc = ckpt_reader_tensor(&rd, &t->tensors[i], params + t->tensors[i].offset);
    for (int i = 0; st && i < st->count && rc == BG_OK; i++)
        rc = ckpt_reader_tensor(&rd, &st->tensors[i], state + st->tensors[i].offset);
    ckpt_reader_close(&rd);
    ckpt_index_free(&x);
    param_table_free(&full), param_table_free(&full_st);
    ckpt_meta_free(&meta);
    return rc;
}
