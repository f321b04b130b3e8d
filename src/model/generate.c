// Incremental decoding with a key/value cache, and sampling (see generate.h).
#include "model/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/block.h"

// One layout routine for measuring (arena capacity 0) and for real, as model.c does.
static void gen_layout(gen_state *g, bg_arena *ar) {
    const model_config *c = &g->m->cfg;
    size_t C = (size_t)c->hidden_size, V = (size_t)c->vocab_size, T = (size_t)g->T_max;
    size_t L = (size_t)c->num_hidden_layers, NH = (size_t)c->num_attention_heads;
    size_t half = C / NH / 2;
    int any_dense = 0, any_moe = 0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        if (model_layer_is_moe(c, l)) any_moe = 1;
        else any_dense = 1;
    }
    // The cache holds the kv heads only: grouped-query attention's saving.
    size_t KV = (size_t)model_kv_heads(c) * (C / NH);
    g->k_cache = BG_ARENA_NEW(ar, float, L * T * KV);
    g->v_cache = BG_ARENA_NEW(ar, float, L * T * KV);
    layer_acts *r = &g->row;
    r->x = BG_ARENA_NEW(ar, float, C);
    r->ln1 = r->ln2 = BG_ARENA_NEW(ar, float, C);  // one norm output serves both norms
    r->qkv = BG_ARENA_NEW(ar, float, (size_t)model_qkv_width(c));
    r->atty = BG_ARENA_NEW(ar, float, C);
    r->x2 = BG_ARENA_NEW(ar, float, C);
    r->ffn_out = BG_ARENA_NEW(ar, float, C);
    r->ln1_mean = r->ln2_mean = BG_ARENA_NEW(ar, float, 1);
    r->ln1_rstd = r->ln2_rstd = BG_ARENA_NEW(ar, float, 1);
    r->ffn_h = any_dense ? BG_ARENA_NEW(ar, float, ffn_in_rows(c->hidden_act, c->intermediate_size)) : NULL;
    r->ffn_a = any_dense ? BG_ARENA_NEW(ar, float, c->intermediate_size) : NULL;
    if (any_moe) {
        moe_shape ms = model_moe_shape(c, NULL);
        ms.routing.group_tokens = 0;  // one token: its own routing group, never dropped
        moe_acts_layout(&r->moe, ar, &ms, 1);
    }
    g->scores = BG_ARENA_NEW(ar, float, NH * T);
    g->rope_cos = BG_ARENA_NEW(ar, float, T * half);
    g->rope_sin = BG_ARENA_NEW(ar, float, T * half);
    g->logits = BG_ARENA_NEW(ar, float, V);
    g->cand = BG_ARENA_NEW(ar, int, V);
    g->cand_p = BG_ARENA_NEW(ar, float, V);
}

void gen_init(gen_state *g, const model *m, int T_max) {
    const model_config *c = &m->cfg;
    BG_ASSERT(m->par == NULL || m->n_experts == c->num_local_experts);
    memset(g, 0, sizeof *g);
    g->m = m;
    g->T_max = T_max > 0 && T_max < c->max_position_embeddings ? T_max : c->max_position_embeddings;
    bg_arena measure;
    bg_arena_init(&measure, 0);
    gen_layout(g, &measure);
    bg_arena_init(&g->arena, measure.used);
    gen_layout(g, &g->arena);
    matmul_weights_changed(m->kernels);  // the weights may be new (a checkpoint just loaded)
    if (c->position_embedding == POS_ROPE)
        rope_tables(g->rope_cos, g->rope_sin, g->T_max, c->hidden_size / c->num_attention_heads,
                    c->rope_theta);
}

void gen_free(gen_state *g) {
    bg_arena_free(&g->arena);
    memset(g, 0, sizeof *g);
}

// The decode attention core: the row's keys and values join layer l's cache at row
// g->pos, then its query attends to cache rows 0..pos (block_attention_core; ctx is the
// generation state).
static void attention_decode(void *ctx, int l, float *atty, const float *qkv) {
    gen_state *g = ctx;
    const model_config *c = &g->m->cfg;
    const int C = c->hidden_size, NH = c->num_attention_heads, NKV = model_kv_heads(c), t = g->pos;
    const size_t KV = (size_t)NKV * (C / NH);
    float *kc = g->k_cache + (size_t)l * g->T_max * KV, *vc = g->v_cache + (size_t)l * g->T_max * KV;
    memcpy(kc + (size_t)t * KV, qkv + C, sizeof(float) * KV);
    memcpy(vc + (size_t)t * KV, qkv + C + KV, sizeof(float) * KV);
    attention_decode_forward(atty, g->scores, qkv, kc, vc, t, g->T_max, C, NH, NKV);
}

// model_forward's list of layer calls for one row at position g->pos.
const float *gen_step(gen_state *g, int token) {
    const model *m = g->m;
    const model_config *c = &m->cfg;
    const int C = c->hidden_size, V = c->vocab_size, NH = c->num_attention_heads;
    const int L = c->num_hidden_layers, t = g->pos, half = C / NH / 2;
    BG_ASSERT(t < g->T_max && token >= 0 && token < V);
    moe_shape ms = model_moe_shape(c, NULL);
    ms.routing.group_tokens = 0;  // as laid out: one token is one routing group
    block_attention_core core = {.forward = attention_decode, .backward = NULL, .ctx = g};
    layer_acts *r = &g->row;

    const float *te = m->w.wte + (size_t)token * C;
    const float *pe = m->w.wpe ? m->w.wpe + (size_t)t * C : NULL;
    for (int i = 0; i < C; i++) r->x[i] = pe ? te[i] + pe[i] : te[i];
    // The tables' row t is the rotation for position t: with B = T = 1 the blocks'
    // RoPE reads exactly that row.
    const float *rope_cos = g->rope_cos + (size_t)t * half, *rope_sin = g->rope_sin + (size_t)t * half;
    for (int l = 0; l < L; l++) {
        const layer_params *lp = &m->w.layers[l];
        block_attention_forward(m->kernels, r, lp, c, &core, l, rope_cos, rope_sin, 1, 1);
        // the router sees this one token; one process, its index in the batch is its position
        moe_router_ctx rc = {.seed = m->seed, .step = m->step, .layer = l, .first_token = t,
                             .state = model_router_state(m, l)};
        // One process, one row: no exchange, so nothing can stop the step.
        int ok = block_ffn_forward(m->kernels, r->x, r, lp, c, &ms, &rc, 1);
        BG_ASSERT(ok == BG_OK);
    }
    block_norm_forward(c, r->ln1, r->ln1_mean, r->ln1_rstd, r->x, m->w.lnf_w, m->w.lnf_b, 1);
    matmul_forward(m->kernels, g->logits, r->ln1, m->w.lm_head, 1, C, V);
    g->pos++;
    return g->logits;
}

// ---- sampling ------------------------------------------------------------------

// More probable first; equal probabilities by lower id (a total order, so the
// result does not depend on the sort algorithm).
static int before(float pa, int ia, float pb, int ib) { return pa > pb || (pa == pb && ia < ib); }

// Sifts position i down a min-heap (the least probable candidate at the root).
static void heap_down(int *id, float *p, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && before(p[w], id[w], p[l], id[l])) w = l;
        if (r < n && before(p[w], id[w], p[r], id[r])) w = r;
        if (w == i) return;
        float tp = p[i];
        int ti = id[i];
        p[i] = p[w], id[i] = id[w];
        p[w] = tp, id[w] = ti;
        i = w;
    }
}

// Sorts n candidates most probable first: heap sort, in place, no allocation
// (qsort's comparator cannot see the probabilities beside the ids without a global).
static void sort_candidates(int *id, float *p, int n) {
    for (int i = n / 2 - 1; i >= 0; i--) heap_down(id, p, n, i);
    for (int end = n - 1; end > 0; end--) {
        float tp = p[0];
        int ti = id[0];
        p[0] = p[end], id[0] = id[end];
        p[end] = tp, id[end] = ti;
        heap_down(id, p, end, 0);
    }
}

int gen_sample(gen_state *g, const float *logits, const gen_sampling *s, bg_rng *rng) {
    const int V = g->m->cfg.vocab_size;
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (s->temperature <= 0.0f) return best;

    // Softmax of logits / temperature, shifted by the maximum so exp never overflows.
    const float inv_t = 1.0f / s->temperature, maxv = logits[best];
    int *id = g->cand;
    float *p = g->cand_p;
    int n = V;
    if (s->top_k > 0 && s->top_k < V) {
        // The k most probable by a min-heap of k: O(V log k), not a sort of V.
        n = s->top_k;
        for (int i = 0; i < n; i++) id[i] = i, p[i] = logits[i];
        for (int i = n / 2 - 1; i >= 0; i--) heap_down(id, p, n, i);
        for (int i = n; i < V; i++)
            if (before(logits[i], i, p[0], id[0])) {
                p[0] = logits[i], id[0] = i;
                heap_down(id, p, n, 0);
            }
        for (int i = 0; i < n; i++) p[i] = expf((p[i] - maxv) * inv_t);
    } else {
        for (int i = 0; i < V; i++) id[i] = i, p[i] = expf((logits[i] - maxv) * inv_t);
    }
    // Then top_p of what top_k left, renormalized (as Hugging Face chains the two):
    // the most probable candidates until their share of the mass reaches top_p.
    if (s->top_p < 1.0f) {
        double total = 0;
        for (int i = 0; i < n; i++) total += p[i];
        sort_candidates(id, p, n);
        double cum = 0, want = (double)s->top_p * total;
        int keep = 0;
        while (keep < n) {
            cum += p[keep++];
            if (cum >= want) break;
        }
        n = keep;
    }
    double mass = 0;
    for (int i = 0; i < n; i++) mass += p[i];
    double u = bg_rng_uniform(rng) * mass, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += p[i];
        if (u < cum) return id[i];
    }
    return id[n - 1];  // u rounded up to the whole mass
}

int gen_generate(gen_state *g, const int *prompt, int n_prompt, int max_new,
                 const gen_sampling *s, uint64_t seed, int eot, int *out,
                 int (*on_token)(void *ctx, int token), void *ctx) {
    BG_ASSERT(n_prompt >= 1 && n_prompt <= g->T_max);
    bg_rng rng;
    bg_rng_seed(&rng, seed);
    gen_reset(g);
    const float *logits = NULL;
    for (int i = 0; i < n_prompt; i++) logits = gen_step(g, prompt[i]);
    int n = 0;
    while (n < max_new) {
        int tok = gen_sample(g, logits, s, &rng);
        out[n++] = tok;
        if (on_token && on_token(ctx, tok)) break;
        if (tok == eot || n == max_new || g->pos == g->T_max) break;
        logits = gen_step(g, tok);
    }
    return n;
}
