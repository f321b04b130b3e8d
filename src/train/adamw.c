#include "train/adamw.h"
#include "core/error.h"

#include <math.h>
#include <string.h>

void adamw_init(adamw_state *s, size_t numel) {
    s->m = bg_aligned_alloc(numel * sizeof(float));
    s->v = bg_aligned_alloc(numel * sizeof(float));
    memset(s->m, 0, numel * sizeof(float));
    memset(s->v, 0, numel * sizeof(float));
    s->step = 0;
    s->numel = numel;
}

void adamw_free(adamw_state *s) {
    free(s->m);
    free(s->v);
    memset(s, 0, sizeof *s);
}

void adamw_update(adamw_state *s, float *params, const float *grads, const param_table *t,
                  const adamw_hparams *h, float lr, float grad_scale) {
    zero_shard whole = zero_shard_make(0, t->dense_numel, t->numel, 0, 1, 0, 1);
    adamw_update_shard(s, params, grads, t, &whole, h, lr, grad_scale);
}

void adamw_update_shard(adamw_state *s, float *params, const float *grads, const param_table *t,
                        const zero_shard *z, const adamw_hparams *h, float lr, float grad_scale) {
    s->step++;
    float b1 = h->beta1, b2 = h->beta2, eps = h->eps;
    // Bias corrections folded into two scalars, computed in double once per step.
    float c1 = (float)(1.0 / (1.0 - pow(b1, (double)s->step)));
    float c2 = (float)(1.0 / (1.0 - pow(b2, (double)s->step)));
    // One parallel region for the whole block: a region per small tensor would
    // cost more than the update itself.
    #pragma omp parallel
    for (int i = 0; i < t->count; i++) {
        const param_tensor *pt = &t->tensors[i];
        float decay = pt->decay ? 1.0f - lr * h->weight_decay : 1.0f;
        // The tensor's part in each owned range (dense, expert): a shard may cut a
        // tensor, and the cut part keeps the tensor's decay. Unsharded, each tensor
        // lies whole in one of them.
        for (int part = 0; part < 2; part++) {
            size_t lo = part ? z->expert_lo : z->dense_lo, hi = part ? z->expert_hi : z->dense_hi;
            size_t a = pt->offset > lo ? pt->offset : lo;
            size_t b = pt->offset + pt->numel < hi ? pt->offset + pt->numel : hi;
            if (a >= b) continue;  // the same on every thread: all skip the loop, or none
            size_t k = zero_shard_index(z, a);
            float *p = params + a, *m = s->m + k, *v = s->v + k;
            const float *g = grads + a;
            long n = (long)(b - a);
            #pragma omp for schedule(static) nowait
            for (long j = 0; j < n; j++) {
                float gj = g[j] * grad_scale;
                float mj = b1 * m[j] + (1.0f - b1) * gj;
                float vj = b2 * v[j] + (1.0f - b2) * gj * gj;
                m[j] = mj;
                v[j] = vj;
                p[j] = p[j] * decay - lr * (mj * c1) / (sqrtf(vj * c2) + eps);
            }
        }
    }
}
