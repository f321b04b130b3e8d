// Open-addressing hash map from byte strings to 64-bit values: the encoder's word
// cache, the trainer's word counts, and token lookups while loading files.
// Keys live in one growing byte store, so a map is three allocations however many
// words it holds.
#include "data/bpe_internal.h"
#include "core/error.h"

#include <string.h>

// Reads 8 bytes at a time (memcpy keeps it alignment-safe) and mixes the length in,
// so that words differing only in trailing bytes still spread.
uint64_t bpe_hash_bytes(const uint8_t *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xA0761D6478BD642FULL);
    while (n >= 8) {
        uint64_t x;
        memcpy(&x, s, 8);
        h = (h ^ x) * 0xE7037ED1A0B428DBULL;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t x = 0;
    if (n) memcpy(&x, s, n);
    h = (h ^ x) * 0xE7037ED1A0B428DBULL;
    return bpe_mix64(h);
}

static void clear_slots(bpe_bytes_slot *slots, size_t capacity) {
    for (size_t i = 0; i < capacity; i++) slots[i].len = UINT32_MAX;
}

void bpe_bytes_map_init(bpe_bytes_map *m, size_t expected) {
    memset(m, 0, sizeof *m);
    size_t cap = 16;
    while (cap < expected * 2) cap *= 2;
    m->slots = bg_malloc(cap * sizeof *m->slots);
    clear_slots(m->slots, cap);
    m->mask = cap - 1;
    m->keys_cap = 4096;
    m->keys = bg_malloc(m->keys_cap);
}

void bpe_bytes_map_free(bpe_bytes_map *m) {
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

void bpe_bytes_map_clear(bpe_bytes_map *m) {
    clear_slots(m->slots, m->mask + 1);
    m->count = 0;
    m->keys_used = 0;
}

bpe_bytes_slot *bpe_bytes_map_find(const bpe_bytes_map *m, const uint8_t *key, size_t n, uint64_t h) {
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        bpe_bytes_slot *s = &m->slots[i];
        if (s->len == UINT32_MAX) return NULL;
        if (s->hash == h && s->len == n && memcmp(m->keys + s->offset, key, n) == 0) return s;
    }
}

static int grow(bpe_bytes_map *m) {
    bpe_bytes_slot *old = m->slots;
    size_t old_cap = m->mask + 1, cap = old_cap * 2;
    bpe_bytes_slot *slots = cap <= SIZE_MAX / sizeof *slots ? malloc(cap * sizeof *slots) : NULL;
    if (!slots) return bg_error_out_of_memory("out of memory growing a hash map to %zu slots", cap);
    clear_slots(slots, cap);
    m->slots = slots;
    m->mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].len == UINT32_MAX) continue;
        size_t j = old[i].hash & m->mask;
        while (m->slots[j].len != UINT32_MAX) j = (j + 1) & m->mask;
        m->slots[j] = old[i];
    }
    free(old);
    return BG_OK;
}

bpe_bytes_slot *bpe_bytes_map_insert(bpe_bytes_map *m, const uint8_t *key, size_t n, uint64_t h, int *added) {
    bpe_bytes_slot *s = bpe_bytes_map_find(m, key, n, h);
    *added = 0;
    if (s) return s;
    BG_ASSERT(n < UINT32_MAX);
    // Offsets are 32-bit to keep slots small: a key store past 4 GiB is a caller bug
    // (the encoder's cache clears itself long before).
    BG_ASSERT(m->keys_used + n <= UINT32_MAX);
    if ((m->count + 1) * 4 > (m->mask + 1) * 3 && grow(m) != BG_OK) return NULL;  // load factor <= 3/4
    if (m->keys_used + n > m->keys_cap) {
        size_t cap = m->keys_cap;
        while (m->keys_used + n > cap) cap *= 2;
        uint8_t *k = realloc(m->keys, cap);
        if (!k) {
            bg_error_out_of_memory("out of memory growing a hash map to %zu bytes", cap);
            return NULL;
        }
        m->keys = k;
        m->keys_cap = cap;
    }
    memcpy(m->keys + m->keys_used, key, n);
    size_t i = h & m->mask;
    while (m->slots[i].len != UINT32_MAX) i = (i + 1) & m->mask;
    s = &m->slots[i];
    s->hash = h;
    s->offset = (uint32_t)m->keys_used;
    s->len = (uint32_t)n;
    s->value = 0;
    m->keys_used += n;
    m->count++;
    *added = 1;
    return s;
}
