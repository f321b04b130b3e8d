// Encoding: pre-tokens (bpe_pretokenize.c), then merges inside each pre-token.
//
// Merging follows GPT-2's bpe(): repeatedly take the adjacent pair with the lowest
// merge rank and merge all its occurrences left to right. Done naively that is
// quadratic in the pre-token's length, and pre-tokens can be long (a megabyte of
// letters without a space is one pre-token), so pairs sit in a min-heap ordered by
// (rank, position) with lazy deletion: O(n log n). All heap entries of one rank are
// taken out before any is applied, so that pairs created by that round wait for the
// next one, exactly as in GPT-2's one pass per rank. Words up to SHORT_WORD bytes
// (nearly all) take the same rounds over small arrays instead.
//
// Natural text repeats its words, so results are cached per pre-token. Most words
// are short and become at most three tokens: those sit in a table that holds the
// word's bytes inline (two 64-bit compares instead of a memcmp through a pointer)
// and their ids beside them; other words up to CACHE_MAX_WORD bytes use a general
// byte-string map. Both start over when full, so memory stays bounded.
#include "data/bpe_internal.h"
#include "core/error.h"

#include <string.h>

enum {
    CACHE_MAX_WORD = 64,              // longer pre-tokens are rare and not worth keeping
    CACHE_MAX_ENTRIES = 1 << 20,      // then the cache starts over: bounded memory
    SMALL_MIN_BITS = 14,              // 2^14 slots of 32 bytes (512 KiB) to start with,
    SMALL_MAX_BITS = 20,              // doubling up to 32 MiB (a million distinct words)
    SMALL_WORD = 16,                  // bytes held inline
    SMALL_IDS = 3,
    SHORT_WORD = 32,                  // merged with arrays on the stack, no heap
};

#define MANY_IDS UINT32_MAX

typedef struct {
    uint64_t k0, k1;  // the word's bytes, zero-padded, little-endian
    uint32_t len;     // 0: empty slot
    uint32_t count;   // ids, or MANY_IDS: look in the general cache
    uint32_t ids[SMALL_IDS];
    uint32_t pad;
} small_slot;

typedef struct {
    uint32_t rank, pos, left, right, result;
} heap_entry;

struct bpe_encoder {
    const bpe_tokenizer *tok;
    bpe_bytes_map cache;    // word -> (offset into cache_ids) << 8 | id count
    uint32_t *cache_ids;
    size_t cache_used, cache_cap;
    // Scratch for one pre-token, indexed by the byte position where a symbol starts.
    uint32_t *sym;          // token id, UINT32_MAX once merged into its left neighbour
    uint32_t *next;         // UINT32_MAX: none
    uint32_t *prev;
    heap_entry *heap, *round;
    size_t scratch_cap;
    bpe_ids word_ids;
    small_slot *small;
    size_t small_count;
    int small_bits;
};

bpe_encoder *bpe_encoder_new(const bpe_tokenizer *tok) {
    bpe_encoder *e = bg_calloc(1, sizeof *e);
    e->tok = tok;
    bpe_bytes_map_init(&e->cache, 1 << 14);
    e->cache_cap = 1 << 16;
    e->cache_ids = bg_malloc(e->cache_cap * sizeof *e->cache_ids);
    e->small_bits = SMALL_MIN_BITS;
    e->small = bg_calloc((size_t)1 << SMALL_MIN_BITS, sizeof *e->small);
    return e;
}

static void free_scratch(bpe_encoder *e) {
    free(e->sym);
    free(e->next);
    free(e->prev);
    free(e->heap);
    free(e->round);
    e->sym = e->next = e->prev = NULL;
    e->heap = e->round = NULL;
    e->scratch_cap = 0;
}

void bpe_encoder_free(bpe_encoder *e) {
    if (!e) return;
    bpe_bytes_map_free(&e->cache);
    free(e->cache_ids);
    free(e->small);
    free_scratch(e);
    bpe_ids_free(&e->word_ids);
    free(e);
}

// Scratch for a pre-token of n bytes; its length is the input's choice (a megabyte of
// letters is one pre-token), so running out of memory is an error, not a crash.
static int reserve_scratch(bpe_encoder *e, size_t n) {
    if (n <= e->scratch_cap) return BG_OK;
    size_t cap = e->scratch_cap ? e->scratch_cap : 256;
    while (cap < n) cap *= 2;
    free_scratch(e);
    e->sym = bg_try_malloc(cap * sizeof *e->sym);
    e->next = e->sym ? bg_try_malloc(cap * sizeof *e->next) : NULL;
    e->prev = e->next ? bg_try_malloc(cap * sizeof *e->prev) : NULL;
    // Each merge pushes at most two entries on top of the n - 1 initial ones.
    e->heap = e->prev ? bg_try_malloc(3 * cap * sizeof *e->heap) : NULL;
    e->round = e->heap ? bg_try_malloc(3 * cap * sizeof *e->round) : NULL;
    if (!e->round) {
        free_scratch(e);
        return BG_ERR;
    }
    e->scratch_cap = cap;
    return BG_OK;
}

static inline int heap_less(heap_entry a, heap_entry b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(heap_entry *h, size_t *n, heap_entry x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(x, h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static heap_entry heap_pop(heap_entry *h, size_t *n) {
    heap_entry top = h[0], x = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && heap_less(h[c + 1], h[c])) c++;
        if (!heap_less(h[c], x)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = x;
    return top;
}

static void push_pair(bpe_encoder *e, size_t *hn, uint32_t pos) {
    uint32_t nx = e->next[pos];
    if (nx == UINT32_MAX) return;
    uint32_t rank, result;
    if (bpe_merge_find(e->tok, e->sym[pos], e->sym[nx], &rank, &result))
        heap_push(e->heap, hn, (heap_entry){rank, pos, e->sym[pos], e->sym[nx], result});
}

// Short words: the same rounds over plain arrays holding each adjacent pair's rank,
// where a scan for the lowest rank costs less than heap upkeep.
static int merge_short_word(const bpe_tokenizer *t, const uint8_t *word, size_t len, bpe_ids *out) {
    uint32_t sym[SHORT_WORD], rank[SHORT_WORD], result[SHORT_WORD];
    uint8_t fresh[SHORT_WORD];  // made by the last round: its pairs need new ranks
    size_t n = len;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_token[word[i]];
    for (size_t i = 0; i + 1 < n; i++)
        if (!bpe_merge_find(t, sym[i], sym[i + 1], &rank[i], &result[i])) rank[i] = UINT32_MAX;
    while (n > 1) {
        uint32_t r = UINT32_MAX;
        for (size_t i = 0; i + 1 < n; i++) r = rank[i] < r ? rank[i] : r;
        if (r == UINT32_MAX) break;
        // One pass, left to right, over the pairs that had rank r when it began: a
        // pair made by this pass has another rank (its left part is a new token).
        size_t k = 0;
        for (size_t i = 0; i < n; k++) {
            if (i + 1 < n && rank[i] == r) {
                sym[k] = result[i];
                fresh[k] = 1;
                i += 2;
            } else {
                // Keeps the rank of (sym[i], sym[i + 1]): right if sym[i + 1] survives,
                // and if it does not, it is fresh and the rank is redone below.
                sym[k] = sym[i];
                rank[k] = rank[i];
                result[k] = result[i];
                fresh[k] = 0;
                i++;
            }
        }
        n = k;
        for (size_t i = 0; i + 1 < n; i++)
            if ((fresh[i] | fresh[i + 1]) && !bpe_merge_find(t, sym[i], sym[i + 1], &rank[i], &result[i]))
                rank[i] = UINT32_MAX;
    }
    for (size_t i = 0; i < n; i++)
        if (bpe_ids_push(out, sym[i]) != BG_OK) return BG_ERR;
    return BG_OK;
}

int bpe_merge_word(bpe_encoder *e, const uint8_t *word, size_t len, bpe_ids *out) {
    const bpe_tokenizer *t = e->tok;
    if (len == 0) return BG_OK;
    if (len <= SHORT_WORD) return merge_short_word(t, word, len, out);
    BG_ASSERT(len < UINT32_MAX);
    if (reserve_scratch(e, len) != BG_OK) return BG_ERR;
    uint32_t *sym = e->sym, *next = e->next, *prev = e->prev;
    for (size_t i = 0; i < len; i++) {
        sym[i] = t->byte_token[word[i]];
        next[i] = i + 1 < len ? (uint32_t)(i + 1) : UINT32_MAX;
        prev[i] = i > 0 ? (uint32_t)(i - 1) : UINT32_MAX;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < len; i++) push_pair(e, &hn, (uint32_t)i);
    while (hn > 0) {
        uint32_t rank = e->heap[0].rank;
        size_t rn = 0;
        while (hn > 0 && e->heap[0].rank == rank) e->round[rn++] = heap_pop(e->heap, &hn);
        for (size_t k = 0; k < rn; k++) {
            heap_entry x = e->round[k];
            uint32_t i = x.pos, j = next[i];
            // Stale: an earlier merge changed this symbol or its right neighbour.
            if (sym[i] != x.left || j == UINT32_MAX || sym[j] != x.right) continue;
            sym[i] = x.result;
            sym[j] = UINT32_MAX;
            next[i] = next[j];
            if (next[j] != UINT32_MAX) prev[next[j]] = i;
            if (prev[i] != UINT32_MAX) push_pair(e, &hn, prev[i]);
            push_pair(e, &hn, i);
        }
    }
    for (uint32_t i = 0; i != UINT32_MAX; i = next[i])
        if (bpe_ids_push(out, sym[i]) != BG_OK) return BG_ERR;
    return BG_OK;
}

static inline uint64_t load64(const uint8_t *p) {
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

// The low n bytes of x (n <= 8).
static inline uint64_t low_bytes(uint64_t x, size_t n) { return n >= 8 ? x : x & ((1ULL << (8 * n)) - 1); }

static inline int emit(bpe_ids *out, const uint32_t *ids, size_t n) {
    if (out->count + n > out->capacity) {
        for (size_t k = 0; k < n; k++)
            if (bpe_ids_push(out, ids[k]) != BG_OK) return BG_ERR;
        return BG_OK;
    }
    uint32_t *dst = out->ids + out->count;
    for (size_t k = 0; k < n; k++) dst[k] = ids[k];  // n is small: no memcpy call
    out->count += n;
    return BG_OK;
}

// Keeps ids for word in the general cache.
static int general_store(bpe_encoder *e, const uint8_t *w, size_t n, uint64_t h, const uint32_t *ids, size_t cnt) {
    if (e->cache.count >= CACHE_MAX_ENTRIES) {
        bpe_bytes_map_clear(&e->cache);
        e->cache_used = 0;
    }
    if (e->cache_used + cnt > e->cache_cap) {
        size_t cap = e->cache_cap;
        while (e->cache_used + cnt > cap) cap *= 2;
        uint32_t *p = realloc(e->cache_ids, cap * sizeof *p);
        if (!p) return bg_error_out_of_memory("out of memory growing the tokenizer cache");
        e->cache_ids = p;
        e->cache_cap = cap;
    }
    memcpy(e->cache_ids + e->cache_used, ids, cnt * sizeof(uint32_t));
    int added;
    bpe_bytes_slot *s = bpe_bytes_map_insert(&e->cache, w, n, h, &added);
    if (!s) return BG_ERR;
    s->value = (uint64_t)e->cache_used << 8 | cnt;
    e->cache_used += cnt;
    return BG_OK;
}

// General cache: words over SMALL_WORD bytes or over SMALL_IDS ids.
static int encode_word_general(bpe_encoder *e, const uint8_t *w, size_t n, bpe_ids *out) {
    if (n > CACHE_MAX_WORD) return bpe_merge_word(e, w, n, out);
    uint64_t h = bpe_hash_bytes(w, n);
    bpe_bytes_slot *s = bpe_bytes_map_find(&e->cache, w, n, h);
    if (s) return emit(out, e->cache_ids + (s->value >> 8), (size_t)(s->value & 0xff));
    e->word_ids.count = 0;
    if (bpe_merge_word(e, w, n, &e->word_ids) != BG_OK ||
        general_store(e, w, n, h, e->word_ids.ids, e->word_ids.count) != BG_OK)
        return BG_ERR;
    return emit(out, e->word_ids.ids, e->word_ids.count);
}

static inline uint64_t small_hash(uint64_t k0, uint64_t k1, size_t n) {
    uint64_t h = (k0 * 0x9E3779B97F4A7C15ULL) ^ (k1 * 0xC2B2AE3D27D4EB4FULL) ^ n;
    return (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ULL;  // the top bits pick the slot
}

// Doubles the small table (rehashing what it holds), or at its largest empties it.
static int small_grow(bpe_encoder *e) {
    size_t old_cap = (size_t)1 << e->small_bits;
    if (e->small_bits == SMALL_MAX_BITS) {
        memset(e->small, 0, old_cap * sizeof *e->small);
        e->small_count = 0;
        return BG_OK;
    }
    small_slot *old = e->small;
    small_slot *grown = bg_try_calloc(old_cap * 2, sizeof *e->small);
    if (!grown) return BG_ERR;
    e->small = grown;
    e->small_bits++;
    size_t mask = ((size_t)1 << e->small_bits) - 1;
    for (size_t j = 0; j < old_cap; j++) {
        if (old[j].len == 0) continue;
        size_t i = (size_t)(small_hash(old[j].k0, old[j].k1, old[j].len) >> (64 - e->small_bits));
        while (e->small[i].len != 0) i = (i + 1) & mask;
        e->small[i] = old[j];
    }
    free(old);
    return BG_OK;
}

// w[0..n) is a pre-token of a text that ends at `end` (reading up to 16 bytes past
// the word is fine while inside the text).
static int encode_word(bpe_encoder *e, const uint8_t *w, size_t n, const uint8_t *end, bpe_ids *out) {
    if (n == 1) return bpe_ids_push(out, e->tok->byte_token[w[0]]);
    if (n > SMALL_WORD) return encode_word_general(e, w, n, out);
    uint64_t k0, k1;
    if ((size_t)(end - w) >= 16) {
        k0 = load64(w);
        k1 = load64(w + 8);
    } else {
        uint8_t buf[16] = {0};
        memcpy(buf, w, n);
        k0 = load64(buf);
        k1 = load64(buf + 8);
    }
    k0 = low_bytes(k0, n);
    k1 = n > 8 ? low_bytes(k1, n - 8) : 0;
    uint64_t h = small_hash(k0, k1, n);
    size_t mask = ((size_t)1 << e->small_bits) - 1;
    size_t i = (size_t)(h >> (64 - e->small_bits));
    for (;; i = (i + 1) & mask) {
        small_slot *s = &e->small[i];
        if (s->len == 0) break;
        if (s->k0 == k0 && s->k1 == k1 && s->len == n)
            return s->count == MANY_IDS ? encode_word_general(e, w, n, out) : emit(out, s->ids, s->count);
    }
    e->word_ids.count = 0;
    if (bpe_merge_word(e, w, n, &e->word_ids) != BG_OK) return BG_ERR;
    size_t cnt = e->word_ids.count;
    if ((e->small_count + 1) * 2 > mask + 1) {  // half full: keep probes short
        if (small_grow(e) != BG_OK) return BG_ERR;
        mask = ((size_t)1 << e->small_bits) - 1;
        i = (size_t)(h >> (64 - e->small_bits));
    }
    while (e->small[i].len != 0) i = (i + 1) & mask;
    small_slot *s = &e->small[i];
    s->k0 = k0;
    s->k1 = k1;
    s->len = (uint32_t)n;
    e->small_count++;
    if (cnt > SMALL_IDS) {  // a short word of many tokens (rare in English): the slot says where to look
        // Should the store fail, a later lookup misses the general cache and merges again.
        s->count = MANY_IDS;
        if (general_store(e, w, n, bpe_hash_bytes(w, n), e->word_ids.ids, cnt) != BG_OK) return BG_ERR;
        return emit(out, e->word_ids.ids, cnt);
    }
    s->count = (uint32_t)cnt;
    memcpy(s->ids, e->word_ids.ids, cnt * sizeof(uint32_t));
    return emit(out, s->ids, cnt);
}

int bpe_encode_part(bpe_encoder *e, const uint8_t *text, size_t len, size_t *pos, size_t budget,
                    bpe_ids *out) {
    size_t at = *pos, stop = len - at > budget ? at + budget : len;
    int rc = BG_OK;
    while (at < stop && rc == BG_OK) {
        // Pre-tokens are found against the whole text: where one ends depends on
        // what follows it.
        size_t end = bpe_pretoken_end(text, len, at);
        rc = encode_word(e, text + at, end - at, text + len, out);
        if (rc == BG_OK) at = end;
    }
    *pos = at;
    return rc;
}

int bpe_encode(bpe_encoder *e, const uint8_t *text, size_t len, bpe_ids *out) {
    size_t pos = 0;
    return bpe_encode_part(e, text, len, &pos, len, out);
}
