#include "core/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/config.h"
#include "model/model.h"
#include "model/params.h"

#include <stdio.h>
#include <string.h>

int cmd_info(int argc, char **argv) {
    const char *config = NULL;
    int seq_len = 0;
    const arg_spec specs[] = {
        {"config", ARG_STR, &config, 1, "model config (JSON)"},
        {"seq-len", ARG_INT, &seq_len, 0, "context for the attention FLOPs (default: the model's)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "info",
                  "Print parameter counts and FLOPs per token of a config."))
        return 0;
    model_config cfg;
    if (args_parse(specs, n, argc, argv, "info") != BG_OK || model_config_load_plan(&cfg, config) != BG_OK) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        return 2;
    }
    if (seq_len <= 0) seq_len = cfg.max_position_embeddings;
    param_table t;
    param_table_build(&t, &cfg);
    printf("tensors:                 %d\n", t.count);
    printf("parameters:              %zu (%.2fM)\n", t.numel, t.numel / 1e6);
    printf("active matmul params:    %.0f (%.2fM)\n", model_active_matmul_params(&cfg),
           model_active_matmul_params(&cfg) / 1e6);
    printf("train FLOPs per token:   %.4g (context %d)\n", model_flops_per_token(&cfg, seq_len), seq_len);
    if (model_config_mla(&cfg))
        printf("attention:               multi-head latent (plan only): the FLOPs count it, the "
               "parameters count bagualu's standard attention\n");
    param_table_free(&t);
    return 0;
}
