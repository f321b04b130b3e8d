#include "train/checkpoint_shard.h"
#include "core/error.h"
#include "io/file_sync.h"
#include "io/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void plan_of(ckpt_plan *p, const trainer *tr) {
    int P = tr->world > 0 ? tr->world : 1, ep = P > 1 ? tr->layout.ep : 1;
    ckpt_plan_make(p, &tr->cfg, P, ep, tr->zero.on, P > 1 ? tr->rank : 0);
    // The run's own shard rule must be the plan's, or the pieces would be mislabelled.
    BG_ASSERT(p->zero.dense_lo == tr->zero.dense_lo && p->zero.dense_hi == tr->zero.dense_hi &&
              p->zero.expert_lo == tr->zero.expert_lo && p->zero.expert_hi == tr->zero.expert_hi &&
              p->table.numel == tr->m.table.numel);
}

size_t ckpt_snapshot_bytes(const trainer *tr) {
    ckpt_plan p;
    plan_of(&p, tr);
    param_table st;
    model_router_state_table(&st, &tr->cfg);
    size_t n = ckpt_plan_floats(&p, st.numel) * sizeof(float);
    param_table_free(&st);
    ckpt_plan_free(&p);
    return n;
}

void ckpt_shard_init(ckpt_shard *s, const trainer *tr, int async) {
    memset(s, 0, sizeof *s);
    plan_of(&s->plan, tr);
    model_router_state_table(&s->st, &tr->cfg);
    s->n_model = s->plan.n_model + (s->plan.state ? s->st.count : 0);
    s->model_src = bg_calloc((size_t)s->n_model + 1, sizeof *s->model_src);
    s->m_src = bg_calloc((size_t)s->plan.n_opt + 1, sizeof *s->m_src);
    s->v_src = bg_calloc((size_t)s->plan.n_opt + 1, sizeof *s->v_src);
    atomic_store(&s->done, 1);
    if (async) {
        s->snapshot_floats = ckpt_plan_floats(&s->plan, s->st.numel);
        s->snapshot = bg_aligned_alloc(s->snapshot_floats * sizeof(float) + 64);
    }
}

void ckpt_shard_free(ckpt_shard *s) {
    if (s->running) ckpt_shard_join(s);
    ckpt_plan_free(&s->plan);
    param_table_free(&s->st);
    free(s->model_src), free(s->m_src), free(s->v_src);
    free(s->snapshot);
    memset(s, 0, sizeof *s);
}

// The sources in the live blocks of tr.
static void point_live(ckpt_shard *s, const trainer *tr) {
    const param_table *t = &s->plan.table;
    for (int k = 0; k < s->plan.n_model; k++) s->model_src[k] = tr->m.params + t->tensors[s->plan.model[k]].offset;
    for (int k = s->plan.n_model; k < s->n_model; k++)
        s->model_src[k] = (const float *)tr->m.router_state + s->st.tensors[k - s->plan.n_model].offset;
    for (int k = 0; k < s->plan.n_opt; k++) {
        size_t at = ckpt_piece_mv_index(&s->plan, &s->plan.opt[k]);
        s->m_src[k] = tr->adam.m + at;
        s->v_src[k] = tr->adam.v + at;
    }
}

static size_t model_numel(const ckpt_shard *s, int k) {
    return k < s->plan.n_model ? s->plan.table.tensors[s->plan.model[k]].numel
                               : s->st.tensors[k - s->plan.n_model].numel;
}

// Copies every source into the snapshot and points the sources there.
static void snapshot(ckpt_shard *s) {
    float *at = s->snapshot;
    for (int k = 0; k < s->n_model; k++) {
        size_t n = model_numel(s, k);
        memcpy(at, s->model_src[k], n * sizeof(float));
        s->model_src[k] = at;
        at += n;
    }
    for (int k = 0; k < s->plan.n_opt; k++) {
        size_t n = s->plan.opt[k].count;
        memcpy(at, s->m_src[k], n * sizeof(float));
        s->m_src[k] = at;
        at += n;
        memcpy(at, s->v_src[k], n * sizeof(float));
        s->v_src[k] = at;
        at += n;
    }
    BG_ASSERT((size_t)(at - s->snapshot) == s->snapshot_floats);
}

static void fill(st_tensor_in *in, const char *name, int ndim, const int64_t *shape, const float *data) {
    memset(in, 0, sizeof *in);
    in->name = name;
    in->dtype = ST_F32;
    in->ndim = ndim;
    for (int d = 0; d < ndim; d++) in->shape[d] = shape[d];
    in->data = data;
}

// Both files from the sources; no trainer, no MPI (it may run on the writer thread).
static int write_files(ckpt_shard *s) {
    const ckpt_plan *p = &s->plan;
    char path[4096 + 64], file[64];
    int n = s->n_model > 2 * p->n_opt ? s->n_model : 2 * p->n_opt;
    st_tensor_in *ins = bg_calloc((size_t)n + 1, sizeof *ins);
    char (*keys)[PARAM_NAME_MAX + 48] = bg_calloc((size_t)2 * p->n_opt + 1, sizeof *keys);
    st_meta meta[] = {{"format", "pt"}, {"producer", "bagualu"}};
    for (int k = 0; k < s->n_model; k++) {
        const param_tensor *t = k < p->n_model ? &p->table.tensors[p->model[k]] : &s->st.tensors[k - p->n_model];
        fill(&ins[k], t->name, t->ndim, t->shape, s->model_src[k]);
    }
    ckpt_plan_model_file(file, sizeof file, p->rank, p->world);
    int rc = io_path_join(path, sizeof path, s->dir, file);
    if (rc == BG_OK) rc = st_write_file(path, ins, s->n_model, meta, 2, &s->sums[0]);
    for (int k = 0; k < p->n_opt && rc == BG_OK; k++) {
        const ckpt_piece *c = &p->opt[k];
        const param_tensor *t = &p->table.tensors[c->tensor];
        int whole = c->offset == 0 && c->count == t->numel;
        int64_t len = (int64_t)c->count;
        for (int kind = 0; kind < 2; kind++) {
            ckpt_plan_piece_key(keys[2 * k + kind], sizeof keys[0], p, c, kind);
            fill(&ins[2 * k + kind], keys[2 * k + kind], whole ? t->ndim : 1, whole ? t->shape : &len,
                 kind ? s->v_src[k] : s->m_src[k]);
        }
    }
    ckpt_plan_optimizer_file(file, sizeof file, p->rank, p->world);
    if (rc == BG_OK) rc = io_path_join(path, sizeof path, s->dir, file);
    if (rc == BG_OK) rc = st_write_file(path, ins, 2 * p->n_opt, meta, 2, &s->sums[1]);
    free(ins);
    free(keys);
    s->rc = rc;
    if (rc != BG_OK) snprintf(s->message, sizeof s->message, "%s", bg_last_error());
    return rc;
}

static int set_dir(ckpt_shard *s, const char *dir) {
    if (strlen(dir) >= sizeof s->dir) return bg_error("%s: path too long", dir);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    return BG_OK;
}

int ckpt_shard_write_now(ckpt_shard *s, const trainer *tr, const char *dir) {
    BG_ASSERT(!s->running);
    if (set_dir(s, dir) != BG_OK) return BG_ERR;
    point_live(s, tr);
    return write_files(s);
}

static void *writer_main(void *arg) {
    ckpt_shard *s = arg;
    // Tests delay the writer so training surely moves on before it reads the snapshot.
    if (s->delay_ms > 0) nanosleep(&(struct timespec){s->delay_ms / 1000, (s->delay_ms % 1000) * 1000000L}, NULL);
    write_files(s);
    atomic_store(&s->done, 1);
    return NULL;
}

int ckpt_shard_start(ckpt_shard *s, const trainer *tr, const char *dir) {
    BG_ASSERT(!s->running && s->snapshot);
    if (set_dir(s, dir) != BG_OK) return BG_ERR;
    point_live(s, tr);
    snapshot(s);
    atomic_store(&s->done, 0);
    const char *delay = getenv("BAGUALU_TEST_SAVE_DELAY_MS");
    s->delay_ms = delay ? atol(delay) : 0;
    if (pthread_create(&s->thread, NULL, writer_main, s) != 0) {
        atomic_store(&s->done, 1);
        return write_files(s);  // no thread to be had: write now
    }
    s->running = 1;
    return BG_OK;
}

int ckpt_shard_finished(ckpt_shard *s) { return !s->running || atomic_load(&s->done); }

int ckpt_shard_join(ckpt_shard *s) {
    if (s->running) {
        pthread_join(s->thread, NULL);
        s->running = 0;
    }
    return s->rc == BG_OK ? BG_OK : bg_error("%s", s->message);
}
