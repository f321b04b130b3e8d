// bagualu <verb> [flags]: the only place that turns errors into exit codes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "comm/dist.h"
#include "core/error.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} verb;

static const verb verbs[] = {
    {"train", cmd_train, "train a model on a token shard"},
    {"synth", cmd_synth, "write a synthetic token shard (copy or count task)"},
    {"info", cmd_info, "print a model config's parameter counts and FLOPs per token"},
    {"tokenizer", cmd_tokenizer, "train a BPE tokenizer, encode text to ids, decode ids to text"},
    {"prepare", cmd_prepare, "tokenize text files into train and val token shards"},
    {"export", cmd_export, "write a checkpoint as a Hugging Face model (Mixtral or GPT-2 layout)"},
    {"import", cmd_import, "read a Hugging Face model (Mixtral or GPT-2 layout) into a checkpoint"},
    {"inspect", cmd_inspect, "print a checkpoint's config, step, parameter counts and checksum status"},
    {"eval", cmd_eval, "print a checkpoint's loss and perplexity on a token shard"},
    {"report", cmd_report, "draw metrics logs as one self-contained HTML report (runs compared)"},
    {"generate", cmd_generate, "sample text from a checkpoint (KV cache; temperature, top-k, top-p)"},
    {"plan", cmd_plan, "predict a run's memory and step time on a cluster; search layouts; calibrate"},
    {"plan-probe", cmd_plan_probe, NULL},  // hidden: run by plan --calibrate under mpirun
};

// The library's fixed workspaces did not fit: one line, and the exit code 3 that
// every out-of-memory failure gets.
static void out_of_memory(size_t bytes) {
    fprintf(stderr, "bagualu: out of memory allocating %zu bytes\n", bytes);
    exit(3);
}

static void usage(FILE *f) {
    fprintf(f, "usage: bagualu <command> [flags]    (bagualu <command> --help for flags)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (verbs[i].summary) fprintf(f, "  %-10s %s\n", verbs[i].name, verbs[i].summary);
}

int main(int argc, char **argv) {
    bg_set_out_of_memory_handler(out_of_memory);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++) {
        if (strcmp(argv[1], verbs[i].name) == 0) {
            // Training (and the planner's link probe) may run under mpirun; the other verbs are single-process tools.
            int parallel = !strcmp(verbs[i].name, "train") || !strcmp(verbs[i].name, "plan-probe");
            if (parallel) dist_init(&argc, &argv);
            int rc = verbs[i].run(argc - 2, argv + 2);
            // The verb printed the error; running out of memory exits 3 whatever the verb.
            if (rc != 0 && bg_last_error_is_out_of_memory()) rc = 3;
            if (parallel) dist_finalize();
            return rc;
        }
    }
    fprintf(stderr, "bagualu: unknown command \"%s\" (bagualu --help lists the commands)\n", argv[1]);
    return 2;
}
