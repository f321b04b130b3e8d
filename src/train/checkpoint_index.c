#include "train/checkpoint_index.h"
#include "core/error.h"
#include "core/text_file.h"
#include "io/file_sync.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_plan.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define INDEX_MAX_BYTES (1u << 30)

static char *dup(const char *s) {
    char *d = bg_malloc(strlen(s) + 1);
    strcpy(d, s);
    return d;
}

void ckpt_index_free(ckpt_index *x) {
    for (int i = 0; i < x->n_files; i++) free(x->files[i]);
    for (int i = 0; i < x->n_model; i++) free(x->model[i].tensor);
    for (int i = 0; i < x->n_opt; i++) free(x->opt[i].tensor), free(x->opt[i].key[0]), free(x->opt[i].key[1]);
    free(x->files), free(x->sums), free(x->model), free(x->opt);
    memset(x, 0, sizeof *x);
}

// ---- lookups -----------------------------------------------------------------------

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const ckpt_index_entry *)a)->tensor, ((const ckpt_index_entry *)b)->tensor);
}
static int cmp_piece(const void *a, const void *b) {
    const ckpt_index_piece *x = a, *y = b;
    int c = strcmp(x->tensor, y->tensor);
    return c ? c : (x->offset > y->offset) - (x->offset < y->offset);
}
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int ckpt_index_model_file(const ckpt_index *x, const char *name) {
    ckpt_index_entry key = {(char *)name, 0};
    const ckpt_index_entry *e = bsearch(&key, x->model, (size_t)x->n_model, sizeof key, cmp_entry);
    return e ? e->file : -1;
}

int ckpt_index_pieces(const ckpt_index *x, const char *name, int *first) {
    int lo = 0, hi = x->n_opt;  // the first piece whose tensor is >= name
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (strcmp(x->opt[mid].tensor, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    *first = lo;
    int n = 0;
    while (lo + n < x->n_opt && !strcmp(x->opt[lo + n].tensor, name)) n++;
    return n;
}

static int file_id(ckpt_index *x, const char *name) {
    char *key = (char *)name;
    char **f = bsearch(&key, x->files, (size_t)x->n_files, sizeof key, cmp_str);
    return f ? (int)(f - x->files) : -1;
}

// ---- reading -----------------------------------------------------------------------

// The file names of both maps, sorted and unique, each with its recorded checksum.
static int collect_files(ckpt_index *x, char **names, int n, const ckpt_meta *meta, const char *json) {
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    x->files = bg_calloc((size_t)n + 1, sizeof *x->files);
    x->sums = bg_calloc((size_t)n + 1, sizeof *x->sums);
    for (int i = 0; i < n; i++)
        if (!x->n_files || strcmp(x->files[x->n_files - 1], names[i]) != 0) {
            if (strchr(names[i], '/') || !strcmp(names[i], "..") || !strcmp(names[i], "."))
                return bg_error("%s: bad file name \"%s\" in the indexes", json, names[i]);
            x->files[x->n_files++] = dup(names[i]);  // counted now: ckpt_index_free frees it
            if (ckpt_meta_sum(meta, names[i], &x->sums[x->n_files - 1], json) != BG_OK) return BG_ERR;
        }
    return BG_OK;
}

static cJSON *read_json(const char *dir, const char *name, char *path) {
    if (io_path_join(path, CKPT_PATH_MAX, dir, name) != BG_OK) return NULL;
    size_t len;
    char *text = bg_read_text_file(path, INDEX_MAX_BYTES, &len);
    if (!text) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        bg_error("%s: not valid JSON", path);
        return NULL;
    }
    return j;
}

static int whole(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 9007199254740992.0 &&
           v->valuedouble == (double)(uint64_t)v->valuedouble;
}

static int read_v2(ckpt_index *x, const char *dir, const ckpt_meta *meta, const char *trainer_json) {
    char mpath[CKPT_PATH_MAX], opath[CKPT_PATH_MAX];
    cJSON *mj = read_json(dir, CKPT_MODEL_INDEX, mpath), *oj = mj ? read_json(dir, CKPT_OPT_INDEX, opath) : NULL;
    int rc = BG_ERR, n_names = 0;
    char **names = NULL;
    if (!oj) goto done;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(mj, "weight_map");
    const cJSON *pieces = cJSON_GetObjectItemCaseSensitive(oj, "pieces");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(oj, "step");
    if (!cJSON_IsObject(map)) {
        bg_error("%s: missing \"weight_map\"", mpath);
        goto done;
    }
    if (!cJSON_IsArray(pieces) || !whole(step)) {
        bg_error("%s: missing \"pieces\" or \"step\"", opath);
        goto done;
    }
    int nm = cJSON_GetArraySize(map), np = cJSON_GetArraySize(pieces);
    names = bg_calloc((size_t)(nm + np) + 1, sizeof *names);
    x->model = bg_calloc((size_t)nm + 1, sizeof *x->model);
    x->opt = bg_calloc((size_t)np + 1, sizeof *x->opt);
    x->adam_step = (int64_t)step->valuedouble;
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e)) {
            bg_error("%s: the file of '%s' is not a string", mpath, e->string);
            goto done;
        }
        names[n_names++] = e->valuestring;
        x->model[x->n_model++] = (ckpt_index_entry){dup(e->string), -1};
    }
    cJSON_ArrayForEach(e, pieces) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "tensor");
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(e, "offset");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "count");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "file");
        const cJSON *k0 = cJSON_GetObjectItemCaseSensitive(e, "exp_avg");
        const cJSON *k1 = cJSON_GetObjectItemCaseSensitive(e, "exp_avg_sq");
        if (!cJSON_IsString(t) || !whole(o) || !whole(c) || !cJSON_IsString(f) || !cJSON_IsString(k0) ||
            !cJSON_IsString(k1)) {
            bg_error("%s: piece %d is incomplete (tensor, offset, count, file, exp_avg, exp_avg_sq)", opath,
                     x->n_opt);
            goto done;
        }
        names[n_names++] = f->valuestring;
        ckpt_index_piece *p = &x->opt[x->n_opt++];
        *p = (ckpt_index_piece){dup(t->valuestring), (uint64_t)o->valuedouble, (uint64_t)c->valuedouble, -1,
                                {dup(k0->valuestring), dup(k1->valuestring)}};
    }
    if (collect_files(x, names, n_names, meta, trainer_json) != BG_OK) goto done;
    // File names by id: the map's entries in order, then the pieces'.
    int k = 0;
    cJSON_ArrayForEach(e, map) x->model[k++].file = file_id(x, e->valuestring);
    k = 0;
    cJSON_ArrayForEach(e, pieces) x->opt[k++].file =
        file_id(x, cJSON_GetObjectItemCaseSensitive(e, "file")->valuestring);
    rc = BG_OK;
done:
    free(names);
    cJSON_Delete(mj);
    cJSON_Delete(oj);
    return rc;
}

// Format 1 as a map: every tensor in model.safetensors, m and v whole in
// optimizer.safetensors (and its "step").
static int make_v1(ckpt_index *x, const ckpt_meta *meta, const param_table *t, const param_table *st,
                   const char *trainer_json) {
    char *names[2] = {"model.safetensors", "optimizer.safetensors"};
    if (collect_files(x, names, 2, meta, trainer_json) != BG_OK) return BG_ERR;
    x->model = bg_calloc((size_t)(t->count + st->count) + 1, sizeof *x->model);
    x->opt = bg_calloc((size_t)t->count + 1, sizeof *x->opt);
    char key[PARAM_NAME_MAX + 16];
    for (int i = 0; i < t->count + st->count; i++) {
        const param_tensor *p = i < t->count ? &t->tensors[i] : &st->tensors[i - t->count];
        x->model[x->n_model++] = (ckpt_index_entry){dup(p->name), 0};
        if (i >= t->count) continue;
        ckpt_index_piece *c = &x->opt[x->n_opt++];
        *c = (ckpt_index_piece){dup(p->name), 0, p->numel, 1, {NULL, NULL}};
        snprintf(key, sizeof key, "%s.exp_avg", p->name);
        c->key[0] = dup(key);
        snprintf(key, sizeof key, "%s.exp_avg_sq", p->name);
        c->key[1] = dup(key);
    }
    x->adam_step = -1;
    return BG_OK;
}

static const param_tensor *find2(const param_table *t, const param_table *st, const char *name) {
    const param_tensor *p = param_table_find(t, name);
    return p ? p : param_table_find(st, name);
}

// Every tensor mapped once; the pieces of each tensor tile it exactly.
static int check_maps(const ckpt_index *x, const param_table *t, const param_table *st, const char *dir) {
    for (int i = 0; i < x->n_model; i++) {
        if (!find2(t, st, x->model[i].tensor))
            return bg_error("%s/%s: unexpected tensor '%s' (not in the model's config)", dir, CKPT_MODEL_INDEX,
                            x->model[i].tensor);
        if (i && !strcmp(x->model[i].tensor, x->model[i - 1].tensor))
            return bg_error("%s/%s: tensor '%s' is listed twice", dir, CKPT_MODEL_INDEX, x->model[i].tensor);
    }
    for (int i = 0; i < t->count + st->count; i++) {
        const param_tensor *p = i < t->count ? &t->tensors[i] : &st->tensors[i - t->count];
        if (ckpt_index_model_file(x, p->name) < 0)
            return bg_error("%s/%s: tensor '%s' is missing", dir, CKPT_MODEL_INDEX, p->name);
    }
    for (int i = 0; i < x->n_opt; i++)
        if (!param_table_find(t, x->opt[i].tensor))
            return bg_error("%s/%s: unexpected tensor '%s' (not in the model's config)", dir, CKPT_OPT_INDEX,
                            x->opt[i].tensor);
    for (int i = 0; i < t->count; i++) {
        int first, n = ckpt_index_pieces(x, t->tensors[i].name, &first);
        uint64_t at = 0;
        int k = 0;
        for (; k < n; k++) {
            const ckpt_index_piece *c = &x->opt[first + k];
            if (c->offset != at || c->count == 0) break;
            at += c->count;
        }
        // Every piece in the chain: a piece repeated or overlapping past the end is no tiling.
        if (k < n || at != t->tensors[i].numel)
            return bg_error("%s/%s: the optimizer state of '%s' is %s", dir, CKPT_OPT_INDEX, t->tensors[i].name,
                            n ? "not covered exactly by its pieces" : "missing");
    }
    return BG_OK;
}

int ckpt_index_read(ckpt_index *x, const char *dir, const ckpt_meta *meta, const param_table *t,
                    const param_table *st) {
    memset(x, 0, sizeof *x);
    x->version = meta->version;
    char trainer_json[CKPT_PATH_MAX];
    if (io_path_join(trainer_json, sizeof trainer_json, dir, "trainer.json") != BG_OK) return BG_ERR;
    int rc = meta->version == 1 ? make_v1(x, meta, t, st, trainer_json) : read_v2(x, dir, meta, trainer_json);
    if (rc == BG_OK) {
        qsort(x->model, (size_t)x->n_model, sizeof *x->model, cmp_entry);
        qsort(x->opt, (size_t)x->n_opt, sizeof *x->opt, cmp_piece);
        rc = check_maps(x, t, st, dir);
    }
    if (rc != BG_OK) ckpt_index_free(x);
    return rc;
}

// ---- checking a data file ----------------------------------------------------------

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

// Whether `name` is one the index puts into file i.
static int expected_in(const ckpt_index *x, int i, const char *name) {
    if (x->version == 1 && i == 1 && !strcmp(name, "step")) return 1;
    for (int k = 0; k < x->n_model; k++)
        if (x->model[k].file == i && !strcmp(x->model[k].tensor, name)) return 1;
    for (int k = 0; k < x->n_opt; k++)
        if (x->opt[k].file == i && (!strcmp(x->opt[k].key[0], name) || !strcmp(x->opt[k].key[1], name)))
            return 1;
    return 0;
}

int ckpt_index_check_file(const ckpt_index *x, int i, const st_file *f, const param_table *t,
                          const param_table *st) {
    int expected = 0;
    for (int k = 0; k < x->n_model; k++) {
        if (x->model[k].file != i) continue;
        const param_tensor *p = find2(t, st, x->model[k].tensor);
        if (check_tensor(f, p->name, ST_F32, p->ndim, p->shape) != BG_OK) return BG_ERR;
        expected++;
    }
    for (int k = 0; k < x->n_opt; k++) {
        const ckpt_index_piece *c = &x->opt[k];
        if (c->file != i) continue;
        const param_tensor *p = param_table_find(t, c->tensor);
        int part = !(c->offset == 0 && c->count == p->numel);
        int64_t n = (int64_t)c->count;
        for (int kind = 0; kind < 2; kind++)
            if (check_tensor(f, c->key[kind], ST_F32, part ? 1 : p->ndim, part ? &n : p->shape) != BG_OK)
                return BG_ERR;
        expected += 2;
    }
    if (x->version == 1 && i == 1) {
        if (check_tensor(f, "step", ST_I64, 0, NULL) != BG_OK) return BG_ERR;
        expected++;
    }
    if (f->count != expected)
        for (int k = 0; k < f->count; k++)
            if (!expected_in(x, i, f->tensors[k].name))
                return bg_error("%s: unexpected tensor '%s' (not in the model's config)", f->path,
                                f->tensors[k].name);
    return BG_OK;
}

// ---- writing -----------------------------------------------------------------------

static int write_json(const char *dir, const char *name, cJSON *j, uint64_t *sum) {
    char path[CKPT_PATH_MAX];
    char *text = cJSON_Print(j);
    size_t n = strlen(text);
    text = realloc(text, n + 2);
    BG_ASSERT(text);
    text[n] = '\n', text[n + 1] = '\0';
    *sum = XXH64(text, n + 1, 0);
    int rc = io_path_join(path, sizeof path, dir, name);
    if (rc == BG_OK) rc = io_write_file_synced(path, text, n + 1);
    free(text);
    return rc;
}

int ckpt_index_write(const char *dir, const model_config *cfg, int P, int ep, int zero_on,
                     int64_t adam_step, uint64_t sums[2]) {
    cJSON *mj = cJSON_CreateObject(), *oj = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(mj, "metadata");
    cJSON *map = cJSON_AddObjectToObject(mj, "weight_map");
    cJSON_AddStringToObject(oj, "format", "bagualu-optimizer");
    cJSON_AddNumberToObject(oj, "step", (double)adam_step);
    cJSON *pieces = cJSON_AddArrayToObject(oj, "pieces");
    param_table st;
    model_router_state_table(&st, cfg);
    double total = 0;
    char file[64], key[PARAM_NAME_MAX + 48];
    int *dealt = ckpt_plan_deal(cfg, P, ep);
    for (int r = 0; r < P; r++) {
        ckpt_plan p;
        ckpt_plan_make_dealt(&p, cfg, P, ep, zero_on, r, dealt);
        ckpt_plan_model_file(file, sizeof file, r, P);
        for (int k = 0; k < p.n_model; k++) {
            const param_tensor *t = &p.table.tensors[p.model[k]];
            cJSON_AddStringToObject(map, t->name, file);
            total += 4.0 * (double)t->numel;
        }
        for (int k = 0; p.state && k < st.count; k++) {
            cJSON_AddStringToObject(map, st.tensors[k].name, file);
            total += 4.0 * (double)st.tensors[k].numel;
        }
        ckpt_plan_optimizer_file(file, sizeof file, r, P);
        for (int k = 0; k < p.n_opt; k++) {
            const ckpt_piece *c = &p.opt[k];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "tensor", p.table.tensors[c->tensor].name);
            cJSON_AddNumberToObject(e, "offset", (double)c->offset);
            cJSON_AddNumberToObject(e, "count", (double)c->count);
            cJSON_AddStringToObject(e, "file", file);
            ckpt_plan_piece_key(key, sizeof key, &p, c, 0);
            cJSON_AddStringToObject(e, "exp_avg", key);
            ckpt_plan_piece_key(key, sizeof key, &p, c, 1);
            cJSON_AddStringToObject(e, "exp_avg_sq", key);
            cJSON_AddItemToArray(pieces, e);
        }
        ckpt_plan_free(&p);
    }
    free(dealt);
    param_table_free(&st);
    cJSON_AddNumberToObject(meta, "total_size", total);
    int rc = write_json(dir, CKPT_MODEL_INDEX, mj, &sums[0]);
    if (rc == BG_OK) rc = write_json(dir, CKPT_OPT_INDEX, oj, &sums[1]);
    cJSON_Delete(mj);
    cJSON_Delete(oj);
    return rc;
}

// ---- reader ------------------------------------------------------------------------

void ckpt_reader_init(ckpt_reader *r, const ckpt_index *x, const char *dir, int verify) {
    r->x = x;
    r->dir = dir;
    r->verify = verify;
    r->files = bg_calloc((size_t)x->n_files + 1, sizeof *r->files);
    r->opened = bg_calloc((size_t)x->n_files + 1, 1);
}

void ckpt_reader_close(ckpt_reader *r) {
    for (int i = 0; r->files && i < r->x->n_files; i++) st_close(&r->files[i]);
    free(r->files), free(r->opened);
    memset(r, 0, sizeof *r);
}

const st_file *ckpt_reader_file(ckpt_reader *r, int i) {
    if (r->opened[i] == 1) return &r->files[i];
    char path[CKPT_PATH_MAX];
    if (io_path_join(path, sizeof path, r->dir, r->x->files[i]) != BG_OK) return NULL;
    if (st_open(&r->files[i], path) != BG_OK) return NULL;
    if (r->verify && st_verify_checksum(&r->files[i], r->x->sums[i]) != BG_OK) {
        st_close(&r->files[i]);
        return NULL;
    }
    r->opened[i] = 1;
    return &r->files[i];
}

int ckpt_reader_tensor(ckpt_reader *r, const param_tensor *p, float *out) {
    int i = ckpt_index_model_file(r->x, p->name);
    if (i < 0) return bg_error("%s/%s: tensor '%s' is missing", r->dir, CKPT_MODEL_INDEX, p->name);
    const st_file *f = ckpt_reader_file(r, i);
    if (!f) return BG_ERR;
    return st_read_raw(f, p->name, ST_F32, out, p->ndim, p->shape);
}
