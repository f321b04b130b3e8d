#include "train/run_info.h"
#include "core/dtype.h"
#include "core/threads.h"
#include "comm/dist.h"
#include "model/model.h"
#include "model/params.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void run_info_cpu(run_cpu *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->model, sizeof c->model, "unknown");
    c->isa = "sse";
    c->flops_per_cycle = 8;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c->cores = n > 0 ? (int)n : 1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[4096];
    int have_model = 0, have_flags = 0;
    while ((!have_model || !have_flags) && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1 + (colon[1] == ' ');
        v[strcspn(v, "\n")] = '\0';
        if (!have_model && !strncmp(line, "model name", 10)) {
            snprintf(c->model, sizeof c->model, "%s", v);
            const char *at = strstr(v, "@ ");
            if (at) c->ghz = atof(at + 2);
            have_model = 1;
        } else if (!c->ghz && !strncmp(line, "cpu MHz", 7)) {
            c->ghz = atof(v) / 1000;
        } else if (!have_flags && !strncmp(line, "flags", 5)) {
            // Whole words only: "avx512f" must not match "avx512fp16" alone, and so on.
            char padded[4096 + 2];
            snprintf(padded, sizeof padded, " %s ", v);
            if (strstr(padded, " avx512f ")) c->isa = "avx512", c->flops_per_cycle = 64;
            else if (strstr(padded, " avx2 ") && strstr(padded, " fma ")) c->isa = "avx2", c->flops_per_cycle = 32;
            have_flags = 1;
        }
    }
    fclose(f);
}

static cJSON *layout_json(const trainer *tr) {
    const train_options *o = &tr->opt;
    cJSON *l = cJSON_CreateObject();
    cJSON_AddNumberToObject(l, "ranks", tr->world);
    if (tr->world > 1 && tr->has_layout) {
        cJSON_AddNumberToObject(l, "expert_parallel", tr->layout.ep);
        cJSON_AddNumberToObject(l, "experts_per_rank", tr->layout.experts_per_rank);
        cJSON_AddNumberToObject(l, "nodes", tr->layout.n_nodes);
        cJSON_AddStringToObject(l, "a2a", dist_a2a_name(tr->par.a2a_algo));
        cJSON_AddNumberToObject(l, "a2a_chunks", o->a2a_chunks);
    }
    cJSON_AddNumberToObject(l, "zero", tr->zero.on);
    cJSON_AddNumberToObject(l, "threads_per_rank", bg_threads_get());
    return l;
}

// A float option as the user wrote it (3e-4, not 0.000300000014...): its shortest
// decimal that reads back as the same float.
static double float_value(float x) {
    char buf[32];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return strtod(buf, NULL);
}

static cJSON *options_json(const trainer *tr) {
    const train_options *o = &tr->opt;
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "batch_size", o->batch_size);
    cJSON_AddNumberToObject(t, "seq_len", o->seq_len);
    cJSON_AddNumberToObject(t, "steps", (double)o->steps);
    cJSON_AddNumberToObject(t, "lr", float_value(o->lr));
    cJSON_AddNumberToObject(t, "min_lr", float_value(tr->min_lr));
    cJSON_AddNumberToObject(t, "warmup", (double)o->warmup);
    cJSON_AddNumberToObject(t, "weight_decay", float_value(o->weight_decay));
    cJSON_AddNumberToObject(t, "clip", float_value(o->clip));
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    cJSON_AddStringToObject(t, "seed", seed);
    cJSON_AddStringToObject(t, "dtype", bg_dtype_name(o->dtype));
    cJSON_AddStringToObject(t, "recompute", o->recompute == MODEL_RECOMPUTE_BLOCK ? "block" : "none");
    if (o->data_path) cJSON_AddStringToObject(t, "data", o->data_path);
    if (o->val_path) cJSON_AddStringToObject(t, "val", o->val_path);
    return t;
}

char *run_info_json(const trainer *tr, const char *command_line) {
    cJSON *root = cJSON_CreateObject(), *run = cJSON_AddObjectToObject(root, "run");
    cJSON_AddStringToObject(run, "command_line", command_line ? command_line : "");
    char *cfg_text = model_config_to_json(&tr->cfg);
    cJSON *cfg = cfg_text ? cJSON_Parse(cfg_text) : NULL;
    free(cfg_text);
    cJSON_AddItemToObject(run, "config", cfg ? cfg : cJSON_CreateNull());
    cJSON_AddNumberToObject(run, "params", (double)model_param_count(&tr->cfg));
    cJSON_AddNumberToObject(run, "flops_per_token", model_flops_per_token(&tr->cfg, tr->opt.seq_len));
    cJSON_AddItemToObject(run, "layout", layout_json(tr));
    cJSON_AddItemToObject(run, "training", options_json(tr));
    run_cpu c;
    run_info_cpu(&c);
    cJSON *cpu = cJSON_AddObjectToObject(run, "cpu");
    cJSON_AddStringToObject(cpu, "model", c.model);
    cJSON_AddNumberToObject(cpu, "ghz", c.ghz);
    cJSON_AddStringToObject(cpu, "isa", c.isa);
    cJSON_AddNumberToObject(cpu, "flops_per_cycle", c.flops_per_cycle);
    cJSON_AddNumberToObject(cpu, "cores", c.cores);
    // The run's peak: every thread of every rank at the tabled rate (fp32 FMAs; bf16's
    // dot-product instructions can beat it, so a bf16 run may read above 100%).
    double peak = c.ghz * c.flops_per_cycle * bg_threads_get() * tr->world;
    cJSON_AddNumberToObject(cpu, "peak_gflops", peak);
    cJSON_AddStringToObject(cpu, "peak_source", "table");
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}
