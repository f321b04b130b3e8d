#include "train/checkpoint_shard.h"
#include "core/error.h"
#include "io/file_sync.h"
#include "io/safetensors.h"
#include "core/threads.h"
#include "core/timer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

static void plan_of(ckpt_plan *p, const trainer *tr) {
    int P = tr->world > 0 ? tr->world : 1, ep = P > 1 ? tr->layout.ep : 1;
    ckpt_plan_make(p, &tr->cfg, P, ep, tr->zero.on, P > 1 ? tr->rank : 0);
    // The run's own shard rule must be the plan's, or the pieces would be mislabelled.
    BG_ASSERT(p->zero.dense_lo == tr->zero.dense_lo && p->zero.dense_hi == tr->zero.dense_hi &&
              p->zero.expert_lo == tr->zero.expert_lo && p->zero.expert_hi == tr->zero.expert_hi &&
              p->table.numel == tr->m.table.numel);
}

static void fill(st_tensor_in *in, const char *name, int ndim, const int64_t *shape, const float *data) {
    memset(in, 0, sizeof *in);
    in->name = name;
    in->dtype = ST_F32;
    in->ndim = ndim;
    for (int d = 0; d < ndim; d++) in->shape[d] = shape[d];
    in->data = data;
}

static const st_meta file_meta[] = {{"format", "pt"}, {"producer", "bagualu"}};

// One file's tensors in file order: which 0 the model file (sources model_src), 1 the
// optimizer file (m, v of each piece; keys holds their names). NULL sources: headers only.
static int file_tensors(const ckpt_plan *p, const param_table *st, int which, const float *const *model_src,
                        const float *const *m_src, const float *const *v_src, st_tensor_in *ins,
                        char (*keys)[PARAM_NAME_MAX + 48]) {
    if (which == 0) {
        int n = p->n_model + (p->state ? st->count : 0);
        for (int k = 0; k < n; k++) {
            const param_tensor *t = k < p->n_model ? &p->table.tensors[p->model[k]] : &st->tensors[k - p->n_model];
            fill(&ins[k], t->name, t->ndim, t->shape, model_src ? model_src[k] : NULL);
        }
        return n;
    }
    for (int k = 0; k < p->n_opt; k++) {
        const ckpt_piece *c = &p->opt[k];
        const param_tensor *t = &p->table.tensors[c->tensor];
        int whole = c->offset == 0 && c->count == t->numel;
        int64_t len = (int64_t)c->count;
        for (int kind = 0; kind < 2; kind++) {
            ckpt_plan_piece_key(keys[2 * k + kind], sizeof keys[0], p, c, kind);
            const float *src = kind ? (v_src ? v_src[k] : NULL) : (m_src ? m_src[k] : NULL);
            fill(&ins[2 * k + kind], keys[2 * k + kind], whole ? t->ndim : 1, whole ? t->shape : &len, src);
        }
    }
    return 2 * p->n_opt;
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The two files' images (prefix + data) as the snapshot lays them out: each at an
// IO_DIRECT_ALIGN boundary. prefix[w] (when non-NULL) receives the bytes (caller frees).
static void image_layout(const ckpt_plan *p, const param_table *st, char **prefix, size_t *prefix_len,
                         size_t *image_len) {
    int n = p->n_model + st->count > 2 * p->n_opt ? p->n_model + st->count : 2 * p->n_opt;
    st_tensor_in *ins = bg_calloc((size_t)n + 1, sizeof *ins);
    char (*keys)[PARAM_NAME_MAX + 48] = bg_calloc((size_t)2 * p->n_opt + 1, sizeof *keys);
    for (int w = 0; w < 2; w++) {
        int count = file_tensors(p, st, w, NULL, NULL, NULL, ins, keys);
        char *bytes;
        uint64_t data;
        // The writer's own checks: names and shapes come from the run's tables.
        BG_ASSERT(st_file_prefix("snapshot", ins, count, file_meta, 2, &bytes, &prefix_len[w], &data) == BG_OK);
        image_len[w] = prefix_len[w] + (size_t)data;
        if (prefix) prefix[w] = bytes;
        else free(bytes);
    }
    free(ins);
    free(keys);
}

static size_t snapshot_alloc_bytes(const size_t *image_len) {
    // Slack to start the first image at an alignment boundary whatever the allocator gives.
    return round_up(image_len[0], IO_DIRECT_ALIGN) + round_up(image_len[1], IO_DIRECT_ALIGN) + IO_DIRECT_ALIGN;
}

size_t ckpt_snapshot_bytes(const trainer *tr) {
    ckpt_plan p;
    plan_of(&p, tr);
    param_table st;
    model_router_state_table(&st, &tr->cfg);
    size_t plen[2], ilen[2];
    image_layout(&p, &st, NULL, plen, ilen);
    param_table_free(&st);
    ckpt_plan_free(&p);
    return snapshot_alloc_bytes(ilen);
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
        // The headers do not change during a run: written into the images once, here.
        char *prefix[2];
        size_t plen[2];
        image_layout(&s->plan, &s->st, prefix, plen, s->image_len);
        s->snapshot_alloc = bg_aligned_alloc(snapshot_alloc_bytes(s->image_len));
        uint8_t *base = (uint8_t *)round_up((uintptr_t)s->snapshot_alloc, IO_DIRECT_ALIGN);
        s->image[0] = base;
        s->image[1] = base + round_up(s->image_len[0], IO_DIRECT_ALIGN);
        // Touched now, before the first step: its page faults would otherwise land in
        // the first save's copy, which the step waits for.
        memset(s->snapshot_alloc, 0, snapshot_alloc_bytes(s->image_len));
        for (int w = 0; w < 2; w++) {
            memcpy(s->image[w], prefix[w], plen[w]);
            s->data_at[w] = plen[w];
            free(prefix[w]);
        }
    }
}

void ckpt_shard_free(ckpt_shard *s) {
    if (s->running) ckpt_shard_join(s);
    ckpt_plan_free(&s->plan);
    param_table_free(&s->st);
    free(s->model_src), free(s->m_src), free(s->v_src);
    free(s->snapshot_alloc);
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

// The snapshot's copies in image order: (source, bytes), destinations contiguous.
typedef struct {
    const ckpt_shard *s;
    size_t total;  // bytes of both images' data sections
} copy_job;

// Copies the data bytes [i0, i1) of the two images' concatenated data sections from
// their sources: each thread of the team walks the tensors its range overlaps.
static void copy_range(void *ctx, size_t i0, size_t i1) {
    const copy_job *j = ctx;
    const ckpt_shard *s = j->s;
    size_t at = 0;  // the current tensor's first byte in the concatenation
    for (int w = 0; w < 2 && at < i1; w++) {
        uint8_t *dst = s->image[w] + s->data_at[w];
        int n = w == 0 ? s->n_model : 2 * s->plan.n_opt;
        for (int k = 0; k < n && at < i1; k++) {
            const float *src = w == 0 ? s->model_src[k] : (k & 1) ? s->v_src[k / 2] : s->m_src[k / 2];
            size_t bytes = (w == 0 ? model_numel(s, k) : s->plan.opt[k / 2].count) * sizeof(float);
            size_t lo = i0 > at ? i0 - at : 0, hi = i1 < at + bytes ? i1 - at : bytes;
            if (lo < hi) memcpy(dst + lo, (const uint8_t *)src + lo, hi - lo);
            dst += bytes;
            at += bytes;
        }
    }
}

// Ranges in pages: fewer, longer memcpys per thread.
#define COPY_UNIT 4096

static void copy_pages(void *ctx, size_t p0, size_t p1) {
    const copy_job *j = ctx;
    size_t i1 = p1 * COPY_UNIT < j->total ? p1 * COPY_UNIT : j->total;
    if (p0 * COPY_UNIT < i1) copy_range(ctx, p0 * COPY_UNIT, i1);
}

// Copies every source into the images over the thread team: the step waits for this
// part only, so it uses every core the step does.
static void snapshot(ckpt_shard *s) {
    copy_job j = {s, s->image_len[0] - s->data_at[0] + s->image_len[1] - s->data_at[1]};
    bg_parallel_ranges((j.total + COPY_UNIT - 1) / COPY_UNIT, copy_pages, &j);
}

// Both files from the sources; no trainer, no MPI (it may run on the writer thread).
static int write_files(ckpt_shard *s) {
    const ckpt_plan *p = &s->plan;
    char path[4096 + 64], file[64];
    int n = s->n_model > 2 * p->n_opt ? s->n_model : 2 * p->n_opt;
    st_tensor_in *ins = bg_calloc((size_t)n + 1, sizeof *ins);
    char (*keys)[PARAM_NAME_MAX + 48] = bg_calloc((size_t)2 * p->n_opt + 1, sizeof *keys);
    int rc = BG_OK;
    for (int w = 0; w < 2 && rc == BG_OK; w++) {
        int count = file_tensors(p, &s->st, w, s->model_src, s->m_src, s->v_src, ins, keys);
        if (w == 0) ckpt_plan_model_file(file, sizeof file, p->rank, p->world);
        else ckpt_plan_optimizer_file(file, sizeof file, p->rank, p->world);
        rc = io_path_join(path, sizeof path, s->dir, file);
        if (rc == BG_OK) rc = st_write_file(path, ins, count, file_meta, 2, &s->sums[w]);
    }
    free(ins);
    free(keys);
    s->rc = rc;
    if (rc != BG_OK) snprintf(s->message, sizeof s->message, "%s", bg_last_error());
    return rc;
}

// Both files from the snapshot's images (the writer thread): the checksum, then large
// direct writes, so the thread copies nothing and leaves the page cache alone.
static int write_images(ckpt_shard *s) {
    const ckpt_plan *p = &s->plan;
    char path[4096 + 64], file[64];
    int rc = BG_OK;
    for (int w = 0; w < 2 && rc == BG_OK; w++) {
        s->sums[w] = XXH64(s->image[w], s->image_len[w], 0);
        if (w == 0) ckpt_plan_model_file(file, sizeof file, p->rank, p->world);
        else ckpt_plan_optimizer_file(file, sizeof file, p->rank, p->world);
        rc = io_path_join(path, sizeof path, s->dir, file);
        if (rc == BG_OK) rc = io_write_file_direct(path, s->image[w], s->image_len[w]);
    }
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
    const double t0 = bg_now(), c0 = bg_thread_cpu_now();
    write_images(s);
    // This thread's CPU (user and kernel): what the save takes from the step's cores.
    s->writer_cpu_s = bg_thread_cpu_now() - c0;
    s->writer_s = bg_now() - t0;
    atomic_store(&s->done, 1);
    return NULL;
}

int ckpt_shard_start(ckpt_shard *s, const trainer *tr, const char *dir) {
    BG_ASSERT(!s->running && s->snapshot_alloc);
    if (set_dir(s, dir) != BG_OK) return BG_ERR;
    const double t0 = bg_now();
    point_live(s, tr);
    snapshot(s);
    s->block_s = bg_now() - t0;
    s->writer_cpu_s = s->writer_s = 0;
    atomic_store(&s->done, 0);
    const char *delay = getenv("BAGUALU_TEST_SAVE_DELAY_MS");
    s->delay_ms = delay ? atol(delay) : 0;
    if (pthread_create(&s->thread, NULL, writer_main, s) != 0) {
        atomic_store(&s->done, 1);
        return write_images(s);  // no thread to be had: write now
    }
    s->running = 1;
    return BG_OK;
}

double ckpt_shard_bytes(const ckpt_shard *s) {
    if (s->snapshot_alloc) return (double)s->image_len[0] + (double)s->image_len[1];
    size_t plen[2], ilen[2];
    image_layout(&s->plan, &s->st, NULL, plen, ilen);
    return (double)ilen[0] + (double)ilen[1];
}

int ckpt_shard_finished(ckpt_shard *s) { return !s->running || atomic_load(&s->done); }

int ckpt_shard_join(ckpt_shard *s) {
    if (s->running) {
        pthread_join(s->thread, NULL);
        s->running = 0;
    }
    return s->rc == BG_OK ? BG_OK : bg_error("%s", s->message);
}
