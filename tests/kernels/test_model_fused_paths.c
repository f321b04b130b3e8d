// The model's fast kernel paths against its reference paths, end to end: flash
// attention with the fused, chunked LM head + loss against naive attention with whole
// logits, on the same weights and batch. (The kernels are tested one by one in
// test_flash_attention.c and test_lmhead_fused.c; this checks how model.c wires them:
// the LM head's gradients computed in model_forward and handed to model_backward
// across model_zero_grad, gradient accumulation over two steps, opt.no_grad,
// model_logits, and that the activations shrink.) tests/model/test_model_grad.c runs
// the whole model against finite differences on batches small enough to stay
// unfused; this test carries that check over to the fused path.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/model.h"
#include "test_util.h"

// max over the tensor of |a - b| / max |b|: rounding differences are judged against
// the tensor's scale, as in the PyTorch parity test.
static double tensor_rel_err(const float *a, const float *b, size_t n) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= diff)) diff = d;  // NaN sticks
        if (fabs(b[i]) > scale) scale = fabs(b[i]);
    }
    return scale > 0 ? diff / scale : diff;
}

typedef struct {
    double loss, objective;
    float *grads;    // after forward, zero_grad, backward
    float *grads2;   // after a second forward + backward on top (accumulated)
    float *logits;   // (N,V) of the first forward
    int **topk;      // per MoE layer (N·k)
    size_t arena;
} run_result;

static run_result run(const model_config *cfg, model_options opt, int B, int T,
                      const int *inputs, const int *targets) {
    model m;
    model_init(&m, cfg, 42);
    m.opt = opt;
    model_prepare(&m, B, T);
    const int N = B * T, V = cfg->vocab_size, L = cfg->num_hidden_layers;
    run_result r = {0};
    r.arena = m.arena.capacity;
    // The trainer's order: forward, zero_grad, backward.
    model_forward(&m, inputs, targets);
    r.loss = m.loss, r.objective = m.objective;
    r.logits = malloc(sizeof(float) * N * V);
    model_logits(&m, r.logits, 0, N);
    if (m.acts.logits) {
        // The unfused model's own logits: model_logits must agree with them exactly
        // (the same GEMM on the same rows).
        TU_CHECK(!memcmp(r.logits, m.acts.logits, sizeof(float) * N * V),
                 "model_logits differs from acts.logits");
    }
    r.topk = calloc(L, sizeof(int *));
    for (int l = 0; l < L; l++) {
        if (!model_layer_is_moe(cfg, l)) continue;
        size_t n = (size_t)N * cfg->num_experts_per_tok;
        r.topk[l] = malloc(sizeof(int) * n);
        memcpy(r.topk[l], m.acts.layers[l].moe.router.topk_idx, sizeof(int) * n);
    }
    model_zero_grad(&m);
    model_backward(&m);
    r.grads = malloc(sizeof(float) * m.table.numel);
    memcpy(r.grads, m.grads, sizeof(float) * m.table.numel);
    // An evaluation forward in between must not disturb the next step...
    m.opt.no_grad = 1;
    model_forward(&m, targets, inputs);
    TU_CHECK(isfinite(m.loss) && m.loss > 0, "no_grad forward gave loss %g", m.loss);
    m.opt.no_grad = 0;
    // ...and a second step without zero_grad accumulates.
    model_forward(&m, inputs, targets);
    TU_CHECK(m.loss == r.loss, "the same batch gave loss %.9g, then %.9g", r.loss, m.loss);
    model_backward(&m);
    r.grads2 = malloc(sizeof(float) * m.table.numel);
    memcpy(r.grads2, m.grads, sizeof(float) * m.table.numel);
    model_free(&m);
    return r;
}

static void run_free(run_result *r, int L) {
    for (int l = 0; l < L; l++) free(r->topk[l]);
    free(r->topk), free(r->grads), free(r->grads2), free(r->logits);
}

static void check(const char *label, const model_config *cfg, int B, int T, int chunk) {
    const int N = B * T, V = cfg->vocab_size, L = cfg->num_hidden_layers;
    int *inputs = malloc(sizeof(int) * N), *targets = malloc(sizeof(int) * N);
    tu_seed(9);
    for (int i = 0; i < N; i++) {
        inputs[i] = (int)(tu_uniform() * V);
        targets[i] = (int)(tu_uniform() * V);
    }
    model_options ref_opt = {.attention = MODEL_ATTN_NAIVE, .lm_head_chunk = 0};
    model_options fast_opt = {.attention = MODEL_ATTN_FLASH, .lm_head_chunk = chunk};
    run_result ref = run(cfg, ref_opt, B, T, inputs, targets);
    run_result fast = run(cfg, fast_opt, B, T, inputs, targets);

    // Both paths compute the same sums in different orders (attention tiles, chunked
    // dW): float rounding, 1e-7 relative per operation, grows to ~1e-6 through the
    // layers. 1e-5 of each tensor's scale leaves margin; a dropped chunk, a gradient
    // counted twice or lost across model_zero_grad errs by 1e-2 or more.
    const double tol = 1e-5;
    TU_CHECK(fabs(fast.loss - ref.loss) <= tol * ref.loss, "%s: loss %.9g vs %.9g", label,
             fast.loss, ref.loss);
    TU_CHECK(fabs(fast.objective - ref.objective) <= tol * ref.objective,
             "%s: objective %.9g vs %.9g", label, fast.objective, ref.objective);
    for (int l = 0; l < L; l++)
        if (ref.topk[l])
            TU_CHECK(!memcmp(ref.topk[l], fast.topk[l],
                             sizeof(int) * N * cfg->num_experts_per_tok),
                     "%s: layer %d routes differently (the comparison below is void)", label, l);
    double e = tensor_rel_err(fast.logits, ref.logits, (size_t)N * V);
    TU_CHECK(e <= tol, "%s: logits differ by %.3g of their scale", label, e);

    model m;  // for the parameter table only
    model_init(&m, cfg, 42);
    double worst = 0, worst2 = 0;
    for (int i = 0; i < m.table.count; i++) {
        const param_tensor *p = &m.table.tensors[i];
        double e1 = tensor_rel_err(fast.grads + p->offset, ref.grads + p->offset, p->numel);
        double e2 = tensor_rel_err(fast.grads2 + p->offset, ref.grads2 + p->offset, p->numel);
        TU_CHECK(e1 <= tol, "%s: gradient of %s differs by %.3g of its scale", label, p->name, e1);
        TU_CHECK(e2 <= tol, "%s: accumulated gradient of %s differs by %.3g of its scale", label,
                 p->name, e2);
        worst = e1 > worst ? e1 : worst;
        worst2 = e2 > worst2 ? e2 : worst2;
    }
    // The second step saw the same batch and weights: the accumulated gradient is
    // twice the first, up to the rounding of the sums of parts (a tied embedding's
    // gradient adds the LM head's and the embedding's), 1e-7 of the tensor's scale.
    double e2x = 0;
    float *twice = malloc(sizeof(float) * m.table.numel);
    for (size_t j = 0; j < m.table.numel; j++) twice[j] = 2.0f * fast.grads[j];
    for (int i = 0; i < m.table.count; i++) {
        const param_tensor *p = &m.table.tensors[i];
        double e = tensor_rel_err(fast.grads2 + p->offset, twice + p->offset, p->numel);
        e2x = e > e2x ? e : e2x;
    }
    free(twice);
    TU_CHECK(e2x <= 1e-6, "%s: the second step did not add the same gradient (%.3g)", label, e2x);
    // The fast path holds neither (N,V) logits nor (B,NH,T,T) probabilities.
    const size_t saved = sizeof(float) * ((size_t)N * V + (size_t)(L + 1) * B *
                                          cfg->num_attention_heads * T * T);
    TU_CHECK(fast.arena + saved / 2 < ref.arena, "%s: arena %zu bytes, reference %zu", label,
             fast.arena, ref.arena);
    printf("%s: loss %.6f, worst gradient error %.2g (accumulated %.2g) of tensor scale, "
           "arena %.1f MB vs %.1f MB\n",
           label, fast.loss, worst, worst2, fast.arena / 1e6, ref.arena / 1e6);
    model_free(&m);
    run_free(&ref, L), run_free(&fast, L);
    free(inputs), free(targets);
}

int main(void) {
    model_config a;
    model_config_defaults(&a);
    a.vocab_size = 97;
    a.max_position_embeddings = 128;
    a.hidden_size = 24;
    a.num_hidden_layers = 2;
    a.num_attention_heads = 3;  // hs 8
    a.intermediate_size = 32;
    a.initializer_range = 0.2f;
    a.num_local_experts = 0;
    // B·T = 140 rows in chunks of 32: four full chunks and one of 12. T = 70 spans two
    // attention blocks.
    check("dense, layernorm+gelu+learned, tied", &a, 2, 70, 32);

    model_config b = a;
    b.norm = NORM_RMSNORM;
    b.hidden_act = FFN_SWIGLU;
    b.position_embedding = POS_ROPE;
    b.tie_word_embeddings = 0;
    b.num_hidden_layers = 3;
    b.num_attention_heads = 2;  // hs 12
    b.num_local_experts = 4;
    b.num_experts_per_tok = 2;
    b.moe_intermediate_size = 16;
    b.moe_layer_freq = 2;
    b.router_z_loss_coef = 0.01f;
    check("MoE top-2, rmsnorm+swiglu+rope, untied", &b, 3, 67, 50);
    return tu_finish("kernels/test_model_fused_paths");
}
