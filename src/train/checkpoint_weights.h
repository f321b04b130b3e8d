#ifndef BG_TRAIN_CHECKPOINT_WEIGHTS_H
#define BG_TRAIN_CHECKPOINT_WEIGHTS_H
// A checkpoint's model for inference (eval, generate): the config from trainer.json
// and the parameters from the model files, no trainer and no optimizer state
// (the layout of a checkpoint directory is described in train/checkpoint.h).
#include <stddef.h>

#include "model/model.h"

typedef struct {
    char dir[4096];     // the step directory read
    long step;          // its training step
    int batch_size;     // the run's batch (B, T) from trainer.json's "training"
    int seq_len;        // (0 when absent): eval's defaults
} ckpt_weights_info;

// path: a step directory (holding trainer.json), or a save directory (holding
// `latest`, which names the step directory to read). Checks trainer.json (its own
// checksum, the config) and the model files (their recorded XXH64, every tensor's
// name, dtype and shape), then model_init's m with the checkpoint's config and fills
// every parameter. BG_ERR (bg_error: one line naming the file) on any problem, with
// m untouched; on success the caller owns m (model_free). info may be NULL.
int ckpt_load_weights(model *m, const char *path, ckpt_weights_info *info);
#endif
