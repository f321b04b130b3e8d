// A full disk on demand, for tests/train/test_checkpoint_disk.sh: loaded with LD_PRELOAD,
// it lets write()/pwrite() to regular files through until BG_ENOSPC_BUDGET bytes have
// been written in total, then behaves like a file system that just filled up: the write
// that crosses the budget is short (only the bytes that still fit), every later one fails
// with ENOSPC. Pipes, terminals and sockets (stdout, stderr) are never counted or failed.
// Without BG_ENOSPC_BUDGET it only passes calls through.
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_llong used;

// The budget, or -1 for none (read once; the environment does not change under us).
static long long budget(void) {
    static long long b = -2;
    if (b == -2) {
        const char *s = getenv("BG_ENOSPC_BUDGET");
        b = s && *s ? atoll(s) : -1;
    }
    return b;
}

static int is_regular(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

// How many of n bytes may be written now: n, fewer (the write that fills the disk), or -1
// with errno = ENOSPC.
static ssize_t allowance(int fd, size_t n) {
    long long b = budget();
    if (b < 0 || n == 0 || !is_regular(fd)) return (ssize_t)n;
    long long before = atomic_fetch_add(&used, (long long)n);
    if (before + (long long)n <= b) return (ssize_t)n;
    long long left = b - before;
    if (left <= 0) {
        atomic_fetch_sub(&used, (long long)n);
        errno = ENOSPC;
        return -1;
    }
    atomic_fetch_sub(&used, (long long)n - left);
    return (ssize_t)left;
}

ssize_t write(int fd, const void *buf, size_t n) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    ssize_t k = allowance(fd, n);
    return k < 0 ? -1 : real(fd, buf, (size_t)k);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real) real = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    ssize_t k = allowance(fd, n);
    return k < 0 ? -1 : real(fd, buf, (size_t)k, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }
