// bagualu export: a checkpoint as a Hugging Face model directory (train/export_hf.h).
#include "core/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "train/export_hf.h"

#include <stdio.h>
#include <string.h>

int cmd_export(int argc, char **argv) {
    const char *checkpoint = NULL, *format = "hf", *out = NULL, *dtype_name = "f32";
    const arg_spec specs[] = {
        {"checkpoint", ARG_STR, &checkpoint, 1, "checkpoint step directory, or a save directory (its latest)"},
        {"format", ARG_STR, &format, 0, "output format: hf (Mixtral for MoE, GPT-2 for dense; default hf)"},
        {"out", ARG_STR, &out, 1, "output directory (config.json, model.safetensors)"},
        {"dtype", ARG_STR, &dtype_name, 0, "stored dtype: f32 (fp32), bf16 or f16 (fp16); default f32"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "export",
                  "Write a checkpoint as a Hugging Face model directory (MixtralForCausalLM or GPT2LMHeadModel)."))
        return 0;
    if (args_parse(specs, n, argc, argv, "export") != BG_OK) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        return 2;
    }
    if (strcmp(format, "hf") != 0) {
        fprintf(stderr, "bagualu: export: unknown --format \"%s\" (supported: hf)\n", format);
        return 2;
    }
    bg_dtype dtype;
    if (bg_dtype_parse(dtype_name, &dtype) != 0) {
        fprintf(stderr, "bagualu: export: unknown --dtype \"%s\" (f32, bf16 or f16)\n", dtype_name);
        return 2;
    }
    export_hf_summary s;
    int rc = export_hf(checkpoint, out, dtype, &s);
    if (rc != 0) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        return rc;
    }
    const char *arch = s.layout == HF_MIXTRAL   ? "MixtralForCausalLM"
                       : s.layout == HF_DEEPSEEK ? "DeepseekForCausalLM"
                                                 : "GPT2LMHeadModel";
    printf("exported %s as %s: %d tensors, %zu parameters, %s, in %s\n", s.checkpoint, arch, s.tensors, s.params,
           st_dtype_name(st_dtype_from_bg(dtype)), out);
    return 0;
}
