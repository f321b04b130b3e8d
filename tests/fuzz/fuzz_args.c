// libFuzzer target: command-line flag parsing (core/args.c). The input is argv, its
// strings separated by NUL bytes, parsed against one spec of every kind of flag, first
// through args_split_files (as verbs that take files do), then args_parse.
// Invariants: accepted arguments set every required flag; errors name the verb.
#include "core/args.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *buf = malloc(size + 1);
    if (size) memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[4097];
    int argc = 0;
    for (size_t i = 0; i <= size; i++)
        if (i == 0 || buf[i - 1] == '\0') argv[argc++] = buf + i;
    if (size == 0) argc = 0;
    const char *str = NULL;
    int i32 = -7, sw = 0;
    long i64 = -7;
    float f = -7.0f;
    uint64_t u = 7;
    const arg_spec specs[] = {
        {"out", ARG_STR, &str, 1, "a path"},       {"steps", ARG_INT, &i32, 0, "an int"},
        {"tokens", ARG_LONG, &i64, 0, "a long"},   {"lr", ARG_FLOAT, &f, 0, "a float"},
        {"seed", ARG_U64, &u, 0, "a u64"},         {"stats", ARG_SWITCH, &sw, 0, "a switch"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    char **files = calloc((size_t)argc + 1, sizeof *files);
    int nfiles = 0;
    int nflags = args_split_files(specs, n, argc, argv, files, &nfiles);
    FUZZ_CHECK(nflags >= 0 && nflags + nfiles <= argc);
    bg_clear_error();
    if (args_parse(specs, n, nflags, argv, "fuzz") != BG_OK) {
        fuzz_check_error("fuzz: ");
    } else {
        FUZZ_CHECK(str != NULL);
        FUZZ_CHECK(f == f && f - f == 0.0f);  // finite
    }
    free(files);
    free(buf);
    return 0;
}
