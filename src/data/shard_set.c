// Shard sets: resolving a spec to sorted paths, opening and checking the shards.
#include "data/shard_set.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char **v;
    int n, cap;
} path_list;

static int list_add(path_list *l, const char *p) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, sizeof *v * (size_t)cap);
        if (!v) return bg_error_out_of_memory("out of memory listing %d shards", cap);
        l->v = v;
        l->cap = cap;
    }
    char *c = strdup(p);
    if (!c) return bg_error_out_of_memory("out of memory listing shards");
    l->v[l->n++] = c;
    return BG_OK;
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

// One element of a spec: a pattern, a directory or a plain path.
static int resolve_one(path_list *l, const char *p) {
    struct stat st;
    if (strpbrk(p, "*?[")) {
        glob_t g;
        int r = glob(p, 0, NULL, &g);
        if (r == GLOB_NOMATCH) return bg_error("%s: no file matches this pattern", p);
        if (r != 0) return bg_error("%s: cannot expand this pattern", p);
        int rc = BG_OK;
        for (size_t i = 0; i < g.gl_pathc && rc == BG_OK; i++) rc = list_add(l, g.gl_pathv[i]);
        globfree(&g);
        return rc;
    }
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(p);
        if (!d) return bg_error("%s: cannot list directory (%s)", p, strerror(errno));
        int was = l->n, rc = BG_OK;
        char buf[4096];
        for (struct dirent *e; rc == BG_OK && (e = readdir(d));) {
            if (e->d_name[0] == '.' || !ends_with(e->d_name, ".bin")) continue;
            snprintf(buf, sizeof buf, "%s/%s", p, e->d_name);
            rc = list_add(l, buf);
        }
        closedir(d);
        if (rc == BG_OK && l->n == was) return bg_error("%s: directory holds no token shards (*.bin)", p);
        return rc;
    }
    return list_add(l, p);  // missing: shard_open names it
}

static int cmp_path(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int resolve_list_file(path_list *l, const char *file) {
    FILE *f = fopen(file, "r");
    if (!f) return bg_error("%s: cannot open shard list (%s)", file, strerror(errno));
    char line[4096];
    int rc = BG_OK, was = l->n;
    while (rc == BG_OK && fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\r\n");
        line[n] = 0;
        if (n == 0 || line[0] == '#') continue;
        rc = resolve_one(l, line);
    }
    fclose(f);
    if (rc == BG_OK && l->n == was) return bg_error("%s: shard list names no files", file);
    return rc;
}

int shard_set_resolve(const char *spec, char ***paths, int *count) {
    *paths = NULL;
    *count = 0;
    path_list l = {0};
    int rc = BG_OK;
    if (!spec || !*spec) rc = bg_error("empty data path");
    else if (spec[0] == '@') rc = resolve_list_file(&l, spec + 1);
    else {
        char *s = strdup(spec);
        if (!s) return bg_error_out_of_memory("out of memory");
        char *save = NULL;
        for (char *tok = strtok_r(s, ",", &save); tok && rc == BG_OK; tok = strtok_r(NULL, ",", &save))
            rc = resolve_one(&l, tok);
        free(s);
        if (rc == BG_OK && l.n == 0) rc = bg_error("%s: names no files", spec);
    }
    if (rc != BG_OK) {
        shard_set_paths_free(l.v, l.n);
        return rc;
    }
    qsort(l.v, (size_t)l.n, sizeof *l.v, cmp_path);
    *paths = l.v;
    *count = l.n;
    return BG_OK;
}

void shard_set_paths_free(char **paths, int count) {
    for (int i = 0; i < count; i++) free(paths[i]);
    free(paths);
}

typedef struct {
    const token_shard *s;
    size_t i0;
    int vocab;
    size_t bad;  // the smallest bad position found; SIZE_MAX: none
} check_job;

static void check_range(void *ctx, size_t a, size_t b) {
    check_job *j = ctx;
    size_t i = shard_find_bad(j->s, j->i0 + a, j->i0 + b, j->vocab);
    if (i == j->i0 + b) return;
    size_t cur = __atomic_load_n(&j->bad, __ATOMIC_RELAXED);
    while (i < cur && !__atomic_compare_exchange_n(&j->bad, &cur, i, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

// Tokens below the vocabulary, in blocks split over the threads; a progress line
// once a check has run for a second.
static int check_tokens(shard_set *set, int vocab, int verbose) {
    size_t total = shard_set_tokens(set), done = 0;
    const size_t block = (size_t)1 << 26;
    double start = bg_now(), shown = start;
    int printed = 0;
    for (int k = 0; k < set->count; k++) {
        const token_shard *s = &set->shards[k];
        for (size_t i0 = 0; i0 < s->count; i0 += block) {
            size_t n = s->count - i0 < block ? s->count - i0 : block;
            check_job j = {s, i0, vocab, SIZE_MAX};
            bg_parallel_ranges(n, check_range, &j);
            if (j.bad != SIZE_MAX) {
                if (printed) fputc('\n', stderr);
                return bg_error("%s: token %u at position %zu is out of range (vocab_size %d)",
                                set->paths[k], shard_token(s, j.bad), j.bad, vocab);
            }
            done += n;
            double now = bg_now();
            if (verbose && now - shown >= 1.0) {
                shown = now;
                printed = 1;
                fprintf(stderr, "\r  checking %d shard%s: %.0f%% of %zu tokens ", set->count,
                        set->count == 1 ? "" : "s", 100.0 * (double)done / (double)total, total);
            }
        }
    }
    if (printed) fprintf(stderr, "\r  checked %d shards, %zu tokens in %.1f s\n", set->count, total, bg_now() - start);
    return BG_OK;
}

int shard_set_open(shard_set *set, const char *spec, int vocab_size, int verbose) {
    memset(set, 0, sizeof *set);
    if (shard_set_resolve(spec, &set->paths, &set->count) != BG_OK) return BG_ERR;
    set->shards = calloc((size_t)set->count, sizeof *set->shards);
    if (!set->shards) {
        shard_set_free(set);
        return bg_error_out_of_memory("out of memory opening %d shards", set->count);
    }
    for (int k = 0; k < set->count; k++)
        if (shard_open(&set->shards[k], set->paths[k]) != BG_OK) {
            shard_set_free(set);
            return BG_ERR;
        }
    for (int k = 1; k < set->count; k++)
        if (set->shards[k].version != set->shards[0].version) {
            int v0 = set->shards[0].version, vk = set->shards[k].version;
            bg_error("%s: token file version %d differs from %s's version %d", set->paths[k], vk,
                     set->paths[0], v0);
            shard_set_free(set);
            return BG_ERR;
        }
    if (check_tokens(set, vocab_size, verbose) != BG_OK) {
        shard_set_free(set);
        return BG_ERR;
    }
    return BG_OK;
}

void shard_set_free(shard_set *set) {
    if (set->shards)
        for (int k = 0; k < set->count; k++) shard_free(&set->shards[k]);
    free(set->shards);
    shard_set_paths_free(set->paths, set->count);
    memset(set, 0, sizeof *set);
}

size_t shard_set_tokens(const shard_set *set) {
    size_t n = 0;
    for (int k = 0; k < set->count; k++) n += set->shards[k].count;
    return n;
}
