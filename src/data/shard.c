#include "data/shard.h"
#include "core/error.h"

#include <errno.h>
#include <string.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int shard_open(token_shard *s, const char *path) {
    memset(s, 0, sizeof *s);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return bg_error("%s: cannot open token file (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return bg_error("%s: not a regular file", path);
    }
    int32_t header[SHARD_HEADER_INTS];
    if (pread(fd, header, sizeof header, 0) != (ssize_t)sizeof header) {
        close(fd);
        return bg_error("%s: too short for a token file header (%lld bytes, need %zu)", path,
                        (long long)st.st_size, sizeof header);
    }
    int rc = BG_OK;
    if (header[0] != SHARD_MAGIC)
        rc = bg_error("%s: wrong magic number %d (expected %d: not a token file)", path, header[0],
                      SHARD_MAGIC);
    else if (header[1] != SHARD_VERSION_U16 && header[1] != SHARD_VERSION_U32)
        rc = bg_error("%s: unsupported token file version %d (expected 1 or 2)", path, header[1]);
    else if (header[2] < 0)
        rc = bg_error("%s: negative token count %d in header", path, header[2]);
    size_t count = rc == BG_OK ? (size_t)(uint32_t)header[2] : 0;
    size_t width = header[1] == SHARD_VERSION_U16 ? 2 : 4;
    size_t expect = sizeof header + count * width;
    if (rc == BG_OK && (size_t)st.st_size != expect)
        rc = bg_error("%s: header says %zu tokens (%zu bytes) but the file has %lld bytes", path,
                      count, expect, (long long)st.st_size);
    // Mapped, not read: a run over many large shards touches only the windows it samples.
    void *map = rc == BG_OK ? mmap(NULL, expect, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    if (rc == BG_OK && map == MAP_FAILED) rc = bg_error("%s: cannot map (%s)", path, strerror(errno));
    close(fd);
    if (rc != BG_OK) return rc;
    s->version = header[1];
    s->count = count;
    s->map = map;
    s->map_len = expect;
    if (s->version == SHARD_VERSION_U16) s->tokens16 = (uint16_t *)((char *)map + sizeof header);
    else s->tokens32 = (uint32_t *)((char *)map + sizeof header);
    return BG_OK;
}

size_t shard_find_bad(const token_shard *s, size_t i0, size_t i1, int vocab_size) {
    uint32_t v = (uint32_t)vocab_size;
    if (s->version == SHARD_VERSION_U16) {
        for (size_t i = i0; i < i1; i++)
            if (s->tokens16[i] >= v) return i;
    } else {
        for (size_t i = i0; i < i1; i++)
            if (s->tokens32[i] >= v) return i;
    }
    return i1;
}

int shard_load(token_shard *s, const char *path, int vocab_size) {
    if (shard_open(s, path) != BG_OK) return BG_ERR;
    size_t i = shard_find_bad(s, 0, s->count, vocab_size);
    if (i < s->count) {
        uint32_t t = shard_token(s, i);
        shard_free(s);
        return bg_error("%s: token %u at position %zu is out of range (vocab_size %d)", path, t, i,
                        vocab_size);
    }
    return BG_OK;
}

void shard_free(token_shard *s) {
    if (s->map) munmap(s->map, s->map_len);
    memset(s, 0, sizeof *s);
}

int shard_write(const char *path, const uint32_t *tokens, size_t count, int version) {
    if (version != SHARD_VERSION_U16 && version != SHARD_VERSION_U32)
        return bg_error("shard_write: bad version %d", version);
    if (count > INT32_MAX) return bg_error("%s: too many tokens for one shard", path);
    FILE *f = fopen(path, "wb");
    if (!f) return bg_error("%s: cannot create (%s)", path, strerror(errno));
    int32_t header[SHARD_HEADER_INTS] = {SHARD_MAGIC, version, (int32_t)count};
    int ok = fwrite(header, sizeof header, 1, f) == 1;
    for (size_t i = 0; i < count && ok; i++) {
        if (version == SHARD_VERSION_U16) {
            if (tokens[i] > 0xFFFF) {
                fclose(f);
                return bg_error("%s: token %u does not fit a uint16 shard", path, tokens[i]);
            }
            uint16_t t = (uint16_t)tokens[i];
            ok = fwrite(&t, 2, 1, f) == 1;
        } else {
            ok = fwrite(&tokens[i], 4, 1, f) == 1;
        }
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) return bg_error("%s: write failed (%s)", path, strerror(errno));
    return BG_OK;
}
