#ifndef BG_TESTS_FUZZ_UTIL_H
#define BG_TESTS_FUZZ_UTIL_H
// Shared by the fuzz targets (tests/fuzz/fuzz_*.c): the invariant check and a way to
// hand bytes to readers that take a path. Each target defines LLVMFuzzerTestOneInput;
// libFuzzer drives it under `make fuzz`, tests/fuzz/replay_main.c under CTest.
#include "core/error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_CHECK(cond)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz invariant failed: %s (%s:%d); last error: %s\n", #cond,   \
                    __FILE__, __LINE__, bg_last_error());                                   \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

// An anonymous in-memory file (memfd, a regular file to stat) holding exactly
// bytes[0..n); returns its path "/proc/self/fd/N". slot picks one of four files, so a
// target may hold several at once; each is reused across inputs.
static inline const char *fuzz_file(int slot, const void *bytes, size_t n) {
    static int fds[4] = {-1, -1, -1, -1};
    static char paths[4][32];
    if (fds[slot] < 0) {
        fds[slot] = memfd_create("bagualu_fuzz", 0);
        FUZZ_CHECK(fds[slot] >= 0);
        snprintf(paths[slot], sizeof paths[slot], "/proc/self/fd/%d", fds[slot]);
    }
    FUZZ_CHECK(ftruncate(fds[slot], 0) == 0);
    for (size_t done = 0; done < n;) {
        ssize_t k = pwrite(fds[slot], (const char *)bytes + done, n - done, (off_t)done);
        FUZZ_CHECK(k > 0);
        done += (size_t)k;
    }
    return paths[slot];
}

// An error message is one line that names its subject (the file, or the verb).
static inline void fuzz_check_error(const char *prefix) {
    const char *e = bg_last_error();
    FUZZ_CHECK(e && *e);
    FUZZ_CHECK(prefix == NULL || strncmp(e, prefix, strlen(prefix)) == 0);
}
#endif
