#include "train/checkpoint_dir.h"
#include "core/error.h"
#include "core/text_file.h"
#include "io/file_sync.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// "step_" and decimal digits only: the names this code writes (zero-padded), nothing a
// stray file or a hand-made "step_-1" / "step_ 5" could sneak past strtol with.
static int is_step_dir_name(const char *name, long *step) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return 0;
    for (const char *p = name + 5; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    errno = 0;
    long s = strtol(name + 5, NULL, 10);
    if (errno) return 0;
    *step = s;
    return 1;
}

typedef struct {
    long step;
    char *name;
} step_dir;

static int cmp_step_desc(const void *a, const void *b) {
    long x = ((const step_dir *)a)->step, y = ((const step_dir *)b)->step;
    return (x < y) - (x > y);
}

int ckpt_list(const char *save_dir, char ***dirs, int *count) {
    *dirs = NULL;
    *count = 0;
    DIR *d = opendir(save_dir);
    if (!d) {
        if (errno == ENOENT) return BG_OK;
        return bg_error("%s: cannot list (%s)", save_dir, strerror(errno));
    }
    step_dir *list = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long step;
        if (!is_step_dir_name(e->d_name, &step)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            list = realloc(list, sizeof *list * cap);
            BG_ASSERT(list);
        }
        list[n].step = step;
        list[n].name = bg_malloc(strlen(save_dir) + strlen(e->d_name) + 2);
        sprintf(list[n].name, "%s/%s", save_dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(list, n, sizeof *list, cmp_step_desc);
    *dirs = bg_calloc(n ? n : 1, sizeof(char *));
    for (int i = 0; i < n; i++) (*dirs)[i] = list[i].name;
    *count = n;
    free(list);
    return BG_OK;
}

long ckpt_dir_step(const char *dir) {
    const char *slash = strrchr(dir, '/');
    long step;
    return is_step_dir_name(slash ? slash + 1 : dir, &step) ? step : -1;
}

int ckpt_latest(const char *save_dir, char *out, size_t n, int *found) {
    *found = 0;
    char path[CKPT_PATH_MAX];
    if (io_path_join(path, sizeof path, save_dir, "latest") != BG_OK) return BG_ERR;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT) return BG_OK;
        return bg_error("%s: cannot read (%s)", path, strerror(errno));
    }
    char *text = bg_read_text_file(path, 256, NULL);
    if (!text) return BG_ERR;
    size_t len = strcspn(text, "\n");
    int junk = text[len] == '\n' && text[len + 1] != '\0';
    text[len] = '\0';
    long step;
    if (junk || !is_step_dir_name(text, &step)) {
        free(text);
        return bg_error("%s: does not name a checkpoint directory (expected one line \"step_NNNNNNNN\")",
                        path);
    }
    int rc = io_path_join(out, n, save_dir, text);
    if (rc == BG_OK && (stat(out, &st) != 0 || !S_ISDIR(st.st_mode)))
        rc = bg_error("%s: names %s, which does not exist", path, text);
    free(text);
    if (rc != BG_OK) return rc;
    *found = 1;
    return BG_OK;
}

int ckpt_dir_paths(const char *dir, char *json) {
    struct stat st;
    if (stat(dir, &st) != 0) return bg_error("%s: cannot open checkpoint directory (%s)", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return bg_error("%s: not a checkpoint directory", dir);
    return io_path_join(json, CKPT_PATH_MAX, dir, "trainer.json");
}
