#ifndef BG_TRAIN_CHECKPOINT_H
#define BG_TRAIN_CHECKPOINT_H
// Checkpoints: one directory per step under a save directory.
//
//   SAVE_DIR/step_00000100/model.safetensors      every parameter under its table name
//                                                 (experts by global expert id), F32;
//                                                 then a gate's state, e.g. the bias
//                                                 gate's ...gate.e_score_correction_bias
//                                                 (replicated: rank 0's copy is written)
//   SAVE_DIR/step_00000100/optimizer.safetensors  "<name>.exp_avg", "<name>.exp_avg_sq"
//                                                 (AdamW m and v), and "step" (I64 scalar)
//   SAVE_DIR/step_00000100/trainer.json           format_version, step, samples consumed,
//                                                 data seed, LR schedule, loss scale, the
//                                                 model config and the training options,
//                                                 the XXH64 of both safetensors files, and
//                                                 last "trainer_json_xxh64": the XXH64 of
//                                                 trainer.json itself with those 16 hex
//                                                 digits written as '0'
//   SAVE_DIR/latest                               "step_00000100\n"
//
// Atomicity: files are written into SAVE_DIR/.tmp-step_00000100, each fsynced; the
// directory is fsynced and renamed to its final name; SAVE_DIR is fsynced; then
// `latest` is replaced by writing latest.tmp, fsync, rename, fsync SAVE_DIR. A crash
// at any instant leaves every final-named checkpoint complete and `latest` naming one
// of them. Leftover .tmp-* directories of crashed saves are removed by the next save.
// Saving a step that already exists swaps the new directory in (RENAME_EXCHANGE); pruning
// renames a directory to .tmp-del-* before deleting it; so no final-named directory is
// ever partial. `latest` is the commit record: a step directory newer than the one it
// names (a crash after the rename, before the pointer) is complete but not used.
//
// Here the policy; trainer.json in checkpoint_meta.h, the tensor files in
// checkpoint_tensors.h, finding step directories and `latest` in checkpoint_dir.h,
// reading without a trainer in checkpoint_inspect.h.
#include "train/train_state.h"

// Writes the trainer's state as SAVE_DIR/step_<step> (creating SAVE_DIR if missing);
// BG_ERR (bg_error: one line naming the step, then the cause) on any I/O failure,
// leaving earlier checkpoints and `latest` untouched.
int ckpt_save(const trainer *tr, const char *save_dir);
// Creates SAVE_DIR if missing and checks that it is a writable directory (a run calls
// this once, before training, so a bad --save-dir fails before hours of work).
int ckpt_init_dir(const char *save_dir);
// Deletes all but the newest keep_last step directories (keep_last <= 0: keep all);
// never the one `latest` names.
int ckpt_prune(const char *save_dir, int keep_last);
// Loads a checkpoint directory into an initialized trainer (same config): parameters,
// optimizer state, step and data position. Verifies checksums (trainer.json's own too),
// tensor names, shapes and dtypes (F32, I64 step), and that the config and seed match;
// errors name the file and tensor. Checks all before copying anything: on failure the
// trainer is unchanged.
int ckpt_load(trainer *tr, const char *ckpt_dir);
#endif
