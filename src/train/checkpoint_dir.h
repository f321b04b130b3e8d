#ifndef BG_TRAIN_CHECKPOINT_DIR_H
#define BG_TRAIN_CHECKPOINT_DIR_H
// Finding checkpoints in a save directory: step directories ("step_" and decimal
// digits) and the `latest` pointer (layout and atomicity in train/checkpoint.h).
#include <stddef.h>

#define CKPT_PATH_MAX 4096

// Step directories under save_dir, newest first (caller frees each and the array).
int ckpt_list(const char *save_dir, char ***dirs, int *count);
// The step of a path whose last component is a step directory name, else -1.
long ckpt_dir_step(const char *dir);
// The directory `latest` points to, as a path in out; *found = 0 when there is no
// checkpoint yet (no `latest`). BG_ERR if `latest` exists but is unreadable, bad, or
// names a directory that does not exist.
int ckpt_latest(const char *save_dir, char *out, size_t n, int *found);
// The path of a step directory's trainer.json (CKPT_PATH_MAX long); BG_ERR unless dir
// is a directory.
int ckpt_dir_paths(const char *dir, char *json);
#endif
