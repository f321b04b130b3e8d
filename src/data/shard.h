#ifndef BG_DATA_SHARD_H
#define BG_DATA_SHARD_H
// Token shards in llm.c's layout:
//   header: 256 little-endian int32 — [0] magic 20240520, [1] version, [2] token count;
//           the rest zero.
//   version 1: tokens follow as uint16 (vocabularies up to 65,536);
//   version 2: tokens follow as uint32 (larger vocabularies).
// The file must hold exactly header + count tokens.
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_HEADER_INTS 256
#define SHARD_VERSION_U16 1
#define SHARD_VERSION_U32 2

typedef struct {
    int version;
    size_t count;
    uint16_t *tokens16;  // version 1
    uint32_t *tokens32;  // version 2
    void *map;           // the file, memory-mapped read-only (pages read when touched)
    size_t map_len;
} token_shard;

static inline uint32_t shard_token(const token_shard *s, size_t i) {
    return s->version == SHARD_VERSION_U16 ? s->tokens16[i] : s->tokens32[i];
}

// Maps the file and checks its header and size; the tokens are not read yet.
int shard_open(token_shard *s, const char *path);
// The first position in [i0, i1) whose token is >= vocab_size, or i1 when none is.
size_t shard_find_bad(const token_shard *s, size_t i0, size_t i1, int vocab_size);
// shard_open, then every token checked < vocab_size.
int shard_load(token_shard *s, const char *path, int vocab_size);
void shard_free(token_shard *s);
// Writes tokens (each < 2^16 for version 1) with the header.
int shard_write(const char *path, const uint32_t *tokens, size_t count, int version);
#endif
