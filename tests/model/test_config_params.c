// Config parsing and the parameter table: names, shapes, offsets, counts.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/config.h"
#include "model/params.h"
#include "test_util.h"

int main(void) {
    const char *json =
        "{\"vocab_size\": 100, \"max_position_embeddings\": 32, \"hidden_size\": 16,"
        " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"intermediate_size\": 24,"
        " \"norm\": \"rmsnorm\", \"hidden_act\": \"swiglu\", \"position_embedding\": \"rope\","
        " \"tie_word_embeddings\": false, \"num_local_experts\": 6, \"num_experts_per_tok\": 2,"
        " \"moe_intermediate_size\": 8, \"moe_layer_freq\": 2, \"num_shared_experts\": 1,"
        " \"model_type\": \"mixtral\"}";
    model_config c;
    TU_CHECK(model_config_parse(&c, json, "test") == BG_OK, "parse: %s", bg_last_error());
    TU_CHECK(c.norm == NORM_RMSNORM && c.hidden_act == FFN_SWIGLU && c.position_embedding == POS_ROPE,
             "enums");
    TU_CHECK(!model_layer_is_moe(&c, 0) && model_layer_is_moe(&c, 1) && !model_layer_is_moe(&c, 2) &&
                 model_layer_is_moe(&c, 3), "moe_layer_freq 2 makes layers 1 and 3 MoE");
    // to_json and back gives the same config
    char *text = model_config_to_json(&c);
    model_config c2;
    TU_CHECK(model_config_parse(&c2, text, "roundtrip") == BG_OK, "reparse: %s", bg_last_error());
    TU_CHECK(memcmp(&c, &c2, sizeof c) == 0, "config round trip differs");
    free(text);

    param_table t;
    param_table_build(&t, &c);
    const param_tensor *p = param_table_find(&t, "model.layers.3.block_sparse_moe.experts.5.w1.weight");
    TU_CHECK(p && p->shape[0] == 8 && p->shape[1] == 16 && p->expert == 5 && p->layer == 3, "expert w1");
    TU_CHECK(param_table_find(&t, "model.layers.3.block_sparse_moe.experts.5.w3.weight"), "expert w3");
    TU_CHECK(param_table_find(&t, "model.layers.1.block_sparse_moe.shared_experts.0.w2.weight"), "shared w2");
    TU_CHECK(param_table_find(&t, "model.layers.0.mlp.gate_proj.weight"), "dense gate_proj");
    TU_CHECK(param_table_find(&t, "lm_head.weight"), "untied lm_head");
    TU_CHECK(!param_table_find(&t, "model.embed_positions.weight"), "rope has no learned positions");
    TU_CHECK(!param_table_find(&t, "model.norm.bias"), "rmsnorm has no bias");
    // offsets tile the block exactly, in order
    size_t off = 0;
    for (int i = 0; i < t.count; i++) {
        TU_CHECK(t.tensors[i].offset == off, "%s offset", t.tensors[i].name);
        off += t.tensors[i].numel;
    }
    TU_CHECK(off == t.numel && t.numel == model_param_count(&c), "total");
    // views: w1 and w3 of expert e stack into w_in + e*2F*C
    float *block = calloc(t.numel, sizeof(float));
    model_params v;
    model_params_bind(&v, &c, block);
    const param_tensor *w3 = param_table_find(&t, "model.layers.1.block_sparse_moe.experts.2.w3.weight");
    TU_CHECK(v.layers[1].moe.w_in + 2 * 16 * 16 + 8 * 16 == block + w3->offset, "w_in view layout");
    const param_tensor *w2 = param_table_find(&t, "model.layers.1.block_sparse_moe.experts.4.w2.weight");
    TU_CHECK(v.layers[1].moe.w_out + 4 * 16 * 8 == block + w2->offset, "w_out view layout");
    const param_tensor *kp = param_table_find(&t, "model.layers.2.self_attn.k_proj.weight");
    TU_CHECK(v.layers[2].qkv_w + 16 * 16 == block + kp->offset, "qkv view layout");
    TU_CHECK(!param_table_find(&t, "model.layers.0.input_layernorm.weight")->decay, "norms do not decay");
    TU_CHECK(!param_table_find(&t, "model.embed_tokens.weight")->decay, "embeddings do not decay");
    TU_CHECK(kp->decay, "matrices decay");
    model_params_free(&v);
    free(block);
    param_table_free(&t);

    // invalid configs
    model_config bad;
    TU_CHECK(model_config_parse(&bad, "{\"vocab_size\": 10}", "x") == BG_ERR &&
                 strstr(bg_last_error(), "missing required key"), "missing key");
    TU_CHECK(model_config_parse(&bad, "[1,2]", "x") == BG_ERR, "not an object");

    // num_key_value_heads: absent = heads; a divisor of heads gives k and v that many
    // heads (and the decode/param counts follow); 0 or a non-divisor is refused.
#define GQA_BASE "{\"vocab_size\": 10, \"max_position_embeddings\": 8, \"hidden_size\": 16, " \
                 "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"intermediate_size\": 8"
    model_config g;
    TU_CHECK(model_config_parse(&g, GQA_BASE "}", "x") == BG_OK && g.num_key_value_heads == 4,
             "num_key_value_heads defaults to the heads");
    TU_CHECK(model_config_parse(&g, GQA_BASE ", \"num_key_value_heads\": 2}", "x") == BG_OK &&
                 model_kv_heads(&g) == 2 && model_qkv_width(&g) == 16 + 2 * 8, "GQA config");
    param_table gt;
    param_table_build(&gt, &g);
    const param_tensor *gk = param_table_find(&gt, "model.layers.0.self_attn.k_proj.weight");
    TU_CHECK(gk && gk->shape[0] == 8 && gk->shape[1] == 16, "GQA k_proj is (kv heads * head size, C)");
    TU_CHECK(model_active_matmul_params(&g) == 2 * 16 * 16 + 2 * 16 * 8 + 2 * 16 * 8 + 10 * 16,
             "GQA active matmul parameters");
    param_table_free(&gt);
    char *gtext = model_config_to_json(&g);
    model_config g2;
    TU_CHECK(model_config_parse(&g2, gtext, "rt") == BG_OK && !memcmp(&g, &g2, sizeof g), "GQA round trip");
    free(gtext);
    TU_CHECK(model_config_parse(&bad, GQA_BASE ", \"num_key_value_heads\": 3}", "x") == BG_ERR &&
                 strstr(bg_last_error(), "num_key_value_heads (3) must be positive and divide num_attention_heads (4)"),
             "kv heads not dividing heads: %s", bg_last_error());
    TU_CHECK(model_config_parse(&bad, GQA_BASE ", \"num_key_value_heads\": 0}", "x") == BG_ERR &&
                 strstr(bg_last_error(), "num_key_value_heads must be positive"), "kv heads 0");
    // Sizes are bounded before the per-layer checks (fuzz finding: 7e8 layers spun there):
    // a config past the bound and also wrong per layer names the bound.
    TU_CHECK(model_config_parse(&bad, "{\"vocab_size\": 64, \"max_position_embeddings\": 8, "
             "\"hidden_size\": 8, \"num_hidden_layers\": 700000000, \"num_attention_heads\": 2, "
             "\"intermediate_size\": 8, \"num_local_experts\": 2, \"num_experts_per_tok\": 1, "
             "\"moe_intermediate_size\": 8, \"mlp_bias\": true}", "x") == BG_ERR &&
                 strstr(bg_last_error(), "beyond what bagualu supports"),
             "sizes bounded first: %s", bg_last_error());
    return tu_finish("config_params");
}
