// libFuzzer target: the token shard reader (data/shard.c), versions 1 and 2.
// Each input is tried as a whole file, and as a body behind a valid header (first byte:
// the version, the rest the tokens; the count matches the body, so mutations reach the
// token checks). Invariants on accepted shards: the size is header + count tokens, the
// tokens are the file's and below the vocabulary.
#include "data/shard.h"
#include "fuzz_util.h"

static void try_file(const uint8_t *bytes, size_t size, int vocab) {
    token_shard s;
    bg_clear_error();
    const char *path = fuzz_file(0, bytes, size);
    if (shard_load(&s, path, vocab) != BG_OK) {
        fuzz_check_error(path);
        FUZZ_CHECK(s.tokens16 == NULL && s.tokens32 == NULL);
        return;
    }
    size_t width = s.version == SHARD_VERSION_U16 ? 2 : 4;
    FUZZ_CHECK(size == 4 * SHARD_HEADER_INTS + s.count * width);
    for (size_t i = 0; i < s.count; i++) {
        uint32_t t = 0;
        memcpy(&t, bytes + 4 * SHARD_HEADER_INTS + i * width, width);
        FUZZ_CHECK(shard_token(&s, i) == t && t < (uint32_t)vocab);
    }
    shard_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    try_file(data, size, 50257);
    try_file(data, size, 0x7FFFFFFF);
    if (size == 0) return 0;
    int version = data[0] & 1 ? SHARD_VERSION_U32 : SHARD_VERSION_U16;
    size_t width = version == SHARD_VERSION_U16 ? 2 : 4;
    size_t body = (size - 1) / width * width;
    uint8_t *file = calloc(1, 4 * SHARD_HEADER_INTS + body);
    int32_t header[3] = {SHARD_MAGIC, version, (int32_t)(body / width)};
    memcpy(file, header, sizeof header);
    memcpy(file + 4 * SHARD_HEADER_INTS, data + 1, body);
    try_file(file, 4 * SHARD_HEADER_INTS + body, data[0] & 2 ? 300 : 70000);
    free(file);
    return 0;
}
