// Replays a fuzz target's corpus without libFuzzer: every file under the directories
// (and every file) named on the command line goes through LLVMFuzzerTestOneInput once,
// in name order. Built with the normal compiler for CTest (tests/CMakeLists.txt), so the
// seeds and every crash input ever found run in `make test`, and under ASan in
// `make asan`. A broken invariant aborts; an empty corpus fails (nothing was checked).
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long replayed;

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void replay(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: cannot stat %s\n", path);
        exit(1);
    }
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) exit(1);
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;  // ., .. and hidden files (.gitkeep)
            names = realloc(names, (n + 1) * sizeof *names);
            size_t len = strlen(path) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            snprintf(names[n++], len, "%s/%s", path, e->d_name);
        }
        closedir(d);
        if (n) qsort(names, n, sizeof *names, by_name);  // an empty folder: names is NULL
        for (size_t i = 0; i < n; i++) {
            replay(names[i]);
            free(names[i]);
        }
        free(names);
        return;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        exit(1);
    }
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);  // exact size: ASan sees reads past the end
    if (fread(buf, 1, size, f) != size) exit(1);
    fclose(f);
    fprintf(stderr, "replay: %s\n", path);  // the last one named is the culprit of a crash
    LLVMFuzzerTestOneInput(buf, size);
    free(buf);
    replayed++;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) replay(argv[i]);
    printf("replayed %ld inputs\n", replayed);
    return replayed > 0 ? 0 : 1;
}
