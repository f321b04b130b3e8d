#ifndef BG_MODEL_GENERATE_H
#define BG_MODEL_GENERATE_H
// Inference: one token at a time with a key/value cache, and sampling.
//
// model_forward recomputes attention over the whole sequence, O(T²) per new token.
// The decoder here keeps every layer's keys and values, (L, T_max, C), so a new token
// runs its own row through the layers and attends to the cached rows: O(context).
// The arithmetic is model_forward's, row by row (the same kernels for norms, GEMMs,
// RoPE and the MoE layer, through the same blocks, model/block.h; the attention core
// is attention_decode_forward, one query against the cache), so its logits equal
// model_forward's up to float summation order (tests/model/test_generate.c).
//
// Everything is allocated once by gen_init; gen_step and gen_sample allocate nothing.
#include <stdint.h>

#include "core/arena.h"
#include "core/rng.h"
#include "model/model.h"

typedef struct {
    const model *m;
    int T_max;                  // cache capacity in positions (<= max_position_embeddings)
    int pos;                    // tokens in the cache: the next token's position
    float *k_cache, *v_cache;   // (L, T_max, KV), KV = kv heads·head size: post-RoPE keys, values
    // One row of activations (N = 1), reused by every layer and kept apart from the
    // model's: x is the layer's input and output, ln1/ln2 one buffer (as their mean and
    // rstd), ffn_h and ffn_a NULL for an all-MoE model, att and att_lse unused.
    layer_acts row;
    float *scores;              // (NH, T_max) attention weights of the current query
    float *rope_cos, *rope_sin; // (T_max, hs/2)
    float *logits;              // (V) the last step's output
    // sampling scratch: candidate ids and their probabilities
    int *cand;                  // (V)
    float *cand_p;              // (V)
    bg_arena arena;
} gen_state;

// Allocates caches and buffers for up to T_max positions (<= 0: the model's
// max_position_embeddings). The model must outlive the state and hold all experts
// (one process: par NULL).
void gen_init(gen_state *g, const model *m, int T_max);
void gen_free(gen_state *g);
// Forgets the cached tokens (a new sequence); nothing is freed.
static inline void gen_reset(gen_state *g) { g->pos = 0; }
// Runs `token` at position g->pos (< T_max, asserted), appends its keys and values
// to the caches and returns the next-token logits (V), valid until the next step.
const float *gen_step(gen_state *g, int token);

// Sampling: temperature <= 0 is greedy (argmax, ties to the lower id); otherwise the
// logits / temperature are softmaxed, cut to the top_k most likely (0: no cut), then to
// the most likely of those whose renormalized probability reaches top_p (1: no cut; the
// order Hugging Face applies them), renormalized and drawn from with one uniform number
// of rng. Equal probabilities order by id, so a seed
// gives the same tokens on every machine with the same logits.
typedef struct {
    float temperature;
    int top_k;
    float top_p;
} gen_sampling;

int gen_sample(gen_state *g, const float *logits, const gen_sampling *s, bg_rng *rng);

// Feeds prompt[0..n_prompt) (n_prompt >= 1) and then samples up to max_new tokens,
// writing them to out. Stops early after the end-of-text token eot (>= 0; it is
// written and counted), or when the cache is full. on_token (may be NULL) is called
// with each new token as it is chosen, for streaming; a nonzero return stops.
// Returns the number of tokens written. Starts from an empty cache.
int gen_generate(gen_state *g, const int *prompt, int n_prompt, int max_new,
                 const gen_sampling *s, uint64_t seed, int eot, int *out,
                 int (*on_token)(void *ctx, int token), void *ctx);
#endif
