#include "core/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "data/shard.h"
#include "data/synthetic.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int cmd_synth(int argc, char **argv) {
    const char *task_name = "copy", *out = NULL;
    int vocab = 64, span = 8;
    long tokens = 100000;
    uint64_t seed = 1;
    const arg_spec specs[] = {
        {"task", ARG_STR, &task_name, 0, "copy or count (default copy)"},
        {"vocab", ARG_INT, &vocab, 0, "vocabulary size (default 64)"},
        {"span", ARG_INT, &span, 0, "copy segment / mean run length (default 8)"},
        {"tokens", ARG_LONG, &tokens, 0, "tokens to write (default 100000)"},
        {"seed", ARG_U64, &seed, 0, "seed (default 1)"},
        {"out", ARG_STR, &out, 1, "output token shard"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "synth",
                  "Write a learnable synthetic token shard."))
        return 0;
    synth_task task;
    if (args_parse(specs, n, argc, argv, "synth") != BG_OK || synth_task_parse(&task, task_name) != BG_OK) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        return 2;
    }
    if (vocab < 2 || vocab > 65536 || span < 1 || tokens < 1 || tokens > INT32_MAX) {
        fprintf(stderr, "bagualu: synth: need 2 <= --vocab <= 65536, --span >= 1, 1 <= --tokens < 2^31\n");
        return 2;
    }
    uint32_t *buf = bg_malloc(sizeof(uint32_t) * (size_t)tokens);
    synth_generate(buf, (size_t)tokens, task, vocab, span, seed);
    int rc = shard_write(out, buf, (size_t)tokens, SHARD_VERSION_U16);
    free(buf);
    if (rc != BG_OK) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        return 1;
    }
    printf("wrote %ld tokens of the %s task (vocab %d) to %s\n", tokens, task_name, vocab, out);
    return 0;
}
