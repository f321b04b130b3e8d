// BPE training, byte-level, on GPT-2's pre-tokens.
//
// Texts are split into pre-tokens and only the distinct words are kept, with counts.
// Then, merge by merge: take the most frequent adjacent pair (summed over words,
// weighted by count) and make it a new token, merging its occurrences inside every
// word left to right, as encoding will.
//
// Ties between equally frequent pairs go to the smallest (left id, right id): ids
// are assigned in merge order, so the result depends only on the text, never on hash
// order or platform.
//
// Speed: counts are kept per pair and updated incrementally. Each pair lists the
// words it occurs in (a list that may hold stale entries: they are checked when
// used), so a merge touches only the words containing its pair. A max-heap keyed on
// (count, -left, -right) finds the next pair; entries go stale when a count changes
// and a fresh entry is pushed, the stale one is skipped when popped (its count no
// longer matches).
#include "data/bpe_internal.h"
#include "core/error.h"

#include <string.h>

// Longer pre-tokens (a page of letters without a space) are counted in pieces of
// this many bytes: it bounds the work per word and changes no realistic merge.
enum { MAX_TRAIN_WORD = 256 };

struct bpe_trainer {
    bpe_bytes_map words;  // word bytes -> count
};

bpe_trainer *bpe_trainer_new(void) {
    bpe_trainer *tr = bg_calloc(1, sizeof *tr);
    bpe_bytes_map_init(&tr->words, 1 << 16);
    return tr;
}

void bpe_trainer_free(bpe_trainer *tr) {
    if (!tr) return;
    bpe_bytes_map_free(&tr->words);
    free(tr);
}

size_t bpe_trainer_unique_words(const bpe_trainer *tr) { return tr->words.count; }

int bpe_trainer_add_text(bpe_trainer *tr, const uint8_t *text, size_t len) {
    size_t pos = 0;
    while (pos < len) {
        size_t end = bpe_pretoken_end(text, len, pos);
        for (size_t a = pos; a < end; a += MAX_TRAIN_WORD) {
            size_t n = end - a < MAX_TRAIN_WORD ? end - a : MAX_TRAIN_WORD;
            int added;
            bpe_bytes_slot *s = bpe_bytes_map_insert(&tr->words, text + a, n, bpe_hash_bytes(text + a, n), &added);
            if (!s) return BG_ERR;
            s->value++;
        }
        pos = end;
    }
    return BG_OK;
}

int bpe_trainer_merge(bpe_trainer *dst, const bpe_trainer *src) {
    const bpe_bytes_map *m = &src->words;
    for (size_t i = 0; i <= m->mask; i++) {
        const bpe_bytes_slot *s = &m->slots[i];
        if (s->len == UINT32_MAX) continue;
        int added;
        bpe_bytes_slot *d = bpe_bytes_map_insert(&dst->words, bpe_bytes_map_key(m, s), s->len, s->hash, &added);
        if (!d) return BG_ERR;
        d->value += s->value;
    }
    return BG_OK;
}

typedef struct {
    uint32_t left, right;
    int64_t count;
    int64_t count_before;  // at the start of the current merge, for touched pairs
    uint32_t touched;      // merge number + 1 that last touched this pair
    uint32_t *words;       // words that (may) contain the pair, no two equal in a row
    uint32_t nwords, capwords;
} pair_stat;

typedef struct {
    int64_t count;
    uint32_t left, right, pair;
} heap_entry;

typedef struct {
    // Words: symbols sym[start[w] .. start[w] + len[w]), rewritten in place.
    uint32_t *sym;
    size_t *start;
    uint32_t *len;
    int64_t *freq;
    uint32_t *stamp;  // merge number + 1 that last visited the word
    size_t nwords;
    // Pairs: a hash table (pair key -> index) over an array of stats.
    pair_stat *pairs;
    size_t npairs, cappairs;
    uint64_t *keys;
    uint32_t *index;
    size_t table_mask;
    heap_entry *heap;
    size_t nheap, capheap;
    uint32_t *touched;
    size_t ntouched, captouched;
} state;

// Room for `need` (at least 1) elements in p (capacity *cap): the array, perhaps moved,
// or NULL (out of memory) with p left as it was.
static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = c <= SIZE_MAX / elem ? realloc(p, c * elem) : NULL;
    if (!q) {
        bg_error_out_of_memory("out of memory while training the tokenizer");
        return NULL;
    }
    *cap = c;
    return q;
}

static int table_resize(state *s, size_t cap) {
    uint64_t *keys = bg_try_malloc(cap * sizeof *keys);
    uint32_t *index = keys ? bg_try_malloc(cap * sizeof *index) : NULL;
    if (!index) {
        free(keys);
        return BG_ERR;
    }
    free(s->keys);
    free(s->index);
    s->keys = keys;
    s->index = index;
    for (size_t i = 0; i < cap; i++) s->keys[i] = UINT64_MAX;
    s->table_mask = cap - 1;
    for (size_t p = 0; p < s->npairs; p++) {
        uint64_t key = bpe_pair_key(s->pairs[p].left, s->pairs[p].right);
        size_t i = bpe_mix64(key) & s->table_mask;
        while (s->keys[i] != UINT64_MAX) i = (i + 1) & s->table_mask;
        s->keys[i] = key;
        s->index[i] = (uint32_t)p;
    }
    return BG_OK;
}

// The index of the pair's stats, made on first sight; UINT32_MAX when out of memory.
static uint32_t pair_of(state *s, uint32_t left, uint32_t right) {
    uint64_t key = bpe_pair_key(left, right);
    size_t i = bpe_mix64(key) & s->table_mask;
    for (; s->keys[i] != UINT64_MAX; i = (i + 1) & s->table_mask)
        if (s->keys[i] == key) return s->index[i];
    if ((s->npairs + 1) * 2 > s->table_mask + 1) {
        if (table_resize(s, (s->table_mask + 1) * 2) != BG_OK) return UINT32_MAX;
        return pair_of(s, left, right);
    }
    pair_stat *pairs = grow(s->pairs, &s->cappairs, s->npairs + 1, sizeof *s->pairs);
    if (!pairs) return UINT32_MAX;
    s->pairs = pairs;
    pair_stat *p = &s->pairs[s->npairs];
    memset(p, 0, sizeof *p);
    p->left = left;
    p->right = right;
    s->keys[i] = key;
    s->index[i] = (uint32_t)s->npairs;
    return (uint32_t)s->npairs++;
}

static int pair_add_word(pair_stat *p, uint32_t w) {
    if (p->nwords && p->words[p->nwords - 1] == w) return BG_OK;
    size_t cap = p->capwords;
    uint32_t *words = grow(p->words, &cap, (size_t)p->nwords + 1, sizeof *p->words);
    if (!words) return BG_ERR;
    p->words = words;
    p->capwords = (uint32_t)cap;
    p->words[p->nwords++] = w;
    return BG_OK;
}

// Max-heap: higher count first, then smaller (left, right).
static int heap_before(heap_entry a, heap_entry b) {
    if (a.count != b.count) return a.count > b.count;
    if (a.left != b.left) return a.left < b.left;
    return a.right < b.right;
}

static int heap_push(state *s, uint32_t p) {
    heap_entry *heap = grow(s->heap, &s->capheap, s->nheap + 1, sizeof *s->heap);
    if (!heap) return BG_ERR;
    s->heap = heap;
    heap_entry x = {s->pairs[p].count, s->pairs[p].left, s->pairs[p].right, p};
    size_t i = s->nheap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!heap_before(x, s->heap[up])) break;
        s->heap[i] = s->heap[up];
        i = up;
    }
    s->heap[i] = x;
    return BG_OK;
}

static heap_entry heap_pop(state *s) {
    heap_entry top = s->heap[0], x = s->heap[--s->nheap];
    size_t i = 0, n = s->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_before(s->heap[c + 1], s->heap[c])) c++;
        if (!heap_before(s->heap[c], x)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = x;
    return top;
}

static int touch(state *s, uint32_t p, uint32_t stamp) {
    pair_stat *ps = &s->pairs[p];
    if (ps->touched == stamp) return BG_OK;
    uint32_t *touched = grow(s->touched, &s->captouched, s->ntouched + 1, sizeof *s->touched);
    if (!touched) return BG_ERR;
    s->touched = touched;
    ps->touched = stamp;
    ps->count_before = ps->count;
    s->touched[s->ntouched++] = p;
    return BG_OK;
}

// Rewrites word w with (left, right) -> id, moving its pair counts along. A failure
// (out of memory) leaves the counts half moved: training then stops.
static int merge_in_word(state *s, uint32_t w, uint32_t left, uint32_t right, uint32_t id, uint32_t stamp) {
    uint32_t *sym = s->sym + s->start[w];
    uint32_t n = s->len[w];
    int found = 0;
    for (uint32_t i = 0; i + 1 < n && !found; i++) found = sym[i] == left && sym[i + 1] == right;
    if (!found) return BG_OK;  // a stale entry of the pair's word list
    int64_t f = s->freq[w];
    for (uint32_t i = 0; i + 1 < n; i++) {
        uint32_t p = pair_of(s, sym[i], sym[i + 1]);
        if (p == UINT32_MAX || touch(s, p, stamp) != BG_OK) return BG_ERR;
        s->pairs[p].count -= f;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n;) {
        if (i + 1 < n && sym[i] == left && sym[i + 1] == right) {
            sym[k++] = id;
            i += 2;
        } else {
            sym[k++] = sym[i++];
        }
    }
    s->len[w] = k;
    for (uint32_t i = 0; i + 1 < k; i++) {
        uint32_t p = pair_of(s, sym[i], sym[i + 1]);
        if (p == UINT32_MAX || touch(s, p, stamp) != BG_OK) return BG_ERR;
        s->pairs[p].count += f;
        // Only pairs with the new token are new to this word.
        if ((sym[i] == id || sym[i + 1] == id) && pair_add_word(&s->pairs[p], w) != BG_OK) return BG_ERR;
    }
    return BG_OK;
}

static void state_free(state *s) {
    for (size_t p = 0; p < s->npairs; p++) free(s->pairs[p].words);
    free(s->pairs);
    free(s->keys);
    free(s->index);
    free(s->heap);
    free(s->touched);
    free(s->sym);
    free(s->start);
    free(s->len);
    free(s->freq);
    free(s->stamp);
}

int bpe_train(bpe_trainer *tr, int vocab_size, bpe_tokenizer **out, void (*progress)(void *, int, int),
              void *ctx) {
    *out = NULL;
    if (vocab_size < 257)
        return bg_error("vocabulary size %d is too small: 256 byte tokens and <|endoftext|> need 257", vocab_size);
    const int want = vocab_size - 257;
    state s;
    memset(&s, 0, sizeof s);
    const bpe_bytes_map *wm = &tr->words;
    // Words of one byte have no pairs: leave them out.
    size_t total = 0;
    for (size_t i = 0; i <= wm->mask; i++)
        if (wm->slots[i].len != UINT32_MAX && wm->slots[i].len > 1) {
            s.nwords++;
            total += wm->slots[i].len;
        }
    // Sized by the text: running out of memory is an error for the caller (and so is
    // every growth below).
    bpe_merge *merges = NULL;
    s.sym = bg_try_malloc((total + 1) * sizeof *s.sym);
    if (!s.sym || !(s.start = bg_try_malloc((s.nwords + 1) * sizeof *s.start)) ||
        !(s.len = bg_try_malloc((s.nwords + 1) * sizeof *s.len)) ||
        !(s.freq = bg_try_malloc((s.nwords + 1) * sizeof *s.freq)) ||
        !(s.stamp = bg_try_calloc(s.nwords + 1, sizeof *s.stamp)))
        goto fail;
    size_t w = 0, at = 0;
    for (size_t i = 0; i <= wm->mask; i++) {
        const bpe_bytes_slot *sl = &wm->slots[i];
        if (sl->len == UINT32_MAX || sl->len <= 1) continue;
        const uint8_t *b = bpe_bytes_map_key(wm, sl);
        s.start[w] = at;
        s.len[w] = sl->len;
        s.freq[w] = (int64_t)sl->value;
        for (uint32_t k = 0; k < sl->len; k++) s.sym[at++] = b[k];  // our ids 0..255 are the bytes
        w++;
    }
    if (table_resize(&s, 1 << 16) != BG_OK) goto fail;
    for (uint32_t wi = 0; wi < s.nwords; wi++) {
        const uint32_t *sym = s.sym + s.start[wi];
        for (uint32_t k = 0; k + 1 < s.len[wi]; k++) {
            uint32_t p = pair_of(&s, sym[k], sym[k + 1]);
            if (p == UINT32_MAX) goto fail;
            s.pairs[p].count += s.freq[wi];
            if (pair_add_word(&s.pairs[p], wi) != BG_OK) goto fail;
        }
    }
    for (uint32_t p = 0; p < s.npairs; p++)
        if (heap_push(&s, p) != BG_OK) goto fail;

    if (!(merges = bg_try_malloc(((size_t)want + 1) * sizeof *merges))) goto fail;
    int done = 0;
    while (done < want && s.nheap > 0) {
        heap_entry top = heap_pop(&s);
        pair_stat *ps = &s.pairs[top.pair];
        if (top.count != ps->count || ps->count <= 0) continue;  // stale
        uint32_t id = (uint32_t)(256 + done), stamp = (uint32_t)done + 1;
        uint32_t left = ps->left, right = ps->right;
        merges[done] = (bpe_merge){left, right, id};
        s.ntouched = 0;
        // merge_in_word may grow the pairs array: index, never hold pointers across it.
        for (uint32_t k = 0; k < s.pairs[top.pair].nwords; k++) {
            uint32_t wi = s.pairs[top.pair].words[k];
            if (s.stamp[wi] == stamp) continue;
            s.stamp[wi] = stamp;
            if (merge_in_word(&s, wi, left, right, id, stamp) != BG_OK) goto fail;
        }
        // The merged pair is gone from every word; its list is no longer needed.
        free(s.pairs[top.pair].words);
        s.pairs[top.pair].words = NULL;
        s.pairs[top.pair].nwords = s.pairs[top.pair].capwords = 0;
        for (size_t k = 0; k < s.ntouched; k++) {
            pair_stat *t = &s.pairs[s.touched[k]];
            if (t->count != t->count_before && t->count > 0 && heap_push(&s, s.touched[k]) != BG_OK) goto fail;
        }
        done++;
        if (progress && (done % 256 == 0 || done == want)) progress(ctx, done, want);
    }
    state_free(&s);
    return bpe_build_ours(out, merges, done, "trained tokenizer");
fail:
    state_free(&s);
    free(merges);
    return BG_ERR;
}
