// The `switch` gate (Fedus et al. 2021, Switch Transformer): softmax, top-1, the gate
// weight is the chosen expert's probability itself (never renormalized: renormalizing
// one weight would make it 1 and leave the router no gradient from the loss), the
// Switch aux loss E·Σ f_i P_i (router.c's). Capacity is applied after the gate by the
// dispatcher's capacity step.
//
// Input jitter (routing.jitter = eps > 0, training only): the router sees x ⊙ U with
// U ~ U(1−eps, 1+eps) per element, as Mesh-TF's multiplicative_jitter in the Switch
// gating; the experts still get the clean x. Draws keyed by (seed, step, layer,
// global token) through moe_router_token_rng, element by element.
#include "moe/router.h"

#include "core/error.h"
#include "kernels/kernels.h"

#include <stddef.h>

static int jitters(const moe_shape *s) { return s->routing.jitter > 0.0f; }

static size_t switch_state_size(const moe_shape *s) {
    (void)s;
    return 0;
}

// The jittered input (N,C), kept for the backward.
static size_t switch_cache_floats(const moe_shape *s, int N) {
    return jitters(s) ? (size_t)N * s->C : 0;
}

// dlogits · gate (N,C) before the jitter's factor is applied.
static size_t switch_scratch_floats(const moe_shape *s, int N) {
    return jitters(s) ? (size_t)N * s->C : 0;
}

// The next jitter factor of a token's stream, in U(1−eps, 1+eps).
static float jitter_draw(bg_rng *r, float eps) {
    return (float)(1.0 - eps + 2.0 * eps * bg_rng_uniform(r));
}

// out (N,C) = x ⊙ U.
static void jitter_input(float *out, const float *x, const moe_router_ctx *ctx, float eps, int N,
                         int C) {
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        bg_rng r;
        moe_router_token_rng(&r, ctx, MOE_RNG_JITTER, ctx->first_token + t);
        for (size_t i = (size_t)t * C; i < (size_t)(t + 1) * C; i++) out[i] = x[i] * jitter_draw(&r, eps);
    }
}

static int jitter_on(const moe_router_ctx *ctx, const moe_shape *s) {
    return jitters(s) && !ctx->eval;
}

static void switch_forward(kernel_ctx *kc, moe_router_cache *c, const moe_router_ctx *ctx,
                           const float *inp, const float *gate, const moe_shape *s, int N) {
    BG_ASSERT(s->k == 1);
    const float *x = inp;
    if (jitter_on(ctx, s)) {
        jitter_input(c->gate_cache, inp, ctx, s->routing.jitter, N, s->C);
        x = c->gate_cache;
    }
    moe_router_forward_routed(kc, c->logits, c->probs, c->lse, c->topk_idx, c->topk_w, x, gate, N,
                              s->C, s->E, 1, 0, &s->routing);
    moe_router_balance_statistics(c, ctx, s, N);
}

static void switch_backward(kernel_ctx *kc, float *dinp, float *dgate, moe_router_scratch *scr,
                            const float *dtopk_w, const float *inp, const moe_router_cache *c,
                            const moe_router_ctx *ctx, const float *gate, const moe_shape *s,
                            int N) {
    if (N == 0) return;
    if (!jitter_on(ctx, s)) {
        moe_router_backward_cached(kc, dinp, dgate, scr, dtopk_w, inp, c, gate, s, N, 0);
        return;
    }
    // logits = (x ⊙ U) · gateᵀ: dgate from the jittered input, dx = U ⊙ (dlogits · gate).
    const int C = s->C;
    moe_router_aux_dprobs(scr->dprobs, c, s, N);
    moe_router_weights_dprobs(scr->dprobs, dtopk_w, c->probs, c->topk_idx, c->topk_w, N, s->E, 1,
                              0);
    moe_router_softmax_dlogits(scr->dlogits, scr->dprobs, c->probs, c->lse, c->n_tokens,
                               s->z_coef, N, s->E);
    float *dx = dinp ? scr->gate_scratch : NULL;
    if (dx) vec_zero(dx, (size_t)N * C);
    matmul_backward_fp32(kc, dx, dgate, scr->dlogits, c->gate_cache, gate, N, C, s->E);
    if (!dinp) return;
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        bg_rng r;
        moe_router_token_rng(&r, ctx, MOE_RNG_JITTER, ctx->first_token + t);
        for (size_t i = (size_t)t * C; i < (size_t)(t + 1) * C; i++)
            dinp[i] += jitter_draw(&r, s->routing.jitter) * dx[i];
    }
}

const moe_router moe_router_switch = {
    .name = "switch",
    .state_size = switch_state_size,
    .cache_floats = switch_cache_floats,
    .scratch_floats = switch_scratch_floats,
    .forward = switch_forward,
    .backward = switch_backward,
};
