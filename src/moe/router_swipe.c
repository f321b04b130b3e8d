// The `swipe` gate: top-k on the router logits, then SWIPE balancing (swipe.h) slot by
// slot over the workers of the expert-parallel group, so every worker receives exactly
// B·k rows and no token is dropped. Gate weights: softmax over the k slots of the logits
// at the final experts (FastMoE's SwipeGate); norm_topk_prob and router_score do not
// apply. No aux loss (balance is by construction); the z-loss when configured.
// Evaluation (ctx->eval) skips the balancing: plain top-k, no exchange.
#include "comm/dist.h"
#include "core/error.h"
#include "moe/router.h"
#include "moe/swipe.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void moe_swipe_weights(float *topk_w, const float *logits, const int *topk_idx, int N, int E,
                       int k) {
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *l = logits + (size_t)t * E;
        const int *idx = topk_idx + (size_t)t * k;
        float *w = topk_w + (size_t)t * k;
        float mx = l[idx[0]];
        for (int j = 1; j < k; j++) mx = l[idx[j]] > mx ? l[idx[j]] : mx;
        double sum = 0.0;  // k terms, each in (0, 1]: the max shift keeps exp finite
        for (int j = 0; j < k; j++) sum += exp((double)l[idx[j]] - mx);
        for (int j = 0; j < k; j++) w[j] = (float)(exp((double)l[idx[j]] - mx) / sum);
    }
}

void moe_swipe_logits_backward(float *dlogits, const float *dtopk_w, const float *topk_w,
                               const int *topk_idx, const float *probs, const float *lse,
                               double n_tokens, float z_coef, int N, int E, int k) {
    const double z_scale = 2.0 * (double)z_coef / n_tokens;  // d(z_coef·z)/d lse[t]
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *p = probs + (size_t)t * E;
        const int *idx = topk_idx + (size_t)t * k;
        const float *dw = dtopk_w + (size_t)t * k;
        const float *w = topk_w + (size_t)t * k;
        float *dl = dlogits + (size_t)t * E;
        double zt = z_scale * lse[t];  // d lse / d logits = probs
        for (int e = 0; e < E; e++) dl[e] = (float)(p[e] * zt);
        // w = softmax over the slots: dl[idx_j] += w_j (dw_j − Σ_i w_i dw_i). A token may
        // hold one expert in two slots (reassignment); the += adds both.
        double dot = 0.0;
        for (int j = 0; j < k; j++) dot += (double)w[j] * dw[j];
        for (int j = 0; j < k; j++) dl[idx[j]] += (float)(w[j] * (dw[j] - dot));
    }
}

// Balances topk_idx in place over W workers of B tokens each; counts and sends (W,W),
// gathered (W,k,W) are workspace. ep_comm NULL: this process holds all W workers
// (virtual workers), topk_idx (W·B,k). Else it is worker `mine` of ep_comm, topk_idx
// (B,k), and its count rows are all-gathered so that every rank balances the same
// matrices. A slot's counts are of the top-k ids, which balancing earlier slots leaves
// alone, so one all-gather serves all k slots.
static void swipe_balance_slots(int *topk_idx, int *counts, int *sends, int *gathered,
                                dist_comm *ep_comm, int W, int mine, int B, int El, int k) {
    int caps[W];
    if (ep_comm) {
        int rows[k * W];
        for (int slot = 0; slot < k; slot++)
            moe_swipe_count(&rows[slot * W], topk_idx + slot, k, B, W, El);
        dist_allgather_i32(ep_comm, rows, gathered, k * W);
    }
    for (int slot = 0; slot < k; slot++) {
        for (int w = 0; w < W; w++) {
            int *row = &counts[(size_t)w * W];
            if (ep_comm)
                memcpy(row, &gathered[((size_t)w * k + slot) * W], sizeof(int) * (size_t)W);
            else
                moe_swipe_count(row, topk_idx + (size_t)w * B * k + slot, k, B, W, El);
        }
        if (slot == 0)  // every worker's capacity: its tokens times k (FastMoE: B·k)
            for (int v = 0; v < W; v++) {
                long n = 0;
                for (int u = 0; u < W; u++) n += counts[(size_t)v * W + u];
                caps[v] = (int)(n * k);
            }
        moe_swipe_balance(sends, caps, counts, W);
        if (ep_comm)
            moe_swipe_assign(topk_idx + slot, k, B, &sends[(size_t)mine * W], W, El, slot);
        else
            for (int w = 0; w < W; w++)
                moe_swipe_assign(topk_idx + (size_t)w * B * k + slot, k, B, &sends[(size_t)w * W],
                                 W, El, slot);
    }
}

static void swipe_balance(int *topk_idx, const moe_shape *s, int N) {
    const int V = s->routing.virtual_workers, k = s->k;
    int W = s->par ? s->par->ep_size : 1, mine = 0, B = N;
    dist_comm *ep_comm = NULL;
    if (V > 1) {  // one process standing in for V ranks of N/V tokens each
        BG_ASSERT(W == 1 && N % V == 0 && s->E % V == 0);
        W = V;
        B = N / V;
    } else if (W > 1) {
        ep_comm = s->par->ep_comm;
        mine = s->par->ep_rank;
    }
    if (W == 1) return;  // one worker holds every expert: it accepts all N·k rows
    // The count matrices on the stack while small (64 KiB); a larger EP·k pays one
    // allocation per layer and step, negligible beside its exchanges.
    const size_t WW = (size_t)W * W, n = (2 + (ep_comm ? (size_t)k : 0)) * WW;
    enum { STACK_INTS = 16384 };
    int stack[n <= STACK_INTS ? n : 1];
    int *buf = n <= STACK_INTS ? stack : bg_malloc(sizeof(int) * n);
    swipe_balance_slots(topk_idx, buf, buf + WW, buf + 2 * WW, ep_comm, W, mine, B, s->E / W, k);
    if (buf != stack) free(buf);
}

static size_t swipe_state_size(const moe_shape *s) {
    (void)s;
    return 0;
}

static void swipe_forward(kernel_ctx *kc, moe_router_cache *c, const moe_router_ctx *ctx,
                          const float *inp, const float *gate, const moe_shape *s, int N) {
    moe_router_forward(kc, c->logits, c->probs, c->lse, c->topk_idx, c->topk_w, inp, gate, N, s->C,
                       s->E, s->k, 0);
    // Every rank of the group enters the count exchange, whatever its N (N = 0 included).
    if (!ctx->eval) swipe_balance(c->topk_idx, s, N);
    moe_swipe_weights(c->topk_w, c->logits, c->topk_idx, N, s->E, s->k);
    moe_router_balance_statistics(c, ctx, s, N);  // counts of the balanced experts
    c->aux_loss = 0.0;
}

static void swipe_backward(kernel_ctx *kc, float *dinp, float *dgate, moe_router_scratch *scr,
                           const float *dtopk_w, const float *inp, const moe_router_cache *c,
                           const moe_router_ctx *ctx, const float *gate, const moe_shape *s,
                           int N) {
    (void)ctx;
    if (N == 0) return;
    moe_swipe_logits_backward(scr->dlogits, dtopk_w, c->topk_w, c->topk_idx, c->probs, c->lse,
                              c->n_tokens, s->z_coef, N, s->E, s->k);
    matmul_backward_fp32(kc, dinp, dgate, scr->dlogits, inp, gate, N, s->C, s->E);
}

const moe_router moe_router_swipe = {
    .name = "swipe",
    .state_size = swipe_state_size,
    .forward = swipe_forward,
    .backward = swipe_backward,
    .balanced_rows = 1,
};
