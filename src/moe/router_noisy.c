// The `noisy_topk` gate (Shazeer et al. 2017, "Outrageously large neural networks",
// section 2.1 and appendix A; tensor2tensor's expert_utils.noisy_top_k_gating):
//   H(x)_i = (x·Wg)_i + z_i · (softplus((x·Wnoise)_i) + 0.01),  z_i ~ N(0,1) (training)
//   G(x) = softmax over KeepTopK(H(x), k)  (always normalized: norm_topk_prob unused)
//   aux = CV²(Importance) + CV²(Load), scaled by aux_coef (t2t's loss_coef; the paper's
//         w_importance = w_load = aux_coef),
//   Importance_i = Σ_x G(x)_i, Load_i = Σ_x Φ((x·Wg)_i − kth_excluding(H(x), k, i)) /
//   noise_i), CV²(v) = var(v) / (mean(v)² + 1e-10) with the population variance (t2t's
//   cv_squared). kth_excluding is the k-th largest H among the other experts: for a
//   chosen expert the best unchosen H, for an unchosen one the k-th chosen H; the
//   gradient flows through it into that expert's H, as in t2t. In evaluation, or when
//   k == E, H is the clean logits and Load is the token counts (t2t's gates_to_load),
//   which carry no gradient.
// The gate's parameter is (2E,C) = [Wg ; Wnoise] (model/params.c keeps gate_noise right
// after gate, initialized to zeros like t2t's w_noise: noise softplus(0) + 0.01 at the
// start, and the load loss's gradient reaches it from step 1). z is keyed by (seed,
// step, layer, global token), drawn expert by expert in Box-Muller pairs and kept for
// the backward. probs / lse are the softmax of
// the clean logits (the z-loss and routing metrics use them). Group limits select on
// H's group sums. The balance loss is always batch-wide (aux_scope sequence applies to
// the f·P loss of the other gates).
#include "moe/router.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stddef.h>

#define NOISE_EPSILON 0.01f  // t2t's noise_epsilon: a floor under the noise scale
#define CV_EPSILON 1e-10     // t2t's cv_squared epsilon

float moe_router_noise_stddev(float r) {
    float sp = r > 20.0f ? r : log1pf(expf(r));
    return sp + NOISE_EPSILON;
}

static size_t noisy_state_size(const moe_shape *s) {
    (void)s;
    return 0;
}

// raw noise logits x·Wnoise, noisy logits H, the load probabilities P and the normal
// draws z (kept for the backward rather than drawn again), each (N,E).
static size_t noisy_cache_floats(const moe_shape *s, int N) { return 4 * (size_t)N * s->E; }

static int noisy_load(const moe_router_ctx *ctx, const moe_shape *s) {
    return !ctx->eval && s->k < s->E;
}

static double normal_cdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }
static double normal_pdf(double x) { return exp(-0.5 * x * x) * 0.3989422804014327; }  // 1/√(2π)

// A token's thresholds: the k-th chosen expert (for unchosen experts) and the best
// unchosen one (for chosen experts), ties → the lower index.
static void thresholds(int *out_thr, int *in_thr, const float *H, const int *idx, int E, int k) {
    *out_thr = idx[k - 1];
    int best = -1;
    for (int e = 0; e < E; e++) {
        int chosen = 0;
        for (int j = 0; j < k; j++) chosen |= idx[j] == e;
        if (!chosen && (best < 0 || H[e] > H[best])) best = e;
    }
    *in_thr = best;
}

static void noisy_forward(kernel_ctx *kc, moe_router_cache *c, const moe_router_ctx *ctx,
                          const float *inp, const float *gate, const moe_shape *s, int N) {
    const int E = s->E, k = s->k, C = s->C, noise = !ctx->eval, load = noisy_load(ctx, s);
    const size_t NE = (size_t)N * E;
    float *raw = c->gate_cache, *Hs = raw + NE, *Ps = Hs + NE, *Zs = Ps + NE;
    if (N > 0) {
        matmul_forward_fp32(kc, c->logits, inp, gate, N, C, E);
        matmul_forward_fp32(kc, raw, inp, gate + (size_t)E * C, N, C, E);
    }
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *l = c->logits + (size_t)t * E, *r = raw + (size_t)t * E;
        float *H = Hs + (size_t)t * E, *P = Ps + (size_t)t * E, *z = Zs + (size_t)t * E;
        moe_router_softmax_row(c->probs + (size_t)t * E, &c->lse[t], l, E);
        if (noise) {
            bg_rng rng;
            moe_router_token_rng(&rng, ctx, MOE_RNG_NOISY, ctx->first_token + t);
            bg_rng_normals(&rng, z, E);
        }
        for (int e = 0; e < E; e++) {
            if (!noise) z[e] = 0.0f;
            H[e] = noise ? l[e] + z[e] * moe_router_noise_stddev(r[e]) : l[e];
        }
        int *idx = c->topk_idx + (size_t)t * k;
        float *w = c->topk_w + (size_t)t * k;
        moe_router_select_row(idx, H, H, E, k, &s->routing);
        double sum = 0.0;
        for (int j = 0; j < k; j++) sum += exp((double)H[idx[j]] - H[idx[0]]);
        for (int j = 0; j < k; j++) w[j] = (float)(exp((double)H[idx[j]] - H[idx[0]]) / sum);
        if (!load) continue;
        int a, b;
        thresholds(&b, &a, H, idx, E, k);
        for (int e = 0; e < E; e++) {
            int chosen = 0;
            for (int j = 0; j < k; j++) chosen |= idx[j] == e;
            float thr = chosen ? H[a] : H[b];
            P[e] = (float)normal_cdf(((double)l[e] - thr) / moe_router_noise_stddev(r[e]));
        }
    }
    // Importance and load sums in a fixed order (token by token): the same bits for
    // any thread count.
    double *imp = c->stats + MOE_ROUTER_STATS_EXTRA(E), *ld = imp + E;
    for (int e = 0; e < E; e++) imp[e] = ld[e] = 0.0;
    for (size_t i = 0; i < (size_t)N * k; i++) imp[c->topk_idx[i]] += c->topk_w[i];
    if (load)
        for (int t = 0; t < N; t++)
            for (int e = 0; e < E; e++) ld[e] += Ps[(size_t)t * E + e];
    moe_router_balance_statistics_ex(c, ctx, s, N, 2 * E);
    if (!load)
        for (int e = 0; e < E; e++) ld[e] = c->stats[E + e];  // the counts
    double cv[2];
    for (int q = 0; q < 2; q++) {
        const double *v = q ? ld : imp;
        double m = 0.0, var = 0.0;
        for (int e = 0; e < E; e++) m += v[e];
        m /= E;
        for (int e = 0; e < E; e++) var += (v[e] - m) * (v[e] - m);
        cv[q] = var / E / (m * m + CV_EPSILON);
    }
    c->aux_loss = cv[0] + cv[1];
}

// d CV²(v) / d v (E) into g, times coef.
static void cv2_grad(double *g, const double *v, int E, double coef) {
    double m = 0.0, var = 0.0;
    for (int e = 0; e < E; e++) m += v[e];
    m /= E;
    for (int e = 0; e < E; e++) var += (v[e] - m) * (v[e] - m);
    var /= E;
    double D = m * m + CV_EPSILON;
    for (int e = 0; e < E; e++) g[e] = coef * (2.0 / E * (v[e] - m) / D - var * (2.0 * m / E) / (D * D));
}

static void noisy_backward(kernel_ctx *kc, float *dinp, float *dgate, moe_router_scratch *scr,
                           const float *dtopk_w, const float *inp, const moe_router_cache *c,
                           const moe_router_ctx *ctx, const float *gate, const moe_shape *s,
                           int N) {
    if (N == 0) return;
    const int E = s->E, k = s->k, C = s->C, load = noisy_load(ctx, s);
    const size_t NE = (size_t)N * E;
    const float *raw = c->gate_cache, *Hs = raw + NE;
    const double *imp = c->stats + MOE_ROUTER_STATS_EXTRA(E), *ld = imp + E;
    double dimp[E], dld[E];
    cv2_grad(dimp, imp, E, s->aux_coef);
    if (load) cv2_grad(dld, ld, E, s->aux_coef);
    const double z_scale = 2.0 * (double)s->z_coef / c->n_tokens;
    float *dL = scr->dlogits, *dR = scr->dprobs;  // d clean logits, d raw noise logits
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *l = c->logits + (size_t)t * E, *r = raw + (size_t)t * E;
        const float *H = Hs + (size_t)t * E, *p = c->probs + (size_t)t * E;
        const int *kept = c->topk_idx + (size_t)t * k;
        const float *dw = dtopk_w + (size_t)t * k;
        float *dl = dL + (size_t)t * E, *dr = dR + (size_t)t * E;
        // The gate's own choice and weights, taken again from H: a later capacity step
        // may have dropped some (id −1, weight 0); those pass no combine gradient.
        int idx[k];
        double w[k], dwk[k], wsum = 0.0;
        moe_router_select_row(idx, H, H, E, k, &s->routing);
        for (int j = 0; j < k; j++) {
            w[j] = exp((double)H[idx[j]] - H[idx[0]]);
            wsum += w[j];
            dwk[j] = (kept[j] < 0 ? 0.0 : dw[j]) + dimp[idx[j]];
        }
        double dH[E], dsd[E];
        for (int e = 0; e < E; e++) dH[e] = dsd[e] = 0.0;
        // Gates: softmax over the kept H; importance adds dImp to each kept weight.
        double dot = 0.0;
        for (int j = 0; j < k; j++) dot += (w[j] /= wsum) * dwk[j];
        for (int j = 0; j < k; j++) dH[idx[j]] += w[j] * (dwk[j] - dot);
        // Load: P_e = Φ(u), u = (l_e − thr)/sd_e.
        double dlc[E];
        for (int e = 0; e < E; e++) dlc[e] = 0.0;
        if (load) {
            int a, b;
            thresholds(&b, &a, H, idx, E, k);
            for (int e = 0; e < E; e++) {
                int chosen = 0;
                for (int j = 0; j < k; j++) chosen |= idx[j] == e;
                double sd = moe_router_noise_stddev(r[e]);
                double u = ((double)l[e] - (chosen ? H[a] : H[b])) / sd;
                double g = dld[e] * normal_pdf(u) / sd;
                dlc[e] += g;
                dsd[e] -= g * u;
                dH[chosen ? a : b] -= g;
            }
        }
        // H = l + z·sd, sd = softplus(r) + eps; the z-loss on the clean logits' lse.
        const float *z = c->gate_cache + 3 * (size_t)N * E + (size_t)t * E;  // the forward's draws
        double zt = z_scale * c->lse[t];
        for (int e = 0; e < E; e++) {
            dsd[e] += dH[e] * z[e];
            dl[e] = (float)(dlc[e] + dH[e] + p[e] * zt);
            dr[e] = (float)(dsd[e] / (1.0 + exp(-(double)r[e])));  // softplus' = sigmoid
        }
    }
    matmul_backward_fp32(kc, dinp, dgate, dL, inp, gate, N, C, E);
    matmul_backward_fp32(kc, dinp, dgate + (size_t)E * C, dR, inp, gate + (size_t)E * C, N, C, E);
}

const moe_router moe_router_noisy_topk = {
    .name = "noisy_topk",
    .state_size = noisy_state_size,
    .cache_floats = noisy_cache_floats,
    .forward = noisy_forward,
    .backward = noisy_backward,
};
