#ifndef BG_TRAIN_CHECKPOINT_INDEX_H
#define BG_TRAIN_CHECKPOINT_INDEX_H
// A checkpoint's map from tensors to files (layout in train/checkpoint.h): written by
// rank 0 from every rank's plan (checkpoint_plan.h), read by every loader. Format 1
// (one model.safetensors + optimizer.safetensors) is read as the same map, so one
// reading path serves both formats.
#include <stdint.h>

#include "io/safetensors.h"
#include "model/params.h"
#include "train/checkpoint_meta.h"

#define CKPT_MODEL_INDEX "model.safetensors.index.json"
#define CKPT_OPT_INDEX "optimizer.index.json"

typedef struct {
    char *tensor;
    int file;
} ckpt_index_entry;

typedef struct {
    char *tensor;
    uint64_t offset, count;  // elements within the tensor
    int file;
    char *key[2];            // m ("exp_avg") and v ("exp_avg_sq") in the file
} ckpt_index_piece;

typedef struct {
    int version;
    int n_files;
    char **files;             // data files, sorted by name
    uint64_t *sums;           // their XXH64 as trainer.json records it
    int n_model;
    ckpt_index_entry *model;  // sorted by tensor name
    int n_opt;
    ckpt_index_piece *opt;    // sorted by tensor name, then offset
    int64_t adam_step;        // format 2: from optimizer.index.json; 1: -1 (in the file)
} ckpt_index;

// Reads dir's indexes (format 2) or makes format 1's from the tables, and checks them
// against the config's tables t (one-process) and st (gates' state): every tensor
// mapped once, every optimizer piece inside its tensor and the pieces of a tensor
// tiling it exactly, every file with a recorded checksum. BG_ERR naming the file.
int ckpt_index_read(ckpt_index *x, const char *dir, const ckpt_meta *meta, const param_table *t,
                    const param_table *st);
void ckpt_index_free(ckpt_index *x);
// The file holding model tensor `name`, or -1.
int ckpt_index_model_file(const ckpt_index *x, const char *name);
// The pieces of tensor `name`: *first (index into opt) and the count.
int ckpt_index_pieces(const ckpt_index *x, const char *name, int *first);
// Checks an opened data file i against the index: every tensor it should hold present
// with its dtype and shape, nothing else. BG_ERR naming the file and tensor.
int ckpt_index_check_file(const ckpt_index *x, int i, const st_file *f, const param_table *t,
                          const param_table *st);
// Rank 0's part of a save of format 2: both index files into dir (fsynced), for a world
// of P ranks with expert-parallel degree ep; their XXH64 into sums[0..1].
int ckpt_index_write(const char *dir, const model_config *cfg, int P, int ep, int zero_on,
                     int64_t adam_step, uint64_t sums[2]);

// Opens a checkpoint's data files on demand (st_open maps a file; only the pages read
// come from disk) and verifies each file's checksum at first open when `verify`.
typedef struct {
    const ckpt_index *x;
    const char *dir;
    int verify;
    st_file *files;
    char *opened;             // 0 not yet, 1 open, 2 failed
} ckpt_reader;
void ckpt_reader_init(ckpt_reader *r, const ckpt_index *x, const char *dir, int verify);
void ckpt_reader_close(ckpt_reader *r);
// The opened file i (NULL with bg_error set when it cannot be opened or verified).
const st_file *ckpt_reader_file(ckpt_reader *r, int i);
// Model tensor `name` (F32, shape as p's) into out.
int ckpt_reader_tensor(ckpt_reader *r, const param_tensor *p, float *out);
#endif
