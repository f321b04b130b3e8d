#ifndef BG_DATA_BPE_INTERNAL_H
#define BG_DATA_BPE_INTERNAL_H
// Shared between the bpe_*.c files (and their tests); not part of the module's interface.
#include "data/bpe.h"

#include <stddef.h>
#include <stdint.h>

// ---- character classes of GPT-2's pattern (bpe_unicode_table.c, generated) ----
enum { BPE_OTHER = 0, BPE_LETTER = 1, BPE_NUMBER = 2, BPE_SPACE = 3 };
extern const uint16_t bpe_uclass_block[0x1100];
extern const uint8_t bpe_uclass_row[][256];

static inline int bpe_uclass(uint32_t cp) {
    return bpe_uclass_row[bpe_uclass_block[cp >> 8]][cp & 0xff];
}

// ---- pre-tokenization (bpe_pretokenize.c) ----
// Returns the end of the pre-token starting at pos < len: the match that
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// finds there. A byte that is not part of valid UTF-8 counts as one "other" character.
size_t bpe_pretoken_end(const uint8_t *s, size_t len, size_t pos);
// Decodes one UTF-8 character at s[0..n) (n >= 1): sets *cp, returns its length, or
// returns 1 with *cp = 0xFFFFFFFF for a byte that does not start a valid sequence.
int bpe_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

// ---- a hash map from byte strings to 64-bit values (bpe_bytes_map.c) ----
typedef struct {
    uint64_t hash;
    uint32_t offset;  // key bytes in the map's key store
    uint32_t len;
    uint64_t value;
} bpe_bytes_slot;

typedef struct {
    bpe_bytes_slot *slots;  // len == UINT32_MAX marks an empty slot
    size_t mask, count;
    uint8_t *keys;
    size_t keys_used, keys_cap;
} bpe_bytes_map;

uint64_t bpe_hash_bytes(const uint8_t *s, size_t n);
void bpe_bytes_map_init(bpe_bytes_map *m, size_t expected);
void bpe_bytes_map_free(bpe_bytes_map *m);
void bpe_bytes_map_clear(bpe_bytes_map *m);
// The slot of key (NULL when absent), or the slot it was inserted into (value 0, *added 1);
// insert returns NULL (bg_error_out_of_memory, the map unchanged) when the map cannot grow.
bpe_bytes_slot *bpe_bytes_map_find(const bpe_bytes_map *m, const uint8_t *key, size_t n, uint64_t h);
bpe_bytes_slot *bpe_bytes_map_insert(bpe_bytes_map *m, const uint8_t *key, size_t n, uint64_t h, int *added);
static inline const uint8_t *bpe_bytes_map_key(const bpe_bytes_map *m, const bpe_bytes_slot *s) {
    return m->keys + s->offset;
}

// ---- the tokenizer (bpe_vocab.c) ----
typedef struct {
    uint64_t pair;    // left << 32 | right; UINT64_MAX marks an empty slot
    uint32_t rank;
    uint32_t result;
} bpe_merge_slot;

typedef struct {
    uint32_t left, right, result;
} bpe_merge;

struct bpe_tokenizer {
    int vocab_size;
    uint32_t eot;
    int ours;                // 1: tok.json (ids 0..255 are the bytes), 0: GPT-2 files
    uint32_t byte_token[256];
    uint8_t *bytes;          // token i is bytes[offset[i] .. offset[i+1])
    uint64_t *offset;
    bpe_merge *merges;       // by rank
    int merge_count;
    // Merge lookup, open addressing on (left, right). Encoding probes it for every
    // adjacent pair of an uncached word, so its size in cache matters: vocabularies
    // up to 65,536 (GPT-2's) use 8-byte slots, key << 32 | rank << 16 | result with
    // key = left << 16 | right; larger ones 16-byte bpe_merge_slot entries.
    uint64_t *compact;       // UINT64_MAX marks an empty slot
    bpe_merge_slot *table;
    uint64_t table_mask;
    int table_shift;         // 64 - log2(slots): the hash's top bits pick the slot
};

// Builds a tokenizer from every token's bytes (concatenated, with vocab_size+1 offsets)
// and merges by rank; takes ownership of the arrays. Checks that each byte has a token,
// that each merge's result is the concatenation of its parts, and that no merge repeats.
int bpe_tokenizer_build(bpe_tokenizer **out, int vocab_size, uint8_t *bytes, uint64_t *offset,
                        bpe_merge *merges, int merge_count, uint32_t eot, int ours, const char *what);

// Builds our layout (bpe_tokjson.c): ids 0..255 the bytes, merge r makes id 256 + r,
// then "<|endoftext|>". merges[r].result must be 256 + r and its parts below it; takes
// ownership of merges.
int bpe_build_ours(bpe_tokenizer **out, bpe_merge *merges, int merge_count, const char *what);

static inline uint64_t bpe_pair_key(uint32_t left, uint32_t right) {
    return (uint64_t)left << 32 | right;
}

static inline uint64_t bpe_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

// Fibonacci hashing: the multiply spreads the key into the top bits.
static inline uint64_t bpe_pair_slot(const bpe_tokenizer *t, uint64_t key) {
    return (key * 0x9E3779B97F4A7C15ULL) >> t->table_shift;
}

// Whether (left, right) merges; if so its rank and the token it makes.
static inline int bpe_merge_find(const bpe_tokenizer *t, uint32_t left, uint32_t right, uint32_t *rank,
                                 uint32_t *result) {
    if (t->compact) {
        if ((left | right) > 0xFFFF) return 0;
        uint64_t key = (uint64_t)left << 16 | right;
        for (uint64_t i = bpe_pair_slot(t, key);; i = (i + 1) & t->table_mask) {
            uint64_t s = t->compact[i];
            if (s >> 32 == key) {
                *rank = (uint32_t)(s >> 16) & 0xFFFF;
                *result = (uint32_t)s & 0xFFFF;
                return 1;
            }
            if (s == UINT64_MAX) return 0;
        }
    }
    uint64_t key = bpe_pair_key(left, right);
    for (uint64_t i = bpe_pair_slot(t, key);; i = (i + 1) & t->table_mask) {
        const bpe_merge_slot *s = &t->table[i];
        if (s->pair == key) {
            *rank = s->rank;
            *result = s->result;
            return 1;
        }
        if (s->pair == UINT64_MAX) return 0;
    }
}

// Applies the merges to one pre-token (GPT-2's bpe(): the lowest-ranked adjacent pair
// first, all its occurrences left to right), appending the ids (bpe_encode.c).
// BG_ERR only for want of memory.
int bpe_merge_word(bpe_encoder *enc, const uint8_t *word, size_t len, bpe_ids *out);

// The whole file in a buffer with a NUL after it; refuses non-regular files and
// files over max_len bytes.
int bpe_read_file(const char *path, uint8_t **data, size_t *len, size_t max_len);

// tok.json from an already parsed cJSON document (bpe_tokjson.c).
int bpe_tokjson_is_ours(const void *json);
int bpe_tokjson_parse(bpe_tokenizer **out, const void *json, const char *path);

#define BPE_EOT_TEXT "<|endoftext|>"
#endif
