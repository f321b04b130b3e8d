#include "core/args.h"
#include "core/error.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_value(const arg_spec *s, const char *v, const char *verb) {
    char *end = NULL;
    errno = 0;
    switch (s->kind) {
    case ARG_STR:
        *(const char **)s->dest = v;
        return BG_OK;
    case ARG_INT:
    case ARG_LONG: {
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || (s->kind == ARG_INT && (x > INT_MAX || x < INT_MIN)))
            return bg_error("%s: --%s expects an integer, got \"%s\"", verb, s->name, v);
        if (s->kind == ARG_INT) *(int *)s->dest = (int)x;
        else *(long *)s->dest = x;
        return BG_OK;
    }
    case ARG_U64: {
        if (v[0] == '-') return bg_error("%s: --%s expects a non-negative integer, got \"%s\"", verb, s->name, v);
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end)
            return bg_error("%s: --%s expects a non-negative integer, got \"%s\"", verb, s->name, v);
        *(uint64_t *)s->dest = x;
        return BG_OK;
    }
    case ARG_FLOAT: {
        double x = strtod(v, &end);
        // Finite as a float too: "1e39" is a finite double but an infinite float.
        if (errno || end == v || *end || !isfinite(x) || !isfinite((float)x))
            return bg_error("%s: --%s expects a number, got \"%s\"", verb, s->name, v);
        *(float *)s->dest = (float)x;
        return BG_OK;
    }
    case ARG_SWITCH:
        return BG_ERR;
    }
    return BG_ERR;
}

int args_parse(const arg_spec *specs, int count, int argc, char **argv, const char *verb) {
    int seen[64] = {0};
    BG_ASSERT(count <= 64);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            return bg_error("%s: unexpected argument \"%s\" (flags start with --)", verb, a);
        int found = -1;
        for (int j = 0; j < count; j++)
            if (strcmp(a + 2, specs[j].name) == 0) found = j;
        if (found < 0) return bg_error("%s: unknown flag \"%s\" (see bagualu %s --help)", verb, a, verb);
        const arg_spec *s = &specs[found];
        if (seen[found]) return bg_error("%s: flag --%s given twice", verb, s->name);
        seen[found] = 1;
        if (s->kind == ARG_SWITCH) {
            *(int *)s->dest = 1;
            continue;
        }
        if (i + 1 >= argc) return bg_error("%s: flag --%s needs a value", verb, s->name);
        if (parse_value(s, argv[++i], verb) != BG_OK) return BG_ERR;
    }
    for (int j = 0; j < count; j++)
        if (specs[j].required && !seen[j]) return bg_error("%s: missing required flag --%s", verb, specs[j].name);
    return BG_OK;
}

void args_usage(const arg_spec *specs, int count, const char *verb, const char *summary) {
    printf("usage: bagualu %s [flags]\n%s\n\nflags:\n", verb, summary);
    for (int j = 0; j < count; j++)
        printf("  --%-16s %s%s\n", specs[j].name, specs[j].help, specs[j].required ? " (required)" : "");
}

int args_help(const arg_spec *specs, int count, int argc, char **argv, const char *verb,
              const char *summary) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            args_usage(specs, count, verb, summary);
            return 1;
        }
    return 0;
}

int args_split_files(const arg_spec *specs, int count, int argc, char **argv, char **files, int *nfiles) {
    int nflags = 0;
    *nfiles = 0;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0) {
            files[(*nfiles)++] = argv[i];
            continue;
        }
        argv[nflags++] = argv[i];
        int takes_value = 1;
        for (int j = 0; j < count; j++)
            if (!strcmp(argv[i] + 2, specs[j].name)) takes_value = specs[j].kind != ARG_SWITCH;
        if (takes_value && i + 1 < argc) argv[nflags++] = argv[++i];
    }
    return nflags;
}

int args_set(const arg_spec *specs, int count, const char *name, const char *value, const char *verb) {
    for (int j = 0; j < count; j++) {
        if (strcmp(name, specs[j].name) != 0) continue;
        if (specs[j].kind != ARG_SWITCH) return parse_value(&specs[j], value, verb);
        if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0)
            return bg_error("%s: %s expects 0 or 1, got \"%s\"", verb, name, value);
        *(int *)specs[j].dest = value[0] == '1';
        return BG_OK;
    }
    return bg_error("%s: unknown option \"%s\"", verb, name);
}
