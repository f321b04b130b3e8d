#include "io/file_hash.h"
#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

int io_file_xxh64(const char *path, uint64_t *sum) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bg_error("%s: cannot open (%s)", path, strerror(errno));
    XXH64_state_t *s = XXH64_createState();
    BG_ASSERT(s);
    XXH64_reset(s, 0);
    enum { CHUNK = 1 << 20 };
    char *buf = bg_malloc(CHUNK);
    int rc = BG_OK;
    for (;;) {
        ssize_t n = read(fd, buf, CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = bg_error("%s: read error (%s)", path, strerror(errno));
            break;
        }
        if (n == 0) break;
        XXH64_update(s, buf, (size_t)n);
    }
    *sum = XXH64_digest(s);
    XXH64_freeState(s);
    free(buf);
    close(fd);
    return rc;
}
