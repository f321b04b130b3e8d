// Reading whole files: tokenizer files (any bytes; their parsers judge them) and
// input text for training and preparing, which must look like text.
#include "data/bpe_internal.h"
#include "core/error.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

int bpe_read_file(const char *path, uint8_t **data, size_t *len, size_t max_len) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return bg_error("%s: cannot open (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return bg_error("%s: not a regular file", path);
    }
    if ((unsigned long long)st.st_size > max_len) {
        fclose(f);
        return bg_error("%s: too large (%lld bytes; at most %zu)", path, (long long)st.st_size, max_len);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = bg_try_malloc(n + 1);  // +1: a NUL after the data for parsers that want one
    if (!buf) {
        fclose(f);
        return BG_ERR;
    }
    if (n && fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        return bg_error("%s: read error", path);
    }
    fclose(f);
    buf[n] = 0;
    *data = buf;
    *len = n;
    return BG_OK;
}

int bpe_read_text_file(const char *path, uint8_t **data, size_t *len) {
    // 2^40 bytes: no corpus file is that large; the real limit is memory.
    if (bpe_read_file(path, data, len, (size_t)1 << 40) != BG_OK) return BG_ERR;
    uint8_t *d = *data;
    size_t n = *len;
    if (n == 0) {
        free(d);
        *data = NULL;
        return bg_error("%s: empty file (no text to read)", path);
    }
    // Binary: a NUL byte, or many bytes that are not UTF-8 (Latin-1 text has a few
    // per line and passes; images and archives fail within their first bytes).
    const uint8_t *nul = memchr(d, 0, n);
    size_t invalid = 0, checked = n < ((size_t)1 << 20) ? n : (size_t)1 << 20;
    for (size_t i = 0; i < checked;) {
        uint32_t cp;
        int w = bpe_utf8_decode(d + i, n - i, &cp);
        if (cp == 0xFFFFFFFF) invalid++;
        i += (size_t)w;
    }
    if (nul || invalid * 10 > checked) {
        size_t at = nul ? (size_t)(nul - d) : 0;
        free(d);
        *data = NULL;
        if (nul) return bg_error("%s: binary file (NUL byte at offset %zu), expected text", path, at);
        return bg_error("%s: binary file (%zu of its first %zu bytes are not UTF-8), expected text", path,
                        invalid, checked);
    }
    return BG_OK;
}

size_t bpe_next_document(const uint8_t *text, size_t len, size_t pos, size_t *next) {
    static const char marker[] = BPE_EOT_TEXT;
    const size_t mlen = sizeof marker - 1;
    const uint8_t *p = text + pos, *end = text + len;
    while ((size_t)(end - p) >= mlen) {
        const uint8_t *q = memchr(p, '<', (size_t)(end - p) - mlen + 1);
        if (!q) break;
        if (memcmp(q, marker, mlen) == 0) {
            *next = (size_t)(q - text) + mlen;
            return (size_t)(q - text);
        }
        p = q + 1;
    }
    *next = len;
    return len;
}
