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
    char *buf = bg_malloc(max + 1);
    size_t n = fread(buf, 1, max + 1, f);
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
