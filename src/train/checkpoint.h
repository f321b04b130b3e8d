#ifndef BG_TRAIN_CHECKPOINT_H
#define BG_TRAIN_CHECKPOINT_H
// Checkpoints: one directory per step under a save directory, format_version 2, written
// in parallel: rank r of P writes its own two files, no rank gathers anything.
//
//   SAVE_DIR/step_00000100/model-0000R-of-0000P.safetensors
//        the whole model tensors rank R-1 writes, F32, under their table names (experts
//        by global id): each expert tensor by one of the P/EP replicas holding it, the
//        dense tensors dealt among all ranks by bytes (train/checkpoint_plan.h); rank 0
//        adds the gates' state (e.g. the bias gate's ...gate.e_score_correction_bias)
//   SAVE_DIR/step_00000100/optimizer-0000R-of-0000P.safetensors
//        AdamW m and v of the rank's pieces: "<name>.exp_avg", "<name>.exp_avg_sq" for a
//        whole tensor (its shape), "<name>.exp_avg.<offset>" (1-D) for a part of one.
//        ZeRO on: the owned slices of model/zero_shard.h cut at tensor boundaries;
//        off: m and v of the tensors in its model file
//   SAVE_DIR/step_00000100/model.safetensors.index.json
//        Hugging Face's sharded layout: {"metadata": {"total_size": bytes},
//        "weight_map": {tensor: file}}
//   SAVE_DIR/step_00000100/optimizer.index.json
//        {"format": "bagualu-optimizer", "step": AdamW step, "pieces": [{"tensor",
//        "offset", "count" (elements within the tensor), "file", "exp_avg",
//        "exp_avg_sq" (keys in the file)}, ...]}
//   SAVE_DIR/step_00000100/trainer.json
//        format_version 2, step, samples consumed, data seed, LR schedule, loss scale,
//        the model config and the training options, the data ranges loss-spike rewinds
//        skipped ("skipped_samples") and the spike detector's window ("spike_losses",
//        "spike_run"; train/rewind.h), "checksums_xxh64" of every other
//        file, and last "trainer_json_xxh64": the XXH64 of trainer.json itself with
//        those 16 hex digits written as '0'
//   SAVE_DIR/latest      "step_00000100\n"
//
// Format 1 (one model.safetensors holding every tensor, one optimizer.safetensors with
// whole m, v and an I64 "step") still loads: it is read as an index of two files.
//
// Saving: rank 0 creates SAVE_DIR/.tmp-step_00000100; every rank writes and fsyncs its
// files there; a collective confirms every shard is on disk and gathers the checksums;
// only then rank 0 writes the indexes and trainer.json (fsynced), fsyncs the directory,
// renames it to its final name, fsyncs SAVE_DIR and replaces `latest` (write
// latest.tmp, fsync, rename, fsync SAVE_DIR). A crash or kill of any rank at any instant
// leaves every final-named checkpoint complete and `latest` naming one of them.
// Leftover .tmp-* directories are removed by the next save. Saving a step that already
// exists swaps the new directory in (RENAME_EXCHANGE); pruning renames a directory to
// .tmp-del-* before deleting it. `latest` is the commit record.
//
// Asynchronous saves: at a step boundary a rank copies its part into a snapshot buffer
// (allocated once) and a writer thread writes its files while training goes on; the
// commit above (collective) runs on the main thread at a later step boundary, once every
// rank's writer has finished, and before the next save, at the end and on a signal.
//
// Loading (any P, EP, ZeRO on or off): every rank reads trainer.json and the indexes,
// file i is verified (checksum, tensors against the index) by rank i mod P and the
// outcome agreed, then each rank reads from the mapped files only the tensors and the
// optimizer elements it holds.
//
// Here the policy; trainer.json in checkpoint_meta.h, the indexes and reading in
// checkpoint_index.h, who writes what in checkpoint_plan.h, a rank's files and the
// writer thread in checkpoint_shard.h, directories and `latest` in checkpoint_dir.h,
// reading without a trainer in checkpoint_inspect.h.
#include "train/train_state.h"

// A run's saver: this rank's part and the save in flight. async: snapshot + writer
// thread; 0: every save written and committed at once. keep_last as ckpt_prune.
typedef struct ckpt_saver ckpt_saver;
ckpt_saver *ckpt_saver_new(const trainer *tr, const char *save_dir, int keep_last, int async);
void ckpt_saver_free(ckpt_saver *s);  // waits for a writer still running, commits nothing
// Collective. Starts a save of tr's state as SAVE_DIR/step_<step> (a pending one is
// committed first); synchronous savers commit before returning. BG_ERR (the same
// one-line bg_error on every rank, naming the step and the cause) on any failure,
// leaving earlier checkpoints and `latest` untouched.
int ckpt_saver_begin(ckpt_saver *s);
// Collective, at a step boundary: commits the pending save once every rank's writer has
// finished (wait = 1: waits for it). One small all-reduce per call while a save is
// pending. Errors as ckpt_saver_begin.
int ckpt_saver_poll(ckpt_saver *s, int wait);
int ckpt_saver_pending(const ckpt_saver *s);
long ckpt_saver_step(const ckpt_saver *s);  // the step of the last save begun
// What the last committed save cost this rank: the seconds the step waited for it (an
// async save's copy into the snapshot; a synchronous save's whole write), and the
// writer thread's seconds and CPU seconds (user + kernel; 0 for a synchronous save).
typedef struct {
    int async;
    double block_s, writer_s, writer_cpu_s;
    double bytes;  // this rank's two files
} ckpt_save_cost;
ckpt_save_cost ckpt_saver_cost(const ckpt_saver *s);
// One synchronous save (collective).
int ckpt_save(const trainer *tr, const char *save_dir);
// Creates SAVE_DIR if missing and checks that it is a writable directory (a run calls
// this once, before training, so a bad --save-dir fails before hours of work).
int ckpt_init_dir(const char *save_dir);
// Deletes all but the newest keep_last step directories (keep_last <= 0: keep all);
// never the one `latest` names.
int ckpt_prune(const char *save_dir, int keep_last);
// Loads a checkpoint directory (format 1 or 2, saved at any layout) into an initialized
// trainer (same config); collective. Verifies checksums (trainer.json's own too),
// tensor names, shapes and dtypes, that the optimizer pieces cover every tensor, and
// that the config and seed match; errors name the file and tensor, the same on every
// rank. Checks all before copying anything: on failure the trainer is unchanged.
int ckpt_load(trainer *tr, const char *ckpt_dir);
#endif
