// DeepSeek-MoE names and layer pattern (what and why: hf_deepseek.h).
#include "train/hf_deepseek.h"

#include "core/error.h"

#include <stdio.h>
#include <string.h>

int hf_deepseek_name(const char *bg, char *out, size_t n, int *part) {
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    int l, e, end = 0;
    char w = 0;
    *part = -1;
    if (sscanf(bg, "model.layers.%d.block_sparse_moe.gate.weight%n", &l, &end) == 1 && end &&
        !bg[end]) {
        snprintf(out, n, "model.layers.%d.mlp.gate.weight", l);
        return -1;
    }
    end = 0;
    if (sscanf(bg, "model.layers.%d.block_sparse_moe.experts.%d.w%c.weight%n", &l, &e, &w, &end) == 3 &&
        end && !bg[end] && w >= '1' && w <= '3') {
        snprintf(out, n, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, proj[w == '1' ? 0 : w == '3' ? 1 : 2]);
        return -1;
    }
    end = 0;
    if (sscanf(bg, "model.layers.%d.block_sparse_moe.shared_experts.%d.w%c.weight%n", &l, &e, &w, &end) == 3 &&
        end && !bg[end] && w >= '1' && w <= '3') {
        *part = w == '1' ? 0 : w == '3' ? 1 : 2;
        snprintf(out, n, "model.layers.%d.mlp.shared_experts.%s.weight", l, proj[*part]);
        return e;
    }
    snprintf(out, n, "%s", bg);
    return -1;
}

static int deepseek_moe(int l, int first_k_dense, int freq) {
    return l >= first_k_dense && l % freq == 0;
}

static int bagualu_moe(int l, int freq) { return (l + 1) % freq == 0; }

int hf_deepseek_pattern(const model_config *c, int *first_k_dense, int *freq) {
    const int L = c->num_hidden_layers;
    // Brute force over the few pairs: (0, 1) for all-MoE, else one MoE layer, f - 1.
    for (int m = 1; m <= L; m++)
        for (int k = 0; k < L; k++) {
            int same = 1;
            for (int l = 0; l < L && same; l++) same = deepseek_moe(l, k, m) == model_layer_is_moe(c, l);
            if (same) {
                *first_k_dense = k;
                *freq = m;
                return BG_OK;
            }
        }
    return bg_error("no Hugging Face layout for this config: DeepSeek-MoE's MoE layers (l >= "
                    "first_k_dense_replace, l %% moe_layer_freq == 0) cannot be those of bagualu's "
                    "moe_layer_freq %d of %d layers (it can: 1, or one MoE layer, 2f - 2 >= layers)",
                    c->moe_layer_freq, L);
}

int hf_deepseek_bagualu_freq(int L, int first_k_dense, int freq) {
    if (freq <= 0 || first_k_dense < 0 || first_k_dense >= L) return 0;
    for (int f = 1; f <= L; f++) {
        int same = 1;
        for (int l = 0; l < L && same; l++) same = deepseek_moe(l, first_k_dense, freq) == bagualu_moe(l, f);
        if (same) return f;
    }
    return 0;
}
