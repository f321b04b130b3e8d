// bagualu inspect DIR: what a checkpoint holds and whether it is intact.
#include "cli/commands.h"
#include "core/error.h"
#include "model/config.h"
#include "model/params.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_inspect.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char *status_word(ckpt_file_status s) {
    switch (s) {
    case CKPT_FILE_OK: return "OK";
    case CKPT_FILE_MISSING: return "MISSING";
    case CKPT_FILE_MISMATCH: return "MISMATCH";
    case CKPT_FILE_INVALID: return "INVALID";
    }
    return "?";
}

static void print_file(const char *name, const ckpt_file_report *f) {
    printf("%-22s %s", name, status_word(f->status));
    if (f->status == CKPT_FILE_OK)
        printf(" (xxh64 %016" PRIx64 ", %d tensors)\n", f->actual, f->tensors);
    else if (f->status == CKPT_FILE_MISMATCH)
        printf(" (file xxh64 %016" PRIx64 ", trainer.json records %016" PRIx64 ")\n", f->actual, f->recorded);
    else
        printf("\n");
}

// One JSON line, numbers with float precision (1e-05, not 9.99999974737875e-06).
static void print_config(const model_config *c) {
    char *text = model_config_to_json(c);
    cJSON *j = cJSON_Parse(text);
    printf("config:                {");
    for (const cJSON *k = j ? j->child : NULL; k; k = k->next) {
        printf("%s\"%s\": ", k == j->child ? "" : ", ", k->string);
        if (cJSON_IsNumber(k)) printf("%.7g", k->valuedouble);
        else if (cJSON_IsString(k)) printf("\"%s\"", k->valuestring);
        else printf("%s", cJSON_IsTrue(k) ? "true" : "false");
    }
    printf("}\n");
    cJSON_Delete(j);
    free(text);
}

static void usage(FILE *f) {
    fprintf(f, "usage: bagualu inspect DIR\n\n"
               "Print a checkpoint's config, step, tensor and parameter counts, and verify every\n"
               "safetensors file against the checksums in trainer.json, the indexes and the\n"
               "config's tensor table. DIR is a step directory, or a save directory (its `latest` is used).\n"
               "Exit code 0 if the checkpoint is intact, 2 if it is unreadable or corrupt.\n");
}

int cmd_inspect(int argc, char **argv) {
    const char *dir = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-' || dir) {
            fprintf(stderr, "bagualu: inspect: unexpected argument \"%s\" (usage: bagualu inspect DIR)\n",
                    argv[i]);
            return 2;
        }
        dir = argv[i];
    }
    if (!dir) {
        fprintf(stderr, "bagualu: inspect: missing the checkpoint directory (usage: bagualu inspect DIR)\n");
        return 2;
    }
    // A save directory stands for the checkpoint its `latest` names.
    char resolved[4096], probe[4096];
    struct stat st;
    snprintf(probe, sizeof probe, "%s/trainer.json", dir);
    if (stat(probe, &st) != 0) {
        snprintf(probe, sizeof probe, "%s/latest", dir);
        int found = 0;
        if (stat(probe, &st) == 0) {
            if (ckpt_latest(dir, resolved, sizeof resolved, &found) != BG_OK) {
                fprintf(stderr, "bagualu: %s\n", bg_last_error());
                return 2;
            }
            dir = resolved;
        }
    }
    ckpt_report r;
    if (ckpt_inspect(dir, &r) != BG_OK) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        return 2;
    }
    const model_config *c = &r.cfg;
    printf("checkpoint:            %s\n", dir);
    printf("step:                  %ld of %ld (%" PRIu64 " samples consumed)\n", r.step, r.total_steps,
           r.samples);
    print_config(c);

    param_table t;
    param_table_build(&t, c);
    size_t embed = 0, tok = 0, pos = 0;
    for (int i = 0; i < t.count; i++) {
        if (!strcmp(t.tensors[i].name, "model.embed_tokens.weight")) tok = t.tensors[i].numel;
        if (!strcmp(t.tensors[i].name, "model.embed_positions.weight")) pos = t.tensors[i].numel;
    }
    embed = tok + pos;
    int n_model = 0;
    for (int i = 0; i < r.n_files; i++) n_model += !r.files[i].optimizer;
    printf("format:                %d (%d model file%s, %d optimizer file%s)\n", r.version, n_model,
           n_model == 1 ? "" : "s", r.n_files - n_model, r.n_files - n_model == 1 ? "" : "s");
    printf("tensors:               %d (model files; the optimizer holds m and v of each in %d piece%s)\n",
           t.count, r.optimizer_pieces, r.optimizer_pieces == 1 ? "" : "s");
    printf("parameters:            %zu total (%.2fM): embeddings %zu (token %zu, position %zu), "
           "other %zu\n",
           t.numel, t.numel / 1e6, embed, tok, pos, t.numel - embed);
    double active = model_active_matmul_params(c);
    if (c->num_local_experts > 0)
        printf("active per token:      %.0f matmul parameters (%.2fM; attention, router, top-%d of %d "
               "experts + %d shared, LM head; embeddings not counted)\n",
               active, active / 1e6, c->num_experts_per_tok, c->num_local_experts, c->num_shared_experts);
    else
        printf("active per token:      %.0f matmul parameters (%.2fM; dense; embeddings not counted)\n",
               active, active / 1e6);
    param_table_free(&t);
    int bad = 0;
    char label[80];
    for (int i = 0; i < r.n_files; i++) {
        snprintf(label, sizeof label, "%s:", r.files[i].name);
        print_file(label, &r.files[i]);
    }
    for (int i = 0; i < r.n_files; i++)
        if (r.files[i].status != CKPT_FILE_OK) fprintf(stderr, "bagualu: %s\n", r.files[i].message), bad = 1;
    ckpt_report_free(&r);
    return bad ? 2 : 0;
}
