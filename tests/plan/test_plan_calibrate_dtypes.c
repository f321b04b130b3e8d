// The calibration's rates per dtype (plan_calibrate_compute, at a small budget): fp16
// always, and bf16 where this CPU's bf16 path holds its operands in floats, run the fp32
// GEMM and take fp32's curves and peak, bit for bit, instead of timing the same kernels
// again; bf16 on a path with bf16 operands gets curves of its own (timed: never the
// same doubles). fp16's attention rate is fp32's too.
#include "core/error.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "plan/calibrate.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *TINY =
    "{\"vocab_size\": 64, \"max_position_embeddings\": 64, \"hidden_size\": 64,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 256,"
    " \"norm\": \"layernorm\", \"hidden_act\": \"gelu\", \"position_embedding\": \"learned\","
    " \"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 128}";

static int same_rates(const plan_cluster *cl, plan_dtype a, plan_dtype b) {
    return !memcmp(cl->gemm[a], cl->gemm[b], sizeof cl->gemm[a]) && cl->peak[a] == cl->peak[b];
}

int main(void) {
    model_config c;
    TU_CHECK(model_config_parse(&c, TINY, "tiny") == BG_OK, "tiny config loads");
    plan_cluster cl;
    memset(&cl, 0, sizeof cl);
    // A rank on every core: no all-cores speedups to time (they are fp32's alone).
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    TU_CHECK(plan_calibrate_compute(&cl, &c, 2, 32, cores > 0 ? (int)cores : 1, 0.2) == BG_OK, "calibration runs");
    TU_CHECK(cl.peak[PLAN_FP32] > 0 && cl.gemm[PLAN_FP32][0].n > 0, "fp32 timed");
    TU_CHECK(same_rates(&cl, PLAN_FP16, PLAN_FP32), "fp16 takes fp32's curves and peak");
    TU_CHECK(cl.attention_rate[PLAN_FP16] == cl.attention_rate[PLAN_FP32], "fp16 takes fp32's attention rate");
    kernel_ctx *kc = kernel_ctx_create(BG_BF16);
    const int bf16_in_floats = kernel_ctx_operand_format(kc) != OPERAND_BF16;
    kernel_ctx_free(kc);
    TU_CHECK(same_rates(&cl, PLAN_BF16, PLAN_FP32) == bf16_in_floats,
             "bf16 %s fp32's curves (its operands %s)", bf16_in_floats ? "takes" : "does not take",
             bf16_in_floats ? "held in floats" : "in bf16");
    TU_CHECK(cl.attention_rate[PLAN_BF16] > 0, "bf16's attention timed");
    printf("this CPU: bf16 operands %s\n", bf16_in_floats ? "in floats (the fp32 path)" : "in bf16");
    return tu_finish("plan_calibrate_dtypes");
}
