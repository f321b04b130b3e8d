// What every gate shares: the cache layout, the balance statistics and losses, and
// the list of gates.
#include "moe/router.h"

#include "comm/dist.h"
#include "core/error.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

// Every gate, one line each.
static const moe_router *const routers[] = {
    &moe_router_topk,
    &moe_router_swipe,
    &moe_router_bias,
    &moe_router_switch,
    &moe_router_gshard,
    &moe_router_noisy_topk,
};

const moe_router *moe_router_find(const char *name) {
    for (size_t i = 0; i < sizeof routers / sizeof routers[0]; i++)
        if (!strcmp(routers[i]->name, name)) return routers[i];
    return NULL;
}

void moe_router_cache_layout(moe_router_cache *c, bg_arena *arena, const moe_shape *s, int N) {
    size_t n = (size_t)N, NK = n * s->k, E = (size_t)s->E;
    c->logits = BG_ARENA_NEW(arena, float, n * E);
    c->probs = BG_ARENA_NEW(arena, float, n * E);
    c->lse = BG_ARENA_NEW(arena, float, n);
    c->topk_idx = BG_ARENA_NEW(arena, int, NK);
    c->topk_w = BG_ARENA_NEW(arena, float, NK);
    c->counts_global = BG_ARENA_NEW(arena, int, E);
    c->stats = BG_ARENA_NEW(arena, double, MOE_ROUTER_STATS_ALLOC(E));
    c->seq_counts = s->routing.aux_scope == MOE_AUX_SEQUENCE
                        ? BG_ARENA_NEW(arena, int, (n / moe_router_seq_tokens(s, N)) * E)
                        : NULL;
    size_t extra = s->router && s->router->cache_floats ? s->router->cache_floats(s, N) : 0;
    c->gate_cache = extra ? BG_ARENA_NEW(arena, float, extra) : NULL;
    c->n_tokens = 0;
    c->dropped_global = 0;
    c->aux_loss = c->z_loss = 0.0;
}

void moe_router_scratch_layout(moe_router_scratch *scr, bg_arena *arena, const moe_shape *s,
                               int N) {
    size_t n = (size_t)N, E = (size_t)s->E;
    scr->dlogits = BG_ARENA_NEW(arena, float, n * E);
    scr->dprobs = BG_ARENA_NEW(arena, float, n * E);
    size_t extra = s->router && s->router->scratch_floats ? s->router->scratch_floats(s, N) : 0;
    scr->gate_scratch = extra ? BG_ARENA_NEW(arena, float, extra) : NULL;
}

int moe_router_seq_tokens(const moe_shape *s, int N) {
    int T = s->routing.group_tokens > 0 ? s->routing.group_tokens : N;
    return T > 0 ? T : 1;
}

// Σ over this rank's sequences of E·Σ_i f_i P_i within each; fills seq_counts.
static double sequence_aux_sum(moe_router_cache *c, const moe_shape *s, int N) {
    const int E = s->E, k = s->k, T = moe_router_seq_tokens(s, N);
    BG_ASSERT(N % T == 0);  // a rank holds whole sequences
    double sum = 0.0;
    for (int g = 0; g < N / T; g++) {
        int *cnt = c->seq_counts + (size_t)g * E;
        for (int i = 0; i < E; i++) cnt[i] = 0;
        for (size_t r = (size_t)g * T * k; r < (size_t)(g + 1) * T * k; r++)
            if (c->topk_idx[r] >= 0) cnt[c->topk_idx[r]]++;
        double aux = 0.0;
        for (int i = 0; i < E; i++) {
            double P = 0.0;
            for (int t = g * T; t < (g + 1) * T; t++) P += c->probs[(size_t)t * E + i];
            aux += (double)cnt[i] / ((double)T * k) * (P / T);
        }
        sum += E * aux;
    }
    return sum;
}

// Σ_t −Σ_i p log p, token by token in order (the same bits for any thread count);
// p = 0 adds nothing (p log p → 0).
static double entropy_sum(const float *probs, int N, int E) {
    double h = 0.0;
    for (int t = 0; t < N; t++) {
        const float *p = probs + (size_t)t * E;
        double ht = 0.0;
        for (int i = 0; i < E; i++)
            if (p[i] > 0.0f) ht -= (double)p[i] * logf(p[i]);
        h += ht;
    }
    return h;
}

double moe_router_entropy_sum(const moe_router_cache *c, const moe_shape *s) {
    return c->stats[2 * (size_t)s->E + 1];
}

void moe_router_balance_statistics(moe_router_cache *c, const moe_router_ctx *ctx,
                                   const moe_shape *s, int N) {
    moe_router_balance_statistics_ex(c, ctx, s, N, 0);
}

void moe_router_balance_statistics_ex(moe_router_cache *c, const moe_router_ctx *ctx,
                                      const moe_shape *s, int N, int n_extra) {
    const int E = s->E;
    const size_t NK = (size_t)N * s->k;
    const int seq = s->routing.aux_scope == MOE_AUX_SEQUENCE;
    double *st = c->stats;
    moe_router_stat_sums(st, &st[2 * E], c->probs, c->lse, N, E);
    for (int i = 0; i < E; i++) st[E + i] = 0;
    for (size_t i = 0; i < NK; i++)  // exact: integers in double
        if (c->topk_idx[i] >= 0) st[E + c->topk_idx[i]] += 1;
    st[2 * E + 1] = entropy_sum(c->probs, N, E);
    if (seq || n_extra) st[2 * E + 2] = seq ? sequence_aux_sum(c, s, N) : 0.0;
    // Each element is summed on its own in rank order, so the slots after the common
    // MOE_ROUTER_STATS(E) are reduced only when used, and leave the others' bits alone.
    size_t n_st = MOE_ROUTER_STATS(E) + (seq || n_extra ? 1 : 0) + (size_t)n_extra;
    c->n_tokens = N;
    if (ctx->comm) {
        dist_allreduce_sum_f64(ctx->comm, st, n_st);
        c->n_tokens = (double)N * dist_size(ctx->comm);
    }
    for (int i = 0; i < E; i++) c->counts_global[i] = (int)st[E + i];
    moe_router_losses_from_sums(&c->aux_loss, &c->z_loss, st, st[2 * E], c->counts_global,
                                c->n_tokens, E, s->k);
    if (seq && c->n_tokens > 0)
        c->aux_loss = st[2 * E + 2] / (c->n_tokens / moe_router_seq_tokens(s, N));
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void moe_router_token_rng(bg_rng *r, const moe_router_ctx *ctx, int purpose, long token) {
    uint64_t h = mix64(ctx->seed + 0x9E3779B97F4A7C15ull);
    h = mix64(h ^ (uint64_t)ctx->step);
    h = mix64(h + (uint64_t)ctx->layer);
    h = mix64(h ^ (uint64_t)purpose);
    h = mix64(h + (uint64_t)token);
    bg_rng_seed(r, h);
}

void moe_router_stat_sums(double *prob_sum, double *lse2_sum, const float *probs,
                          const float *lse, int N, int E) {
    // Fixed summation order (expert by expert, token by token): same bits for any
    // thread count. O(N·E), negligible beside the expert GEMMs.
    for (int i = 0; i < E; i++) {
        double P = 0.0;
        for (int t = 0; t < N; t++) P += probs[(size_t)t * E + i];
        prob_sum[i] = P;
    }
    double z = 0.0;
    for (int t = 0; t < N; t++) z += (double)lse[t] * lse[t];
    *lse2_sum = z;
}

void moe_router_losses_from_sums(double *aux_loss, double *z_loss, const double *prob_sum,
                                 double lse2_sum, const int *counts, double n_tokens, int E,
                                 int k) {
    *aux_loss = 0.0;
    *z_loss = 0.0;
    if (n_tokens <= 0) return;
    double aux = 0.0;
    for (int i = 0; i < E; i++) {
        double f = (double)counts[i] / (n_tokens * k);
        aux += f * (prob_sum[i] / n_tokens);
    }
    *aux_loss = E * aux;
    *z_loss = lse2_sum / n_tokens;
}

void moe_router_balance_losses(double *aux_loss, double *z_loss, const float *probs,
                               const float *lse, const int *counts, int N, int E, int k) {
    *aux_loss = 0.0;
    *z_loss = 0.0;
    if (N == 0) return;
    double lse2 = 0.0, prob_sum[E];
    moe_router_stat_sums(prob_sum, &lse2, probs, lse, N, E);
    moe_router_losses_from_sums(aux_loss, z_loss, prob_sum, lse2, counts, (double)N, E, k);
}

