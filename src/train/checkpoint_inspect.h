#ifndef BG_TRAIN_CHECKPOINT_INSPECT_H
#define BG_TRAIN_CHECKPOINT_INSPECT_H
#include <stdint.h>

#include "model/config.h"

// A checkpoint read without a trainer (`bagualu inspect`).
typedef enum { CKPT_FILE_OK = 0, CKPT_FILE_MISSING, CKPT_FILE_MISMATCH, CKPT_FILE_INVALID } ckpt_file_status;
typedef struct {
    ckpt_file_status status;
    uint64_t recorded, actual;   // XXH64 in trainer.json, of the file (0 when missing)
    int tensors;                 // when OK
    char message[1024];          // when not OK: one line naming the file (and tensor)
} ckpt_file_report;
typedef struct {
    long step, total_steps;
    uint64_t samples;
    model_config cfg;
    ckpt_file_report model, optimizer;
} ckpt_report;
// Reads trainer.json (BG_ERR if it is missing, corrupt or incomplete), then checks each
// safetensors file: checksum, then every tensor against the config (status, message).
int ckpt_inspect(const char *ckpt_dir, ckpt_report *r);
#endif
