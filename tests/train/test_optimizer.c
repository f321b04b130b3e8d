// AdamW against the formula in double, the LR schedule's shape, the global norm.
// Tolerance 1e-6 relative: one AdamW update is a handful of fp32 operations.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/threads.h"

#include "test_util.h"
#include "train/adamw.h"
#include "train/grad_norm.h"
#include "train/optimizer_rate.h"
#include "train/schedule.h"

int main(void) {
    // Two tensors: one decayed, one not.
    param_tensor tensors[2] = {{.name = "w", .offset = 0, .numel = 5, .decay = 1},
                               {.name = "b", .offset = 5, .numel = 3, .decay = 0}};
    param_table t = {.tensors = tensors, .count = 2, .numel = 8};
    float p[8], g[8];
    double pd[8], md[8] = {0}, vd[8] = {0};
    tu_seed(1);
    tu_fill_normal(p, 8, 1.0);
    for (int i = 0; i < 8; i++) pd[i] = p[i];
    adamw_state s;
    adamw_init(&s, 8);
    adamw_hparams h = {0.9f, 0.95f, 1e-8f, 0.1f};
    for (int step = 1; step <= 3; step++) {
        tu_fill_normal(g, 8, 1.0);
        float lr = 0.01f * step, scale = 0.5f;
        adamw_update(&s, p, g, &t, &h, lr, scale);
        for (int i = 0; i < 8; i++) {
            double gi = (double)g[i] * scale;
            md[i] = 0.9 * md[i] + 0.1 * gi;
            vd[i] = 0.95 * vd[i] + 0.05 * gi * gi;
            double mh = md[i] / (1 - pow(0.9, step)), vh = vd[i] / (1 - pow(0.95, step));
            if (i < 5) pd[i] -= (double)lr * 0.1 * pd[i];
            pd[i] -= lr * mh / (sqrt(vh) + 1e-8);
        }
    }
    tu_expect_close("adamw params", p, pd, 8, 1e-6, 1e-6);
    TU_CHECK(s.step == 3, "step count");
    adamw_free(&s);

    // Schedule: linear warm-up reaching max at step warmup-1, cosine to min at the end.
    TU_CHECK(fabsf(lr_schedule(0, 100, 10, 1.0f, 0.1f) - 0.1f) < 1e-6f, "warm-up start");
    TU_CHECK(fabsf(lr_schedule(9, 100, 10, 1.0f, 0.1f) - 1.0f) < 1e-6f, "warm-up end");
    TU_CHECK(fabsf(lr_schedule(10, 100, 10, 1.0f, 0.1f) - 1.0f) < 1e-6f, "cosine start");
    TU_CHECK(fabsf(lr_schedule(55, 100, 10, 1.0f, 0.1f) - 0.55f) < 1e-6f, "cosine middle");
    TU_CHECK(fabsf(lr_schedule(100, 100, 10, 1.0f, 0.1f) - 0.1f) < 1e-6f, "cosine floor");
    float prev = 2;
    for (int i = 10; i < 100; i++) {
        float lr = lr_schedule(i, 100, 10, 1.0f, 0.1f);
        TU_CHECK(lr <= prev, "cosine must not increase (step %d)", i);
        prev = lr;
    }

    // Global norm and clip scale.
    float big[100003];
    double sq = 0;
    for (int i = 0; i < 100003; i++) {
        big[i] = (float)((i % 7) - 3) * 0.25f;
        sq += (double)big[i] * big[i];
    }
    double norm = grad_global_norm(big, 100003);
    TU_CHECK(fabs(norm - sqrt(sq)) < 1e-9 * sqrt(sq), "norm %.12g vs %.12g", norm, sqrt(sq));
    TU_CHECK(grad_clip_scale(0.5, 1.0f) == 1.0f, "no clip below max");
    TU_CHECK(fabsf(grad_clip_scale(4.0, 1.0f) - 0.25f) < 1e-6f, "clip to max");
    TU_CHECK(grad_clip_scale(4.0, 0.0f) == 1.0f, "clip 0 disables");
    // The planner's optimizer rate: a finite positive bytes/s on one thread and on two,
    // the caller's thread count left as it was.
    const int threads = bg_threads_get();
    const double r1 = optimizer_bytes_per_s(1 << 20, 1), r2 = optimizer_bytes_per_s(1 << 20, 2);
    TU_CHECK(isfinite(r1) && r1 > 0 && isfinite(r2) && r2 > 0, "optimizer rate %g, %g bytes/s", r1, r2);
    TU_CHECK(bg_threads_get() == threads, "threads %d after timing, %d before", bg_threads_get(), threads);
    return tu_finish("optimizer");
}
