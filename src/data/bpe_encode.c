// Encoding: pre-tokens (bpe_pretokenize.c), then merges inside each pre-token.
//
// Merging follows GPT-2's bpe(): repeatedly take the adjacent pair with the lowest
// merge rank and merge all its occurrences left to right. Done naively that is
// quadratic in the pre-token's length, and pre-tokens can be long (a megabyte of
// letters without a space is one pre-token), so pairs sit in a min-heap ordered by
// (rank, position) with lazy deletion: O(n log n). All heap entries of one rank are
// taken out before any is applied, so that pairs created by that round wait for the
// next one, exactly as in GPT-2's one pass per rank.
//
// Natural text repeats its words, so results for pre-tokens up to CACHE_MAX_WORD
// bytes are kept in a cache: most of the encoding time is one hash lookup per word.
#include "data/bpe_internal.h"
#include "core/error.h"

#include <string.h>

enum {
    CACHE_MAX_WORD = 64,              // longer pre-tokens are rare and not worth keeping
    CACHE_MAX_ENTRIES = 1 << 20,      // then the cache starts over: bounded memory
};

typedef struct {
    uint32_t rank, pos, left, right;
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
};

bpe_encoder *bpe_encoder_new(const bpe_tokenizer *tok) {
    bpe_encoder *e = bg_calloc(1, sizeof *e);
    e->tok = tok;
    bpe_bytes_map_init(&e->cache, 1 << 14);
    e->cache_cap = 1 << 16;
    e->cache_ids = bg_malloc(e->cache_cap * sizeof *e->cache_ids);
    return e;
}

void bpe_encoder_free(bpe_encoder *e) {
    if (!e) return;
    bpe_bytes_map_free(&e->cache);
    free(e->cache_ids);
    free(e->sym);
    free(e->next);
    free(e->prev);
    free(e->heap);
    free(e->round);
    bpe_ids_free(&e->word_ids);
    free(e);
}

static void reserve_scratch(bpe_encoder *e, size_t n) {
    if (n <= e->scratch_cap) return;
    size_t cap = e->scratch_cap ? e->scratch_cap : 256;
    while (cap < n) cap *= 2;
    free(e->sym);
    free(e->next);
    free(e->prev);
    free(e->heap);
    free(e->round);
    e->sym = bg_malloc(cap * sizeof *e->sym);
    e->next = bg_malloc(cap * sizeof *e->next);
    e->prev = bg_malloc(cap * sizeof *e->prev);
    // Each merge pushes at most two entries on top of the n - 1 initial ones.
    e->heap = bg_malloc(3 * cap * sizeof *e->heap);
    e->round = bg_malloc(3 * cap * sizeof *e->round);
    e->scratch_cap = cap;
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
    const bpe_merge_slot *m = bpe_merge_find(e->tok, e->sym[pos], e->sym[nx]);
    if (m) heap_push(e->heap, hn, (heap_entry){m->rank, pos, e->sym[pos], e->sym[nx]});
}

void bpe_merge_word(bpe_encoder *e, const uint8_t *word, size_t len, bpe_ids *out) {
    const bpe_tokenizer *t = e->tok;
    if (len == 0) return;
    BG_ASSERT(len < UINT32_MAX);
    reserve_scratch(e, len);
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
            sym[i] = bpe_merge_find(t, x.left, x.right)->result;
            sym[j] = UINT32_MAX;
            next[i] = next[j];
            if (next[j] != UINT32_MAX) prev[next[j]] = i;
            if (prev[i] != UINT32_MAX) push_pair(e, &hn, prev[i]);
            push_pair(e, &hn, i);
        }
    }
    for (uint32_t i = 0; i != UINT32_MAX; i = next[i]) bpe_ids_push(out, sym[i]);
}

static void encode_word(bpe_encoder *e, const uint8_t *w, size_t n, bpe_ids *out) {
    if (n == 1) {
        bpe_ids_push(out, e->tok->byte_token[w[0]]);
        return;
    }
    if (n > CACHE_MAX_WORD) {
        bpe_merge_word(e, w, n, out);
        return;
    }
    uint64_t h = bpe_hash_bytes(w, n);
    bpe_bytes_slot *s = bpe_bytes_map_find(&e->cache, w, n, h);
    if (s) {
        size_t off = (size_t)(s->value >> 8), cnt = (size_t)(s->value & 0xff);
        for (size_t k = 0; k < cnt; k++) bpe_ids_push(out, e->cache_ids[off + k]);
        return;
    }
    e->word_ids.count = 0;
    bpe_merge_word(e, w, n, &e->word_ids);
    size_t cnt = e->word_ids.count;
    if (e->cache.count >= CACHE_MAX_ENTRIES) {
        bpe_bytes_map_clear(&e->cache);
        e->cache_used = 0;
    }
    if (e->cache_used + cnt > e->cache_cap) {
        while (e->cache_used + cnt > e->cache_cap) e->cache_cap *= 2;
        uint32_t *p = realloc(e->cache_ids, e->cache_cap * sizeof *p);
        if (!p) {
            fprintf(stderr, "bagualu: out of memory growing the tokenizer cache\n");
            exit(3);
        }
        e->cache_ids = p;
    }
    memcpy(e->cache_ids + e->cache_used, e->word_ids.ids, cnt * sizeof(uint32_t));
    int added;
    s = bpe_bytes_map_insert(&e->cache, w, n, h, &added);
    s->value = (uint64_t)e->cache_used << 8 | cnt;
    e->cache_used += cnt;
    for (size_t k = 0; k < cnt; k++) bpe_ids_push(out, e->word_ids.ids[k]);
}

void bpe_encode(bpe_encoder *e, const uint8_t *text, size_t len, bpe_ids *out) {
    size_t pos = 0;
    while (pos < len) {
        size_t end = bpe_pretoken_end(text, len, pos);
        encode_word(e, text + pos, end - pos, out);
        pos = end;
    }
}
