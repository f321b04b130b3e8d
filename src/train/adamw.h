#ifndef BG_TRAIN_ADAMW_H
#define BG_TRAIN_ADAMW_H
// AdamW with decoupled weight decay (Loshchilov & Hutter), PyTorch's form:
//   p -= lr·wd·p (decayed tensors only);  p -= lr · m̂ / (sqrt(v̂) + eps).
// State mirrors the parameter block (or a rank's shard of it); the table says which
// tensors decay.
#include "model/params.h"
#include "model/zero_shard.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
} adamw_hparams;

typedef struct {
    float *m, *v;       // (numel) first and second moments
    long step;          // updates applied so far
    size_t numel;
} adamw_state;

void adamw_init(adamw_state *s, size_t numel);
void adamw_free(adamw_state *s);
// One update of every tensor in the table with learning rate lr; grads are read
// multiplied by grad_scale (gradient clipping folds in here, grads stay untouched).
void adamw_update(adamw_state *s, float *params, const float *grads, const param_table *t,
                  const adamw_hparams *h, float lr, float grad_scale);
// The same for the elements the shard owns (ZeRO-1): m and v hold zero_shard_numel
// elements (model/zero_shard.h); parameters outside the shard are left untouched.
// adamw_update is this with the whole block; each element's arithmetic is the same.
void adamw_update_shard(adamw_state *s, float *params, const float *grads, const param_table *t,
                        const zero_shard *z, const adamw_hparams *h, float lr, float grad_scale);
#endif
