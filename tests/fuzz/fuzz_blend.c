// libFuzzer target: the --data-mix / --valid-mix spec (data/blend.c), in both forms:
// the input as the "name:weight=shards,..." string, and as a file whose name ends in
// .json (the JSON array form); each with weights required and not.
// Invariants on accepted specs: at least one dataset, names of 1-64 [A-Za-z0-9_-] and
// unique, weights finite and > 0 where given (and given when required), shards named;
// on errors nothing is returned and the message names the spec (or the file).
#include "data/blend.h"
#include "fuzz_util.h"

#include <math.h>

static char dir[64], path[80];

static void remove_dir(void) {
    unlink(path);
    rmdir(dir);
}

static void check(const char *spec, int weights_required) {
    blend_entry *e = (blend_entry *)1;
    int n = -1;
    bg_clear_error();
    if (blend_parse(spec, weights_required, &e, &n) != BG_OK) {
        FUZZ_CHECK(e == NULL && n == 0);
        char prefix[256];  // the message is cut at 1 KiB: compare the start of the spec
        snprintf(prefix, sizeof prefix, "%s", spec);
        fuzz_check_error(prefix);
        return;
    }
    FUZZ_CHECK(e && n >= 1);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(e[i].name);
        FUZZ_CHECK(len >= 1 && len <= 64 && strspn(e[i].name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                                  "0123456789_-") == len);
        for (int k = 0; k < i; k++) FUZZ_CHECK(strcmp(e[i].name, e[k].name) != 0);
        FUZZ_CHECK(e[i].data && e[i].data[0]);
        FUZZ_CHECK(e[i].weight == 0 || (isfinite(e[i].weight) && e[i].weight > 0));
        FUZZ_CHECK(!weights_required || e[i].weight > 0);
    }
    blend_entries_free(e, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1 << 17)) return 0;
    // The JSON form: a path ending in ".json", since the name chooses the form.
    if (!path[0]) {
        snprintf(dir, sizeof dir, "/tmp/bagualu_fuzz_blend_XXXXXX");
        FUZZ_CHECK(mkdtemp(dir));
        snprintf(path, sizeof path, "%s/mix.json", dir);
        atexit(remove_dir);
        FUZZ_CHECK(symlink(fuzz_file(0, "", 0), path) == 0);  // in memory: no disk write per input
    }
    fuzz_file(0, data, size);
    check(path, 1);
    check(path, 0);
    // The string form (up to the first NUL, as argv would carry it).
    char *text = malloc(size + 1);
    if (size) memcpy(text, data, size);
    text[size] = '\0';
    size_t len = strlen(text);
    if (!(len > 5 && !strcmp(text + len - 5, ".json"))) {  // a path: not this form
        check(text, 1);
        check(text, 0);
    }
    free(text);
    return 0;
}
