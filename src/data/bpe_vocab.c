// The tokenizer's tables, however it was loaded: each token's bytes (for decoding),
// the token of each single byte (where encoding starts), and the merges by rank with
// a hash table from (left, right) to (rank, result) (how encoding proceeds).
#include "data/bpe_internal.h"
#include "core/error.h"

#include <string.h>

static int ids_grow(bpe_ids *v) {
    size_t cap = v->capacity ? v->capacity * 2 : 1024;
    uint32_t *p = cap <= SIZE_MAX / sizeof *p ? realloc(v->ids, cap * sizeof *p) : NULL;
    if (!p) return bg_error_out_of_memory("out of memory growing a token list to %zu ids", cap);
    v->ids = p;
    v->capacity = cap;
    return BG_OK;
}

int bpe_ids_push(bpe_ids *v, uint32_t id) {
    if (v->count == v->capacity && ids_grow(v) != BG_OK) return BG_ERR;
    v->ids[v->count++] = id;
    return BG_OK;
}

void bpe_ids_free(bpe_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

static size_t token_len(const uint64_t *offset, uint32_t id) { return (size_t)(offset[id + 1] - offset[id]); }

int bpe_tokenizer_build(bpe_tokenizer **out, int vocab_size, uint8_t *bytes, uint64_t *offset,
                        bpe_merge *merges, int merge_count, uint32_t eot, int ours, const char *what) {
    *out = NULL;
    bpe_tokenizer *t = bg_try_calloc(1, sizeof *t);
    if (!t) {
        free(bytes);
        free(offset);
        free(merges);
        return BG_ERR;
    }
    t->vocab_size = vocab_size;
    t->bytes = bytes;
    t->offset = offset;
    t->merges = merges;
    t->merge_count = merge_count;
    t->eot = eot;
    t->ours = ours;
    int rc = BG_OK;
    if (vocab_size < 257 || eot >= (uint32_t)vocab_size) {
        rc = bg_error("%s: a byte-level vocabulary needs at least 257 tokens and <|endoftext|> inside it", what);
        goto done;
    }
    for (int b = 0; b < 256; b++) t->byte_token[b] = UINT32_MAX;
    for (int id = 0; id < vocab_size; id++) {
        if (token_len(offset, (uint32_t)id) != 1 || (uint32_t)id == eot) continue;
        uint8_t b = bytes[offset[id]];
        if (t->byte_token[b] != UINT32_MAX) {
            rc = bg_error("%s: tokens %u and %d both stand for the byte 0x%02x", what, t->byte_token[b], id, b);
            goto done;
        }
        t->byte_token[b] = (uint32_t)id;
    }
    for (int b = 0; b < 256; b++)
        if (t->byte_token[b] == UINT32_MAX) {
            rc = bg_error("%s: no token for the byte 0x%02x, so not every text could be encoded", what, b);
            goto done;
        }
    // Load factor at most 1/2: lookups of pairs that do not merge (most of them) end
    // at the first empty slot.
    int bits = 4;
    while (((uint64_t)1 << bits) < (uint64_t)merge_count * 2) bits++;
    uint64_t cap = (uint64_t)1 << bits;
    t->table_mask = cap - 1;
    t->table_shift = 64 - bits;
    if (vocab_size <= 65536) {
        if (!(t->compact = bg_try_malloc(cap * sizeof *t->compact))) {
            rc = BG_ERR;
            goto done;
        }
        for (uint64_t i = 0; i < cap; i++) t->compact[i] = UINT64_MAX;
    } else {
        if (!(t->table = bg_try_malloc(cap * sizeof *t->table))) {
            rc = BG_ERR;
            goto done;
        }
        for (uint64_t i = 0; i < cap; i++) t->table[i].pair = UINT64_MAX;
    }
    for (int r = 0; r < merge_count; r++) {
        bpe_merge m = merges[r];
        uint32_t v = (uint32_t)vocab_size;
        if (m.left >= v || m.right >= v || m.result >= v) {
            rc = bg_error("%s: merge %d refers to a token outside the vocabulary", what, r + 1);
            goto done;
        }
        size_t ll = token_len(offset, m.left), lr = token_len(offset, m.right);
        if (m.left == eot || m.right == eot || m.result == eot || token_len(offset, m.result) != ll + lr ||
            memcmp(bytes + offset[m.result], bytes + offset[m.left], ll) != 0 ||
            memcmp(bytes + offset[m.result] + ll, bytes + offset[m.right], lr) != 0) {
            rc = bg_error("%s: merge %d does not produce the concatenation of its two tokens", what, r + 1);
            goto done;
        }
        uint32_t earlier, unused;
        if (bpe_merge_find(t, m.left, m.right, &earlier, &unused)) {
            rc = bg_error("%s: merge %d repeats merge %u", what, r + 1, earlier + 1);
            goto done;
        }
        if (t->compact) {
            uint64_t key = (uint64_t)m.left << 16 | m.right;
            uint64_t i = bpe_pair_slot(t, key);
            while (t->compact[i] != UINT64_MAX) i = (i + 1) & t->table_mask;
            t->compact[i] = key << 32 | (uint64_t)r << 16 | m.result;
        } else {
            uint64_t key = bpe_pair_key(m.left, m.right);
            uint64_t i = bpe_pair_slot(t, key);
            while (t->table[i].pair != UINT64_MAX) i = (i + 1) & t->table_mask;
            t->table[i] = (bpe_merge_slot){key, (uint32_t)r, m.result};
        }
    }
done:
    if (rc != BG_OK) {
        bpe_free(t);
        return rc;
    }
    *out = t;
    return BG_OK;
}

void bpe_free(bpe_tokenizer *t) {
    if (!t) return;
    free(t->bytes);
    free(t->offset);
    free(t->merges);
    free(t->table);
    free(t->compact);
    free(t);
}

int bpe_vocab_size(const bpe_tokenizer *t) { return t->vocab_size; }
uint32_t bpe_eot_token(const bpe_tokenizer *t) { return t->eot; }
int bpe_merge_count(const bpe_tokenizer *t) { return t->merge_count; }

void bpe_merge_at(const bpe_tokenizer *t, int rank, uint32_t *left, uint32_t *right, uint32_t *result) {
    BG_ASSERT(rank >= 0 && rank < t->merge_count);
    *left = t->merges[rank].left;
    *right = t->merges[rank].right;
    *result = t->merges[rank].result;
}

const uint8_t *bpe_token_bytes(const bpe_tokenizer *t, uint32_t id, size_t *len) {
    BG_ASSERT(id < (uint32_t)t->vocab_size);
    *len = token_len(t->offset, id);
    return t->bytes + t->offset[id];
}

long long bpe_decode(const bpe_tokenizer *t, const uint32_t *ids, size_t count, uint8_t *out, size_t out_cap) {
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (ids[i] >= (uint32_t)t->vocab_size)
            return bg_error("token id %u at position %zu is out of range (vocabulary of %d)", ids[i], i,
                            t->vocab_size);
        size_t len = token_len(t->offset, ids[i]);
        if (n + len <= out_cap) memcpy(out + n, t->bytes + t->offset[ids[i]], len);
        n += len;
    }
    return (long long)n;
}

enum { MAX_TOKEN_BYTES = 1 << 16 };  // far beyond any real token; stops doubling chains

int bpe_build_ours(bpe_tokenizer **out, bpe_merge *merges, int m, const char *what) {
    *out = NULL;
    int v = 257 + m;
    uint64_t *offset = bg_try_malloc(((size_t)v + 1) * sizeof *offset);
    if (!offset) {
        free(merges);
        return BG_ERR;
    }
    // Lengths first, so that the byte buffer is allocated once.
    for (int i = 0; i <= 256; i++) offset[i] = (uint64_t)i;
    for (int r = 0; r < m; r++) {
        uint32_t left = merges[r].left, right = merges[r].right, id = (uint32_t)(256 + r);
        BG_ASSERT(merges[r].result == id && left < id && right < id);
        uint64_t len = token_len(offset, left) + token_len(offset, right);
        if (len > MAX_TOKEN_BYTES) {
            free(offset);
            free(merges);
            return bg_error("%s: merge %d makes a token of %llu bytes (at most %d)", what, r + 1,
                            (unsigned long long)len, MAX_TOKEN_BYTES);
        }
        offset[id + 1] = offset[id] + len;
    }
    const size_t eot_len = sizeof BPE_EOT_TEXT - 1;
    offset[v] = offset[v - 1] + eot_len;
    uint8_t *bytes = bg_try_malloc((size_t)offset[v]);
    if (!bytes) {
        free(offset);
        free(merges);
        return BG_ERR;
    }
    for (int i = 0; i < 256; i++) bytes[i] = (uint8_t)i;
    for (int r = 0; r < m; r++) {
        uint32_t left = merges[r].left, right = merges[r].right;
        uint8_t *dst = bytes + offset[256 + r];
        memcpy(dst, bytes + offset[left], token_len(offset, left));
        memcpy(dst + token_len(offset, left), bytes + offset[right], token_len(offset, right));
    }
    memcpy(bytes + offset[v - 1], BPE_EOT_TEXT, eot_len);
    return bpe_tokenizer_build(out, v, bytes, offset, merges, m, (uint32_t)(v - 1), 1, what);
}
