#ifndef BG_TRAIN_CHECKPOINT_H
#define BG_TRAIN_CHECKPOINT_H
// Checkpoints: one directory per step under a save directory.
//
//   SAVE_DIR/step_00000100/model.safetensors      every parameter under its table name
//                                                 (experts by global expert id), F32
//   SAVE_DIR/step_00000100/optimizer.safetensors  "<name>.exp_avg", "<name>.exp_avg_sq"
//                                                 (AdamW m and v), and "step" (I64 scalar)
//   SAVE_DIR/step_00000100/trainer.json           format_version, step, samples consumed,
//                                                 data seed, LR schedule, loss scale, the
//                                                 model config and the training options,
//                                                 and the XXH64 of both safetensors files
//   SAVE_DIR/latest                               "step_00000100\n"
//
// Atomicity: files are written into SAVE_DIR/.tmp-step_00000100, each fsynced; the
// directory is fsynced and renamed to its final name; SAVE_DIR is fsynced; then
// `latest` is replaced by writing latest.tmp, fsync, rename, fsync SAVE_DIR. A crash
// at any instant leaves every final-named checkpoint complete and `latest` naming one
// of them. Leftover .tmp-* directories of crashed saves are removed by the next save.
#include <stddef.h>
#include <stdint.h>

#include "train/trainer.h"

#define CKPT_FORMAT_VERSION 1

// Writes the trainer's state as SAVE_DIR/step_<step>; BG_ERR (bg_error) on any I/O
// failure, leaving earlier checkpoints and `latest` untouched.
int ckpt_save(const trainer *tr, const char *save_dir);
// Deletes all but the newest keep_last step directories (keep_last <= 0: keep all).
int ckpt_prune(const char *save_dir, int keep_last);
// Loads a checkpoint directory into an initialized trainer (same config): parameters,
// optimizer state, step and data position. Verifies checksums, tensor names, shapes
// and dtypes, and that the config matches; errors name the file and tensor.
int ckpt_load(trainer *tr, const char *ckpt_dir);
// Step directories under save_dir, newest first (caller frees each and the array).
int ckpt_list(const char *save_dir, char ***dirs, int *count);
// The directory `latest` points to, as a path in out; *found = 0 when there is no
// checkpoint yet (no `latest`). BG_ERR if `latest` exists but is unreadable or bad.
int ckpt_latest(const char *save_dir, char *out, size_t n, int *found);
#endif
