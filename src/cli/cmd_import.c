// bagualu import: a Hugging Face model directory as a checkpoint (train/import_hf.h).
#include "core/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "train/import_hf.h"

#include <stdint.h>
#include <stdio.h>

int cmd_import(int argc, char **argv) {
    const char *from = NULL, *out = NULL;
    long step = 0;
    uint64_t seed = 1337;
    const arg_spec specs[] = {
        {"from", ARG_STR, &from, 1, "Hugging Face model directory (config.json, model.safetensors or its index)"},
        {"out", ARG_STR, &out, 1, "save directory: the checkpoint goes to OUT/step_N, OUT/latest names it"},
        {"step", ARG_LONG, &step, 0, "the step recorded in the checkpoint (default 0)"},
        {"seed", ARG_U64, &seed, 0, "seed recorded for the data order of a resumed run (default 1337)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "import",
                  "Read a Hugging Face Mixtral or GPT-2 model into a bagualu checkpoint (fresh optimizer)."))
        return 0;
    if (args_parse(specs, n, argc, argv, "import") != BG_OK) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        return 2;
    }
    import_hf_summary s;
    int rc = import_hf(from, out, step, seed, &s);
    if (rc != 0) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        return rc;
    }
    printf("imported %s (%s): %d tensors, %zu parameters, into %s\n", from, s.layout, s.tensors,
           s.params, s.checkpoint);
    return 0;
}
