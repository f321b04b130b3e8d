// Incremental decoding (model/generate.h) against the full forward.
//
// 1. Logits: feeding a sequence one token at a time through the KV cache gives, at every
//    position, model_forward's logits for that position. Configs: learned positions and
//    RoPE; LayerNorm+GELU and RMSNorm+SwiGLU; MoE (with and without a shared expert, MoE
//    every layer or every other), and dense.
//    Tolerance: atol 2e-5 + rtol 1e-4 on logits of size ~0.1. Both paths run the same
//    kernels on the same values; what differs is float summation order (oneDNN may pick
//    another GEMM kernel for M = 1 than for M = T, and attention here uses expf, the
//    kernel a polynomial exp with relative error < 1e-7), which moves a logit by a few
//    float ulps per layer: measured below 6e-7 (3% of the tolerance). A wrong position
//    (RoPE rotated by the previous position's row fails at position 1 by 5e-2), a stale
//    or missing cache row, or a misrouted token moves logits by 1e-2 or more.
//    Routing: a tie in the top-k within that noise could flip an expert; with random
//    weights at this scale the gaps are ~1e-2, and the test reports the worst ratio.
// 2. Greedy generation with the cache equals greedy generation that reruns model_forward
//    on the whole prefix for every token (the O(T²) way): the same token ids.
// 3. Sampling: the same seed gives the same tokens, different seeds different ones;
//    top-k = 1 and a tiny top-p are greedy; on crafted logits only the allowed tokens
//    are drawn, with frequencies within 4 standard deviations of the renormalized
//    probabilities; generation stops at the end-of-text token.
// 4. After the first step, decoding creates no new GEMM primitives (the per-token loop
//    is allocation-free in our code: every buffer comes from gen_init's arena).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/generate.h"
#include "test_util.h"

#define V 97
#define T 40     // context of the short configs
#define T_LONG 320  // one config (C = 64) past attend_one's threshold for splitting heads over threads

static void base_config(model_config *c) {
    model_config_defaults(c);
    c->vocab_size = V;
    c->max_position_embeddings = T;
    c->hidden_size = 32;
    c->num_hidden_layers = 3;
    c->num_attention_heads = 4;
    c->intermediate_size = 48;
    c->initializer_range = 0.1f;  // larger than training's 0.02: peaked attention and routing
    c->num_local_experts = 4;
    c->num_experts_per_tok = 2;
    c->moe_intermediate_size = 24;
    c->moe_layer_freq = 1;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

// Part 1: per-position logits.
static void check_logits(const char *label, const model_config *cfg) {
    const int ctx = cfg->max_position_embeddings;
    model m;
    model_init(&m, cfg, 7);
    model_prepare(&m, 1, ctx);
    int tokens[T_LONG];
    tu_seed(11);
    for (int i = 0; i < ctx; i++) tokens[i] = (int)(tu_uniform() * V);
    model_forward(&m, tokens, NULL);

    gen_state g;
    gen_init(&g, &m, 0);
    TU_CHECK(g.T_max == ctx, "%s: T_max %d", label, g.T_max);
    double *want = malloc(sizeof(double) * V), worst = 0;
    float *row = malloc(sizeof(float) * V);
    long primitives = 0;
    for (int t = 0; t < ctx; t++) {
        // The forward's logits; a model that fuses the LM head into the loss for long
        // batches keeps none, and then they are its final normed rows times the head.
        const float *ref = m.acts.logits ? m.acts.logits + (size_t)t * V : row;
        if (!m.acts.logits)
            matmul_forward(m.kernels, row, m.acts.lnf + (size_t)t * cfg->hidden_size,
                           m.w.lm_head, 1, cfg->hidden_size, V);
        const float *got = gen_step(&g, tokens[t]);
        if (t == 0) primitives = matmul_primitives_created(m.kernels);
        for (int i = 0; i < V; i++) want[i] = ref[i];
        double r = tu_tol_ratio(got, want, V, 2e-5, 1e-4);
        worst = r > worst ? r : worst;
        char what[128];
        snprintf(what, sizeof what, "%s: logits at position %d", label, t);
        if (!tu_expect_close(what, got, want, V, 2e-5, 1e-4)) break;
    }
    TU_CHECK(matmul_primitives_created(m.kernels) == primitives,
             "%s: decoding created GEMM primitives after step 1", label);
    printf("%-34s worst |diff|/tol over %d positions: %.3f\n", label, ctx, worst);
    free(want);
    free(row);
    gen_free(&g);
    model_free(&m);
}

// Part 2: greedy with the cache against greedy by full forwards.
static void check_greedy(const char *label, const model_config *cfg) {
    if (cfg->max_position_embeddings != T) return;  // the O(T²)-per-token reference is slow
    model m;
    model_init(&m, cfg, 3);
    model_prepare(&m, 1, T);
    gen_state g;
    gen_init(&g, &m, 0);
    int prompt[3] = {5, 17, 42}, got[T], seq[T];
    gen_sampling greedy = {.temperature = 0, .top_k = 0, .top_p = 1};
    int n = gen_generate(&g, prompt, 3, T, &greedy, 1, -1, got, NULL, NULL);
    // The cache holds T positions: 3 prompt tokens, then one per generated token but
    // the last (it is never fed back), so T - 2 tokens.
    TU_CHECK(n == T - 2, "%s: generated %d tokens, want %d (context full)", label, n, T - 2);

    // Causal attention: logits at position t depend on tokens 0..t only, so the rest
    // of the sequence may hold anything (zeros).
    memset(seq, 0, sizeof seq);
    memcpy(seq, prompt, sizeof prompt);
    int len = 3, same = 1;
    for (int i = 0; i < n; i++) {
        model_forward(&m, seq, NULL);
        int tok = argmax(m.acts.logits + (size_t)(len - 1) * V, V);
        if (tok != got[i]) {
            same = 0;
            TU_CHECK(0, "%s: greedy token %d: cache %d, full forward %d", label, i, got[i], tok);
            break;
        }
        if (len < T) seq[len++] = tok;  // the last token is never fed back
    }
    printf("%-34s greedy %d tokens with and without the cache: %s\n", label, n, same ? "same" : "DIFFERENT");
    gen_free(&g);
    model_free(&m);
}

// Part 3: sampling.
static void check_sampling(void) {
    model_config cfg;
    base_config(&cfg);
    model m;
    model_init(&m, &cfg, 5);
    gen_state g;
    gen_init(&g, &m, 0);
    int prompt[2] = {1, 2}, a[24], b[24], c[24], greedy_out[24], k1[24], p0[24];
    gen_sampling s = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f};
    int na = gen_generate(&g, prompt, 2, 24, &s, 42, -1, a, NULL, NULL);
    int nb = gen_generate(&g, prompt, 2, 24, &s, 42, -1, b, NULL, NULL);
    int nc = gen_generate(&g, prompt, 2, 24, &s, 43, -1, c, NULL, NULL);
    TU_CHECK(na == 24 && nb == 24 && nc == 24, "sampling: lengths %d %d %d", na, nb, nc);
    TU_CHECK(memcmp(a, b, sizeof a) == 0, "sampling: the same seed gave different tokens");
    TU_CHECK(memcmp(a, c, sizeof a) != 0, "sampling: seeds 42 and 43 gave the same 24 tokens");

    gen_sampling greedy = {.temperature = 0, .top_k = 0, .top_p = 1};
    gen_sampling topk1 = {.temperature = 1.5f, .top_k = 1, .top_p = 1};
    gen_sampling tiny_p = {.temperature = 1.5f, .top_k = 0, .top_p = 1e-6f};
    gen_generate(&g, prompt, 2, 24, &greedy, 1, -1, greedy_out, NULL, NULL);
    gen_generate(&g, prompt, 2, 24, &topk1, 9, -1, k1, NULL, NULL);
    gen_generate(&g, prompt, 2, 24, &tiny_p, 9, -1, p0, NULL, NULL);
    TU_CHECK(memcmp(greedy_out, k1, sizeof k1) == 0, "sampling: top-k 1 is not greedy");
    TU_CHECK(memcmp(greedy_out, p0, sizeof p0) == 0, "sampling: top-p 1e-6 is not greedy");

    // End of text: make the first greedy token the end-of-text token.
    int out[24];
    int n = gen_generate(&g, prompt, 2, 24, &greedy, 1, greedy_out[0], out, NULL, NULL);
    TU_CHECK(n == 1 && out[0] == greedy_out[0], "sampling: did not stop at end-of-text (%d tokens)", n);

    // Crafted logits: probabilities ∝ 5,3,2,1,1,... (the rest of V tiny).
    float *logits = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) logits[i] = -30.0f;
    logits[10] = logf(5), logits[20] = logf(3), logits[30] = logf(2), logits[40] = 0, logits[50] = 0;
    // top_k 2: {10, 20} with 5/8, 3/8. top_p 0.7 of all: 5/12 + 3/12 = 0.67 < 0.7, so
    // {10, 20, 30} with 5/10, 3/10, 2/10. Both: top-p over the top-2 renormalized
    // (0.625 < 0.7 <= 1) keeps {10, 20}.
    struct {
        gen_sampling s;
        int ids[3];
        double p[3];
    } cases[3] = {
        {{1.0f, 2, 1.0f}, {10, 20, -1}, {5 / 8.0, 3 / 8.0, 0}},
        {{1.0f, 0, 0.7f}, {10, 20, 30}, {0.5, 0.3, 0.2}},
        {{1.0f, 2, 0.7f}, {10, 20, -1}, {5 / 8.0, 3 / 8.0, 0}},
    };
    const int draws = 20000;
    for (int ci = 0; ci < 3; ci++) {
        bg_rng rng;
        bg_rng_seed(&rng, 100 + ci);
        int count[3] = {0}, other = 0;
        for (int d = 0; d < draws; d++) {
            int id = gen_sample(&g, logits, &cases[ci].s, &rng), hit = 0;
            for (int j = 0; j < 3; j++)
                if (id == cases[ci].ids[j]) count[j]++, hit = 1;
            other += !hit;
        }
        TU_CHECK(other == 0, "sampling case %d: %d draws outside the allowed tokens", ci, other);
        for (int j = 0; j < 3; j++) {
            if (cases[ci].ids[j] < 0) continue;
            double p = cases[ci].p[j], f = (double)count[j] / draws, sd = sqrt(p * (1 - p) / draws);
            TU_CHECK(fabs(f - p) < 4 * sd, "sampling case %d: token %d drawn %.4f of the time, want %.4f",
                     ci, cases[ci].ids[j], f, p);
        }
    }
    printf("sampling: seeds, greedy limits, end-of-text and 3 x %d crafted draws checked\n", draws);
    free(logits);
    gen_free(&g);
    model_free(&m);
}

int main(void) {
    struct {
        const char *label;
        int rope, rms_swiglu, experts, freq, shared, kv_heads;
    } cases[] = {
        {"learned, layernorm/gelu, MoE", 0, 0, 4, 1, 0, 0},
        {"rope, rmsnorm/swiglu, MoE+shared", 1, 1, 4, 1, 1, 0},
        {"rope, layernorm/gelu, MoE every 2nd", 1, 0, 4, 2, 0, 0},
        {"learned, rmsnorm/swiglu, dense", 0, 1, 0, 1, 0, 0},
        {"rope, layernorm/gelu, dense", 1, 0, 0, 1, 0, 0},
        {"rope, rmsnorm/swiglu, MoE, 320 ctx", 1, 1, 4, 1, 0, 0},
        {"rope, rmsnorm/swiglu, MoE, GQA 4/2", 1, 1, 4, 1, 0, 2},  // the smaller cache
        {"learned, layernorm/gelu, dense, multi-query", 0, 0, 0, 1, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_config cfg;
        base_config(&cfg);
        cfg.position_embedding = cases[i].rope ? POS_ROPE : POS_LEARNED;
        if (cases[i].rms_swiglu) cfg.norm = NORM_RMSNORM, cfg.hidden_act = FFN_SWIGLU;
        cfg.num_local_experts = cases[i].experts;
        cfg.moe_layer_freq = cases[i].freq;
        cfg.num_shared_experts = cases[i].shared;
        cfg.num_key_value_heads = cases[i].kv_heads;  // 0: one per query head
        cfg.tie_word_embeddings = (int)(i % 2);
        if (strstr(cases[i].label, "320 ctx")) cfg.max_position_embeddings = T_LONG, cfg.hidden_size = 64;
        BG_ASSERT(model_config_validate(&cfg, "test") == BG_OK);
        check_logits(cases[i].label, &cfg);
        check_greedy(cases[i].label, &cfg);
    }
    check_sampling();
    return tu_finish("test_generate");
}
