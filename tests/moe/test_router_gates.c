// The gates switch, gshard and noisy_topk, group-limited routing and the sequence-level
// balance loss: gradients against finite differences, determinism (seed, step, thread
// count, layout), a hand-checked group limit, gshard's keep rate, noisy_topk's losses
// against a double recomputation.
#include "kernels/kernels.h"
#include "moe/router.h"
#include "moe_ref.h"
#include "core/error.h"
#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Finite differences of the fp32 forward itself (there is no double reference of the
// random gates): central, step FD_EPS. The loss sums O(10) terms rounded at ~6e-8
// relative, so FD's rounding error is ~1e-7·10 / 2e-3 ~ 5e-4 at worst, truncation
// ~eps² ~ 1e-6; the worst seen stays under a tenth of atol 1e-3 + rtol 1e-2, while a
// dropped or wrong term (threshold, importance, jitter factor, sequence scale) is off
// by 0.05 or more.
#define FD_EPS 1e-3
#define FD_ATOL 1e-3
#define FD_RTOL 1e-2

static kernel_ctx *g_kc;

typedef struct {
    moe_shape s;
    moe_router_ctx ctx;
    float state[64];    // a gate's state (the bias gate's per-expert bias), for E <= 64
    bg_arena arena;
    moe_router_cache c;
    moe_router_scratch scr;
    int N;
} gate_run;

static void run_init(gate_run *g, const moe_shape *s, int N) {
    memset(g, 0, sizeof *g);
    g->s = *s;
    g->N = N;
    g->ctx = (moe_router_ctx){.seed = 7, .step = 3, .layer = 1, .state = g->state};
    BG_ASSERT(s->router->state_size(s) <= sizeof g->state);
    // A bias that favours the odd experts, so that selection on score + bias differs
    // from selection on the score alone.
    for (int e = 0; e < 64; e++) g->state[e] = e % 2 ? 0.2f : 0.0f;
    bg_arena m;
    bg_arena_init(&m, 0);
    moe_router_cache_layout(&g->c, &m, s, N);
    moe_router_scratch_layout(&g->scr, &m, s, N);
    bg_arena_init(&g->arena, m.used);
    moe_router_cache_layout(&g->c, &g->arena, s, N);
    moe_router_scratch_layout(&g->scr, &g->arena, s, N);
}

static void run_free(gate_run *g) { bg_arena_free(&g->arena); }

static void forward(gate_run *g, const float *inp, const float *gate) {
    g->s.router->forward(g_kc, &g->c, &g->ctx, inp, gate, &g->s, g->N);
}

// L = Σ gw·topk_w + aux_coef·aux + z_coef·z (what the backward differentiates).
static double gate_loss(gate_run *g, const float *inp, const float *gate, const float *gw) {
    forward(g, inp, gate);
    double L = g->s.aux_coef * g->c.aux_loss + g->s.z_coef * g->c.z_loss;
    for (int i = 0; i < g->N * g->s.k; i++) L += (double)gw[i] * g->c.topk_w[i];
    return L;
}

// What must not change for FD to be valid: the chosen (and dropped) experts, and for
// noisy_topk the order of H (its load thresholds).
static void decision(int *out, gate_run *g) {
    const int N = g->N, E = g->s.E, k = g->s.k;
    memcpy(out, g->c.topk_idx, sizeof(int) * N * k);
    if (g->s.router != &moe_router_noisy_topk) return;
    const float *H = g->c.gate_cache + (size_t)N * E;
    for (int t = 0; t < N; t++) {
        double h[64];
        for (int e = 0; e < E; e++) h[e] = H[(size_t)t * E + e];
        ref_topk(out + N * k + t * E, h, E, E);
    }
}

static size_t decision_len(const gate_run *g) {
    return (size_t)g->N * g->s.k + (g->s.router == &moe_router_noisy_topk ? (size_t)g->N * g->s.E : 0);
}

// FD of x[0..n) (inp or gate); coordinates whose ±eps flips a decision are skipped.
static int fd_check(const char *what, gate_run *g, float *x, size_t n, const float *got,
                    float *inp, float *gate, const float *gw) {
    size_t dn = decision_len(g);
    int *d0 = malloc(sizeof(int) * dn), *d1 = malloc(sizeof(int) * dn);
    double *want = malloc(sizeof(double) * n);
    float *gotc = malloc(sizeof(float) * n);
    size_t used = 0, skipped = 0;
    gate_loss(g, inp, gate, gw);
    decision(d0, g);
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        x[i] = save + (float)FD_EPS;
        float xp = x[i];
        double lp = gate_loss(g, inp, gate, gw);
        decision(d1, g);
        int same = !memcmp(d0, d1, sizeof(int) * dn);
        x[i] = save - (float)FD_EPS;
        float xm = x[i];
        double lm = gate_loss(g, inp, gate, gw);
        decision(d1, g);
        same &= !memcmp(d0, d1, sizeof(int) * dn);
        x[i] = save;
        if (!same) {
            skipped++;
            continue;
        }
        want[used] = (lp - lm) / ((double)xp - xm);
        gotc[used++] = got[i];
    }
    printf("  %s: %zu coordinates, %zu skipped (a decision flips)\n", what, n, skipped);
    TU_CHECK(skipped * 5 <= n, "%s: too many coordinates skipped (%zu of %zu)", what, skipped, n);
    int ok = ref_expect(what, gotc, want, used, FD_ATOL, FD_RTOL);
    free(d0); free(d1); free(want); free(gotc);
    return ok;
}

static moe_shape shape(const moe_router *r, int C, int E, int k) {
    return (moe_shape){.C = C, .E = E, .k = k, .F = 4, .router = r, .norm_topk_prob = 1,
                       .routing = {.groups = 1, .topk_groups = 1}};
}

static size_t gate_rows(const moe_shape *s) { return s->router == &moe_router_noisy_topk ? 2 * s->E : s->E; }

// Backward of (gw·topk_w + aux_coef·aux + z_coef·z) against FD of the forward.
static void check_grad(const char *name, moe_shape s, int N, uint64_t seed) {
    printf("%s: FD gradient (N=%d C=%d E=%d k=%d aux=%g z=%g jitter=%g scope=%d groups=%d/%d)\n",
           name, N, s.C, s.E, s.k, s.aux_coef, s.z_coef, s.routing.jitter, s.routing.aux_scope,
           s.routing.topk_groups, s.routing.groups);
    gate_run g;
    run_init(&g, &s, N);
    size_t nx = (size_t)N * s.C, ng = gate_rows(&s) * s.C;
    tu_seed(seed);
    float *inp = malloc(sizeof(float) * nx), *gate = malloc(sizeof(float) * ng);
    float *gw = malloc(sizeof(float) * N * s.k);
    tu_fill_normal(inp, nx, 1.0);
    tu_fill_normal(gate, ng, 0.5);
    tu_fill_normal(gw, (size_t)N * s.k, 1.0);
    float *dinp = calloc(nx, sizeof(float)), *dgate = calloc(ng, sizeof(float));
    forward(&g, inp, gate);
    s.router->backward(g_kc, dinp, dgate, &g.scr, gw, inp, &g.c, &g.ctx, gate, &s, N);
    fd_check("dinp", &g, inp, nx, dinp, inp, gate, gw);
    fd_check("dgate", &g, gate, ng, dgate, inp, gate, gw);
    free(inp); free(gate); free(gw); free(dinp); free(dgate);
    run_free(&g);
}

// Forward (and backward) bits for the same seed; different bits for another step;
// the same bits at 1 and 4 threads and when the N tokens are split in two "ranks"
// (first_token keys the draws).
static void check_determinism(const char *name, moe_shape s, int N) {
    printf("%s: determinism\n", name);
    size_t nx = (size_t)N * s.C, ng = gate_rows(&s) * s.C, nk = (size_t)N * s.k;
    tu_seed(99);
    float *inp = malloc(sizeof(float) * nx), *gate = malloc(sizeof(float) * ng);
    float *gw = malloc(sizeof(float) * nk);
    tu_fill_normal(inp, nx, 1.0);
    tu_fill_normal(gate, ng, 0.5);
    tu_fill_normal(gw, nk, 1.0);
    int saved = omp_get_max_threads();
    float *w[4], *dg[4];
    int *id[4];
    for (int run = 0; run < 4; run++) {
        // run 0, 1: same everything (1: at 1 thread); 2: another step; 3: two halves.
        omp_set_num_threads(run == 1 ? 1 : 4);
        w[run] = malloc(sizeof(float) * nk);
        id[run] = malloc(sizeof(int) * nk);
        dg[run] = calloc(ng, sizeof(float));
        int parts = run == 3 ? 2 : 1, n = N / parts;
        for (int p = 0; p < parts; p++) {
            gate_run g;
            run_init(&g, &s, n);
            g.ctx.step = run == 2 ? 4 : 3;
            g.ctx.first_token = (long)p * n;
            const float *x = inp + (size_t)p * n * s.C;
            forward(&g, x, gate);
            memcpy(w[run] + (size_t)p * n * s.k, g.c.topk_w, sizeof(float) * n * s.k);
            memcpy(id[run] + (size_t)p * n * s.k, g.c.topk_idx, sizeof(int) * n * s.k);
            if (parts == 1)
                s.router->backward(g_kc, NULL, dg[run], &g.scr, gw, x, &g.c, &g.ctx, gate, &s, n);
            run_free(&g);
        }
    }
    omp_set_num_threads(saved);
    TU_CHECK(!memcmp(w[0], w[1], sizeof(float) * nk) && !memcmp(id[0], id[1], sizeof(int) * nk),
             "%s: forward bits depend on the thread count", name);
    TU_CHECK(!memcmp(dg[0], dg[1], sizeof(float) * ng), "%s: backward bits depend on the thread count", name);
    TU_CHECK(memcmp(w[0], w[2], sizeof(float) * nk), "%s: another step draws the same noise", name);
    // Split in two, the router GEMM runs on other shapes and may round differently
    // (~1e-7 relative): the ids must agree exactly, the weights to 1e-5.
    TU_CHECK(!memcmp(id[0], id[3], sizeof(int) * nk), "%s: routing depends on how the tokens are split", name);
    for (size_t i = 0; i < nk; i++)
        TU_CHECK(fabsf(w[0][i] - w[3][i]) < 1e-5f, "%s: weight %zu %g vs %g when split", name, i,
                 w[0][i], w[3][i]);
    // Evaluation draws nothing: no drops, and the same as the plain gate at any step.
    gate_run g;
    run_init(&g, &s, N);
    g.ctx.eval = 1;
    forward(&g, inp, gate);
    for (size_t i = 0; i < nk; i++)
        TU_CHECK(g.c.topk_idx[i] >= 0, "%s: evaluation dropped an assignment", name);
    float *we = malloc(sizeof(float) * nk);
    memcpy(we, g.c.topk_w, sizeof(float) * nk);
    g.ctx.step = 11;
    forward(&g, inp, gate);
    TU_CHECK(!memcmp(we, g.c.topk_w, sizeof(float) * nk), "%s: evaluation depends on the step", name);
    run_free(&g);
    for (int run = 0; run < 4; run++) {
        free(w[run]); free(id[run]); free(dg[run]);
    }
    free(we); free(inp); free(gate); free(gw);
}

// A hand-checked group limit: E=8 in G=4 groups of 2, M=2, k=3.
static void check_groups_hand(void) {
    printf("group-limited routing: hand example\n");
    const float sc[8] = {0.30f, 0.01f, 0.20f, 0.19f, 0.25f, 0.00f, 0.02f, 0.03f};
    // group sums .31 .39 .25 .05 → groups 1, 0 → experts {0,1,2,3} → 0, 2, 3
    // (unlimited top-3 would be 0, 4, 2).
    moe_routing r = {.groups = 4, .topk_groups = 2};
    int idx[3];
    moe_router_select_row(idx, sc, sc, 8, 3, &r);
    TU_CHECK(idx[0] == 0 && idx[1] == 2 && idx[2] == 3, "limited top-3 %d %d %d, want 0 2 3",
             idx[0], idx[1], idx[2]);
    moe_router_select_row(idx, sc, sc, 8, 3, NULL);
    TU_CHECK(idx[0] == 0 && idx[1] == 4 && idx[2] == 2, "unlimited top-3 %d %d %d, want 0 4 2",
             idx[0], idx[1], idx[2]);
    // One expert per group: the group score is that expert's, so the limit changes nothing.
    r = (moe_routing){.groups = 8, .topk_groups = 3};
    moe_router_select_row(idx, sc, sc, 8, 3, &r);
    TU_CHECK(idx[0] == 0 && idx[1] == 4 && idx[2] == 2, "1-expert groups %d %d %d, want 0 4 2",
             idx[0], idx[1], idx[2]);
    // Group ties go to the lower group: all equal → groups 0, 1 → experts 0, 1, 2.
    const float eq[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    r = (moe_routing){.groups = 4, .topk_groups = 2};
    moe_router_select_row(idx, eq, eq, 8, 3, &r);
    TU_CHECK(idx[0] == 0 && idx[1] == 1 && idx[2] == 2, "tied groups %d %d %d, want 0 1 2", idx[0],
             idx[1], idx[2]);
}

// Every gate with a group limit: no token's experts span more than M groups.
static void check_groups_gates(const moe_router *router, int k) {
    printf("%s: at most topk_groups groups per token\n", router->name);
    enum { N = 200, C = 6, E = 8 };
    moe_shape s = shape(router, C, E, k);
    s.routing.groups = 4;
    s.routing.topk_groups = 1 + (k > 2);
    gate_run g;
    run_init(&g, &s, N);
    size_t ng = gate_rows(&s) * C;
    float *inp = malloc(sizeof(float) * N * C), *gate = malloc(sizeof(float) * ng);
    tu_seed(5);
    tu_fill_normal(inp, (size_t)N * C, 1.0);
    tu_fill_normal(gate, ng, 1.0);
    forward(&g, inp, gate);
    int unlimited_spans = 0;
    for (int t = 0; t < N; t++) {
        int used[4] = {0}, n = 0;
        for (int j = 0; j < k; j++) {
            int e = g.c.topk_idx[t * k + j];
            if (e >= 0 && !used[e / 2]++) n++;
        }
        TU_CHECK(n <= s.routing.topk_groups, "token %d uses %d groups > %d", t, n, s.routing.topk_groups);
    }
    // The limit must bind somewhere: without it some token would span more groups.
    gate_run u;
    moe_shape su = s;
    su.routing.groups = su.routing.topk_groups = 1;
    run_init(&u, &su, N);
    forward(&u, inp, gate);
    for (int t = 0; t < N; t++) {
        int used[4] = {0}, n = 0;
        for (int j = 0; j < k; j++) {
            int e = u.c.topk_idx[t * k + j];
            if (e >= 0 && !used[e / 2]++) n++;
        }
        unlimited_spans += n > s.routing.topk_groups;
    }
    TU_CHECK(k == 1 || unlimited_spans > 0, "test set-up: the limit never binds");
    run_free(&g);
    run_free(&u);
    free(inp);
    free(gate);
}

// gshard keeps the second expert with probability min(1, 2·w2): over N tokens the
// count of keeps is a sum of independent Bernoullis with mean μ = Σ p_t and variance
// σ² = Σ p_t(1−p_t); |keeps − μ| < 5σ fails by chance with probability < 1e-6 (and the
// draws are fixed by the seed, so the test is deterministic).
static void check_gshard_rate(void) {
    printf("gshard: second-expert keep rate\n");
    enum { N = 20000, C = 8, E = 4 };
    moe_shape s = shape(&moe_router_gshard, C, E, 2);
    gate_run g;
    run_init(&g, &s, N);
    float *inp = malloc(sizeof(float) * N * C), *gate = malloc(sizeof(float) * E * C);
    tu_seed(3);
    tu_fill_normal(inp, (size_t)N * C, 1.0);
    tu_fill_normal(gate, (size_t)E * C, 0.5);
    forward(&g, inp, gate);
    double mu = 0, var = 0;
    int keeps = 0;
    for (int t = 0; t < N; t++) {
        const float *p = g.c.probs + (size_t)t * E;
        double p1 = 0, p2 = 0;  // the two largest probs
        for (int e = 0; e < E; e++) {
            if (p[e] > p1) {
                p2 = p1;
                p1 = p[e];
            } else if (p[e] > p2) {
                p2 = p[e];
            }
        }
        double keep = fmin(1.0, 2.0 * p2 / (p1 + p2));
        mu += keep;
        var += keep * (1 - keep);
        keeps += g.c.topk_idx[2 * t + 1] >= 0;
        if (g.c.topk_idx[2 * t + 1] < 0)
            TU_CHECK(g.c.topk_w[2 * t + 1] == 0.0f, "a dropped second expert keeps weight");
        TU_CHECK(fabs(g.c.topk_w[2 * t] - p1 / (p1 + p2)) < 1e-6, "w1 not p1/(p1+p2)");
    }
    printf("  kept %d of %d, expected %.1f ± %.1f\n", keeps, N, mu, sqrt(var));
    TU_CHECK(fabs(keeps - mu) < 5 * sqrt(var), "keeps %d, expected %.1f (σ %.1f)", keeps, mu, sqrt(var));
    // Dropped assignments are not counted.
    int total = 0;
    for (int e = 0; e < E; e++) total += g.c.counts_global[e];
    TU_CHECK(total == N + keeps, "counts %d, want %d", total, N + keeps);
    run_free(&g);
    free(inp);
    free(gate);
}

// noisy_topk's losses recomputed in double from the definition (the same keyed draws).
static double cv2(const double *v, int E) {
    double m = 0, var = 0;
    for (int e = 0; e < E; e++) m += v[e];
    m /= E;
    for (int e = 0; e < E; e++) var += (v[e] - m) * (v[e] - m);
    return var / E / (m * m + 1e-10);
}

static void check_noisy_losses(void) {
    printf("noisy_topk: importance and load against a double recomputation\n");
    enum { N = 40, C = 6, E = 6, k = 2 };
    moe_shape s = shape(&moe_router_noisy_topk, C, E, k);
    gate_run g;
    run_init(&g, &s, N);
    float *inp = malloc(sizeof(float) * N * C), *gate = malloc(sizeof(float) * 2 * E * C);
    tu_seed(8);
    tu_fill_normal(inp, (size_t)N * C, 1.0);
    tu_fill_normal(gate, 2 * (size_t)E * C, 0.5);
    forward(&g, inp, gate);
    double imp[E] = {0}, load[E] = {0};
    for (int t = 0; t < N; t++) {
        double l[E], sd[E], H[E];
        bg_rng r;
        moe_router_token_rng(&r, &g.ctx, MOE_RNG_NOISY, t);
        double zs[E + 1];  // Box-Muller, both outputs of each pair of uniforms
        for (int e = 0; e < E; e += 2) {
            double u1 = bg_rng_uniform(&r), u2 = bg_rng_uniform(&r);
            double rad = sqrt(-2.0 * log(u1 < 1e-300 ? 1e-300 : u1));
            zs[e] = (float)(rad * cos(6.283185307179586 * u2));
            zs[e + 1] = (float)(rad * sin(6.283185307179586 * u2));
        }
        for (int e = 0; e < E; e++) {
            double a = 0, b = 0;
            for (int c = 0; c < C; c++) {
                a += (double)inp[t * C + c] * gate[e * C + c];
                b += (double)inp[t * C + c] * gate[(E + e) * C + c];
            }
            l[e] = a;
            sd[e] = log1p(exp(b)) + 0.01;
            H[e] = a + zs[e] * sd[e];
        }
        int order[E];
        ref_topk(order, H, E, E);
        TU_CHECK(order[0] == g.c.topk_idx[t * k] && order[1] == g.c.topk_idx[t * k + 1],
                 "token %d: noisy top-k differs", t);
        double z = exp(H[order[1]] - H[order[0]]);
        imp[order[0]] += 1 / (1 + z);
        imp[order[1]] += z / (1 + z);
        for (int e = 0; e < E; e++) {
            int in = e == order[0] || e == order[1];
            double thr = in ? H[order[k]] : H[order[k - 1]];  // k-th largest excluding e
            load[e] += 0.5 * erfc(-(l[e] - thr) / sd[e] / sqrt(2.0));
        }
    }
    double want = cv2(imp, E) + cv2(load, E);
    printf("  aux %.9g want %.9g\n", g.c.aux_loss, want);
    TU_CHECK(fabs(g.c.aux_loss - want) < 1e-5 * (1 + want), "noisy aux %.9g want %.9g", g.c.aux_loss, want);
    run_free(&g);
    free(inp);
    free(gate);
}

// Sequence scope: aux is the mean of topk's batch aux computed on each sequence alone.
static void check_sequence_value(void) {
    printf("aux_scope sequence: value\n");
    enum { N = 12, T = 4, C = 6, E = 5, k = 2 };
    moe_shape s = shape(&moe_router_topk, C, E, k);
    s.routing.aux_scope = MOE_AUX_SEQUENCE;
    s.routing.group_tokens = T;
    gate_run g;
    run_init(&g, &s, N);
    float *inp = malloc(sizeof(float) * N * C), *gate = malloc(sizeof(float) * E * C);
    tu_seed(12);
    tu_fill_normal(inp, (size_t)N * C, 1.0);
    tu_fill_normal(gate, (size_t)E * C, 1.0);
    forward(&g, inp, gate);
    double want = 0, batch, z;
    for (int q = 0; q < N / T; q++) {
        int counts[E] = {0};
        for (int r = q * T * k; r < (q + 1) * T * k; r++) counts[g.c.topk_idx[r]]++;
        double aux;
        moe_router_balance_losses(&aux, &z, g.c.probs + q * T * E, g.c.lse + q * T, counts, T, E, k);
        want += aux / (N / T);
    }
    moe_router_balance_losses(&batch, &z, g.c.probs, g.c.lse, g.c.counts_global, N, E, k);
    TU_CHECK(fabs(g.c.aux_loss - want) < 1e-12, "sequence aux %.12g want %.12g", g.c.aux_loss, want);
    TU_CHECK(fabs(batch - want) > 1e-3, "test set-up: sequence and batch aux coincide");
    run_free(&g);
    free(inp);
    free(gate);
}

int main(void) {
    g_kc = kernel_ctx_create(BG_FP32);
    check_groups_hand();

    moe_shape s = shape(&moe_router_switch, 5, 5, 1);
    s.aux_coef = 0.7f;
    s.z_coef = 0.3f;
    check_grad("switch", s, 8, 1);
    s.routing.jitter = 0.2f;  // large, so that a wrong jitter factor shows
    check_grad("switch+jitter", s, 8, 2);
    check_determinism("switch+jitter", s, 16);

    s = shape(&moe_router_gshard, 5, 5, 2);
    s.aux_coef = 0.7f;
    s.z_coef = 0.3f;
    check_grad("gshard", s, 10, 3);
    check_determinism("gshard", s, 16);
    check_gshard_rate();

    s = shape(&moe_router_noisy_topk, 5, 6, 2);
    s.aux_coef = 0.5f;
    s.z_coef = 0.1f;
    check_grad("noisy_topk", s, 10, 4);
    check_determinism("noisy_topk", s, 16);
    check_noisy_losses();

    check_sequence_value();
    s = shape(&moe_router_topk, 5, 5, 2);
    s.aux_coef = 0.9f;
    s.routing.aux_scope = MOE_AUX_SEQUENCE;
    s.routing.group_tokens = 3;
    check_grad("topk sequence aux", s, 9, 5);
    s = shape(&moe_router_gshard, 5, 5, 2);
    s.aux_coef = 0.9f;
    s.routing.aux_scope = MOE_AUX_SEQUENCE;
    s.routing.group_tokens = 5;
    check_grad("gshard sequence aux", s, 10, 6);

    check_groups_gates(&moe_router_topk, 3);
    check_groups_gates(&moe_router_switch, 1);
    check_groups_gates(&moe_router_gshard, 2);
    check_groups_gates(&moe_router_noisy_topk, 2);
    check_groups_gates(&moe_router_bias, 2);
    s = shape(&moe_router_topk, 5, 8, 3);
    s.aux_coef = 0.5f;
    s.routing.groups = 4;
    s.routing.topk_groups = 2;
    check_grad("topk groups", s, 8, 7);
    kernel_ctx_free(g_kc);
    return tu_finish("moe/test_router_gates");
}
