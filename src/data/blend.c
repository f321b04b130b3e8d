// Blended datasets: the spec and the Megatron sampler (format in blend.h).
#include "data/blend.h"
#include "core/error.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int name_ok(const char *s) {
    if (!*s || strlen(s) > 64) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-'))
            return 0;
    return 1;
}

static int add_entry(blend_entry **v, int *n, const char *name, double w, int has_w, const char *data,
                     int weights_required, const char *where) {
    if (!name_ok(name))
        return bg_error("%s: dataset name '%s' must be 1-64 of [A-Za-z0-9_-]", where, name);
    for (int i = 0; i < *n; i++)
        if (!strcmp((*v)[i].name, name)) return bg_error("%s: dataset '%s' named twice", where, name);
    if (!has_w && weights_required) return bg_error("%s: dataset '%s' has no weight", where, name);
    if (has_w && !(w > 0 && isfinite(w)))
        return bg_error("%s: dataset '%s' has weight %g; weights must be > 0", where, name, w);
    if (!data || !*data) return bg_error("%s: dataset '%s' names no shards", where, name);
    blend_entry *e = realloc(*v, sizeof *e * (size_t)(*n + 1));
    if (!e) return bg_error_out_of_memory("out of memory");
    *v = e;
    e[*n] = (blend_entry){strdup(name), has_w ? w : 0, strdup(data)};
    (*n)++;
    return BG_OK;
}

static int parse_json(const char *path, int weights_required, blend_entry **out, int *count) {
    FILE *f = fopen(path, "rb");
    if (!f) return bg_error("%s: cannot open data mix (%s)", path, strerror(errno));
    char buf[65536];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    int big = !feof(f);
    fclose(f);
    if (big) return bg_error("%s: data mix file is larger than 64 KiB", path);
    buf[len] = 0;
    cJSON *root = cJSON_Parse(buf);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return bg_error("%s: a data mix must be a JSON array of {name, weight, data}", path);
    }
    int rc = BG_OK;
    for (cJSON *it = root->child; it && rc == BG_OK; it = it->next) {
        cJSON *n = cJSON_GetObjectItem(it, "name"), *w = cJSON_GetObjectItem(it, "weight"),
              *d = cJSON_GetObjectItem(it, "data");
        if (!cJSON_IsString(n) || !cJSON_IsString(d) || (w && !cJSON_IsNumber(w)))
            rc = bg_error("%s: each dataset needs a string name and data and a number weight", path);
        else
            rc = add_entry(out, count, n->valuestring, w ? w->valuedouble : 0, w != NULL, d->valuestring,
                           weights_required, path);
    }
    cJSON_Delete(root);
    return rc;
}

int blend_parse(const char *spec, int weights_required, blend_entry **out, int *count) {
    *out = NULL;
    *count = 0;
    size_t L = strlen(spec);
    int rc = BG_OK;
    if (L > 5 && !strcmp(spec + L - 5, ".json")) rc = parse_json(spec, weights_required, out, count);
    else {
        char *s = strdup(spec), *save = NULL;
        for (char *tok = strtok_r(s, ",", &save); tok && rc == BG_OK; tok = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(tok, '=');
            if (!eq) {
                rc = bg_error("%s: '%s' is not name:weight=shards", spec, tok);
                break;
            }
            *eq = 0;
            char *colon = strchr(tok, ':'), *end = NULL;
            double w = 0;
            if (colon) {
                *colon = 0;
                errno = 0;
                w = strtod(colon + 1, &end);
                if (end == colon + 1 || *end || errno) {
                    rc = bg_error("%s: dataset '%s' has weight '%s', not a number", spec, tok, colon + 1);
                    break;
                }
            }
            rc = add_entry(out, count, tok, w, colon != NULL, eq + 1, weights_required, spec);
        }
        free(s);
    }
    if (rc == BG_OK && *count == 0) rc = bg_error("%s: data mix names no dataset", spec);
    if (rc != BG_OK) {
        blend_entries_free(*out, *count);
        *out = NULL;
        *count = 0;
    }
    return rc;
}

void blend_entries_free(blend_entry *e, int count) {
    for (int i = 0; i < count; i++) free(e[i].name), free(e[i].data);
    free(e);
}

void blend_init(blend_sampler *b, const double *weights, int count) {
    b->count = count;
    b->weights = bg_malloc(sizeof(double) * (size_t)count);
    b->taken = bg_calloc((size_t)count, sizeof(uint64_t));
    double sum = 0;
    for (int d = 0; d < count; d++) sum += weights[d];
    // Validation sets may come without weights (all 0): they are never sampled, but
    // the sampler stays well defined with equal shares.
    for (int d = 0; d < count; d++) b->weights[d] = sum > 0 ? weights[d] / sum : 1.0 / count;
    b->pos = 0;
}

void blend_free(blend_sampler *b) {
    free(b->weights);
    free(b->taken);
    b->weights = NULL;
    b->taken = NULL;
}

int blend_next(blend_sampler *b, uint64_t *local) {
    double i = b->pos > 1 ? (double)b->pos : 1.0;
    int best = 0;
    double best_err = b->weights[0] * i - (double)b->taken[0];
    for (int d = 1; d < b->count; d++) {
        double err = b->weights[d] * i - (double)b->taken[d];
        if (err > best_err) best = d, best_err = err;
    }
    *local = b->taken[best]++;
    b->pos++;
    return best;
}

void blend_seek(blend_sampler *b, uint64_t pos) {
    if (pos < b->pos) {
        b->pos = 0;
        memset(b->taken, 0, sizeof(uint64_t) * (size_t)b->count);
    }
    uint64_t local;
    while (b->pos < pos) blend_next(b, &local);
}
