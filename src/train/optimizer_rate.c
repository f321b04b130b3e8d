// Timing the optimizer's passes (optimizer_rate.h).
#include "train/optimizer_rate.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/kernels.h"
#include "train/adamw.h"
#include "train/grad_norm.h"

#include <stdlib.h>
#include <string.h>

double optimizer_bytes_per_s(size_t n, int threads) {
    const int before = bg_threads_get();
    bg_threads_set(threads);
    float *p = bg_aligned_alloc(n * 4), *g = bg_aligned_alloc(n * 4);
    for (size_t i = 0; i < n; i++) p[i] = (float)(i % 13) * 0.01f;
    param_tensor one = {.name = "w", .ndim = 1, .shape = {(int64_t)n}, .offset = 0, .numel = n,
                        .decay = 1, .expert = -1, .layer = -1};
    param_table t = {.tensors = &one, .count = 1, .numel = n, .dense_numel = n};
    const adamw_hparams h = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    adamw_state s;
    adamw_init(&s, n);
    double dt[6];
    for (int r = 0; r < 6; r++) {
        const double t0 = bg_now();
        vec_zero(g, n);
        const double sq = grad_sum_squares(g, n);
        adamw_update(&s, p, g, &t, &h, 1e-4f, sq > 1 ? 0.5f : 1.0f);
        dt[r] = bg_now() - t0;
    }
    adamw_free(&s);
    free(p), free(g);
    bg_threads_set(before);
    return 36.0 * (double)n / bg_median(dt + 1, 5);  // the first call warms up
}
