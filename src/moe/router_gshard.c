// The `gshard` gate (Lepikhin et al. 2020, GShard, Algorithm 1; Lingvo's
// gshard_layers top2_gating): softmax, top-2, the two weights renormalized over the
// pair, w1 = p1/(p1+p2), w2 = p2/(p1+p2) (always, whatever norm_topk_prob says, as
// GShard). Random routing (training only): the second expert is kept iff
// u < 2·w2, u ~ U(0,1) — Lingvo's `uniform < gate_2 / second_expert_threshold` with
// its default threshold 0.5 — so it is kept with probability min(1, 2·w2). A second
// expert not kept is a dropped assignment (topk_idx −1, topk_w 0) and w1 stays
// p1/(p1+p2), not renormalized to 1, as in GShard: the residual carries the rest.
// u is keyed by (seed, step, layer, global token). The balance loss is topk's
// E·Σ f_i P_i over the kept assignments (GShard's own counts first choices only).
#include "moe/router.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <stddef.h>

static size_t gshard_state_size(const moe_shape *s) {
    (void)s;
    return 0;
}

int moe_router_gshard_keeps(float w2, double u) { return u < 2.0 * (double)w2; }

static void gshard_forward(kernel_ctx *kc, moe_router_cache *c, const moe_router_ctx *ctx,
                           const float *inp, const float *gate, const moe_shape *s, int N) {
    BG_ASSERT(s->k == 2);
    moe_router_forward_routed(kc, c->logits, c->probs, c->lse, c->topk_idx, c->topk_w, inp, gate,
                              N, s->C, s->E, 2, 1, &s->routing);
    if (!ctx->eval) {
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < N; t++) {
            bg_rng r;
            moe_router_token_rng(&r, ctx, MOE_RNG_GSHARD, ctx->first_token + t);
            if (!moe_router_gshard_keeps(c->topk_w[2 * (size_t)t + 1], bg_rng_uniform(&r))) {
                c->topk_idx[2 * (size_t)t + 1] = -1;
                c->topk_w[2 * (size_t)t + 1] = 0.0f;
            }
        }
    }
    moe_router_balance_statistics(c, ctx, s, N);
}

static void gshard_backward(kernel_ctx *kc, float *dinp, float *dgate, moe_router_scratch *scr,
                            const float *dtopk_w, const float *inp, const moe_router_cache *c,
                            const moe_router_ctx *ctx, const float *gate, const moe_shape *s,
                            int N) {
    (void)ctx;
    if (N == 0) return;
    const int E = s->E;
    moe_router_aux_dprobs(scr->dprobs, c, s, N);
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *p = c->probs + (size_t)t * E;
        const int *idx = c->topk_idx + 2 * (size_t)t;
        const float *dw = dtopk_w + 2 * (size_t)t, *w = c->topk_w + 2 * (size_t)t;
        float *dp = scr->dprobs + (size_t)t * E;
        // w1 = p1/(p1+p2) depends on p2 even when the second was dropped (here or by
        // the capacity step): take the pair again (the same selection, the same ids).
        int pair[2] = {idx[0], idx[1]};
        if (pair[0] < 0 || pair[1] < 0)
            moe_router_select_row(pair, c->logits + (size_t)t * E, p, E, 2, &s->routing);
        double sum = (double)p[pair[0]] + p[pair[1]];
        double dw1 = idx[0] < 0 ? 0.0 : dw[0], dw2 = idx[1] < 0 ? 0.0 : dw[1];
        double dot = dw1 * w[0] + dw2 * w[1];
        dp[pair[0]] += (float)((dw1 - dot) / sum);
        dp[pair[1]] += (float)((dw2 - dot) / sum);
    }
    moe_router_softmax_dlogits(scr->dlogits, scr->dprobs, c->probs, c->lse, c->n_tokens,
                               s->z_coef, N, E);
    matmul_backward_fp32(kc, dinp, dgate, scr->dlogits, inp, gate, N, s->C, E);
}

const moe_router moe_router_gshard = {
    .name = "gshard",
    .state_size = gshard_state_size,
    .forward = gshard_forward,
    .backward = gshard_backward,
};
