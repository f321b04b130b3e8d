#include "core/text_file.h"
#include "core/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

char *bg_read_text_file(const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        bg_error("%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    // The buffer grows with what is read, up to max + 1 bytes (one more tells "too large"):
    // max is a bound, not a size, and small files are read often (fuzzing, config files).
    size_t cap = max + 1 < ((size_t)1 << 16) ? max + 1 : (size_t)1 << 16, n = 0;
    char *buf = bg_malloc(cap + 1);
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || cap == max + 1) break;
        cap = cap > (max + 1) / 2 ? max + 1 : 2 * cap;
        buf = bg_realloc(buf, cap + 1);
    }
    int err = ferror(f);
    fclose(f);
    if (err || n > max) {
        free(buf);
        bg_error("%s: %s", path, err ? "read error" : "file too large");
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}
