// The text rule of safetensors headers (shared by the reader and the writer): UTF-8.
#include "io/safetensors.h"

size_t st_utf8_invalid_at(const uint8_t *s, size_t n, int allow_control) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            if (!allow_control && c < 0x20 && c != '\t' && c != '\n' && c != '\r') return i;
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;  // min: the smallest code point that needs this length (no overlongs)
        if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1fu, min = 0x80;
        else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0fu, min = 0x800;
        else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07u, min = 0x10000;
        else return i;
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3fu);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
        i += len;
    }
    return n;
}
