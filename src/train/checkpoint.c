#include "train/checkpoint.h"
#include "core/error.h"
#include "core/text_file.h"
#include "model/config.h"
#include "comm/dist.h"
#include "train/checkpoint_gather.h"
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define PATH_MAX_LEN 4096
// trainer.json's own checksum: the last key of the object. It is computed over the file
// with the value's 16 hex digits set to '0', so a flipped bit anywhere in trainer.json
// (a step count, the data position) is caught like one in the tensor files.
#define SELF_SUM_KEY "trainer_json_xxh64"

// ---- small file-system helpers ---------------------------------------------------

// dir/name into out; a path too long for the buffer is an error, never truncated.
static int path_join(char *out, size_t n, const char *dir, const char *name) {
    int len = snprintf(out, n, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= n) return bg_error("%s: path too long", dir);
    return BG_OK;
}

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bg_error("%s: cannot open for fsync (%s)", path, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0) return bg_error("%s: fsync failed (%s)", path, strerror(err));
    return BG_OK;
}

static int write_file_synced(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return bg_error("%s: cannot create (%s)", path, strerror(errno));
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = w < 0 ? errno : EIO;
            close(fd);
            unlink(path);
            return bg_error("%s: write failed (%s)", path, strerror(err));
        }
        off += (size_t)w;
    }
    // close even when fsync fails (no descriptor leak); either failing fails the write.
    int rc = fsync(fd), err = errno;
    if (close(fd) != 0 && rc == 0) rc = -1, err = errno;
    if (rc != 0) {
        unlink(path);
        return bg_error("%s: fsync/close failed (%s)", path, strerror(err));
    }
    return BG_OK;
}

// XXH64 (seed 0) of a whole file read in chunks: for files that do not even parse.
static int file_xxh64(const char *path, uint64_t *sum) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bg_error("%s: cannot open (%s)", path, strerror(errno));
    XXH64_state_t *s = XXH64_createState();
    BG_ASSERT(s);
    XXH64_reset(s, 0);
    enum { CHUNK = 1 << 20 };
    char *buf = bg_malloc(CHUNK);
    int rc = BG_OK;
    for (;;) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = bg_error("%s: read error (%s)", path, strerror(errno));
            break;
        }
        if (n == 0) break;
        XXH64_update(s, buf, (size_t)n);
    }
    *sum = XXH64_digest(s);
    XXH64_freeState(s);
    free(buf);
    close(fd);
    return rc;
}

// Checkpoint directories hold plain files only.
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[PATH_MAX_LEN];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (path_join(path, sizeof path, dir, e->d_name) == BG_OK) unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

// "step_" and decimal digits only: the names this code writes (zero-padded), nothing a
// stray file or a hand-made "step_-1" / "step_ 5" could sneak past strtol with.
static int is_step_dir_name(const char *name, long *step) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return 0;
    for (const char *p = name + 5; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    errno = 0;
    long s = strtol(name + 5, NULL, 10);
    if (errno) return 0;
    *step = s;
    return 1;
}

// ---- trainer.json ------------------------------------------------------------------

static void hex64(char *out, uint64_t v) { snprintf(out, 17, "%016" PRIx64, v); }

// Where the 16 hex digits of SELF_SUM_KEY's value start in text, or NULL. The key is the
// last one the writer prints; a data path containing the key's text is escaped by the
// JSON writer ("\"...\""), so the last exact occurrence is the real one.
static char *self_sum_digits(char *text) {
    const char *key = "\"" SELF_SUM_KEY "\"";
    char *p = NULL;
    for (char *q = text; (q = strstr(q, key)); q++) p = q;
    if (!p) return NULL;
    p += strlen(key);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p++ != ':') return NULL;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p++ != '"') return NULL;
    for (int i = 0; i < 16; i++)
        if (!isxdigit((unsigned char)p[i])) return NULL;
    return p[16] == '"' ? p : NULL;
}

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
    // fp16's dynamic loss scale and its run of good steps: exact resume needs both.
    cJSON_AddNumberToObject(root, "loss_scale", tr->loss_scale);
    cJSON_AddNumberToObject(root, "loss_scale_good_steps", (double)tr->good_steps);
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
    cJSON_AddStringToObject(t, "dtype", bg_dtype_name(o->dtype));
    cJSON_AddStringToObject(t, "data", o->data_path ? o->data_path : "");
    cJSON *sums = cJSON_AddObjectToObject(root, "checksums_xxh64");
    char hex[17];
    hex64(hex, model_sum);
    cJSON_AddStringToObject(sums, "model.safetensors", hex);
    hex64(hex, opt_sum);
    cJSON_AddStringToObject(sums, "optimizer.safetensors", hex);
    cJSON_AddStringToObject(root, SELF_SUM_KEY, "0000000000000000");
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    size_t n = strlen(text);
    text = realloc(text, n + 2);
    BG_ASSERT(text);
    text[n] = '\n', text[n + 1] = '\0';
    char *digits = self_sum_digits(text);
    BG_ASSERT(digits);
    hex64(hex, XXH64(text, n + 1, 0));
    memcpy(digits, hex, 16);
    return text;
}

// What trainer.json says, checked for completeness and its own checksum.
typedef struct {
    cJSON *root;
    long step, total_steps;
    uint64_t samples;
    const char *seed;             // decimal, inside root
    const cJSON *model_config;    // inside root
    uint64_t model_sum, opt_sum;
    double loss_scale;            // 0: not recorded
    long good_steps;
} ckpt_meta;

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

// A non-negative integer below 2^53 (exact in a double).
static int whole(double x) { return x >= 0 && x < 9007199254740992.0 && x == (double)(int64_t)x; }

static void meta_free(ckpt_meta *m) {
    cJSON_Delete(m->root);
    memset(m, 0, sizeof *m);
}

static int meta_read(ckpt_meta *m, const char *path) {
    memset(m, 0, sizeof *m);
    size_t len;
    char *text = bg_read_text_file(path, 16 << 20, &len);
    if (!text) return BG_ERR;
    // The checksum first: a flipped bit may also break the JSON, and "corrupt" is the
    // better diagnosis than "not valid JSON".
    char *digits = self_sum_digits(text);
    if (digits) {
        char recorded[17];
        memcpy(recorded, digits, 16);
        recorded[16] = '\0';
        memset(digits, '0', 16);
        uint64_t want = strtoull(recorded, NULL, 16), got = XXH64(text, len, 0);
        memcpy(digits, recorded, 16);
        if (got != want) {
            free(text);
            return bg_error("%s: checksum mismatch (xxh64 %016" PRIx64 ", recorded %016" PRIx64
                            "): the file is corrupt",
                            path, got, want);
        }
    }
    m->root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(m->root)) {
        meta_free(m);
        return bg_error("%s: not valid JSON", path);
    }
    if (!digits) {
        meta_free(m);
        return bg_error("%s: missing or malformed \"" SELF_SUM_KEY "\" (the file's checksum)", path);
    }
    double version = 0, step = 0, samples = 0, total = 0;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(m->root, "data");
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(m->root, "lr_schedule");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(data, "seed");
    const cJSON *sums = cJSON_GetObjectItemCaseSensitive(m->root, "checksums_xxh64");
    int rc = json_get_number(m->root, "format_version", &version, path);
    if (rc == BG_OK && version != CKPT_FORMAT_VERSION)
        rc = bg_error("%s: unsupported checkpoint format_version %g (this build reads %d)", path,
                      version, CKPT_FORMAT_VERSION);
    if (rc == BG_OK) rc = json_get_number(m->root, "step", &step, path);
    if (rc == BG_OK && !cJSON_IsObject(data)) rc = bg_error("%s: missing data position", path);
    if (rc == BG_OK) rc = json_get_number(data, "samples_consumed", &samples, path);
    if (rc == BG_OK && cJSON_IsObject(lr)) rc = json_get_number(lr, "total_steps", &total, path);
    if (rc == BG_OK && (!whole(step) || !whole(samples) || !whole(total)))
        rc = bg_error("%s: bad step or data position", path);
    if (rc == BG_OK && !cJSON_IsString(seed)) rc = bg_error("%s: missing data seed", path);
    if (rc == BG_OK) rc = parse_hex64(sums, "model.safetensors", &m->model_sum, path);
    if (rc == BG_OK) rc = parse_hex64(sums, "optimizer.safetensors", &m->opt_sum, path);
    // The loss scale: optional (1 when absent), positive and finite when present.
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(m->root, "loss_scale");
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(m->root, "loss_scale_good_steps");
    if (rc == BG_OK && ls && !(cJSON_IsNumber(ls) && isfinite(ls->valuedouble) && ls->valuedouble > 0))
        rc = bg_error("%s: bad \"loss_scale\"", path);
    if (rc == BG_OK && gs && !(cJSON_IsNumber(gs) && whole(gs->valuedouble)))
        rc = bg_error("%s: bad \"loss_scale_good_steps\"", path);
    m->loss_scale = ls ? ls->valuedouble : 0;
    m->good_steps = gs ? (long)gs->valuedouble : 0;
    m->model_config = cJSON_GetObjectItemCaseSensitive(m->root, "model_config");
    if (rc == BG_OK && !cJSON_IsObject(m->model_config)) rc = bg_error("%s: missing model_config", path);
    if (rc != BG_OK) {
        meta_free(m);
        return BG_ERR;
    }
    m->step = (long)step;
    m->total_steps = (long)total;
    m->samples = (uint64_t)samples;
    m->seed = seed->valuestring;
    return BG_OK;
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

// The state to write: the one-process table and blocks (on one process the trainer's
// own; in a parallel run the experts gathered to rank 0, checkpoint_gather.h).
typedef struct {
    const param_table *t;
    const float *params, *m, *v;
} save_source;

static int save_files(const trainer *tr, const save_source *src, const char *tmp) {
    const param_table *t = src->t;
    char path[PATH_MAX_LEN];
    st_tensor_in *ins = bg_calloc((size_t)t->count * 2 + 1, sizeof *ins);
    char (*names)[PARAM_NAME_MAX + 16] = bg_calloc((size_t)t->count * 2, sizeof *names);
    st_meta meta[] = {{"format", "pt"}, {"producer", "bagualu"}};
    uint64_t model_sum = 0, opt_sum = 0;
    int rc;

    for (int i = 0; i < t->count; i++) fill_tensor(&ins[i], t->tensors[i].name, &t->tensors[i],
                                                   src->params + t->tensors[i].offset);
    rc = path_join(path, sizeof path, tmp, "model.safetensors");
    if (rc == BG_OK) rc = st_write_file(path, ins, t->count, meta, 2, &model_sum);

    if (rc == BG_OK) {
        int n = 0;
        for (int i = 0; i < t->count; i++) {
            snprintf(names[n], sizeof names[n], "%s.exp_avg", t->tensors[i].name);
            fill_tensor(&ins[n], names[n], &t->tensors[i], src->m + t->tensors[i].offset);
            n++;
            snprintf(names[n], sizeof names[n], "%s.exp_avg_sq", t->tensors[i].name);
            fill_tensor(&ins[n], names[n], &t->tensors[i], src->v + t->tensors[i].offset);
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

// Leftovers of saves, replacements and prunes that a crash cut short: .tmp-* directories
// and latest.tmp. None of them is ever read.
static void remove_stale_tmp(const char *save_dir) {
    DIR *d = opendir(save_dir);
    if (!d) return;
    struct dirent *e;
    char path[PATH_MAX_LEN];
    while ((e = readdir(d))) {
        int dir = strncmp(e->d_name, ".tmp-", 5) == 0;
        if (!dir && strcmp(e->d_name, "latest.tmp") != 0) continue;
        if (path_join(path, sizeof path, save_dir, e->d_name) != BG_OK) continue;
        if (dir) remove_tree(path);
        else unlink(path);
    }
    closedir(d);
}

// Puts the complete directory tmp under the name final. When final exists (a run resumed
// from an older checkpoint saves this step again) the two are swapped in one atomic
// rename (RENAME_EXCHANGE), so at no instant is there no checkpoint of this step, and
// the old one (now under tmp's name) is deleted. Where exchange is unsupported the old
// one is renamed away first: a crash in between leaves this step absent, never partial.
static int move_into_place(const char *save_dir, const char *name, const char *tmp, const char *final) {
    struct stat st;
    if (stat(final, &st) == 0) {
#ifdef RENAME_EXCHANGE
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            remove_tree(tmp);
            return BG_OK;
        }
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
            return bg_error("%s: cannot replace (%s)", final, strerror(errno));
#endif
        char old[PATH_MAX_LEN], oldname[80];
        snprintf(oldname, sizeof oldname, ".tmp-old-%s", name);
        if (path_join(old, sizeof old, save_dir, oldname) != BG_OK) return BG_ERR;
        if (rename(final, old) != 0) return bg_error("%s: cannot replace (%s)", final, strerror(errno));
        remove_tree(old);
    }
    if (rename(tmp, final) != 0) return bg_error("%s: cannot rename into place (%s)", final, strerror(errno));
    return BG_OK;
}

static int save_step(const trainer *tr, const save_source *src, const char *save_dir,
                     const char *name) {
    char tmpname[80], tmp[PATH_MAX_LEN], final[PATH_MAX_LEN], latest[PATH_MAX_LEN],
        latest_tmp[PATH_MAX_LEN], text[80];
    snprintf(tmpname, sizeof tmpname, ".tmp-%s", name);
    if (path_join(tmp, sizeof tmp, save_dir, tmpname) != BG_OK ||
        path_join(final, sizeof final, save_dir, name) != BG_OK ||
        path_join(latest, sizeof latest, save_dir, "latest") != BG_OK ||
        path_join(latest_tmp, sizeof latest_tmp, save_dir, "latest.tmp") != BG_OK)
        return BG_ERR;
    if (mkdir(tmp, 0755) != 0)
        return bg_error("%s: cannot create checkpoint directory (%s)", tmp, strerror(errno));
    if (save_files(tr, src, tmp) != BG_OK || fsync_path(tmp) != BG_OK ||
        move_into_place(save_dir, name, tmp, final) != BG_OK) {
        remove_tree(tmp);
        return BG_ERR;
    }
    // The directory entry must be durable before `latest` may name it.
    if (fsync_path(save_dir) != BG_OK) return BG_ERR;
    snprintf(text, sizeof text, "%s\n", name);
    if (write_file_synced(latest_tmp, text) != BG_OK) return BG_ERR;
    if (rename(latest_tmp, latest) != 0) {
        int err = errno;
        unlink(latest_tmp);
        return bg_error("%s: cannot update (%s)", latest, strerror(err));
    }
    return fsync_path(save_dir);
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
    if (!tr->m.par) {
        save_source src = {&tr->m.table, tr->m.params, tr->adam.m, tr->adam.v};
        return save_on_this_rank(tr, &src, save_dir);
    }
    // Parallel: rank 0 writes the whole model after gathering the experts; every rank
    // learns the outcome, so all of them go on, or all stop.
    const dist_layout *L = tr->m.par->layout;
    ckpt_full_state full;
    ckpt_gather_full(&full, tr);
    int32_t ok = 1;
    char message[1024] = "";
    if (L->world_rank == 0) {
        save_source src = {&full.table, full.params, full.m, full.v};
        if (save_on_this_rank(tr, &src, save_dir) != BG_OK) {
            ok = 0;
            snprintf(message, sizeof message, "%s", bg_last_error());
        }
    }
    ckpt_full_free(&full);
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
    if (n) qsort(list, n, sizeof *list, cmp_step_desc);
    *dirs = bg_calloc(n ? n : 1, sizeof(char *));
    for (int i = 0; i < n; i++) (*dirs)[i] = list[i].name;
    *count = n;
    free(list);
    return BG_OK;
}

long ckpt_dir_step(const char *dir) {
    const char *slash = strrchr(dir, '/');
    long step;
    return is_step_dir_name(slash ? slash + 1 : dir, &step) ? step : -1;
}

// A pruned directory is first renamed to .tmp-del-*, then emptied: a crash while deleting
// leaves a .tmp-* leftover (swept by the next save), never a half-deleted step directory
// under its final name. The directory `latest` names is never pruned, even if newer ones
// exist (left by a run that was later resumed from an older checkpoint).
int ckpt_prune(const char *save_dir, int keep_last) {
    if (keep_last <= 0) return BG_OK;
    char **dirs, latest[PATH_MAX_LEN], doomed[PATH_MAX_LEN], tmpname[80];
    int n, found = 0;
    if (ckpt_latest(save_dir, latest, sizeof latest, &found) != BG_OK) found = 0;
    if (ckpt_list(save_dir, &dirs, &n) != BG_OK) return BG_ERR;
    for (int i = 0; i < n; i++) {
        const char *base = strrchr(dirs[i], '/') + 1;
        if (i >= keep_last && !(found && strcmp(dirs[i], latest) == 0)) {
            snprintf(tmpname, sizeof tmpname, ".tmp-del-%.60s", base);
            if (path_join(doomed, sizeof doomed, save_dir, tmpname) == BG_OK &&
                rename(dirs[i], doomed) == 0)
                remove_tree(doomed);
        }
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
    char *text = bg_read_text_file(path, 256, NULL);
    if (!text) return BG_ERR;
    size_t len = strcspn(text, "\n");
    int junk = text[len] == '\n' && text[len + 1] != '\0';
    text[len] = '\0';
    long step;
    if (junk || !is_step_dir_name(text, &step)) {
        free(text);
        return bg_error("%s: does not name a checkpoint directory (expected one line \"step_NNNNNNNN\")",
                        path);
    }
    int rc = path_join(out, n, save_dir, text);
    if (rc == BG_OK && (stat(out, &st) != 0 || !S_ISDIR(st.st_mode)))
        rc = bg_error("%s: names %s, which does not exist", path, text);
    free(text);
    if (rc != BG_OK) return rc;
    *found = 1;
    return BG_OK;
}

// ---- load --------------------------------------------------------------------------

// The config the run asks for must be the one the checkpoint holds: a mismatch
// names the first differing key.
static int check_config(const cJSON *saved, const model_config *cfg, const char *file) {
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

// Present, stored exactly as `dtype` (a checkpoint is never converted: exact resume needs
// the bits), with the shape the config gives.
static int check_tensor(const st_file *f, const char *name, st_dtype dtype, int ndim, const int64_t *shape) {
    const st_tensor *s = st_find(f, name);
    if (!s) return bg_error("%s: tensor '%s' is missing", f->path, name);
    if (s->dtype != dtype)
        return bg_error("%s: tensor '%s' has dtype %s, expected %s", f->path, name, st_dtype_name(s->dtype),
                        st_dtype_name(dtype));
    int same = s->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = s->shape[d] == shape[d];
    if (!same) {
        char want[96] = "", got[96] = "";
        for (int d = 0; d < ndim; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)shape[d]);
        for (int d = 0; d < s->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)s->shape[d]);
        return bg_error("%s: tensor '%s' has shape [%s], the config gives [%s]", f->path, name, got, want);
    }
    return BG_OK;
}

// Every expected tensor first (a missing one is named), then the count (an extra one is
// named: a checkpoint of another model must not load by accident).
static int check_model_file(const param_table *t, const st_file *f) {
    for (int i = 0; i < t->count; i++)
        if (check_tensor(f, t->tensors[i].name, ST_F32, t->tensors[i].ndim, t->tensors[i].shape) != BG_OK)
            return BG_ERR;
    if (f->count != t->count)
        for (int i = 0; i < f->count; i++)
            if (!param_table_find(t, f->tensors[i].name))
                return bg_error("%s: unexpected tensor '%s' (not in the model's config)", f->path,
                                f->tensors[i].name);
    return BG_OK;
}

static int is_optimizer_name(const param_table *t, const char *name) {
    if (!strcmp(name, "step")) return 1;
    char base[PARAM_NAME_MAX + 16];
    snprintf(base, sizeof base, "%s", name);
    char *dot = strrchr(base, '.');
    if (!dot || (strcmp(dot, ".exp_avg") != 0 && strcmp(dot, ".exp_avg_sq") != 0)) return 0;
    *dot = '\0';
    return param_table_find(t, base) != NULL;
}

static int check_optimizer_file(const param_table *t, const st_file *f) {
    char name[PARAM_NAME_MAX + 16];
    for (int i = 0; i < t->count; i++) {
        const param_tensor *p = &t->tensors[i];
        snprintf(name, sizeof name, "%s.exp_avg", p->name);
        if (check_tensor(f, name, ST_F32, p->ndim, p->shape) != BG_OK) return BG_ERR;
        snprintf(name, sizeof name, "%s.exp_avg_sq", p->name);
        if (check_tensor(f, name, ST_F32, p->ndim, p->shape) != BG_OK) return BG_ERR;
    }
    if (check_tensor(f, "step", ST_I64, 0, NULL) != BG_OK) return BG_ERR;
    if (f->count != 2 * t->count + 1)
        for (int i = 0; i < f->count; i++)
            if (!is_optimizer_name(t, f->tensors[i].name))
                return bg_error("%s: unexpected tensor '%s' (not in the model's config)", f->path,
                                f->tensors[i].name);
    return BG_OK;
}

// Opens, verifies the checksum recorded in trainer.json, checks every tensor.
static int open_checked(st_file *f, const char *path, uint64_t sum, const param_table *t, int optimizer) {
    if (st_open(f, path) != BG_OK) return BG_ERR;
    if (st_verify_checksum(f, sum) != BG_OK) return BG_ERR;
    return optimizer ? check_optimizer_file(t, f) : check_model_file(t, f);
}

static int checkpoint_paths(const char *dir, char *json, char *model, char *opt) {
    struct stat st;
    if (stat(dir, &st) != 0) return bg_error("%s: cannot open checkpoint directory (%s)", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return bg_error("%s: not a checkpoint directory", dir);
    if (path_join(json, PATH_MAX_LEN, dir, "trainer.json") != BG_OK ||
        path_join(model, PATH_MAX_LEN, dir, "model.safetensors") != BG_OK ||
        path_join(opt, PATH_MAX_LEN, dir, "optimizer.safetensors") != BG_OK)
        return BG_ERR;
    return BG_OK;
}

// Everything is checked before anything is copied, so a failed load leaves the trainer
// as it was.
int ckpt_load(trainer *tr, const char *dir) {
    char path[PATH_MAX_LEN], mpath[PATH_MAX_LEN], opath[PATH_MAX_LEN];
    if (checkpoint_paths(dir, path, mpath, opath) != BG_OK) return BG_ERR;
    ckpt_meta meta;
    if (meta_read(&meta, path) != BG_OK) return BG_ERR;
    int rc = BG_ERR;
    st_file mf, of;
    memset(&mf, 0, sizeof mf), memset(&of, 0, sizeof of);
    // Files hold the one-process model; this rank reads its tensors by name (its
    // share of the experts in a parallel run), after checking the whole file.
    const param_table *t = &tr->m.table;
    param_table full;
    param_table_build(&full, &tr->cfg);
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, tr->opt.seed);
    if (strcmp(meta.seed, seed) != 0) {
        bg_error("%s: the checkpoint's data seed %s differs from --seed %s", path, meta.seed, seed);
        goto done;
    }
    if (check_config(meta.model_config, &tr->cfg, path) != BG_OK) goto done;
    if (open_checked(&mf, mpath, meta.model_sum, &full, 0) != BG_OK) goto done;
    if (open_checked(&of, opath, meta.opt_sum, &full, 1) != BG_OK) goto done;
    int64_t step;
    if (st_read_raw(&of, "step", ST_I64, &step, 0, NULL) != BG_OK) goto done;
    if (step < 0) {
        bg_error("%s: negative optimizer step", of.path);
        goto done;
    }
    char name[PARAM_NAME_MAX + 16];
    for (int i = 0; i < t->count; i++) {
        const param_tensor *p = &t->tensors[i];
        BG_ASSERT(st_read_raw(&mf, p->name, ST_F32, tr->m.params + p->offset, p->ndim, p->shape) == BG_OK);
        snprintf(name, sizeof name, "%s.exp_avg", p->name);
        BG_ASSERT(st_read_raw(&of, name, ST_F32, tr->adam.m + p->offset, p->ndim, p->shape) == BG_OK);
        snprintf(name, sizeof name, "%s.exp_avg_sq", p->name);
        BG_ASSERT(st_read_raw(&of, name, ST_F32, tr->adam.v + p->offset, p->ndim, p->shape) == BG_OK);
    }
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
    st_close(&mf);
    st_close(&of);
    meta_free(&meta);
    return rc;
}

// ---- inspect -----------------------------------------------------------------------

static void inspect_file(ckpt_file_report *r, const char *path, uint64_t recorded, const param_table *t,
                         int optimizer) {
    memset(r, 0, sizeof *r);
    r->recorded = recorded;
    r->tensors = -1;
    struct stat st;
    if (stat(path, &st) != 0) {
        r->status = CKPT_FILE_MISSING;
        snprintf(r->message, sizeof r->message, "%s: missing (%s)", path, strerror(errno));
        return;
    }
    if (file_xxh64(path, &r->actual) != BG_OK) {
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
    if (open_checked(&f, path, recorded, t, optimizer) != BG_OK) {
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
    char path[PATH_MAX_LEN], mpath[PATH_MAX_LEN], opath[PATH_MAX_LEN];
    if (checkpoint_paths(dir, path, mpath, opath) != BG_OK) return BG_ERR;
    ckpt_meta meta;
    if (meta_read(&meta, path) != BG_OK) return BG_ERR;
    char *text = cJSON_PrintUnformatted(meta.model_config);
    int rc = model_config_parse(&r->cfg, text, path);
    free(text);
    if (rc == BG_OK) {
        r->step = meta.step;
        r->total_steps = meta.total_steps;
        r->samples = meta.samples;
        param_table t;
        param_table_build(&t, &r->cfg);
        inspect_file(&r->model, mpath, meta.model_sum, &t, 0);
        inspect_file(&r->optimizer, opath, meta.opt_sum, &t, 1);
        param_table_free(&t);
    }
    meta_free(&meta);
    return rc;
}
