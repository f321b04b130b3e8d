// Our tokenizer file, tok.json (written by `bagualu tokenizer train`):
//
//   {
//     "format": "bagualu-bpe",
//     "version": 1,
//     "pretokenizer": "gpt2",
//     "vocab_size": 16384,
//     "merges": [[32, 116], [104, 101], ...],
//     "special_tokens": {"<|endoftext|>": 16383}
//   }
//
// Token ids: 0..255 are the single bytes (id = byte value). Merge r (0-based, in
// rank order) joins two earlier tokens [left, right] into token 256 + r, whose bytes
// are left's followed by right's. The special tokens follow the merges; the only one
// now is "<|endoftext|>", at id 256 + number of merges, so vocab_size = 257 + merges.
// "pretokenizer": "gpt2" names the pattern that splits text before merging (GPT-2's).
// Every key is required and no other is allowed, so a file from a newer version is
// refused by name rather than misread.
#include "data/bpe_internal.h"
#include "core/error.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <string.h>

static int get_int(const cJSON *root, const char *key, long long lo, long long hi, long long *v,
                   const char *path) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it) return bg_error("%s: missing key \"%s\"", path, key);
    double d = it->valuedouble;
    if (!cJSON_IsNumber(it) || d != floor(d) || d < (double)lo || d > (double)hi)
        return bg_error("%s: \"%s\" must be an integer in %lld..%lld", path, key, lo, hi);
    *v = (long long)d;
    return BG_OK;
}

static int check_keys(const cJSON *root, const char *path) {
    static const char *known[] = {"format", "version", "pretokenizer", "vocab_size", "merges", "special_tokens"};
    for (const cJSON *it = root->child; it; it = it->next) {
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) ok |= strcmp(it->string, known[k]) == 0;
        if (!ok) return bg_error("%s: unknown key \"%.40s\" in a bagualu-bpe tokenizer", path, it->string);
    }
    return BG_OK;
}

static int parse(const cJSON *root, const char *path, bpe_tokenizer **out) {
    if (check_keys(root, path) != BG_OK) return BG_ERR;
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pretokenizer");
    if (!cJSON_IsString(pre) || strcmp(pre->valuestring, "gpt2") != 0)
        return bg_error("%s: \"pretokenizer\" must be \"gpt2\"", path);
    long long version = 0, vocab_size = 0;
    if (get_int(root, "version", 1, 1, &version, path) != BG_OK) return BG_ERR;
    if (get_int(root, "vocab_size", 257, 0x7FFFFFFF, &vocab_size, path) != BG_OK) return BG_ERR;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(root, "merges");
    if (!cJSON_IsArray(merges)) return bg_error("%s: \"merges\" must be an array of [left, right] id pairs", path);
    long long m = cJSON_GetArraySize(merges);
    if (vocab_size != 257 + m)
        return bg_error("%s: vocab_size %lld does not match 256 bytes + %lld merges + <|endoftext|>", path,
                        vocab_size, m);
    const cJSON *special = cJSON_GetObjectItemCaseSensitive(root, "special_tokens");
    const cJSON *eot = cJSON_GetObjectItemCaseSensitive(special, BPE_EOT_TEXT);
    if (!cJSON_IsObject(special) || cJSON_GetArraySize(special) != 1 || !cJSON_IsNumber(eot) ||
        eot->valuedouble != (double)(256 + m))
        return bg_error("%s: \"special_tokens\" must be {\"<|endoftext|>\": %lld}", path, 256 + m);

    bpe_merge *list = bg_malloc(((size_t)m + 1) * sizeof *list);
    int r = 0;
    for (const cJSON *pair = merges->child; pair; pair = pair->next, r++) {
        const cJSON *a = cJSON_GetArrayItem(pair, 0), *b = cJSON_GetArrayItem(pair, 1);
        double lim = 256.0 + r;  // a merge may only join tokens that exist before it
        if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) ||
            a->valuedouble != floor(a->valuedouble) || b->valuedouble != floor(b->valuedouble) ||
            a->valuedouble < 0 || b->valuedouble < 0 || a->valuedouble >= lim || b->valuedouble >= lim) {
            free(list);
            return bg_error("%s: merge %d must be [left, right] with ids of earlier tokens (below %d)", path,
                            r + 1, 256 + r);
        }
        list[r] = (bpe_merge){(uint32_t)a->valuedouble, (uint32_t)b->valuedouble, (uint32_t)(256 + r)};
    }
    return bpe_build_ours(out, list, (int)m, path);
}

// Whether a parsed JSON document claims to be ours (for bpe_load's format sniffing).
int bpe_tokjson_is_ours(const void *json) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive((const cJSON *)json, "format");
    return cJSON_IsString(f) && strcmp(f->valuestring, "bagualu-bpe") == 0;
}

int bpe_tokjson_parse(bpe_tokenizer **out, const void *json, const char *path) {
    *out = NULL;
    return parse((const cJSON *)json, path, out);
}

int bpe_load_tokjson(bpe_tokenizer **out, const char *path) {
    *out = NULL;
    uint8_t *text;
    size_t len;
    if (bpe_read_file(path, &text, &len, (size_t)1 << 30) != BG_OK) return BG_ERR;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)text, len, NULL, 0);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return bg_error("%s: not a JSON object; expected a bagualu-bpe tokenizer (tok.json)", path);
    }
    int rc = bpe_tokjson_is_ours(root) ? parse(root, path, out)
                                      : bg_error("%s: unknown tokenizer format (no \"format\": \"bagualu-bpe\")", path);
    cJSON_Delete(root);
    return rc;
}

int bpe_save(const bpe_tokenizer *t, const char *path) {
    if (!t->ours)
        return bg_error("%s: only tokenizers trained by bagualu are saved as tok.json (GPT-2's stays in its files)",
                        path);
    FILE *f = fopen(path, "wb");
    if (!f) return bg_error("%s: cannot create (%s)", path, strerror(errno));
    fprintf(f, "{\n  \"format\": \"bagualu-bpe\",\n  \"version\": 1,\n  \"pretokenizer\": \"gpt2\",\n");
    fprintf(f, "  \"vocab_size\": %d,\n  \"merges\": [", t->vocab_size);
    for (int r = 0; r < t->merge_count; r++)
        fprintf(f, "%s[%u, %u]", r == 0 ? "\n    " : r % 8 == 0 ? ",\n    " : ", ", t->merges[r].left,
                t->merges[r].right);
    fprintf(f, "%s],\n  \"special_tokens\": {\"%s\": %u}\n}\n", t->merge_count ? "\n  " : "", BPE_EOT_TEXT, t->eot);
    int ok = !ferror(f);
    ok &= fclose(f) == 0;
    if (!ok) return bg_error("%s: write error", path);
    return BG_OK;
}
