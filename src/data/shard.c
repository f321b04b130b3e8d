#include "data/shard.h"
#include "core/error.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

int shard_load(token_shard *s, const char *path, int vocab_size) {
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "rb");
    if (!f) return bg_error("%s: cannot open token file (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return bg_error("%s: not a regular file", path);
    }
    int32_t header[SHARD_HEADER_INTS];
    if (fread(header, sizeof header, 1, f) != 1) {
        fclose(f);
        return bg_error("%s: too short for a token file header (%lld bytes, need %zu)", path,
                        (long long)st.st_size, sizeof header);
    }
    if (header[0] != SHARD_MAGIC) {
        fclose(f);
        return bg_error("%s: wrong magic number %d (expected %d: not a token file)", path,
                        header[0], SHARD_MAGIC);
    }
    int version = header[1];
    if (version != SHARD_VERSION_U16 && version != SHARD_VERSION_U32) {
        fclose(f);
        return bg_error("%s: unsupported token file version %d (expected 1 or 2)", path, version);
    }
    if (header[2] < 0) {
        fclose(f);
        return bg_error("%s: negative token count %d in header", path, header[2]);
    }
    size_t count = (size_t)(uint32_t)header[2];
    size_t width = version == SHARD_VERSION_U16 ? 2 : 4;
    size_t expect = sizeof header + count * width;
    if ((size_t)st.st_size != expect) {
        fclose(f);
        return bg_error("%s: header says %zu tokens (%zu bytes) but the file has %lld bytes", path,
                        count, expect, (long long)st.st_size);
    }
    void *buf = bg_try_malloc(count * width);
    if (!buf) {
        fclose(f);
        return BG_ERR;
    }
    if (count && fread(buf, width, count, f) != count) {
        free(buf);
        fclose(f);
        return bg_error("%s: read error", path);
    }
    fclose(f);
    s->version = version;
    s->count = count;
    if (version == SHARD_VERSION_U16) s->tokens16 = buf;
    else s->tokens32 = buf;
    for (size_t i = 0; i < count; i++) {
        uint32_t t = shard_token(s, i);
        if (t >= (uint32_t)vocab_size) {
            shard_free(s);
            return bg_error("%s: token %u at position %zu is out of range (vocab_size %d)", path,
                            t, i, vocab_size);
        }
    }
    return BG_OK;
}

void shard_free(token_shard *s) {
    free(s->tokens16);
    free(s->tokens32);
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
