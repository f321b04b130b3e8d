// io_write_file_direct: the file holds exactly the image whatever its length (whole
// blocks through O_DIRECT, the tail and unaligned buffers through ordinary writes), on
// the disk (/tmp: ext4 here, O_DIRECT) and on tmpfs (/dev/shm, where O_DIRECT may be
// refused); a failure leaves no file. Why it can fail: a tail lost or written past the
// image's end, a block skipped after falling back to buffered writes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "io/file_sync.h"
#include "test_util.h"

static void check_one(const char *dir, const unsigned char *buf, size_t len) {
    char path[256];
    snprintf(path, sizeof path, "%s/bg_direct_%d_%zu", dir, (int)getpid(), len);
    TU_CHECK(io_write_file_direct(path, buf, len) == BG_OK, "%s: %s", path, bg_last_error());
    FILE *f = fopen(path, "rb");
    TU_CHECK(f != NULL, "%s: not created", path);
    if (!f) return;
    unsigned char *back = malloc(len + 1);
    size_t got = fread(back, 1, len + 1, f);
    fclose(f);
    unlink(path);
    TU_CHECK(got == len, "%s: %zu bytes, want %zu", path, got, len);
    TU_CHECK(got != len || memcmp(back, buf, len) == 0, "%s: contents differ", path);
    free(back);
}

int main(void) {
    enum { MAX = 3 * IO_DIRECT_ALIGN + 77 };
    unsigned char *mem = bg_aligned_alloc(MAX + 2 * IO_DIRECT_ALIGN);
    unsigned char *aligned = (unsigned char *)(((uintptr_t)mem + IO_DIRECT_ALIGN - 1) / IO_DIRECT_ALIGN * IO_DIRECT_ALIGN);
    for (size_t i = 0; i < MAX + IO_DIRECT_ALIGN; i++) aligned[i] = (unsigned char)(i * 131 + 7);
    const size_t lens[] = {0, 1, IO_DIRECT_ALIGN - 1, IO_DIRECT_ALIGN, IO_DIRECT_ALIGN + 1,
                           2 * IO_DIRECT_ALIGN, MAX};
    const char *dirs[] = {"/tmp", "/dev/shm"};
    for (int d = 0; d < 2; d++) {
        struct stat st;
        if (stat(dirs[d], &st) != 0 || !S_ISDIR(st.st_mode) || access(dirs[d], W_OK) != 0) continue;
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
            check_one(dirs[d], aligned, lens[i]);
            check_one(dirs[d], aligned + 1, lens[i]);  // unaligned: buffered all the way
        }
    }
    // A directory that does not exist: an error naming the path, no file.
    TU_CHECK(io_write_file_direct("/nonexistent-bg-dir/x", aligned, 10) == BG_ERR, "missing directory accepted");
    TU_CHECK(strstr(bg_last_error(), "/nonexistent-bg-dir/x") != NULL, "message: %s", bg_last_error());
    free(mem);
    return tu_finish("test_file_direct");
}
