// A run's data: shard sets, their loaders and the blend over them (data_source.h).
#include "data/data_source.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

int data_source_open(data_source *s, const char *shards, const char *mix, int weights_required, int vocab_size,
                     int T, uint64_t seed, int verbose) {
    memset(s, 0, sizeof *s);
    blend_entry *e = NULL;
    int n = 1;
    if (mix && blend_parse(mix, weights_required, &e, &n) != BG_OK) return BG_ERR;
    s->count = n;
    s->named = mix != NULL;
    s->names = s->named ? bg_calloc((size_t)n, sizeof *s->names) : NULL;
    s->weights = bg_calloc((size_t)n, sizeof *s->weights);
    s->sets = bg_calloc((size_t)n, sizeof *s->sets);
    s->loaders = bg_calloc((size_t)n, sizeof *s->loaders);
    int rc = BG_OK;
    for (int d = 0; d < n && rc == BG_OK; d++) {
        const char *spec = mix ? e[d].data : shards;
        if (mix) s->names[d] = strdup(e[d].name);
        s->weights[d] = mix ? e[d].weight : 1.0;
        rc = shard_set_open(&s->sets[d], spec, vocab_size, verbose);
        if (rc == BG_OK) rc = loader_init(&s->loaders[d], &s->sets[d], T, seed + (uint64_t)d, spec);
        if (rc != BG_OK && mix) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", bg_last_error());
            rc = bg_error("dataset '%s': %s", e[d].name, msg);
        }
    }
    blend_entries_free(e, mix ? n : 0);
    if (rc != BG_OK) {
        data_source_free(s);
        return BG_ERR;
    }
    blend_init(&s->blend, s->weights, n);
    return BG_OK;
}

void data_source_free(data_source *s) {
    for (int d = 0; d < s->count; d++) {
        if (s->loaders) loader_free(&s->loaders[d]);
        if (s->sets) shard_set_free(&s->sets[d]);
        if (s->names) free(s->names[d]);
    }
    free(s->loaders);
    free(s->sets);
    free(s->names);
    free(s->weights);
    blend_free(&s->blend);
    memset(s, 0, sizeof *s);
}

void data_source_seek(data_source *s, uint64_t pos) { blend_seek(&s->blend, pos); }

void data_source_batch(data_source *s, uint64_t first, int GB, int lo, int B, int *inputs, int *targets) {
    if (s->blend.pos != first) blend_seek(&s->blend, first);
    int T = s->loaders[0].T;
    for (int i = 0; i < GB; i++) {
        uint64_t local;
        int d = blend_next(&s->blend, &local);
        if (i >= lo && i < lo + B)
            loader_sample(&s->loaders[d], local, inputs + (size_t)(i - lo) * T, targets + (size_t)(i - lo) * T);
    }
}

int data_source_find(const data_source *s, const char *name) {
    for (int d = 0; s->named && d < s->count; d++)
        if (!strcmp(s->names[d], name)) return d;
    return -1;
}
