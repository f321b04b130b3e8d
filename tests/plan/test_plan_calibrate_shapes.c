// The shapes `plan --calibrate` times (plan_calibrate_shapes): each class's curve has
// increasing sizes, and wherever a spread shape has the size of one of the model's,
// the model's own shape is the one timed (M2's experts at EP = 1, (32, 512, 1024),
// have the FLOPs of the spread's (64, 512, 512) and (16, 1024, 1024), whose rates differ).
#include "core/error.h"
#include "model/config.h"
#include "plan/calibrate.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

static const char *M2 =
    "{\"vocab_size\": 8192, \"max_position_embeddings\": 512, \"hidden_size\": 512,"
    " \"num_hidden_layers\": 8, \"num_attention_heads\": 8, \"intermediate_size\": 512,"
    " \"norm\": \"rmsnorm\", \"hidden_act\": \"swiglu\", \"position_embedding\": \"rope\","
    " \"num_local_experts\": 16, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 512}";

static int has(const plan_gemm_shape *v, int n, int M, int K, int N) {
    for (int i = 0; i < n; i++)
        if (v[i].M == M && v[i].K == K && v[i].N == N) return 1;
    return 0;
}

int main(void) {
    model_config c;
    TU_CHECK(model_config_parse(&c, M2, "m2") == BG_OK, "M2 config loads");
    plan_gemm_shape v[PLAN_CALIBRATE_SHAPES];
    int n = plan_calibrate_shapes(v, &c, 2, 128);
    TU_CHECK(n > 8, "%d shapes", n);
    // Each class: increasing by more than 5%, at most PLAN_GEMM_POINTS.
    for (int k = 0; k < PLAN_GEMM_CLASSES; k++) {
        double last = 0;
        int count = 0;
        for (int i = 0; i < n; i++) {
            if (plan_gemm_class_of(v[i].M, v[i].K, v[i].N) != (plan_gemm_class)k) continue;
            TU_CHECK(v[i].flops > last * 1.05, "class %d: %g after %g", k, v[i].flops, last);
            last = v[i].flops, count++;
        }
        TU_CHECK(count <= PLAN_GEMM_POINTS, "class %d: %d points", k, count);
    }
    // The model's shapes: experts at EP = 1 (32 rows) and 2 (64), qkv, the LM head.
    TU_CHECK(has(v, n, 32, 512, 1024), "M2's expert w_in at EP = 1 is timed");
    TU_CHECK(has(v, n, 64, 512, 1024), "M2's expert w_in at EP = 2 is timed");
    TU_CHECK(has(v, n, 256, 512, 1536), "M2's qkv is timed");
    TU_CHECK(has(v, n, 256, 512, 8192), "M2's LM head is timed");
    for (int i = 0; i < n; i++)
        if (v[i].M == 64 && v[i].K == 512 && v[i].N == 512 && !v[i].own)
            TU_CHECK(0, "the spread's (64, 512, 512) displaced a model shape of its size");
    // Without a model: the spread alone, still increasing.
    int m = plan_calibrate_shapes(v, NULL, 0, 0);
    TU_CHECK(m > 8 && m <= n + 8, "%d spread shapes", m);
    for (int i = 0; i < m; i++) TU_CHECK(!v[i].own, "no model, no own shape");
    return tu_finish("plan_calibrate_shapes");
}
