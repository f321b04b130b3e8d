// The `bias` gate: DeepSeek-V3's auxiliary-loss-free load balancing (arXiv:2412.19437,
// section 2.1.2). Scores s are softmax(logits) or, as DeepSeek-V3, sigmoid(logits)
// (routing.score); a per-expert bias b, the gate's state, is added to the scores for
// SELECTION only: the experts are the top-k of s + b, the gate weights are their s
// (divided by their sum when norm_topk_prob). After each optimizer step the bias moves
// by rate·sign(mean load − load_i) over the global counts, so an overloaded expert
// becomes less attractive without a loss term that pulls on the gradients.
//
// No aux loss (aux_loss is 0 whatever aux_coef says): the bias does the balancing.
// The z-loss, mean logsumexp(logits)², applies to the logits as for topk, with either
// score (it keeps the logits small; sigmoid scores saturate without it just the same).
// The bias gets no gradient: top-k is piecewise constant in it.
#include "moe/router.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

// Added to the sum of the chosen scores before dividing, as DeepSeek-V3's reference
// code: sigmoid scores of very negative logits can round to 0.
#define BIAS_NORM_EPS 1e-20

static size_t bias_state_size(const moe_shape *s) { return (size_t)s->E * sizeof(float); }

// logits (N,E), bias (E) → scores (N,E) (softmax or sigmoid), lse (N), topk_idx (N,k)
// the k largest s + b in descending order (ties to the LOWER expert index; within the
// group limit of r), topk_w (N,k) their s, normalized when norm.
static void bias_scores_topk(float *scores, float *lse, int *topk_idx, float *topk_w,
                             const float *logits, const float *bias, int N, int E, int k,
                             int sigmoid, int norm, const moe_routing *r) {
    BG_ASSERT(k >= 1 && k <= E);
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *l = logits + (size_t)t * E;
        float *p = scores + (size_t)t * E;
        float mx = l[0];
        for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < E; e++) sum += expf(l[e] - mx);
        lse[t] = mx + (float)log(sum);  // the z-loss's, with either score
        if (sigmoid) {
            for (int e = 0; e < E; e++) p[e] = 1.0f / (1.0f + expf(-l[e]));
        } else {
            float inv = (float)(1.0 / sum);
            for (int e = 0; e < E; e++) p[e] = expf(l[e] - mx) * inv;
        }
        // The experts, and with a group limit the groups, are chosen on s + b, as
        // DeepSeek-V3 does; ties go to the lower index.
        int *idx = topk_idx + (size_t)t * k;
        float key[E];
        for (int e = 0; e < E; e++) key[e] = p[e] + bias[e];
        moe_router_select_row(idx, key, key, E, k, r);
        float *w = topk_w + (size_t)t * k;
        double s = 0.0;
        for (int j = 0; j < k; j++) {
            w[j] = p[idx[j]];
            s += w[j];
        }
        if (norm)
            for (int j = 0; j < k; j++) w[j] = (float)(w[j] / (s + BIAS_NORM_EPS));
    }
}

static void bias_forward(kernel_ctx *kc, moe_router_cache *c, const moe_router_ctx *ctx,
                         const float *inp, const float *gate, const moe_shape *s, int N) {
    BG_ASSERT(ctx->state);  // the model allocates state_size bytes per MoE layer
    if (N > 0) {
        matmul_forward_fp32(kc, c->logits, inp, gate, N, s->C, s->E);  // routing stays fp32
        bias_scores_topk(c->probs, c->lse, c->topk_idx, c->topk_w, c->logits, ctx->state, N,
                         s->E, s->k, s->routing.score == MOE_SCORE_SIGMOID, s->norm_topk_prob,
                         &s->routing);
    }
    moe_router_balance_statistics(c, ctx, s, N);  // counts_global and the z-loss
    c->aux_loss = 0.0;
}

// dtopk_w (N,k) → dlogits through the chosen scores (and the z-loss), then the GEMM's
// backward into dinp and dgate.
static void bias_backward(kernel_ctx *kc, float *dinp, float *dgate, moe_router_scratch *scr,
                          const float *dtopk_w, const float *inp, const moe_router_cache *c,
                          const moe_router_ctx *ctx, const float *gate, const moe_shape *s,
                          int N) {
    (void)ctx;
    if (N == 0) return;
    const int E = s->E, k = s->k, sigmoid = s->routing.score == MOE_SCORE_SIGMOID;
    const double z_scale = 2.0 * (double)s->z_coef / c->n_tokens;  // d(z_coef·z)/d lse[t] / lse[t]
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *p = c->probs + (size_t)t * E, *l = c->logits + (size_t)t * E;
        const int *idx = c->topk_idx + (size_t)t * k;
        const float *dw = dtopk_w + (size_t)t * k, *w = c->topk_w + (size_t)t * k;
        float *ds = scr->dprobs + (size_t)t * E, *dl = scr->dlogits + (size_t)t * E;
        for (int e = 0; e < E; e++) ds[e] = 0.0f;
        if (s->norm_topk_prob) {
            // w_j = s_j / (S + eps), S = Σ_j s_j  ⇒  ds_j = (dw_j − Σ_l dw_l·w_l) / (S + eps)
            double S = 0.0, dot = 0.0;
            for (int j = 0; j < k; j++) {
                S += p[idx[j]];
                dot += (double)dw[j] * w[j];
            }
            for (int j = 0; j < k; j++) ds[idx[j]] += (float)((dw[j] - dot) / (S + BIAS_NORM_EPS));
        } else {
            for (int j = 0; j < k; j++) ds[idx[j]] += dw[j];
        }
        // d lse / d logits = softmax(logits) = exp(l − lse), for the z-loss term.
        double zt = z_scale * c->lse[t];
        if (sigmoid) {
            for (int e = 0; e < E; e++)
                dl[e] = (float)(ds[e] * p[e] * (1.0f - p[e]) + zt * exp((double)l[e] - c->lse[t]));
        } else {
            double pds = 0.0;
            for (int e = 0; e < E; e++) pds += (double)p[e] * ds[e];
            for (int e = 0; e < E; e++) dl[e] = (float)(p[e] * (ds[e] - pds + zt));
        }
    }
    matmul_backward_fp32(kc, dinp, dgate, scr->dlogits, inp, gate, N, s->C, E);
}

// b_i += rate·sign(mean − load_i), mean = Σ load / E; compared in integers (E·load_i
// against Σ load), so an expert exactly at the mean stays put.
static void bias_after_step(void *state, const moe_router_cache *c, const moe_shape *s) {
    float *b = state;
    const float rate = s->routing.bias_update_rate;
    int64_t total = 0;
    for (int i = 0; i < s->E; i++) total += c->counts_global[i];
    for (int i = 0; i < s->E; i++) {
        int64_t d = total - (int64_t)s->E * c->counts_global[i];
        if (d > 0) b[i] += rate;
        else if (d < 0) b[i] -= rate;
    }
}

const moe_router moe_router_bias = {
    .name = "bias",
    .state_size = bias_state_size,
    .forward = bias_forward,
    .backward = bias_backward,
    .after_step = bias_after_step,
    .state_name = "e_score_correction_bias",
};
