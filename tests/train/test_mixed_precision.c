// Mixed precision: bf16 and fp16 training track the fp32 loss curve; fp16's dynamic
// loss scale skips exactly the step whose gradients overflow, halves, and grows back.
//
// Tolerance for tracking: the three runs share the seed and the batches, so their
// curves differ only by operand rounding (bf16: 8 mantissa bits, relative 2^-9 per
// operand; fp16: 11 bits, 2^-12), which AdamW amplifies step by step. The task is
// "count" (runs of repeated tokens), whose loss falls smoothly from 3.4 to about 0.85
// in 100 steps (the copy task learns by a sudden jump whose timing any perturbation
// moves). The mean loss of every window of 10 steps must stay within 0.02 nats of
// fp32's; measured about 0.001 (printed). Bugs this catches: stale weight copies (the
// curve stalls), a loss scale not undone (updates 65536 times too large diverge), a
// precision that never took effect (bitwise the fp32 curve).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test_util.h"
#include "train_fixture.h"

#define STEPS 100
#define WINDOW 10
#define TRACK_TOL 0.02

// path: the kernels' bf16 path for this run (both are run under bf16: each must track
// fp32, hence the other, within the tolerance).
static void run(const train_fixture *f, bg_dtype dtype, bf16_path path, double *losses, long *skipped) {
    train_options o;
    fixture_options(&o, f);
    o.steps = STEPS;
    o.dtype = dtype;
    trainer tr;
    BG_ASSERT(trainer_init(&tr, &o) == BG_OK);
    kernel_ctx_set_bf16_path(tr.m.kernels, path);
    for (int i = 0; i < STEPS; i++) losses[i] = fixture_step(&tr);
    *skipped = tr.skipped_steps;
    trainer_free(&tr);
}

static double window_mean(const double *x, int from) {
    double s = 0;
    for (int i = from; i < from + WINDOW; i++) s += x[i];
    return s / WINDOW;
}

static void check_tracks(const char *name, const double *got, const double *ref) {
    double worst = 0;
    int all_finite = 1;
    for (int i = 0; i < STEPS; i++) all_finite &= isfinite(got[i]);
    for (int w = 0; w + WINDOW <= STEPS; w += WINDOW) {
        double gap = fabs(window_mean(got, w) - window_mean(ref, w));
        if (gap > worst) worst = gap;
    }
    int identical = memcmp(got, ref, sizeof(double) * STEPS) == 0;
    printf("%s: loss first %.4f last-10 mean %.4f (fp32 %.4f); worst 10-step mean gap %.4f (tolerance %.2f)\n",
           name, got[0], window_mean(got, STEPS - WINDOW), window_mean(ref, STEPS - WINDOW), worst,
           TRACK_TOL);
    TU_CHECK(all_finite, "%s: a loss is not finite", name);
    TU_CHECK(worst <= TRACK_TOL, "%s: 10-step mean loss strays %.4f from fp32's", name, worst);
    // The precision must have taken effect: identical curves mean the GEMMs ran in fp32.
    TU_CHECK(!identical, "%s: losses are bitwise those of fp32", name);
}

// One fp16 trainer: an inf written into the gradients between backward and update.
static void check_injected_inf(const train_fixture *f) {
    train_options o;
    fixture_options(&o, f);
    o.steps = 20;
    o.dtype = BG_FP16;
    o.loss_scale_init = 1024;
    o.loss_scale_window = 4;
    trainer tr;
    BG_ASSERT(trainer_init(&tr, &o) == BG_OK);
    size_t n = tr.m.table.numel;
    float *before = bg_malloc(n * sizeof(float));
    int applied_after = 0;
    float scale_at_inject = 0;
    for (int i = 0; i < 12; i++) {
        fixture_grads(&tr);
        memcpy(before, tr.m.params, n * sizeof(float));
        if (i == 6) {
            tr.m.grads[n / 2] = INFINITY;
            scale_at_inject = tr.loss_scale;
        }
        int applied = trainer_apply_grads(&tr);
        int unchanged = memcmp(before, tr.m.params, n * sizeof(float)) == 0;
        if (i == 6) {
            TU_CHECK(!applied, "the step with an inf gradient was applied");
            TU_CHECK(unchanged, "a skipped step changed the weights");
            TU_CHECK(tr.loss_scale == scale_at_inject / 2, "loss scale %g after the skip, expected %g",
                     tr.loss_scale, scale_at_inject / 2);
            TU_CHECK(isinf(tr.last_grad_norm), "a skipped step reports grad norm %g", tr.last_grad_norm);
        } else {
            TU_CHECK(applied && !unchanged, "step %d was not applied", i + 1);
            if (i > 6) applied_after++;
        }
    }
    // Window 4: 1024 doubled after steps 4 (2048), halved by the skip at step 7 (1024),
    // doubled again after the 4 good steps 8-11 (2048).
    printf("fp16 injected inf at step 7: scale %g -> %g; %ld skipped of 12; scale after 12 steps %g\n",
           scale_at_inject, scale_at_inject / 2, tr.skipped_steps, tr.loss_scale);
    TU_CHECK(scale_at_inject == 2048, "scale before the skip %g, expected 2048 (1024 doubled after 4 good steps)",
             scale_at_inject);
    TU_CHECK(tr.skipped_steps == 1, "%ld steps skipped, expected exactly 1", tr.skipped_steps);
    TU_CHECK(applied_after == 5, "%d steps applied after the skip, expected 5", applied_after);
    TU_CHECK(tr.loss_scale == 2048, "scale after 12 steps %g, expected 2048", tr.loss_scale);
    TU_CHECK(tr.step == 12, "step counter %ld, expected 12 (a skipped step still counts)", tr.step);
    free(before);
    trainer_free(&tr);
}

// Loss scaling is algebraically neutral: the gradients of a scaled backward are the
// scale times the unscaled ones (the LM head's and the router losses' shares alike).
static void check_scaled_gradients(const train_fixture *f) {
    train_options o;
    fixture_options(&o, f);
    trainer tr;
    BG_ASSERT(trainer_init(&tr, &o) == BG_OK);
    size_t n = tr.m.table.numel;
    uint64_t samples = tr.samples;
    float *g1 = bg_malloc(n * sizeof(float));
    fixture_grads(&tr);
    memcpy(g1, tr.m.grads, n * sizeof(float));
    tr.samples = samples;  // the same batch again
    tr.loss_scale = 4096;
    fixture_grads(&tr);
    double worst = 0, norm = 0;
    for (size_t i = 0; i < n; i++) norm = fmax(norm, fabs(g1[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(tr.m.grads[i] / 4096.0 - g1[i]));
    printf("loss scale 4096: worst |g_scaled/4096 - g| = %.3g (largest |g| %.3g)\n", worst, norm);
    TU_CHECK(worst <= 1e-5 * norm, "scaled gradients differ from scale x gradients by %.3g", worst);
    free(g1);
    trainer_free(&tr);
}

// The bf16 path this CPU does not take (train/test_mixed_precision_other_path, this
// program with --other-path): a skip (77) where it cannot run here (native bf16 without
// oneDNN's bf16 GEMMs, on an AVX2-only CPU).
static int main_other_path(const train_fixture *f, bf16_path path) {
    const bf16_path other = path == BF16_PATH_FP32 ? BF16_PATH_NATIVE : BF16_PATH_FP32;
    if (other == BF16_PATH_NATIVE && !matmul_bf16_native_usable()) {
        printf("train/test_mixed_precision --other-path: oneDNN has no bf16 GEMM on this CPU: skipped\n");
        return 77;
    }
    double ref[STEPS], bf16_other[STEPS];
    long skipped_ref, skipped_other;
    run(f, BG_FP32, path, ref, &skipped_ref);
    run(f, BG_BF16, other, bf16_other, &skipped_other);
    printf("bf16 paths: this CPU's %s, the other %s\n", bf16_path_name(path), bf16_path_name(other));
    check_tracks("bf16, the other path", bf16_other, ref);
    TU_CHECK(skipped_ref == 0 && skipped_other == 0, "fp32/bf16 skipped steps");
    return tu_finish("mixed_precision --other-path");
}

int main(int argc, char **argv) {
    train_fixture f;
    fixture_make_task(&f, SYNTH_COUNT, 8);
    const bf16_path path = bf16_path_default();
    if (argc > 1 && !strcmp(argv[1], "--other-path")) {
        const int rc = main_other_path(&f, path);
        fixture_remove(&f);
        return rc;
    }
    double ref[STEPS], bf16[STEPS], fp16[STEPS];
    long skipped_ref, skipped_bf16, skipped_fp16;
    run(&f, BG_FP32, path, ref, &skipped_ref);
    run(&f, BG_BF16, path, bf16, &skipped_bf16);
    run(&f, BG_FP16, path, fp16, &skipped_fp16);
    printf("bf16 path: this CPU's %s\n", bf16_path_name(path));
    check_tracks("bf16", bf16, ref);
    check_tracks("fp16", fp16, ref);
    printf("fp16 steps skipped for overflow at the default scale: %ld\n", skipped_fp16);
    TU_CHECK(skipped_ref == 0 && skipped_bf16 == 0, "fp32/bf16 skipped steps");
    TU_CHECK(window_mean(ref, STEPS - WINDOW) < ref[0] - 1.0, "fp32 did not learn (%.4f -> %.4f)", ref[0],
             window_mean(ref, STEPS - WINDOW));
    check_injected_inf(&f);
    check_scaled_gradients(&f);
    fixture_remove(&f);
    return tu_finish("mixed_precision");
}
