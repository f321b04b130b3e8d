#include "train/checkpoint_meta.h"
#include "core/error.h"
#include "core/log.h"
#include "core/text_file.h"
#include "kernels/kernels.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

// trainer.json's own checksum: the last key of the object. It is computed over the file
// with the value's 16 hex digits set to '0', so a flipped bit anywhere in trainer.json
// (a step count, the data position) is caught like one in the tensor files.
#define SELF_SUM_KEY "trainer_json_xxh64"

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

// ---- the bf16 path (issue 19): one key, training.bf16_path ------------------------------
// The kernels' bf16 path (kernels/bf16_path.c) depends on the CPU: recorded so that a
// resume on a CPU taking the other path can say so (the numerics agree up to summation
// order, so it is a note, not an error).
static void ckpt_meta_write_bf16_path(cJSON *training, const trainer *tr) {
    cJSON_AddStringToObject(training, "bf16_path", bf16_path_name(kernel_ctx_bf16_path(tr->m.kernels)));
}

static void ckpt_meta_read_bf16_path(ckpt_meta *m) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m->root, "training");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "bf16_path");
    bf16_path p;
    m->bf16_path = cJSON_IsString(v) && bf16_path_parse(v->valuestring, &p) == 0 ? v->valuestring : NULL;
}

void ckpt_meta_note_bf16_path(const ckpt_meta *m, const trainer *tr, const char *file) {
    const char *now = bf16_path_name(kernel_ctx_bf16_path(tr->m.kernels));
    if (m->bf16_path && strcmp(m->bf16_path, now) != 0 && tr->opt.dtype == BG_BF16)
        bg_log_info("%s: saved on a CPU taking the %s bf16 path, resumed on one taking the %s "
                    "path (same numerics up to summation order)", file, m->bf16_path, now);
}
// ---- end of the bf16 path ---------------------------------------------------------------

ckpt_progress ckpt_progress_of(const trainer *tr) {
    return (ckpt_progress){tr->step, tr->samples, tr->loss_scale, tr->good_steps, tr->adam.step,
                           tr->skips, tr->spike};
}

// Loss-spike rewinds: the data ranges skipped ("skipped_samples": [[lo, hi], ...], global
// samples, written when there is one) and the detector's window ("spike_losses", oldest
// first, and "spike_run", written when --spike-rewind is on), so a resume repeats the
// run exactly. Absent: nothing skipped, an empty window.
static void write_spikes(cJSON *root, const ckpt_progress *p, int detector) {
    if (p->skips.n > 0) {
        cJSON *a = cJSON_AddArrayToObject(root, "skipped_samples");
        for (int i = 0; i < p->skips.n; i++) {
            cJSON *r = cJSON_CreateArray();
            cJSON_AddItemToArray(r, cJSON_CreateNumber((double)p->skips.lo[i]));
            cJSON_AddItemToArray(r, cJSON_CreateNumber((double)p->skips.hi[i]));
            cJSON_AddItemToArray(a, r);
        }
    }
    if (detector) {
        // cJSON prints doubles with enough digits to read back the same bits.
        cJSON_AddItemToObject(root, "spike_losses", cJSON_CreateDoubleArray(p->spike.loss, p->spike.n));
        cJSON_AddNumberToObject(root, "spike_run", p->spike.run);
    }
}

// "datasets" (a blended run only): each dataset's name and the samples drawn from it
// at the checkpoint's position, replayed from the weights (the blend is a function of
// the position), so an asynchronous save needs no copy of the sampler.
static void add_datasets(cJSON *data, const data_source *src, uint64_t samples) {
    blend_sampler b;
    blend_init(&b, src->weights, src->count);
    blend_seek(&b, samples);
    cJSON *list = cJSON_AddArrayToObject(data, "datasets");
    for (int d = 0; d < src->count; d++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", src->names[d]);
        cJSON_AddNumberToObject(e, "samples", (double)b.taken[d]);
        cJSON_AddItemToArray(list, e);
    }
    blend_free(&b);
}

int ckpt_meta_check_data(const ckpt_meta *m, const trainer *tr, const char *path) {
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(m->root, "data");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(data, "datasets");
    const data_source *src = &tr->train;
    if (!list && !src->named) return BG_OK;
    if (!list) return bg_error("%s: the checkpoint was not trained on a data mix; resume with --data", path);
    if (!src->named) return bg_error("%s: the checkpoint was trained on a data mix; resume with --data-mix", path);
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != src->count)
        return bg_error("%s: the checkpoint's data mix has %d datasets, --data-mix %d", path,
                        cJSON_IsArray(list) ? cJSON_GetArraySize(list) : -1, src->count);
    blend_sampler b;
    blend_init(&b, src->weights, src->count);
    blend_seek(&b, m->samples);
    int rc = BG_OK, d = 0;
    for (const cJSON *e = list->child; e && rc == BG_OK; e = e->next, d++) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "samples");
        if (!cJSON_IsString(name) || !cJSON_IsNumber(n))
            rc = bg_error("%s: bad \"datasets\" entry %d", path, d);
        else if (strcmp(name->valuestring, src->names[d]) != 0)
            rc = bg_error("%s: the checkpoint's dataset %d is '%s', --data-mix's '%s'", path, d, name->valuestring,
                          src->names[d]);
        else if (n->valuedouble != (double)b.taken[d])
            rc = bg_error("%s: dataset '%s': %.0f samples drawn in the checkpoint, %" PRIu64
                          " with these weights (the weights changed)", path, src->names[d], n->valuedouble,
                          b.taken[d]);
    }
    blend_free(&b);
    return rc;
}

char *ckpt_meta_json(const trainer *tr, const ckpt_progress *p, const char *const *files,
                     const uint64_t *sums_in, int n_files) {
    const train_options *o = &tr->opt;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "format_version", CKPT_FORMAT_VERSION);
    cJSON_AddNumberToObject(root, "step", (double)p->step);
    cJSON *data = cJSON_AddObjectToObject(root, "data");
    cJSON_AddNumberToObject(data, "samples_consumed", (double)p->samples);
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, o->seed);
    cJSON_AddStringToObject(data, "seed", seed);  // a string: JSON numbers lose 64-bit seeds
    cJSON_AddNumberToObject(data, "seq_len", o->seq_len);
    if (tr->train.named) add_datasets(data, &tr->train, p->samples);
    cJSON *lr = cJSON_AddObjectToObject(root, "lr_schedule");
    cJSON_AddNumberToObject(lr, "step", (double)p->step);
    cJSON_AddNumberToObject(lr, "total_steps", (double)o->steps);
    cJSON_AddNumberToObject(lr, "warmup", (double)o->warmup);
    cJSON_AddNumberToObject(lr, "max_lr", o->lr);
    cJSON_AddNumberToObject(lr, "min_lr", tr->min_lr);
    // fp16's dynamic loss scale and its run of good steps: exact resume needs both.
    cJSON_AddNumberToObject(root, "loss_scale", p->loss_scale);
    cJSON_AddNumberToObject(root, "loss_scale_good_steps", (double)p->good_steps);
    write_spikes(root, p, o->spike_rewind > 0);
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
    ckpt_meta_write_bf16_path(t, tr);
    if (o->data_mix) cJSON_AddStringToObject(t, "data_mix", o->data_mix);
    cJSON *sums = cJSON_AddObjectToObject(root, "checksums_xxh64");
    char hex[17];
    for (int i = 0; i < n_files; i++) {
        hex64(hex, sums_in[i]);
        cJSON_AddStringToObject(sums, files[i], hex);
    }
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

static int json_get_number(const cJSON *obj, const char *key, double *out, const char *file) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v)) return bg_error("%s: missing or non-numeric \"%s\"", file, key);
    *out = v->valuedouble;
    return BG_OK;
}

static int parse_hex64(const cJSON *sums, const char *key, uint64_t *out, const char *file);
int ckpt_meta_sum(const ckpt_meta *m, const char *file, uint64_t *sum, const char *path) {
    return parse_hex64(m->sums, file, sum, path);
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

// write_spikes' keys, bounded and checked before anything is stored.
static int read_spikes(ckpt_meta *m, const char *path) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(m->root, "skipped_samples");
    if (a) {
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > SKIP_RANGES_MAX)
            return bg_error("%s: bad \"skipped_samples\" (at most %d [lo, hi] ranges)", path, SKIP_RANGES_MAX);
        const cJSON *r;
        cJSON_ArrayForEach(r, a) {
            const cJSON *lo = cJSON_GetArrayItem(r, 0), *hi = cJSON_GetArrayItem(r, 1);
            if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) != 2 || !cJSON_IsNumber(lo) || !cJSON_IsNumber(hi) ||
                !whole(lo->valuedouble) || !whole(hi->valuedouble) || !(lo->valuedouble < hi->valuedouble))
                return bg_error("%s: bad \"skipped_samples\" range", path);
            int i = m->skips.n++;
            m->skips.lo[i] = (uint64_t)lo->valuedouble, m->skips.hi[i] = (uint64_t)hi->valuedouble;
        }
    }
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(m->root, "spike_losses");
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(m->root, "spike_run");
    if (w) {
        if (!cJSON_IsArray(w) || cJSON_GetArraySize(w) > SPIKE_WINDOW_MAX)
            return bg_error("%s: bad \"spike_losses\" (at most %d numbers)", path, SPIKE_WINDOW_MAX);
        const cJSON *x;
        cJSON_ArrayForEach(x, w) {
            if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
                return bg_error("%s: bad \"spike_losses\" value", path);
            m->spike.loss[m->spike.n++] = x->valuedouble;
        }
    }
    if (run && !(cJSON_IsNumber(run) && whole(run->valuedouble) && run->valuedouble < 1e9))
        return bg_error("%s: bad \"spike_run\"", path);
    m->spike.run = run ? (int)run->valuedouble : 0;
    return BG_OK;
}

void ckpt_meta_free(ckpt_meta *m) {
    cJSON_Delete(m->root);
    memset(m, 0, sizeof *m);
}

int ckpt_meta_read(ckpt_meta *m, const char *path) {
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
        ckpt_meta_free(m);
        return bg_error("%s: not valid JSON", path);
    }
    if (!digits) {
        ckpt_meta_free(m);
        return bg_error("%s: missing or malformed \"" SELF_SUM_KEY "\" (the file's checksum)", path);
    }
    double version = 0, step = 0, samples = 0, total = 0;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(m->root, "data");
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(m->root, "lr_schedule");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(data, "seed");
    const cJSON *sums = cJSON_GetObjectItemCaseSensitive(m->root, "checksums_xxh64");
    int rc = json_get_number(m->root, "format_version", &version, path);
    if (rc == BG_OK && !(version == 1 || version == CKPT_FORMAT_VERSION))
        rc = bg_error("%s: unsupported checkpoint format_version %g (this build reads %d to %d)", path,
                      version, CKPT_FORMAT_VERSION_MIN, CKPT_FORMAT_VERSION);
    if (rc == BG_OK) rc = json_get_number(m->root, "step", &step, path);
    if (rc == BG_OK && !cJSON_IsObject(data)) rc = bg_error("%s: missing data position", path);
    if (rc == BG_OK) rc = json_get_number(data, "samples_consumed", &samples, path);
    if (rc == BG_OK && cJSON_IsObject(lr)) rc = json_get_number(lr, "total_steps", &total, path);
    if (rc == BG_OK && (!whole(step) || !whole(samples) || !whole(total)))
        rc = bg_error("%s: bad step or data position", path);
    if (rc == BG_OK && !cJSON_IsString(seed)) rc = bg_error("%s: missing data seed", path);
    uint64_t sum;
    if (rc == BG_OK && !cJSON_IsObject(sums)) rc = bg_error("%s: missing \"checksums_xxh64\"", path);
    // Format 1 has its two files; format 2's files are named by its indexes.
    if (rc == BG_OK && version == 1) rc = parse_hex64(sums, "model.safetensors", &sum, path);
    if (rc == BG_OK && version == 1) rc = parse_hex64(sums, "optimizer.safetensors", &sum, path);
    // The loss scale: optional (1 when absent), positive and finite when present.
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(m->root, "loss_scale");
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(m->root, "loss_scale_good_steps");
    if (rc == BG_OK && ls && !(cJSON_IsNumber(ls) && isfinite(ls->valuedouble) && ls->valuedouble > 0))
        rc = bg_error("%s: bad \"loss_scale\"", path);
    if (rc == BG_OK && gs && !(cJSON_IsNumber(gs) && whole(gs->valuedouble)))
        rc = bg_error("%s: bad \"loss_scale_good_steps\"", path);
    m->loss_scale = ls ? ls->valuedouble : 0;
    m->good_steps = rc == BG_OK && gs ? (long)gs->valuedouble : 0;  // only once checked
    ckpt_meta_read_bf16_path(m);
    if (rc == BG_OK) rc = read_spikes(m, path);
    m->model_config = cJSON_GetObjectItemCaseSensitive(m->root, "model_config");
    if (rc == BG_OK && !cJSON_IsObject(m->model_config)) rc = bg_error("%s: missing model_config", path);
    if (rc != BG_OK) {
        ckpt_meta_free(m);
        return BG_ERR;
    }
    m->version = (int)version;
    m->sums = sums;
    m->step = (long)step;
    m->total_steps = (long)total;
    m->samples = (uint64_t)samples;
    m->seed = seed->valuestring;
    return BG_OK;
}

int ckpt_meta_check_config(const cJSON *saved, const model_config *cfg, const char *file) {
    char *text = cJSON_PrintUnformatted(saved);
    model_config ck;
    int rc = model_config_parse(&ck, text, file);
    free(text);
    if (rc != BG_OK) return BG_ERR;
    // A config built in code may leave num_key_value_heads 0 (= the heads); parsing
    // always gives the count.
    model_config run = *cfg;
    run.num_key_value_heads = model_kv_heads(cfg);
    if (memcmp(&ck, &run, sizeof ck) == 0) return BG_OK;
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
