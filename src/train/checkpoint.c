#include "train/checkpoint.h"
#include "core/error.h"
#include "model/config.h"
#include "train/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_MAX_LEN 4096

// ---- small file-system helpers ---------------------------------------------------

// dir/name into out; a path too long for the buffer is an error, never truncated.
static int path_join(char *out, size_t n, const char *dir, const char *name) {
    int len = snprintf(out, n, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= n) return bg_error("%s: path too long", dir);
    return BG_OK;
}

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return bg_error("%s: cannot open for fsync (%s)", path, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0) return bg_error("%s: fsync failed (%s)", path, strerror(err));
    return BG_OK;
}

static int write_file_synced(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return bg_error("%s: cannot create (%s)", path, strerror(errno));
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = errno;
            close(fd);
            unlink(path);
            return bg_error("%s: write failed (%s)", path, strerror(err ? err : EIO));
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int err = errno;
        unlink(path);
        return bg_error("%s: fsync/close failed (%s)", path, strerror(err));
    }
    return BG_OK;
}

static char *read_text_file(const char *path, size_t max) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        bg_error("%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    char *buf = bg_malloc(max + 1);
    size_t n = fread(buf, 1, max + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err || n > max) {
        free(buf);
        bg_error("%s: %s", path, err ? "read error" : "file too large");
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[PATH_MAX_LEN];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static int is_step_dir_name(const char *name, long *step) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return 0;
    char *end;
    long s = strtol(name + 5, &end, 10);
    if (*end || s < 0) return 0;
    *step = s;
    return 1;
}

// ---- trainer.json ------------------------------------------------------------------

static void hex64(char *out, uint64_t v) { snprintf(out, 17, "%016" PRIx64, v); }

static char *trainer_json(const trainer *tr, uint64_t model_sum, uint64_t opt_sum) {
    const train_options *o = &tr->opt;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "format_version", CKPT_FORMAT_VERSION);
    cJSON_AddNumberToObject(root, "step", (double)tr->step);
    cJSON *data = cJSON_AddObjectToObject(root, "data");
    cJSON_AddNumberToObject(data, "samples_consumed", (double)tr->samples);
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, o->seed);
    cJSON_AddStringToObject(data, "seed", seed);  // a string: JSON numbers lose 64-bit seeds
    cJSON_AddNumberToObject(data, "seq_len", o->seq_len);
    cJSON *lr = cJSON_AddObjectToObject(root, "lr_schedule");
    cJSON_AddNumberToObject(lr, "step", (double)tr->step);
    cJSON_AddNumberToObject(lr, "total_steps", (double)o->steps);
    cJSON_AddNumberToObject(lr, "warmup", (double)o->warmup);
    cJSON_AddNumberToObject(lr, "max_lr", o->lr);
    cJSON_AddNumberToObject(lr, "min_lr", tr->min_lr);
    cJSON_AddNumberToObject(root, "loss_scale", 1.0);
    char *cfg_text = model_config_to_json(&tr->cfg);
    cJSON_AddItemToObject(root, "model_config", cJSON_Parse(cfg_text));
    free(cfg_text);
    cJSON *t = cJSON_AddObjectToObject(root, "training");
    cJSON_AddNumberToObject(t, "batch_size", o->batch_size);
    cJSON_AddNumberToObject(t, "seq_len", o->seq_len);
    cJSON_AddNumberToObject(t, "steps", (double)o->steps);
    cJSON_AddNumberToObject(t, "lr", o->lr);
    cJSON_AddNumberToObject(t, "warmup", (double)o->warmup);
    cJSON_AddNumberToObject(t, "weight_decay", o->weight_decay);
    cJSON_AddNumberToObject(t, "beta1", o->beta1);
    cJSON_AddNumberToObject(t, "beta2", o->beta2);
    cJSON_AddNumberToObject(t, "eps", o->eps);
    cJSON_AddNumberToObject(t, "clip", o->clip);
    cJSON_AddStringToObject(t, "data", o->data_path ? o->data_path : "");
    cJSON *sums = cJSON_AddObjectToObject(root, "checksums_xxh64");
    char hex[17];
    hex64(hex, model_sum);
    cJSON_AddStringToObject(sums, "model.safetensors", hex);
    hex64(hex, opt_sum);
    cJSON_AddStringToObject(sums, "optimizer.safetensors", hex);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    size_t n = strlen(text);
    text = realloc(text, n + 2);
    BG_ASSERT(text);
    text[n] = '\n', text[n + 1] = '\0';
    return text;
}

// ---- save --------------------------------------------------------------------------

static void fill_tensor(st_tensor_in *in, const char *name, const param_tensor *p, const float *data) {
    memset(in, 0, sizeof *in);
    in->name = name;
    in->dtype = ST_F32;
    in->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) in->shape[d] = p->shape[d];
    in->data = data;
}

static int save_files(const trainer *tr, const char *tmp) {
    const param_table *t = &tr->m.table;
    char path[PATH_MAX_LEN];
    st_tensor_in *ins = bg_calloc((size_t)t->count * 2 + 1, sizeof *ins);
    char (*names)[PARAM_NAME_MAX + 16] = bg_calloc((size_t)t->count * 2, sizeof *names);
    st_meta meta[] = {{"format", "pt"}, {"producer", "bagualu"}};
    uint64_t model_sum = 0, opt_sum = 0;
    int rc;

    for (int i = 0; i < t->count; i++) fill_tensor(&ins[i], t->tensors[i].name, &t->tensors[i],
                                                   tr->m.params + t->tensors[i].offset);
    rc = path_join(path, sizeof path, tmp, "model.safetensors");
    if (rc == BG_OK) rc = st_write_file(path, ins, t->count, meta, 2, &model_sum);

    if (rc == BG_OK) {
        int n = 0;
        for (int i = 0; i < t->count; i++) {
            snprintf(names[n], sizeof names[n], "%s.exp_avg", t->tensors[i].name);
            fill_tensor(&ins[n], names[n], &t->tensors[i], tr->adam.m + t->tensors[i].offset);
            n++;
            snprintf(names[n], sizeof names[n], "%s.exp_avg_sq", t->tensors[i].name);
            fill_tensor(&ins[n], names[n], &t->tensors[i], tr->adam.v + t->tensors[i].offset);
            n++;
        }
        int64_t step = tr->adam.step;
        memset(&ins[n], 0, sizeof ins[n]);
        ins[n].name = "step";
        ins[n].dtype = ST_I64;
        ins[n].ndim = 0;
        ins[n].data = &step;
        n++;
        rc = path_join(path, sizeof path, tmp, "optimizer.safetensors");
        if (rc == BG_OK) rc = st_write_file(path, ins, n, meta, 2, &opt_sum);
    }
    free(ins);
    free(names);
    if (rc != BG_OK) return rc;

    if (path_join(path, sizeof path, tmp, "trainer.json") != BG_OK) return BG_ERR;
    char *json = trainer_json(tr, model_sum, opt_sum);
    rc = write_file_synced(path, json);
    free(json);
    return rc;
}

static void remove_stale_tmp(const char *save_dir) {
    DIR *d = opendir(save_dir);
    if (!d) return;
    struct dirent *e;
    char path[PATH_MAX_LEN];
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".tmp-", 5) != 0) continue;
        snprintf(path, sizeof path, "%s/%s", save_dir, e->d_name);
        remove_tree(path);
    }
    closedir(d);
}

int ckpt_save(const trainer *tr, const char *save_dir) {
    if (mkdir(save_dir, 0755) != 0 && errno != EEXIST)
        return bg_error("%s: cannot create save directory (%s)", save_dir, strerror(errno));
    remove_stale_tmp(save_dir);
    char name[64], tmpname[80], tmp[PATH_MAX_LEN], final[PATH_MAX_LEN], path[PATH_MAX_LEN];
    snprintf(name, sizeof name, "step_%08ld", tr->step);
    snprintf(tmpname, sizeof tmpname, ".tmp-%s", name);
    if (path_join(tmp, sizeof tmp, save_dir, tmpname) != BG_OK ||
        path_join(final, sizeof final, save_dir, name) != BG_OK ||
        path_join(path, sizeof path, save_dir, "latest") != BG_OK)
        return BG_ERR;
    if (mkdir(tmp, 0755) != 0)
        return bg_error("%s: cannot create checkpoint directory (%s)", tmp, strerror(errno));
    if (save_files(tr, tmp) != BG_OK || fsync_path(tmp) != BG_OK) {
        remove_tree(tmp);
        return BG_ERR;
    }
    // A checkpoint of this step may exist (a resumed run saving the same step again):
    // it is replaced only after the new one is complete.
    struct stat st;
    if (stat(final, &st) == 0) {
        char old[PATH_MAX_LEN], oldname[80];
        snprintf(oldname, sizeof oldname, ".tmp-old-%s", name);
        if (path_join(old, sizeof old, save_dir, oldname) != BG_OK) return BG_ERR;
        if (rename(final, old) != 0) {
            remove_tree(tmp);
            return bg_error("%s: cannot replace (%s)", final, strerror(errno));
        }
        remove_tree(old);
    }
    if (rename(tmp, final) != 0) {
        int err = errno;
        remove_tree(tmp);
        return bg_error("%s: cannot rename into place (%s)", final, strerror(err));
    }
    if (fsync_path(save_dir) != BG_OK) return BG_ERR;
    char latest_tmp[PATH_MAX_LEN], text[80];
    if (path_join(latest_tmp, sizeof latest_tmp, save_dir, "latest.tmp") != BG_OK) return BG_ERR;
    snprintf(text, sizeof text, "%s\n", name);
    if (write_file_synced(latest_tmp, text) != BG_OK) return BG_ERR;
    if (rename(latest_tmp, path) != 0) {
        int err = errno;
        unlink(latest_tmp);
        return bg_error("%s: cannot update (%s)", path, strerror(err));
    }
    return fsync_path(save_dir);
}

// ---- listing -----------------------------------------------------------------------

typedef struct {
    long step;
    char *name;
} step_dir;

static int cmp_step_desc(const void *a, const void *b) {
    long x = ((const step_dir *)a)->step, y = ((const step_dir *)b)->step;
    return (x < y) - (x > y);
}

int ckpt_list(const char *save_dir, char ***dirs, int *count) {
    *dirs = NULL;
    *count = 0;
    DIR *d = opendir(save_dir);
    if (!d) {
        if (errno == ENOENT) return BG_OK;
        return bg_error("%s: cannot list (%s)", save_dir, strerror(errno));
    }
    step_dir *list = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long step;
        if (!is_step_dir_name(e->d_name, &step)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            list = realloc(list, sizeof *list * cap);
            BG_ASSERT(list);
        }
        list[n].step = step;
        list[n].name = bg_malloc(strlen(save_dir) + strlen(e->d_name) + 2);
        sprintf(list[n].name, "%s/%s", save_dir, e->d_name);
        n++;
    }
    closedir(d);
    qsort(list, n, sizeof *list, cmp_step_desc);
    *dirs = bg_calloc(n ? n : 1, sizeof(char *));
    for (int i = 0; i < n; i++) (*dirs)[i] = list[i].name;
    *count = n;
    free(list);
    return BG_OK;
}

int ckpt_prune(const char *save_dir, int keep_last) {
    if (keep_last <= 0) return BG_OK;
    char **dirs;
    int n;
    if (ckpt_list(save_dir, &dirs, &n) != BG_OK) return BG_ERR;
    for (int i = 0; i < n; i++) {
        if (i >= keep_last) remove_tree(dirs[i]);
        free(dirs[i]);
    }
    free(dirs);
    return BG_OK;
}

int ckpt_latest(const char *save_dir, char *out, size_t n, int *found) {
    *found = 0;
    char path[PATH_MAX_LEN];
    if (path_join(path, sizeof path, save_dir, "latest") != BG_OK) return BG_ERR;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return BG_OK;
        return bg_error("%s: cannot read (%s)", path, strerror(errno));
    }
    char *text = read_text_file(path, 256);
    if (!text) return BG_ERR;
    size_t len = strcspn(text, "\n");
    text[len] = '\0';
    long step;
    if (!is_step_dir_name(text, &step)) {
        free(text);
        return bg_error("%s: does not name a checkpoint directory", path);
    }
    int rc = path_join(out, n, save_dir, text);
    free(text);
    if (rc != BG_OK) return rc;
    *found = 1;
    return BG_OK;
}

// ---- load --------------------------------------------------------------------------

static int json_get_number(const cJSON *obj, const char *key, double *out, const char *file) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v)) return bg_error("%s: missing or non-numeric \"%s\"", file, key);
    *out = v->valuedouble;
    return BG_OK;
}

static int parse_hex64(const cJSON *sums, const char *key, uint64_t *out, const char *file) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sums, key);
    char *end;
    if (!cJSON_IsString(v) || strlen(v->valuestring) != 16)
        return bg_error("%s: missing checksum for %s", file, key);
    errno = 0;
    *out = strtoull(v->valuestring, &end, 16);
    if (*end || errno) return bg_error("%s: bad checksum for %s", file, key);
    return BG_OK;
}

// The config the run asks for must be the one the checkpoint holds: a mismatch
// names the first differing key.
static int check_config(const cJSON *saved, const model_config *cfg, const char *file) {
    if (!cJSON_IsObject(saved)) return bg_error("%s: missing model_config", file);
    char *text = cJSON_PrintUnformatted(saved);
    model_config ck;
    int rc = model_config_parse(&ck, text, file);
    free(text);
    if (rc != BG_OK) return BG_ERR;
    if (memcmp(&ck, cfg, sizeof ck) == 0) return BG_OK;
    char *want = model_config_to_json(cfg);
    cJSON *w = cJSON_Parse(want);
    free(want);
    for (const cJSON *k = w->child; k; k = k->next) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(saved, k->string);
        if (!s || !cJSON_Compare(s, k, 1)) {
            char *a = s ? cJSON_PrintUnformatted(s) : strdup("(missing)");
            char *b = cJSON_PrintUnformatted(k);
            rc = bg_error("%s: config mismatch: the checkpoint has %s = %s, the run's config %s", file,
                          k->string, a, b);
            free(a), free(b);
            cJSON_Delete(w);
            return rc;
        }
    }
    cJSON_Delete(w);
    return bg_error("%s: config mismatch", file);
}

static int load_tensors(trainer *tr, const st_file *mf, const st_file *of) {
    const param_table *t = &tr->m.table;
    char name[PARAM_NAME_MAX + 16];
    int expected_opt = 2 * t->count + 1;
    if (mf->count != t->count)
        return bg_error("%s: holds %d tensors, the model has %d", mf->path, mf->count, t->count);
    if (of->count != expected_opt)
        return bg_error("%s: holds %d tensors, expected %d", of->path, of->count, expected_opt);
    for (int i = 0; i < t->count; i++) {
        const param_tensor *p = &t->tensors[i];
        const st_tensor *s = st_find(mf, p->name);
        if (s && s->dtype != ST_F32)
            return bg_error("%s: tensor %s has dtype %s, expected F32", mf->path, p->name,
                            st_dtype_name(s->dtype));
        if (st_read_f32(mf, p->name, tr->m.params + p->offset, p->ndim, p->shape) != BG_OK) return BG_ERR;
        snprintf(name, sizeof name, "%s.exp_avg", p->name);
        if (st_read_f32(of, name, tr->adam.m + p->offset, p->ndim, p->shape) != BG_OK) return BG_ERR;
        snprintf(name, sizeof name, "%s.exp_avg_sq", p->name);
        if (st_read_f32(of, name, tr->adam.v + p->offset, p->ndim, p->shape) != BG_OK) return BG_ERR;
    }
    int64_t step;
    if (st_read_raw(of, "step", ST_I64, &step, 0, NULL) != BG_OK) return BG_ERR;
    if (step < 0) return bg_error("%s: negative optimizer step", of->path);
    tr->adam.step = (long)step;
    return BG_OK;
}

int ckpt_load(trainer *tr, const char *dir) {
    char path[PATH_MAX_LEN], mpath[PATH_MAX_LEN], opath[PATH_MAX_LEN];
    if (path_join(path, sizeof path, dir, "trainer.json") != BG_OK ||
        path_join(mpath, sizeof mpath, dir, "model.safetensors") != BG_OK ||
        path_join(opath, sizeof opath, dir, "optimizer.safetensors") != BG_OK)
        return BG_ERR;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return bg_error("%s: not a checkpoint directory", dir);
    char *text = read_text_file(path, 16 << 20);
    if (!text) return BG_ERR;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return bg_error("%s: not valid JSON", path);
    }
    int rc = BG_ERR;
    double version = 0, step = 0, samples = 0;
    uint64_t msum, osum;
    st_file mf, of;
    memset(&mf, 0, sizeof mf), memset(&of, 0, sizeof of);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON *sums = cJSON_GetObjectItemCaseSensitive(root, "checksums_xxh64");
    const cJSON *seed = data ? cJSON_GetObjectItemCaseSensitive(data, "seed") : NULL;
    if (json_get_number(root, "format_version", &version, path) != BG_OK) goto done;
    if (version != CKPT_FORMAT_VERSION) {
        bg_error("%s: unsupported checkpoint format_version %g (this build reads %d)", path, version,
                 CKPT_FORMAT_VERSION);
        goto done;
    }
    if (json_get_number(root, "step", &step, path) != BG_OK) goto done;
    if (!cJSON_IsObject(data) || json_get_number(data, "samples_consumed", &samples, path) != BG_OK) {
        bg_error("%s: missing data position", path);
        goto done;
    }
    if (step < 0 || samples < 0 || step != (double)(long)step) {
        bg_error("%s: bad step or data position", path);
        goto done;
    }
    if (!cJSON_IsString(seed) || strtoull(seed->valuestring, NULL, 10) != tr->opt.seed) {
        bg_error("%s: the checkpoint's data seed %s differs from --seed %" PRIu64, path,
                 cJSON_IsString(seed) ? seed->valuestring : "(missing)", tr->opt.seed);
        goto done;
    }
    if (check_config(cJSON_GetObjectItemCaseSensitive(root, "model_config"), &tr->cfg, path) != BG_OK)
        goto done;
    if (parse_hex64(sums, "model.safetensors", &msum, path) != BG_OK ||
        parse_hex64(sums, "optimizer.safetensors", &osum, path) != BG_OK)
        goto done;
    if (st_open(&mf, mpath) != BG_OK || st_verify_checksum(&mf, msum) != BG_OK) goto done;
    if (st_open(&of, opath) != BG_OK || st_verify_checksum(&of, osum) != BG_OK) goto done;
    if (load_tensors(tr, &mf, &of) != BG_OK) goto done;
    tr->step = (long)step;
    tr->samples = (uint64_t)samples;
    rc = BG_OK;
done:
    st_close(&mf);
    st_close(&of);
    cJSON_Delete(root);
    return rc;
}
