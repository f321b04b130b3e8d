#ifndef BG_TRAIN_CHECKPOINT_META_H
#define BG_TRAIN_CHECKPOINT_META_H
// trainer.json, a checkpoint's record of everything but the tensors (its keys are
// listed in train/checkpoint.h): written from a trainer, read back checked for
// completeness and for its own checksum, the last key "trainer_json_xxh64".
#include <cjson/cJSON.h>
#include <stdint.h>

#include "model/config.h"
#include "train/train_state.h"

#define CKPT_FORMAT_VERSION 2
#define CKPT_FORMAT_VERSION_MIN 1  // one model.safetensors + optimizer.safetensors

// What moves with training: captured when a save starts, so an asynchronous save
// records the step it snapshotted, not the one running when it commits.
typedef struct {
    long step;
    uint64_t samples;
    float loss_scale;
    long good_steps;
    int64_t adam_step;
    skip_ranges skips;          // loss-spike rewinds: data never trained on
    spike_state spike;          // the spike detector's window
} ckpt_progress;
ckpt_progress ckpt_progress_of(const trainer *tr);

// trainer.json's text for tr's options and config, the progress p and the XXH64 of
// the n files named (malloc'd, ending in a newline, its own checksum filled in).
char *ckpt_meta_json(const trainer *tr, const ckpt_progress *p, const char *const *files,
                     const uint64_t *sums, int n);

// What trainer.json says, checked for completeness and its own checksum.
typedef struct {
    cJSON *root;
    long step, total_steps;
    uint64_t samples;
    const char *seed;             // decimal, inside root
    const cJSON *model_config;    // inside root
    int version;                  // format_version: 1 or 2
    const cJSON *sums;            // "checksums_xxh64": file name -> 16 hex digits
    double loss_scale;            // 0: not recorded
    long good_steps;
    const char *bf16_path;        // training.bf16_path, inside root; NULL: not recorded
    skip_ranges skips;            // "skipped_samples" (none when absent)
    spike_state spike;            // "spike_losses", "spike_run" (empty when absent)
} ckpt_meta;

// Reads and checks path; BG_ERR (bg_error naming the file) when it is corrupt,
// not JSON, of another format_version, or lacks a field.
int ckpt_meta_read(ckpt_meta *m, const char *path);
void ckpt_meta_free(ckpt_meta *m);
// The XXH64 trainer.json (at path) records for file; BG_ERR naming both when absent.
int ckpt_meta_sum(const ckpt_meta *m, const char *file, uint64_t *sum, const char *path);
// A blended run (--data-mix) resumes only from a checkpoint of the same datasets and
// weights: data.datasets names each dataset and the samples drawn from it.
int ckpt_meta_check_data(const ckpt_meta *m, const trainer *tr, const char *path);
// The config the run asks for must be the one the checkpoint holds: a mismatch
// names the first differing key.
// One log line when the checkpoint's bf16 path (training.bf16_path) differs from the
// one tr's kernels take now and tr trains in bf16.
void ckpt_meta_note_bf16_path(const ckpt_meta *m, const trainer *tr, const char *file);
int ckpt_meta_check_config(const cJSON *saved, const model_config *cfg, const char *file);
#endif
