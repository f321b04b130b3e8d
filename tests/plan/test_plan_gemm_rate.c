// plan_gemm_rate across the shape classes: where the curves carry their points'
// arithmetic intensities, a shape between two classes' typical intensities takes a rate
// between theirs, so the 2x step at a class boundary (AI 20) is gone; at a class's own
// typical intensity, and for curves without intensities, the class's curve alone.
#include "plan/cluster.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

// One point per class at the same FLOPs: skinny 1e10 FLOP/s at AI 8, medium 2e10 at AI 32.
static void two_classes(plan_cluster *c, int with_ai) {
    memset(c, 0, sizeof *c);
    c->peak[PLAN_FP32] = 1e11;
    c->gemm_efficiency = 0.5;
    plan_gemm_curve *s = &c->gemm[PLAN_FP32][PLAN_GEMM_SKINNY], *m = &c->gemm[PLAN_FP32][PLAN_GEMM_MEDIUM];
    s->n = m->n = 1;
    s->flops[0] = m->flops[0] = 1e8;
    s->rate[0] = 1e10, m->rate[0] = 2e10;
    s->ai[0] = with_ai ? 8 : 0, m->ai[0] = with_ai ? 32 : 0;
    plan_gemm_curve_finish(s), plan_gemm_curve_finish(m);
}

// M x K x K with the given intensity (AI = M K / (2 (2M + K))): M = 2 K AI / (K - 4 AI).
static double rate_at_ai(const plan_cluster *c, double ai) {
    double K = 4096, M = 2 * K * ai / (K - 4 * ai);
    TU_CHECK(fabs(plan_gemm_ai(M, K, K) - ai) < 1e-9 * ai, "AI %g", ai);
    return plan_gemm_rate(c, PLAN_FP32, M, K, K);
}

int main(void) {
    plan_cluster c;
    two_classes(&c, 1);
    double below = rate_at_ai(&c, 19.999), above = rate_at_ai(&c, 20.001);
    TU_CHECK(fabs(above - below) < 1e-3 * below, "continuous at AI 20: %g vs %g", below, above);
    // log-linear in AI between 8 and 32: AI 16 is halfway.
    TU_CHECK(fabs(rate_at_ai(&c, 16) - 1.5e10) < 1e3, "AI 16: %g", rate_at_ai(&c, 16));
    TU_CHECK(fabs(rate_at_ai(&c, 8) - 1e10) < 1e3, "at skinny's own AI: %g", rate_at_ai(&c, 8));
    TU_CHECK(fabs(rate_at_ai(&c, 32) - 2e10) < 1e3, "at medium's own AI: %g", rate_at_ai(&c, 32));
    TU_CHECK(fabs(rate_at_ai(&c, 4) - 1e10) < 1e3, "below skinny's AI: %g", rate_at_ai(&c, 4));
    TU_CHECK(fabs(rate_at_ai(&c, 50) - 2e10) < 1e3, "above medium's AI, no square: %g", rate_at_ai(&c, 50));
    double prev = 0;
    for (double ai = 4; ai <= 50; ai *= 1.1) {
        double r = rate_at_ai(&c, ai);
        TU_CHECK(r >= prev, "rate falls from %g to %g at AI %g", prev, r, ai);
        prev = r;
    }
    // Without intensities: each class's curve alone (the step stays).
    two_classes(&c, 0);
    TU_CHECK(fabs(rate_at_ai(&c, 19.999) - 1e10) < 1e3 && fabs(rate_at_ai(&c, 20.001) - 2e10) < 1e3,
             "no intensities: %g / %g", rate_at_ai(&c, 19.999), rate_at_ai(&c, 20.001));
    return tu_finish("plan_gemm_rate across classes");
}
