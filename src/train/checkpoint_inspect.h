#ifndef BG_TRAIN_CHECKPOINT_INSPECT_H
#define BG_TRAIN_CHECKPOINT_INSPECT_H
#include <stdint.h>

#include "model/config.h"
#include "model/params.h"

// A checkpoint read without a trainer (`bagualu inspect`, export, inference).
typedef enum { CKPT_FILE_OK = 0, CKPT_FILE_MISSING, CKPT_FILE_MISMATCH, CKPT_FILE_INVALID } ckpt_file_status;
typedef struct {
    char name[64];               // the file's name in the step directory
    int optimizer;               // 1: optimizer state, 0: model tensors
    ckpt_file_status status;
    uint64_t recorded, actual;   // XXH64 in trainer.json, of the file (0 when missing)
    int tensors;                 // when OK
    char message[1024];          // when not OK: one line naming the file (and tensor)
} ckpt_file_report;
typedef struct {
    long step, total_steps;
    uint64_t samples;
    model_config cfg;
    int version;                 // format_version
    int n_files;
    ckpt_file_report *files;     // every data file, sorted by name
    int optimizer_pieces;        // pieces of m/v in the optimizer index
} ckpt_report;
// Reads trainer.json and the indexes (BG_ERR if one is missing, corrupt or incomplete),
// then checks each data file: checksum, then every tensor against the index and the
// config (status, message). Free with ckpt_report_free.
int ckpt_inspect(const char *ckpt_dir, ckpt_report *r);
void ckpt_report_free(ckpt_report *r);
// The model tensors of t (the one-process table of cfg) into params and, when st is not
// NULL, the gates' state into state, from the step directory dir: the model files'
// checksums verified, every tensor's name, dtype and shape checked; the optimizer files
// are not read. BG_ERR naming the file.
int ckpt_read_model(const char *dir, const model_config *cfg, const param_table *t, float *params,
                    const param_table *st, float *state);
#endif
