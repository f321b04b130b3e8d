#ifndef BG_TRAIN_CHECKPOINT_TENSORS_H
#define BG_TRAIN_CHECKPOINT_TENSORS_H
// A checkpoint's two safetensors files, both in the one-process table's names:
//   model.safetensors      every parameter under its table name, F32; then the gates'
//                          state (model_router_state_table), F32, when the gate keeps any
//   optimizer.safetensors  "<name>.exp_avg", "<name>.exp_avg_sq" (AdamW m and v), F32,
//                          and "step" (I64 scalar)
#include <stdint.h>

#include "io/safetensors.h"
#include "model/params.h"

// Writes dir/model.safetensors and dir/optimizer.safetensors from blocks in t's
// layout (each file fsynced), and the gates' state from `state` in st's layout (st
// NULL or empty: none); their XXH64 into *model_sum and *opt_sum.
int ckpt_tensors_write(const char *dir, const param_table *t, const float *params, const float *m,
                       const float *v, int64_t adam_step, const param_table *st,
                       const float *state, uint64_t *model_sum, uint64_t *opt_sum);
// Opens path, verifies the checksum recorded in trainer.json, and checks every tensor
// of the model (optimizer 0; t's and st's tensors, st may be NULL) or optimizer (1)
// file against t: names, dtypes, shapes, nothing missing and nothing extra. Errors
// name the file and tensor.
int ckpt_tensors_open(st_file *f, const char *path, uint64_t sum, const param_table *t,
                      const param_table *st, int optimizer);
// Reads t's tensors by name (t may hold one rank's share of the experts) from the
// checked files mf and of into params, m and v, st's (NULL: none) into state;
// *adam_step from "step". BG_ERR (nothing copied) when "step" is unreadable or negative.
int ckpt_tensors_read(const st_file *mf, const st_file *of, const param_table *t, float *params,
                      float *m, float *v, const param_table *st, float *state,
                      int64_t *adam_step);
#endif
