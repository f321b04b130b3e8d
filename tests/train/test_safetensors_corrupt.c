// Corrupt safetensors files and failing writes: each gives BG_ERR and one message that
// names the file and, where there is one, the tensor — never a crash or a wrong tensor.
#include "core/error.h"
#include "io/safetensors.h"
#include "test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];
static char path[512];  // the file each case writes and opens

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void write_bytes(const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

// A file from a header text (written unpadded, with its exact length) and `data_len` bytes.
static void write_raw(const char *header, size_t data_len) {
    size_t n = strlen(header);
    unsigned char *b = calloc(8 + n + data_len + 1, 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(b + 8, header, n);
    for (size_t i = 0; i < data_len; i++) b[8 + n + i] = (unsigned char)i;
    write_bytes(b, 8 + n + data_len);
    free(b);
}

// st_open must fail with a message containing the path and every given fragment.
static void expect_open_error_at(int line, const char *what, const char *frag1, const char *frag2) {
    st_file f;
    bg_clear_error();
    int rc = st_open(&f, path);
    const char *msg = bg_last_error();
    if (rc != BG_ERR) {
        tu_fail(__FILE__, line, "%s: file accepted", what);
        st_close(&f);
        return;
    }
    if (!strstr(msg, path)) tu_fail(__FILE__, line, "%s: message does not name the file: %s", what, msg);
    if (frag1 && !strstr(msg, frag1)) tu_fail(__FILE__, line, "%s: message lacks '%s': %s", what, frag1, msg);
    if (frag2 && !strstr(msg, frag2)) tu_fail(__FILE__, line, "%s: message lacks '%s': %s", what, frag2, msg);
    TU_CHECK(f.count == 0 && f.tensors == NULL && f.map == NULL, "%s: failed open leaves an empty st_file", what);
    st_close(&f);
}
#define EXPECT_OPEN_ERROR(what, f1, f2) expect_open_error_at(__LINE__, what, f1, f2)

#define T(name, dtype, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_header_structure(void) {
    // Too short for the length prefix, and lengths that do not fit the file.
    write_bytes("\x02\0\0\0", 4);
    EXPECT_OPEN_ERROR("4-byte file", "too short", NULL);
    write_bytes("", 0);
    EXPECT_OPEN_ERROR("empty file", "too short", NULL);
    write_bytes("\x40\0\0\0\0\0\0\0{}", 10);
    EXPECT_OPEN_ERROR("header length beyond file", "runs past the end", NULL);
    write_bytes("\0\0\0\0\0\0\0\x80{}", 10);
    EXPECT_OPEN_ERROR("header length 2^63", "exceeds", NULL);
    write_bytes("\x01\xe1\xf5\x05\0\0\0\0{}", 10);  // 100,000,001
    EXPECT_OPEN_ERROR("header length just over the cap", "exceeds", NULL);
    // Header text.
    write_raw("[1,2]", 0);
    EXPECT_OPEN_ERROR("array header", "start with '{'", NULL);
    write_raw(" {}", 0);
    EXPECT_OPEN_ERROR("leading space", "start with '{'", NULL);
    write_raw("{" T("a", "F32", "[1]", 0, 4), 4);
    EXPECT_OPEN_ERROR("unterminated JSON", "not valid JSON", NULL);
    write_raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],}}", 4);
    EXPECT_OPEN_ERROR("trailing comma", "not valid JSON", NULL);
    write_raw("{} x", 0);
    EXPECT_OPEN_ERROR("text after the object", "after the header", NULL);
    write_raw("{}{}", 0);
    EXPECT_OPEN_ERROR("two objects", "after the header", NULL);
    write_raw("{\"a\xff\":{}}", 0);
    EXPECT_OPEN_ERROR("invalid UTF-8", "UTF-8", NULL);
    write_raw("{\"a\xed\xa0\x80\":{}}", 0);
    EXPECT_OPEN_ERROR("UTF-8 surrogate", "UTF-8", NULL);
    write_raw("{\"a\xc1\x81\":{}}", 0);
    EXPECT_OPEN_ERROR("overlong UTF-8", "UTF-8", NULL);
    write_raw("{\"a\x01\":{}}", 0);
    EXPECT_OPEN_ERROR("raw control byte", "UTF-8", NULL);
    static const char nul_header[] = "\x0c\0\0\0\0\0\0\0{\"a\0b\":5}   ";
    write_bytes(nul_header, sizeof nul_header - 1);
    EXPECT_OPEN_ERROR("NUL in header", "UTF-8", NULL);
    write_raw("{\"a\":5}", 0);
    EXPECT_OPEN_ERROR("entry not an object", "'a'", "not a JSON object");
    // Whitespace is fine anywhere JSON allows it (foreign writers pretty-print).
    write_raw("{\n \"a\" : { \"dtype\" : \"F32\", \"shape\" : [ 1 ], \"data_offsets\" : [ 0, 4 ] }\n}\t\r\n ", 4);
    st_file f;
    TU_CHECK(st_open(&f, path) == BG_OK && f.count == 1, "pretty JSON: %s", bg_last_error());
    st_close(&f);
}

static void test_tensor_entries(void) {
    write_raw("{" T("w", "F128", "[1]", 0, 4) "}", 4);
    EXPECT_OPEN_ERROR("unknown dtype", "'w'", "unknown dtype \"F128\"");
    write_raw("{" T("w", "f32", "[1]", 0, 4) "}", 4);
    EXPECT_OPEN_ERROR("lower-case dtype", "'w'", "unknown dtype");
    write_raw("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    EXPECT_OPEN_ERROR("missing dtype", "'w'", "missing dtype");
    write_raw("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    EXPECT_OPEN_ERROR("dtype not a string", "'w'", "missing dtype");
    write_raw("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4);
    EXPECT_OPEN_ERROR("missing shape", "'w'", "missing shape");
    write_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4);
    EXPECT_OPEN_ERROR("missing offsets", "'w'", "data_offsets");
    write_raw("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    EXPECT_OPEN_ERROR("key twice in an entry", "'w'", "'dtype' appears twice");
    write_raw("{" T("w", "F32", "[-1]", 0, 4) "}", 4);
    EXPECT_OPEN_ERROR("negative dimension", "'w'", "shape[0]");
    write_raw("{" T("w", "F32", "[2.5]", 0, 10) "}", 10);
    EXPECT_OPEN_ERROR("fractional dimension", "'w'", "shape[0]");
    write_raw("{" T("w", "F32", "[\"2\"]", 0, 8) "}", 8);
    EXPECT_OPEN_ERROR("string dimension", "'w'", "shape[0]");
    write_raw("{" T("w", "F32", "[1e300]", 0, 8) "}", 8);
    EXPECT_OPEN_ERROR("huge dimension", "'w'", "shape[0]");
    write_raw("{" T("w", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4);
    EXPECT_OPEN_ERROR("9 dimensions", "'w'", "9 dimensions");
    write_raw("{" T("w", "F32", "[4294967296,4294967296]", 0, 4) "}", 4);
    EXPECT_OPEN_ERROR("element count overflow", "'w'", "overflows");
    write_raw("{" T("w", "F64", "[4503599627370495,4096]", 0, 4) "}", 4);
    EXPECT_OPEN_ERROR("byte size overflow", "'w'", "overflows");
    write_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4);
    EXPECT_OPEN_ERROR("one offset", "'w'", "data_offsets");
    write_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8);
    EXPECT_OPEN_ERROR("three offsets", "'w'", "data_offsets");
    write_raw("{" T("w", "F32", "[1]", 0, 9007199254740993) "}", 4);
    EXPECT_OPEN_ERROR("offset beyond 2^53", "'w'", "data_offsets");
    write_raw("{" T("w", "F32", "[0]", 4, 0) "}", 4);
    EXPECT_OPEN_ERROR("begin > end", "'w'", "begin 4 > end 0");
    write_raw("{" T("w", "F32", "[2,2]", 0, 12) "}", 12);
    EXPECT_OPEN_ERROR("shape/offset mismatch", "'w'", "need 16 bytes");
    write_raw("{" T("w", "BF16", "[4]", 0, 16) "}", 16);
    EXPECT_OPEN_ERROR("dtype/offset mismatch", "'w'", "need 8 bytes");
    // Metadata.
    write_raw("{\"__metadata__\":{\"k\":1}}", 0);
    EXPECT_OPEN_ERROR("metadata value not a string", "__metadata__", "'k'");
    write_raw("{\"__metadata__\":[\"k\"]}", 0);
    EXPECT_OPEN_ERROR("metadata not an object", "__metadata__", NULL);
    write_raw("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0);
    EXPECT_OPEN_ERROR("metadata key twice", "'k' appears twice", NULL);
    write_raw("{\"__metadata__\":{},\"__metadata__\":{}}", 0);
    EXPECT_OPEN_ERROR("metadata twice", "__metadata__ appears twice", NULL);
}

static void test_layout(void) {
    write_raw("{" T("a", "F32", "[2]", 0, 8) "," T("a", "F32", "[2]", 8, 16) "}", 16);
    EXPECT_OPEN_ERROR("duplicate names", "'a' appears twice", NULL);
    write_raw("{" T("a", "F32", "[4]", 0, 16) "," T("b", "F32", "[2]", 8, 16) "}", 16);
    EXPECT_OPEN_ERROR("overlapping tensors", "'b'", "overlaps tensor 'a'");
    write_raw("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 0, 8) "}", 8);
    EXPECT_OPEN_ERROR("same range twice", "overlaps", NULL);
    write_raw("{" T("a", "F32", "[4]", 0, 16) "," T("z", "F32", "[0]", 4, 4) "}", 16);
    EXPECT_OPEN_ERROR("empty tensor inside another", "'z'", "overlaps tensor 'a'");
    write_raw("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 12, 20) "}", 20);
    EXPECT_OPEN_ERROR("gap between tensors", "'b'", "starts at byte 12");
    write_raw("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 8, 16) "}", 12);
    EXPECT_OPEN_ERROR("offsets past the end", "'b'", "truncated");
    write_raw("{" T("a", "F32", "[2]", 0, 8) "}", 9);
    EXPECT_OPEN_ERROR("trailing bytes", "1 bytes after the last tensor", NULL);
    write_raw("{}", 3);
    EXPECT_OPEN_ERROR("data without tensors", "3 bytes after", NULL);
    // Legitimate edge cases: out-of-order header entries, several empty tensors at one offset.
    write_raw("{" T("b", "F32", "[2]", 8, 16) "," T("e1", "I64", "[0,3]", 8, 8) "," T("a", "F32", "[2]", 0, 8)
              "," T("e2", "F16", "[0]", 8, 8) "," T("s", "U8", "[]", 16, 17) "}", 17);
    st_file f;
    TU_CHECK(st_open(&f, path) == BG_OK, "unsorted header: %s", bg_last_error());
    TU_CHECK(f.count == 5 && strcmp(f.tensors[0].name, "a") == 0 && strcmp(f.tensors[4].name, "s") == 0,
             "table sorted by offset");
    TU_CHECK(st_find(&f, "e2") && st_find(&f, "e2")->numel == 0 && st_find(&f, "s")->ndim == 0, "find after sort");
    st_close(&f);
}

// Errors that concern a tensor's use, not the file: missing, wrong shape, wrong dtype.
static void test_lookup_errors(void) {
    float x[6] = {1, 2, 3, 4, 5, 6};
    int64_t step = 3;
    st_tensor_in t[2] = {{.name = "layer.0.w", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = x},
                         {.name = "step", .dtype = ST_I64, .ndim = 0, .data = &step}};
    TU_CHECK(st_write_file(path, t, 2, NULL, 0, NULL) == BG_OK, "write: %s", bg_last_error());
    st_file f;
    TU_CHECK(st_open(&f, path) == BG_OK, "open: %s", bg_last_error());
    float out[6];
    TU_CHECK(st_read_f32(&f, "layer.1.w", out, 2, (int64_t[]){2, 3}) == BG_ERR &&
                 strstr(bg_last_error(), path) && strstr(bg_last_error(), "tensor 'layer.1.w' is missing"),
             "missing tensor: %s", bg_last_error());
    TU_CHECK(st_read_f32(&f, "layer.0.w", out, 2, (int64_t[]){3, 2}) == BG_ERR &&
                 strstr(bg_last_error(), "'layer.0.w': expected shape [3, 2], file has [2, 3]"),
             "wrong shape: %s", bg_last_error());
    TU_CHECK(st_read_f32(&f, "layer.0.w", out, 1, (int64_t[]){6}) == BG_ERR &&
                 strstr(bg_last_error(), "expected shape [6], file has [2, 3]"),
             "wrong rank: %s", bg_last_error());
    TU_CHECK(st_read_raw(&f, "step", ST_I32, out, 0, NULL) == BG_ERR &&
                 strstr(bg_last_error(), "'step': expected dtype I32, file has I64"),
             "wrong dtype: %s", bg_last_error());
    TU_CHECK(st_read_f32(&f, "step", out, 0, NULL) == BG_ERR && strstr(bg_last_error(), "cannot be read as floats"),
             "int as float: %s", bg_last_error());
    TU_CHECK(st_view_f32(&f, "step", 0, NULL) == NULL && strstr(bg_last_error(), "expected dtype F32"),
             "int view: %s", bg_last_error());
    st_close(&f);

    char missing[600];
    snprintf(missing, sizeof missing, "%s/no-such-file", dir);
    bg_clear_error();
    TU_CHECK(st_open(&f, missing) == BG_ERR && strstr(bg_last_error(), "No such file"), "absent file: %s",
             bg_last_error());
    TU_CHECK(st_open(&f, dir) == BG_ERR && strstr(bg_last_error(), "not a regular file"), "directory: %s",
             bg_last_error());
}

// Every single-bit flip anywhere in a valid file is caught: either the header no longer
// validates, or the checksum differs.
static void test_bit_flips(void) {
    float x[5] = {1, -2, 3, -4, 5};
    uint16_t h[3] = {1, 2, 3};
    st_tensor_in t[2] = {{.name = "w", .dtype = ST_F32, .ndim = 1, .shape = {5}, .data = x},
                         {.name = "h", .dtype = ST_BF16, .ndim = 1, .shape = {3}, .data = h}};
    st_meta m = {"step", "10"};
    uint64_t sum;
    TU_CHECK(st_write_file(path, t, 2, &m, 1, &sum) == BG_OK, "write: %s", bg_last_error());
    FILE *fp = fopen(path, "rb");
    unsigned char buf[512];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    int structural = 0, by_checksum = 0, missed = 0;
    for (size_t bit = 0; bit < n * 8; bit++) {
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        st_file f;
        if (st_open_memory(&f, buf, n, "flipped") != BG_OK) structural++;
        else {
            if (st_verify_checksum(&f, sum) == BG_ERR && strstr(bg_last_error(), "checksum mismatch")) by_checksum++;
            else missed++;
            st_close(&f);
        }
        buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    TU_CHECK(missed == 0, "%d of %zu bit flips undetected", missed, n * 8);
    TU_CHECK(by_checksum >= 26 * 8, "payload flips (26 bytes) are caught by the checksum: %d", by_checksum);
    printf("bit flips: %d caught by validation, %d by checksum, %d missed\n", structural, by_checksum, missed);
    // And the message a caller sees names the file.
    st_file f;
    buf[n - 1] ^= 1;
    write_bytes(buf, n);
    TU_CHECK(st_open(&f, path) == BG_OK, "payload flip still parses");
    TU_CHECK(st_verify_checksum(&f, sum) == BG_ERR && strstr(bg_last_error(), path) &&
                 strstr(bg_last_error(), "checksum mismatch"),
             "checksum message: %s", bg_last_error());
    st_close(&f);
}

// Truncating a valid file at every length gives an error, never a short read.
static void test_truncation(void) {
    float x[4] = {1, 2, 3, 4};
    st_tensor_in t[2] = {{.name = "first", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = x},
                         {.name = "last", .dtype = ST_F32, .ndim = 1, .shape = {2}, .data = x}};
    TU_CHECK(st_write_file(path, t, 2, NULL, 0, NULL) == BG_OK, "write: %s", bg_last_error());
    FILE *fp = fopen(path, "rb");
    unsigned char buf[512];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    for (size_t len = 0; len < n; len++) {
        st_file f;
        if (st_open_memory(&f, buf, len, "cut") == BG_OK) {
            TU_CHECK(0, "file cut to %zu of %zu bytes accepted", len, n);
            st_close(&f);
        }
    }
    write_bytes(buf, n - 1);
    EXPECT_OPEN_ERROR("last byte missing", "'last'", "truncated");
    write_bytes(buf, n - 8);
    EXPECT_OPEN_ERROR("last tensor missing", "'last'", "truncated");
    write_bytes(buf, 20);
    EXPECT_OPEN_ERROR("cut inside the header", "runs past the end", NULL);
}

// I/O failures while writing: a clean error with the errno text, no partial file.
static void test_write_failures(void) {
    float x[4] = {1, 2, 3, 4};
    st_tensor_in t = {.name = "w", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = x};
    char p[700];

    int fd = open("/dev/full", O_WRONLY);
    if (fd >= 0) {
        bg_clear_error();
        TU_CHECK(st_write_fd(fd, "/dev/full", &t, 1, NULL, 0, NULL) == BG_ERR &&
                     strstr(bg_last_error(), "/dev/full: write failed (No space left on device)"),
                 "disk full: %s", bg_last_error());
        close(fd);
    } else {
        printf("no /dev/full: disk-full case skipped\n");
    }

    snprintf(p, sizeof p, "%s/no-such-dir/model.safetensors", dir);
    TU_CHECK(st_write_file(p, &t, 1, NULL, 0, NULL) == BG_ERR && strstr(bg_last_error(), p) &&
                 strstr(bg_last_error(), "cannot create (No such file or directory)"),
             "missing directory: %s", bg_last_error());
    snprintf(p, sizeof p, "%s/model.safetensors", path);  // `path` is a regular file
    TU_CHECK(st_write_file(p, &t, 1, NULL, 0, NULL) == BG_ERR && strstr(bg_last_error(), "Not a directory"),
             "parent is a file: %s", bg_last_error());

    // An unwritable directory. Root ignores permission bits, so as root the write runs in a
    // child that has dropped to the unprivileged "nobody" user.
    char ro[600];
    snprintf(ro, sizeof ro, "%s/readonly", dir);
    mkdir(ro, 0555);
    chmod(ro, 0555);  // mkdir applies the umask
    snprintf(p, sizeof p, "%s/model.safetensors", ro);
    char msg[1024] = "";
    int pipefd[2];
    if (geteuid() != 0) {
        TU_CHECK(st_write_file(p, &t, 1, NULL, 0, NULL) == BG_ERR, "read-only directory accepted");
        snprintf(msg, sizeof msg, "%s", bg_last_error());
    } else if (pipe(pipefd) == 0) {
        chmod(dir, 0711);  // let the child reach `ro`
        pid_t pid = fork();
        if (pid == 0) {
            close(pipefd[0]);
            if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
            const char *m = st_write_file(p, &t, 1, NULL, 0, NULL) == BG_ERR ? bg_last_error() : "accepted";
            ssize_t w = write(pipefd[1], m, strlen(m));
            _exit(w < 0);
        }
        close(pipefd[1]);
        ssize_t k = read(pipefd[0], msg, sizeof msg - 1);
        msg[k > 0 ? k : 0] = '\0';
        close(pipefd[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        chmod(dir, 0700);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
            printf("cannot drop root privileges here: read-only directory case skipped\n");
            snprintf(msg, sizeof msg, "%s: cannot create (Permission denied)", p);
        }
    }
    TU_CHECK(strstr(msg, p) && strstr(msg, "cannot create (Permission denied)"), "read-only directory: %s", msg);
    TU_CHECK(access(p, F_OK) != 0, "nothing created in the read-only directory");
    chmod(ro, 0700);

    // Running out of space mid-file: a file-size limit makes write(2) fail with EFBIG after
    // the header and part of the data went out. The partial file must be removed.
    enum { N = 1 << 16 };
    float *big = calloc(N, sizeof(float));
    st_tensor_in tb = {.name = "big", .dtype = ST_F32, .ndim = 1, .shape = {N}, .data = big};
    snprintf(p, sizeof p, "%s/partial.safetensors", dir);
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    struct rlimit small = {4096, old.rlim_max};
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);  // otherwise the signal kills the process
    TU_CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit");
    bg_clear_error();
    int rc = st_write_file(p, &tb, 1, NULL, 0, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    TU_CHECK(rc == BG_ERR && strstr(bg_last_error(), p) && strstr(bg_last_error(), "File too large"),
             "write stopped midway: %s", bg_last_error());
    TU_CHECK(access(p, F_OK) != 0, "partial file removed");
    // Same through the bf16 conversion path (it writes through a staging buffer).
    tb.dtype = ST_BF16, tb.src_dtype = ST_F32;
    setrlimit(RLIMIT_FSIZE, &small);
    signal(SIGXFSZ, SIG_IGN);
    rc = st_write_file(p, &tb, 1, NULL, 0, NULL);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    TU_CHECK(rc == BG_ERR && strstr(bg_last_error(), "File too large"), "converted write stopped: %s", bg_last_error());
    free(big);

    // A descriptor that cannot be written.
    fd = open(path, O_RDONLY);
    TU_CHECK(st_write_fd(fd, "readonly-fd", &t, 1, NULL, 0, NULL) == BG_ERR &&
                 strstr(bg_last_error(), "Bad file descriptor"),
             "read-only fd: %s", bg_last_error());
    close(fd);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/bg_stc_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/case.safetensors", dir);
    test_header_structure();
    test_tensor_entries();
    test_layout();
    test_lookup_errors();
    test_bit_flips();
    test_truncation();
    test_write_failures();
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return tu_finish("test_safetensors_corrupt");
}
