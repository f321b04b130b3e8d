#include "train/checkpoint_tensors.h"
#include "core/error.h"
#include "io/file_sync.h"
#include "train/checkpoint_dir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- writing -------------------------------------------------------------------------

static void fill_tensor(st_tensor_in *in, const char *name, const param_tensor *p, const float *data) {
    memset(in, 0, sizeof *in);
    in->name = name;
    in->dtype = ST_F32;
    in->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) in->shape[d] = p->shape[d];
    in->data = data;
}

static int state_count(const param_table *st) { return st ? st->count : 0; }

int ckpt_tensors_write(const char *dir, const param_table *t, const float *params, const float *m,
                       const float *v, int64_t adam_step, const param_table *st,
                       const float *state, uint64_t *model_sum, uint64_t *opt_sum) {
    char path[CKPT_PATH_MAX];
    const int ns = state_count(st);
    st_tensor_in *ins = bg_calloc((size_t)t->count * 2 + 1 + ns, sizeof *ins);
    char (*names)[PARAM_NAME_MAX + 16] = bg_calloc((size_t)t->count * 2, sizeof *names);
    st_meta meta[] = {{"format", "pt"}, {"producer", "bagualu"}};
    int rc;

    for (int i = 0; i < t->count; i++) fill_tensor(&ins[i], t->tensors[i].name, &t->tensors[i],
                                                   params + t->tensors[i].offset);
    // The gates' state after the parameters (none for topk: its files stay as they were).
    for (int i = 0; i < ns; i++)
        fill_tensor(&ins[t->count + i], st->tensors[i].name, &st->tensors[i],
                    state + st->tensors[i].offset);
    rc = io_path_join(path, sizeof path, dir, "model.safetensors");
    if (rc == BG_OK) rc = st_write_file(path, ins, t->count + ns, meta, 2, model_sum);

    if (rc == BG_OK) {
        int n = 0;
        for (int i = 0; i < t->count; i++) {
            snprintf(names[n], sizeof names[n], "%s.exp_avg", t->tensors[i].name);
            fill_tensor(&ins[n], names[n], &t->tensors[i], m + t->tensors[i].offset);
            n++;
            snprintf(names[n], sizeof names[n], "%s.exp_avg_sq", t->tensors[i].name);
            fill_tensor(&ins[n], names[n], &t->tensors[i], v + t->tensors[i].offset);
            n++;
        }
        int64_t step = adam_step;
        memset(&ins[n], 0, sizeof ins[n]);
        ins[n].name = "step";
        ins[n].dtype = ST_I64;
        ins[n].ndim = 0;
        ins[n].data = &step;
        n++;
        rc = io_path_join(path, sizeof path, dir, "optimizer.safetensors");
        if (rc == BG_OK) rc = st_write_file(path, ins, n, meta, 2, opt_sum);
    }
    free(ins);
    free(names);
    return rc;
}

// ---- checking and reading -------------------------------------------------------------

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
static int check_model_file(const param_table *t, const param_table *st, const st_file *f) {
    const param_table none = {0};
    if (!st) st = &none;
    for (int i = 0; i < t->count; i++)
        if (check_tensor(f, t->tensors[i].name, ST_F32, t->tensors[i].ndim, t->tensors[i].shape) != BG_OK)
            return BG_ERR;
    for (int i = 0; i < st->count; i++)
        if (check_tensor(f, st->tensors[i].name, ST_F32, st->tensors[i].ndim, st->tensors[i].shape) != BG_OK)
            return BG_ERR;
    if (f->count != t->count + st->count)
        for (int i = 0; i < f->count; i++)
            if (!param_table_find(t, f->tensors[i].name) && !param_table_find(st, f->tensors[i].name))
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
int ckpt_tensors_open(st_file *f, const char *path, uint64_t sum, const param_table *t,
                      const param_table *st, int optimizer) {
    if (st_open(f, path) != BG_OK) return BG_ERR;
    if (st_verify_checksum(f, sum) != BG_OK) return BG_ERR;
    return optimizer ? check_optimizer_file(t, f) : check_model_file(t, st, f);
}

int ckpt_tensors_read(const st_file *mf, const st_file *of, const param_table *t, float *params,
                      float *m, float *v, const param_table *st, float *state,
                      int64_t *adam_step) {
    // The step is checked before anything is copied: a failed read leaves the blocks as
    // they were.
    int64_t step;
    if (st_read_raw(of, "step", ST_I64, &step, 0, NULL) != BG_OK) return BG_ERR;
    if (step < 0) return bg_error("%s: negative optimizer step", of->path);
    char name[PARAM_NAME_MAX + 16];
    for (int i = 0; i < t->count; i++) {
        const param_tensor *p = &t->tensors[i];
        BG_ASSERT(st_read_raw(mf, p->name, ST_F32, params + p->offset, p->ndim, p->shape) == BG_OK);
        snprintf(name, sizeof name, "%s.exp_avg", p->name);
        BG_ASSERT(st_read_raw(of, name, ST_F32, m + p->offset, p->ndim, p->shape) == BG_OK);
        snprintf(name, sizeof name, "%s.exp_avg_sq", p->name);
        BG_ASSERT(st_read_raw(of, name, ST_F32, v + p->offset, p->ndim, p->shape) == BG_OK);
    }
    for (int i = 0; i < state_count(st); i++) {
        const param_tensor *p = &st->tensors[i];
        BG_ASSERT(st_read_raw(mf, p->name, ST_F32, state + p->offset, p->ndim, p->shape) == BG_OK);
    }
    *adam_step = step;
    return BG_OK;
}
