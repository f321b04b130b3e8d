// The `topk` gate: fp32 logits, stable softmax, deterministic top-k; its balance
// statistics are router.c's.
#include "moe/router.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stddef.h>

void moe_router_softmax_topk(float *probs, float *lse, int *topk_idx, float *topk_w,
                             const float *logits, int N, int E, int k, int norm_topk_prob) {
    BG_ASSERT(k >= 1 && k <= E);
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *l = logits + (size_t)t * E;
        float *p = probs + (size_t)t * E;
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
        lse[t] = mx + (float)log(sum);

        // Top-k by repeated selection, O(k·E) (k is small). Selection runs on the logits,
        // which order the experts exactly like probs but without the ties that rounding
        // exp() can create; a strict '>' keeps the lower index on an exact tie, so the
        // choice is deterministic and independent of the thread count.
        int *idx = topk_idx + (size_t)t * k;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++) taken |= idx[i] == e;
                if (taken) continue;
                if (best < 0 || l[e] > l[best]) best = e;
            }
            idx[j] = best;
        }
        float *w = topk_w + (size_t)t * k;
        double s = 0.0;
        for (int j = 0; j < k; j++) {
            w[j] = p[idx[j]];
            s += w[j];
        }
        // s >= p[idx[0]] >= 1/E > 0, so the division is safe.
        if (norm_topk_prob)
            for (int j = 0; j < k; j++) w[j] = (float)(w[j] / s);
    }
}

void moe_router_forward(kernel_ctx *kc, float *logits, float *probs, float *lse, int *topk_idx,
                        float *topk_w, const float *inp, const float *gate, int N, int C,
                        int E, int k, int norm_topk_prob) {
    if (N == 0) return;
    matmul_forward_fp32(kc, logits, inp, gate, N, C, E);  // routing decisions stay in fp32
    moe_router_softmax_topk(probs, lse, topk_idx, topk_w, logits, N, E, k, norm_topk_prob);
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

void moe_router_backward_global(kernel_ctx *kc, float *dinp, float *dgate, float *dlogits, float *dprobs,
                                const float *dtopk_w, const float *inp, const float *gate,
                                const float *probs, const float *lse, const int *topk_idx,
                                const float *topk_w, const int *counts, double n_tokens, int N,
                                int C, int E, int k, int norm_topk_prob, float aux_coef,
                                float z_coef) {
    if (N == 0) return;
    // d(aux_coef·aux)/d probs[t,i] = aux_coef · E · f_i / n, the same for every token
    // (f_i counts the discrete choices and is not differentiated); n and the counts
    // are over the global batch when it is split across ranks.
    const double aux_scale = (double)aux_coef * E / (n_tokens * n_tokens * k);
    const double z_scale = 2.0 * (double)z_coef / n_tokens;  // d(z_coef·z)/d lse[t] = 2·z_coef·lse[t]/n
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *p = probs + (size_t)t * E;
        const int *idx = topk_idx + (size_t)t * k;
        const float *dw = dtopk_w + (size_t)t * k;
        const float *w = topk_w + (size_t)t * k;
        float *dp = dprobs + (size_t)t * E;
        float *dl = dlogits + (size_t)t * E;
        for (int e = 0; e < E; e++) dp[e] = (float)(aux_scale * counts[e]);
        // A slot with no expert (-1: dropped) has no weight to differentiate.
        if (norm_topk_prob) {
            // w_j = p_j / s, s = Σ_j p_j  ⇒  dp_j = (dw_j − Σ_l dw_l·w_l) / s
            double s = 0.0, dot = 0.0;
            for (int j = 0; j < k; j++) {
                if (idx[j] < 0) continue;
                s += p[idx[j]];
                dot += (double)dw[j] * w[j];
            }
            for (int j = 0; j < k; j++)
                if (idx[j] >= 0) dp[idx[j]] += (float)((dw[j] - dot) / s);
        } else {
            for (int j = 0; j < k; j++)
                if (idx[j] >= 0) dp[idx[j]] += dw[j];
        }
        // Softmax backward, then the z-loss term (d lse / d logits = probs).
        double pdp = 0.0;
        for (int e = 0; e < E; e++) pdp += (double)p[e] * dp[e];
        double zt = z_scale * lse[t];
        for (int e = 0; e < E; e++) dl[e] = (float)(p[e] * (dp[e] - pdp + zt));
    }
    matmul_backward_fp32(kc, dinp, dgate, dlogits, inp, gate, N, C, E);
}

static size_t topk_state_size(const moe_shape *s) {
    (void)s;
    return 0;
}

static void topk_forward(kernel_ctx *kc, moe_router_cache *c, const moe_router_ctx *ctx, const float *inp,
                         const float *gate, const moe_shape *s, int N) {
    moe_router_forward(kc, c->logits, c->probs, c->lse, c->topk_idx, c->topk_w, inp, gate, N, s->C,
                       s->E, s->k, s->norm_topk_prob);
    moe_router_balance_statistics(c, ctx, s, N);
}

static void topk_backward(kernel_ctx *kc, float *dinp, float *dgate, moe_router_scratch *scr,
                          const float *dtopk_w, const float *inp, const moe_router_cache *c,
                          const moe_router_ctx *ctx, const float *gate, const moe_shape *s,
                          int N) {
    (void)ctx;
    moe_router_backward_global(kc, dinp, dgate, scr->dlogits, scr->dprobs, dtopk_w, inp, gate,
                               c->probs, c->lse, c->topk_idx, c->topk_w, c->counts_global,
                               c->n_tokens, N, s->C, s->E, s->k, s->norm_topk_prob, s->aux_coef,
                               s->z_coef);
}

const moe_router moe_router_topk = {
    .name = "topk",
    .state_size = topk_state_size,
    .forward = topk_forward,
    .backward = topk_backward,
};
