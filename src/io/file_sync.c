#include "io/file_sync.h"
#include "core/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int io_path_join(char *out, size_t n, const char *dir, const char *name) {
    int len = snprintf(out, n, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= n) return bg_error("%s: path too long", dir);
    return BG_OK;
}

int io_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bg_error("%s: cannot open for fsync (%s)", path, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0) return bg_error("%s: fsync failed (%s)", path, strerror(err));
    return BG_OK;
}

int io_write_file_synced(const char *path, const void *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return bg_error("%s: cannot create (%s)", path, strerror(errno));
    const char *text = data;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = w < 0 ? errno : EIO;
            close(fd);
            unlink(path);
            return bg_error("%s: write failed (%s)", path, strerror(err));
        }
        off += (size_t)w;
    }
    // close even when fsync fails (no descriptor leak); either failing fails the write.
    int rc = fsync(fd), err = errno;
    if (close(fd) != 0 && rc == 0) rc = -1, err = errno;
    if (rc != 0) {
        unlink(path);
        return bg_error("%s: fsync/close failed (%s)", path, strerror(err));
    }
    return BG_OK;
}

// Fewer, larger requests cost less CPU per byte; 64 MiB keeps one in flight small.
#define IO_DIRECT_CHUNK ((size_t)64 << 20)

static int drop_direct(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl & ~O_DIRECT);
}

int io_write_file_direct(const char *path, const void *data, size_t len) {
    const char *p = data;
    int direct = ((uintptr_t)p % IO_DIRECT_ALIGN) == 0 && len >= IO_DIRECT_ALIGN;
    int fd = direct ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644) : -1;
    if (fd < 0) {
        direct = 0;  // EINVAL: this file system has no O_DIRECT
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd < 0) return bg_error("%s: cannot create (%s)", path, strerror(errno));
    size_t off = 0;
    int err = 0;
    while (off < len && !err) {
        size_t n = len - off < IO_DIRECT_CHUNK ? len - off : IO_DIRECT_CHUNK;
        if (direct) {
            n -= n % IO_DIRECT_ALIGN;
            // The unaligned tail, or an offset a short write left unaligned: buffered.
            if (n == 0 || off % IO_DIRECT_ALIGN) {
                if (drop_direct(fd) != 0) err = errno;
                direct = 0;
                continue;
            }
        }
        ssize_t w = write(fd, p + off, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EINVAL && direct) {  // refused late (some file systems): buffered
            if (drop_direct(fd) != 0) err = errno;
            direct = 0;
            continue;
        }
        if (w <= 0) err = w < 0 ? errno : EIO;
        else off += (size_t)w;
    }
    if (err) {
        close(fd);
        unlink(path);
        return bg_error("%s: write failed (%s)", path, strerror(err));
    }
    int rc = fsync(fd);
    err = errno;
    if (close(fd) != 0 && rc == 0) rc = -1, err = errno;
    if (rc != 0) {
        unlink(path);
        return bg_error("%s: fsync/close failed (%s)", path, strerror(err));
    }
    return BG_OK;
}

void io_remove_flat_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (io_path_join(path, sizeof path, dir, e->d_name) == BG_OK) unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

int io_replace_dir(const char *tmp, const char *final, const char *old_tmp) {
    struct stat st;
    if (stat(final, &st) == 0) {
#ifdef RENAME_EXCHANGE
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            io_remove_flat_dir(tmp);
            return BG_OK;
        }
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
            return bg_error("%s: cannot replace (%s)", final, strerror(errno));
#endif
        if (rename(final, old_tmp) != 0) return bg_error("%s: cannot replace (%s)", final, strerror(errno));
        io_remove_flat_dir(old_tmp);
    }
    if (rename(tmp, final) != 0) return bg_error("%s: cannot rename into place (%s)", final, strerror(errno));
    return BG_OK;
}
