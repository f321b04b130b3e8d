// bpe_load: from what a user types after --tokenizer to the right loader.
#include "data/bpe_internal.h"
#include "core/error.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// dir/name into buf; 0 when it does not fit.
static int join(char *buf, size_t cap, const char *dir, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    return n >= 0 && (size_t)n < cap;
}

static int load_gpt2_dir(bpe_tokenizer **out, const char *dir) {
    char enc[PATH_MAX], voc[PATH_MAX];
    if (!join(enc, sizeof enc, dir, "encoder.json") || !join(voc, sizeof voc, dir, "vocab.bpe"))
        return bg_error("%s: path too long", dir);
    if (!is_file(enc) || !is_file(voc))
        return bg_error("%s: no tokenizer here (a directory needs GPT-2's encoder.json and vocab.bpe)", dir);
    return bpe_load_gpt2(out, enc, voc);
}

int bpe_gpt2_cache_dir(char *buf, size_t cap) {
    const char *env = getenv("BAGUALU_GPT2_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n = env && *env ? snprintf(buf, cap, "%s", env)
            : xdg && *xdg ? snprintf(buf, cap, "%s/bagualu/gpt2", xdg)
            : home && *home ? snprintf(buf, cap, "%s/.cache/bagualu/gpt2", home)
                            : -1;
    return n >= 0 && (size_t)n < cap ? BG_OK : BG_ERR;
}

// "gpt2": the files scripts/fetch_gpt2.sh puts in data/gpt2 of the source tree, found
// from the working directory or from the executable (build/bagualu -> build/../data/gpt2),
// else the user's cache, where the command line fetches them on first use. The first
// directory holding encoder.json goes to dir; 0 when none does.
static int find_named_gpt2(char dir[PATH_MAX]) {
    char cand[4][PATH_MAX];
    int n = 0;
    join(cand[n++], sizeof cand[0], "data", "gpt2");
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        if (join(cand[n], sizeof cand[0], exe, "../data/gpt2")) n++;
        if (join(cand[n], sizeof cand[0], exe, "data/gpt2")) n++;
    }
    if (bpe_gpt2_cache_dir(cand[n], sizeof cand[0]) == BG_OK) n++;
    for (int i = 0; i < n; i++) {
        char enc[PATH_MAX];
        if (join(enc, sizeof enc, cand[i], "encoder.json") && is_file(enc)) {
            memcpy(dir, cand[i], PATH_MAX);
            return 1;
        }
    }
    return 0;
}

int bpe_gpt2_present(void) {
    const char *env = getenv("BAGUALU_GPT2_DIR");
    char dir[PATH_MAX], enc[PATH_MAX];
    if (env && *env) return join(enc, sizeof enc, env, "encoder.json") && is_file(enc);
    return find_named_gpt2(dir);
}

static int load_named_gpt2(bpe_tokenizer **out) {
    const char *env = getenv("BAGUALU_GPT2_DIR");
    if (env && *env) return load_gpt2_dir(out, env);
    char dir[PATH_MAX], cache[PATH_MAX];
    if (find_named_gpt2(dir)) return load_gpt2_dir(out, dir);
    if (bpe_gpt2_cache_dir(cache, sizeof cache) != BG_OK) snprintf(cache, sizeof cache, "the cache");
    return bg_error("gpt2: GPT-2's encoder.json and vocab.bpe not found in data/gpt2 or %s (run "
                    "scripts/fetch_gpt2.sh, or set BAGUALU_GPT2_DIR)", cache);
}

// The file beside `path` named `name`.
static void sibling(char *buf, size_t cap, const char *path, const char *name) {
    const char *slash = strrchr(path, '/');
    int n = slash ? snprintf(buf, cap, "%.*s/%s", (int)(slash - path), path, name) : snprintf(buf, cap, "%s", name);
    if (n < 0 || (size_t)n >= cap) buf[0] = 0;  // too long: the open that follows reports it
}

int bpe_load(bpe_tokenizer **out, const char *spec) {
    *out = NULL;
    if (strcmp(spec, "gpt2") == 0) return load_named_gpt2(out);
    if (is_dir(spec)) return load_gpt2_dir(out, spec);
    uint8_t *text;
    size_t len;
    if (bpe_read_file(spec, &text, &len, (size_t)1 << 30) != BG_OK) return BG_ERR;
    char other[PATH_MAX + 32];
    if (len >= 8 && memcmp(text, "#version", 8) == 0) {  // vocab.bpe given: encoder.json beside it
        free(text);
        sibling(other, sizeof other, spec, "encoder.json");
        return bpe_load_gpt2(out, other, spec);
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)text, len, &end, 0);
    size_t first = 0;
    while (first < len && (text[first] == ' ' || text[first] == '\n' || text[first] == '\t' || text[first] == '\r'))
        first++;
    // A file that starts like a JSON object but does not parse is a broken tokenizer
    // file (cut short, edited by hand): say where, rather than "unknown format".
    if (!root && first < len && text[first] == '{') {
        size_t at = end && end >= (const char *)text ? (size_t)(end - (const char *)text) : 0;
        free(text);
        return bg_error("%s: not valid JSON (near byte %zu): a damaged tokenizer file?", spec, at);
    }
    free(text);
    int rc;
    if (root && cJSON_IsObject(root) && bpe_tokjson_is_ours(root)) {
        rc = bpe_tokjson_parse(out, root, spec);
    } else if (root && cJSON_IsObject(root) && root->child && cJSON_IsNumber(root->child)) {
        sibling(other, sizeof other, spec, "vocab.bpe");  // encoder.json given: vocab.bpe beside it
        rc = bpe_load_gpt2(out, spec, other);
    } else {
        rc = bg_error("%s: unknown tokenizer format (expected gpt2, a tok.json from bagualu tokenizer train, "
                      "or GPT-2's encoder.json with vocab.bpe)", spec);
    }
    cJSON_Delete(root);
    return rc;
}
