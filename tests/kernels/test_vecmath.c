// The vectorisable exp and its row helpers (kernels/vecmath.h): bg_expf against
// double-precision exp over its range and at its clamps; bg_exp_shifted_sum (whole vectors at
// a time where the build has AVX-512 or AVX2) value for value equal to bg_expf, its sum close to
// the exact one, and its bf16 form (bg_exp_shifted_sum_bf16) equal to bg_f32_to_bf16 of
// those values, at lengths with and without a tail; bg_max_f32 exact at every length and
// with the maximum at either end; vf_tanh against tanh; vf_sigmoid bit for bit bg_sigmoidf.
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "kernels/vecmath.h"
#include "test_util.h"

static void check_expf_accuracy(void) {
    double worst = 0;
    float worst_x = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.00173f) {
        const double want = exp((double)x), rel = fabs(bg_expf(x) - want) / want;
        if (rel > worst) worst = rel, worst_x = x;
    }
    TU_CHECK(worst < 1.5e-7, "bg_expf: relative error %.3g at x = %.6g (limit 1.5e-7)", worst,
             (double)worst_x);
    TU_CHECK(bg_expf(0.0f) == 1.0f, "bg_expf(0) = %.9g, not 1", (double)bg_expf(0.0f));
    TU_CHECK(bg_expf(-1000.0f) == bg_expf(-87.0f) && bg_expf(-87.0f) > 0,
             "bg_expf: below -87 is not clamped to e^-87 (%.3g)", (double)bg_expf(-1000.0f));
    TU_CHECK(bg_expf(1000.0f) == bg_expf(88.0f) && isfinite(bg_expf(88.0f)),
             "bg_expf: above 88 is not clamped to e^88 (%.3g)", (double)bg_expf(1000.0f));
    TU_CHECK(isnan(bg_expf(NAN)), "bg_expf(NaN) is not NaN");
}

static void check_shifted_sum(int n) {
    float *x = malloc(sizeof(float) * (n + 1)), *e = malloc(sizeof(float) * (n + 1));
    tu_seed(7 + n);
    for (int i = 0; i < n; i++) x[i] = (float)(tu_uniform() * 200.0 - 120.0);  // past both clamps
    if (n > 3) x[1] = NAN, x[2] = -INFINITY, x[3] = INFINITY;
    // NaNs with payloads, one signalling: their bf16 forms keep the top payload bits.
    const uint32_t payloads[3] = {0x7fc12345u, 0xffa0f00du, 0x7f800001u};
    for (int k = 0; k < 3 && 40 + 20 * k < n; k++) memcpy(&x[40 + 20 * k], &payloads[k], sizeof(float));
    const float shift = 3.25f;
    bg_exp_shifted_sum(e, x, shift, n);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const float want = bg_expf(x[i] - shift);
        if (isnan(want) ? !isnan(e[i]) : memcmp(&want, &e[i], sizeof want) != 0) bad++;
    }
    TU_CHECK(bad == 0, "bg_exp_shifted_sum n=%d: %d values differ from bg_expf", n, bad);

    // The bf16 form: each value bg_f32_to_bf16 of bg_expf's (NaN lanes included), the sum
    // that of the unrounded values.
    uint16_t *h = malloc(sizeof(uint16_t) * (n + 1));
    const float s16 = bg_exp_shifted_sum_bf16(h, x, shift, n), s32 = bg_exp_shifted_sum(e, x, shift, n);
    bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != bg_f32_to_bf16(bg_expf(x[i] - shift));
    TU_CHECK(bad == 0, "bg_exp_shifted_sum_bf16 n=%d: %d values differ from bf16(bg_expf)", n, bad);
    TU_CHECK(n > 3 ? isnan(s16) && isnan(s32) : fabs(s16 - s32) <= 1e-6 * fabs(s32),
             "bg_exp_shifted_sum_bf16 n=%d: sum %.9g, bg_exp_shifted_sum's %.9g", n, (double)s16,
             (double)s32);
    free(h);

    // The sum, on values in the range of a softmax row.
    for (int i = 0; i < n; i++) x[i] = (float)(tu_uniform() * 10.0 - 5.0);
    const float got = bg_exp_shifted_sum(e, x, shift, n);
    double want = 0;
    for (int i = 0; i < n; i++) want += exp((double)x[i] - shift);
    TU_CHECK(fabs(got - want) <= 1e-6 * want + 1e-30, "bg_exp_shifted_sum n=%d: sum %.9g, exact %.9g",
             n, (double)got, want);
    h = malloc(sizeof(uint16_t) * (n + 1));
    const float got16 = bg_exp_shifted_sum_bf16(h, x, shift, n);
    TU_CHECK(fabs(got16 - got) <= 1e-6 * fabs(got), "bg_exp_shifted_sum_bf16 n=%d: sum %.9g, bg_exp_shifted_sum's %.9g", n,
             (double)got16, (double)got);
    free(h);
    free(x), free(e);
}

static void check_max(int n) {
    float *x = malloc(sizeof(float) * (n + 1));
    tu_seed(11 + n);
    for (int pos = 0; pos < n; pos += (n > 40 ? n / 7 + 1 : 1)) {
        for (int i = 0; i < n; i++) x[i] = (float)(tu_uniform() * 100.0 - 90.0);
        x[pos] = 50.0f;
        TU_CHECK(bg_max_f32(x, n) == 50.0f, "bg_max_f32 n=%d: max at %d not found (%.9g)", n, pos,
                 (double)bg_max_f32(x, n));
    }
    x[0] = 1.0f;
    TU_CHECK(bg_max_f32(x, 0) == -FLT_MAX, "bg_max_f32 of nothing is not -FLT_MAX");
    free(x);
}

// vf_tanh (builds with AVX-512 or AVX2): absolute error against tanh in double, over the
// range where it bends and far into both saturated tails.
static void check_tanh_vf(void) {
#if defined(VF_LANES)
    double worst = 0, worst_u = 0;
    float u[VF_LANES], t[VF_LANES];
    for (float u0 = -60.0f; u0 <= 60.0f; u0 += VF_LANES * 0.000731f) {
        for (int j = 0; j < VF_LANES; j++) u[j] = u0 + j * 0.000731f;
        vf_store(t, vf_tanh(vf_load(u)));
        for (int j = 0; j < VF_LANES; j++) {
            const double err = fabs(t[j] - tanh((double)u[j]));
            if (err > worst) worst = err, worst_u = u[j];
        }
    }
    TU_CHECK(worst < 3e-7, "vf_tanh (%d lanes): absolute error %.3g at u = %.6g (limit 3e-7)", VF_LANES,
             worst, worst_u);
#endif
}

// vf_sigmoid: bit for bit bg_sigmoidf (the same exp and the same division), over both
// saturated tails and the exp's clamps.
static void check_sigmoid_vf(void) {
#if defined(VF_LANES)
    int bad = 0;
    float x[VF_LANES], y[VF_LANES];
    for (float x0 = -120.0f; x0 <= 120.0f; x0 += VF_LANES * 0.00937f) {
        for (int j = 0; j < VF_LANES; j++) x[j] = x0 + j * 0.00937f;
        vf_store(y, vf_sigmoid(vf_load(x)));
        for (int j = 0; j < VF_LANES; j++) bad += memcmp(&y[j], &(float){bg_sigmoidf(x[j])}, sizeof(float)) != 0;
    }
    TU_CHECK(bad == 0, "vf_sigmoid (%d lanes): %d values differ from bg_sigmoidf", VF_LANES, bad);
#endif
}

int main(void) {
    check_expf_accuracy();
    check_tanh_vf();
    check_sigmoid_vf();
    const int lengths[] = {0, 1, 15, 16, 17, 63, 64, 65, 1024, 1107};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        check_shifted_sum(lengths[i]);
        if (lengths[i]) check_max(lengths[i]);
    }
    check_max(0);
    return tu_finish("kernels/test_vecmath");
}
