// The `topk` gate: fp32 logits, stable softmax, deterministic top-k; its balance
// statistics are router.c's.
#include "moe/router.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stddef.h>

void moe_router_softmax_row(float *p, float *lse, const float *l, int E) {
    // Stable softmax: subtract the row max; the sum runs in double so lse (which the
    // z-loss squares) does not depend on E's rounding.
    float mx = l[0];
    for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    double sum = 0.0;
    for (int e = 0; e < E; e++) {
        p[e] = expf(l[e] - mx);
        sum += p[e];
    }
    float inv = (float)(1.0 / sum);
    for (int e = 0; e < E; e++) p[e] *= inv;
    *lse = mx + (float)log(sum);
}

static void softmax_topk_routed(float *probs, float *lse, int *topk_idx, float *topk_w,
                                const float *logits, int N, int E, int k, int norm_topk_prob,
                                const moe_routing *r) {
    BG_ASSERT(k >= 1 && k <= E);
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *l = logits + (size_t)t * E;
        float *p = probs + (size_t)t * E;
        moe_router_softmax_row(p, &lse[t], l, E);
        // Selection runs on the logits, which order the experts exactly like probs but
        // without the ties that rounding exp() can create; group scores sum probs.
        int *idx = topk_idx + (size_t)t * k;
        moe_router_select_row(idx, l, p, E, k, r);
        float *w = topk_w + (size_t)t * k;
        double s = 0.0;
        for (int j = 0; j < k; j++) {
            w[j] = p[idx[j]];
            s += w[j];
        }
        // s >= p[idx[0]] > 0, so the division is safe.
        if (norm_topk_prob)
            for (int j = 0; j < k; j++) w[j] = (float)(w[j] / s);
    }
}

void moe_router_softmax_topk(float *probs, float *lse, int *topk_idx, float *topk_w,
                             const float *logits, int N, int E, int k, int norm_topk_prob) {
    softmax_topk_routed(probs, lse, topk_idx, topk_w, logits, N, E, k, norm_topk_prob, NULL);
}

void moe_router_forward(kernel_ctx *kc, float *logits, float *probs, float *lse, int *topk_idx,
                        float *topk_w, const float *inp, const float *gate, int N, int C,
                        int E, int k, int norm_topk_prob) {
    moe_router_forward_routed(kc, logits, probs, lse, topk_idx, topk_w, inp, gate, N, C, E, k,
                              norm_topk_prob, NULL);
}

void moe_router_forward_routed(kernel_ctx *kc, float *logits, float *probs, float *lse,
                               int *topk_idx, float *topk_w, const float *inp, const float *gate,
                               int N, int C, int E, int k, int norm_topk_prob,
                               const moe_routing *r) {
    if (N == 0) return;
    matmul_forward_fp32(kc, logits, inp, gate, N, C, E);  // routing decisions stay in fp32
    softmax_topk_routed(probs, lse, topk_idx, topk_w, logits, N, E, k, norm_topk_prob, r);
}

void moe_router_backward(kernel_ctx *kc, float *dinp, float *dgate, float *dlogits, float *dprobs,
                         const float *dtopk_w, const float *inp, const float *gate,
                         const float *probs, const float *lse, const int *topk_idx,
                         const float *topk_w, const int *counts, int N, int C, int E, int k,
                         int norm_topk_prob, float aux_coef, float z_coef) {
    moe_router_backward_global(kc, dinp, dgate, dlogits, dprobs, dtopk_w, inp, gate, probs, lse,
                               topk_idx, topk_w, counts, (double)N, N, C, E, k, norm_topk_prob,
                               aux_coef, z_coef);
}

// d(aux_coef·aux)/d probs[t,i] = aux_coef · E · f_i / n, the same for every token
// (f_i counts the discrete choices and is not differentiated); n and the counts are
// over the global batch when it is split across ranks. Per sequence of T tokens
// (n/T of them): aux_coef · E · count_i(seq) / (n · T · k).
static void aux_dprobs_rows(float *dprobs, const int *counts, int rows_per_count,
                            double aux_scale, int N, int E) {
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const int *cnt = counts + (size_t)(t / rows_per_count) * E;
        float *dp = dprobs + (size_t)t * E;
        for (int e = 0; e < E; e++) dp[e] = (float)(aux_scale * cnt[e]);
    }
}

void moe_router_aux_dprobs(float *dprobs, const moe_router_cache *c, const moe_shape *s, int N) {
    const double n = c->n_tokens;
    if (s->routing.aux_scope == MOE_AUX_SEQUENCE) {
        const int T = moe_router_seq_tokens(s, N);
        const double scale = (double)s->aux_coef * s->E / (n * T * s->k);
        aux_dprobs_rows(dprobs, c->seq_counts, T, scale, N, s->E);
    } else {
        const double scale = (double)s->aux_coef * s->E / (n * n * s->k);
        aux_dprobs_rows(dprobs, c->counts_global, N > 0 ? N : 1, scale, N, s->E);
    }
}

void moe_router_weights_dprobs(float *dprobs, const float *dtopk_w, const float *probs,
                               const int *topk_idx, const float *topk_w, int N, int E, int k,
                               int norm_topk_prob) {
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *p = probs + (size_t)t * E;
        const int *idx = topk_idx + (size_t)t * k;
        const float *dw = dtopk_w + (size_t)t * k;
        const float *w = topk_w + (size_t)t * k;
        float *dp = dprobs + (size_t)t * E;
        if (norm_topk_prob) {
            // w_j = p_j / s, s = Σ_j p_j  ⇒  dp_j = (dw_j − Σ_l dw_l·w_l) / s
            double s = 0.0, dot = 0.0;
            for (int j = 0; j < k; j++) {
                s += p[idx[j]];
                dot += (double)dw[j] * w[j];
            }
            for (int j = 0; j < k; j++) dp[idx[j]] += (float)((dw[j] - dot) / s);
        } else {
            for (int j = 0; j < k; j++)
                if (idx[j] >= 0) dp[idx[j]] += dw[j];  // a dropped assignment has no weight
        }
    }
}

void moe_router_softmax_dlogits(float *dlogits, const float *dprobs, const float *probs,
                                const float *lse, double n_tokens, float z_coef, int N, int E) {
    const double z_scale = 2.0 * (double)z_coef / n_tokens;  // d(z_coef·z)/d lse[t] = 2·z_coef·lse[t]/n
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *p = probs + (size_t)t * E, *dp = dprobs + (size_t)t * E;
        float *dl = dlogits + (size_t)t * E;
        // Softmax backward, then the z-loss term (d lse / d logits = probs).
        double pdp = 0.0;
        for (int e = 0; e < E; e++) pdp += (double)p[e] * dp[e];
        double zt = z_scale * lse[t];
        for (int e = 0; e < E; e++) dl[e] = (float)(p[e] * (dp[e] - pdp + zt));
    }
}

void moe_router_backward_global(kernel_ctx *kc, float *dinp, float *dgate, float *dlogits, float *dprobs,
                                const float *dtopk_w, const float *inp, const float *gate,
                                const float *probs, const float *lse, const int *topk_idx,
                                const float *topk_w, const int *counts, double n_tokens, int N,
                                int C, int E, int k, int norm_topk_prob, float aux_coef,
                                float z_coef) {
    if (N == 0) return;
    aux_dprobs_rows(dprobs, counts, N, (double)aux_coef * E / (n_tokens * n_tokens * k), N, E);
    moe_router_weights_dprobs(dprobs, dtopk_w, probs, topk_idx, topk_w, N, E, k, norm_topk_prob);
    moe_router_softmax_dlogits(dlogits, dprobs, probs, lse, n_tokens, z_coef, N, E);
    matmul_backward_fp32(kc, dinp, dgate, dlogits, inp, gate, N, C, E);
}

void moe_router_backward_cached(kernel_ctx *kc, float *dinp, float *dgate, moe_router_scratch *scr,
                                const float *dtopk_w, const float *inp, const moe_router_cache *c,
                                const float *gate, const moe_shape *s, int N, int norm_topk_prob) {
    if (N == 0) return;
    moe_router_aux_dprobs(scr->dprobs, c, s, N);
    moe_router_weights_dprobs(scr->dprobs, dtopk_w, c->probs, c->topk_idx, c->topk_w, N, s->E,
                              s->k, norm_topk_prob);
    moe_router_softmax_dlogits(scr->dlogits, scr->dprobs, c->probs, c->lse, c->n_tokens,
                               s->z_coef, N, s->E);
    matmul_backward_fp32(kc, dinp, dgate, scr->dlogits, inp, gate, N, s->C, s->E);
}

static size_t topk_state_size(const moe_shape *s) {
    (void)s;
    return 0;
}

static void topk_forward(kernel_ctx *kc, moe_router_cache *c, const moe_router_ctx *ctx, const float *inp,
                         const float *gate, const moe_shape *s, int N) {
    moe_router_forward_routed(kc, c->logits, c->probs, c->lse, c->topk_idx, c->topk_w, inp, gate,
                              N, s->C, s->E, s->k, s->norm_topk_prob, &s->routing);
    moe_router_balance_statistics(c, ctx, s, N);
}

static void topk_backward(kernel_ctx *kc, float *dinp, float *dgate, moe_router_scratch *scr,
                          const float *dtopk_w, const float *inp, const moe_router_cache *c,
                          const moe_router_ctx *ctx, const float *gate, const moe_shape *s,
                          int N) {
    (void)ctx;
    moe_router_backward_cached(kc, dinp, dgate, scr, dtopk_w, inp, c, gate, s, N,
                               s->norm_topk_prob);
}

const moe_router moe_router_topk = {
    .name = "topk",
    .state_size = topk_state_size,
    .forward = topk_forward,
    .backward = topk_backward,
};
