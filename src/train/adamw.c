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
        float *p = params + pt->offset, *m = s->m + pt->offset, *v = s->v + pt->offset;
        const float *g = grads + pt->offset;
        long n = (long)pt->numel;
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
