// Checkpoints of format 2 across layouts, element by element: `--phase save` fills a
// tiny MoE model's parameters and its AdamW m, v (only the elements this rank owns:
// ZeRO on shards them through model/zero_shard.h) with values keyed by (tensor name,
// element) and saves; `--phase load`, in another mpirun at another P, EP or ZeRO
// setting, loads and checks every parameter and every owned m, v element bitwise, the
// AdamW step and the data position. test_ckpt_reshard.sh runs the pairs. Without
// --phase (a plain CTest run) it saves and loads on one process, ZeRO on and off.
// Why it can fail: a piece cut or placed at the wrong offset, a tensor written twice or
// by no rank, m and v swapped, a replica's copy confused with another expert's.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/dist.h"
#include "core/error.h"
#include "model_layout_fixture.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

// A value no two (name, element, kind) share by accident, exact in fp32.
static float value(const char *name, size_t i, int kind) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h ^= (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)kind * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (float)(h >> 40) / 16777216.0f - 0.5f;
}

static void make_trainer(trainer *tr, int E, int ep, int zero) {
    memset(tr, 0, sizeof *tr);
    train_options_defaults(&tr->opt);
    tr->opt.steps = 10;
    layout_fixture_config(&tr->cfg, 8, E, 2);
    layout_fixture_init(&tr->layout, E, ep, 0);
    tr->has_layout = 1;
    tr->rank = tr->layout.world_rank;
    tr->world = tr->layout.world_size;
    tr->par = (model_parallel){.layout = &tr->layout, .a2a_chunks = 1};
    model_init_parallel(&tr->m, &tr->cfg, tr->opt.seed, tr->world > 1 ? &tr->par : NULL);
    const param_table *t = &tr->m.table;
    tr->zero = zero_shard_make(zero, t->dense_numel, t->numel, tr->rank, tr->world, tr->layout.edp_rank,
                               tr->layout.edp_size);
    adamw_init(&tr->adam, zero_shard_numel(&tr->zero));
    tr->loss_scale = 1.0f;
    tr->min_lr = 3e-5f;
}

static void free_trainer(trainer *tr) {
    adamw_free(&tr->adam);
    model_free(&tr->m);
    dist_layout_free(&tr->layout);
}

// Each owned element's index into m/v, or -1 (not owned).
static long owned(const zero_shard *z, size_t i) {
    int in = (i >= z->dense_lo && i < z->dense_hi) || (i >= z->expert_lo && i < z->expert_hi);
    return in ? (long)zero_shard_index(z, i) : -1;
}

static void fill(trainer *tr) {
    const param_table *t = &tr->m.table;
    for (int k = 0; k < t->count; k++) {
        const param_tensor *p = &t->tensors[k];
        for (size_t i = 0; i < p->numel; i++) {
            tr->m.params[p->offset + i] = value(p->name, i, 0);
            long j = owned(&tr->zero, p->offset + i);
            if (j >= 0) tr->adam.m[j] = value(p->name, i, 1), tr->adam.v[j] = value(p->name, i, 2);
        }
    }
    tr->adam.step = 7;
    tr->step = 7;
    tr->samples = 56;
}

// Mismatched elements of this rank (0: all bitwise equal).
static long check(const trainer *tr) {
    const param_table *t = &tr->m.table;
    long bad = 0;
    for (int k = 0; k < t->count; k++) {
        const param_tensor *p = &t->tensors[k];
        for (size_t i = 0; i < p->numel; i++) {
            float want[3] = {value(p->name, i, 0), value(p->name, i, 1), value(p->name, i, 2)};
            long j = owned(&tr->zero, p->offset + i);
            float got[3] = {tr->m.params[p->offset + i], j >= 0 ? tr->adam.m[j] : want[1],
                            j >= 0 ? tr->adam.v[j] : want[2]};
            for (int c = 0; c < 3; c++)
                if (memcmp(&want[c], &got[c], sizeof(float)) != 0) {
                    if (bad < 3)
                        fprintf(stderr, "rank %d: %s[%zu] %s: %.9g, want %.9g\n", tr->rank, p->name, i,
                                c == 0 ? "param" : c == 1 ? "m" : "v", got[c], want[c]);
                    bad++;
                }
        }
    }
    if (tr->adam.step != 7 || tr->step != 7 || tr->samples != 56) {
        fprintf(stderr, "rank %d: step %ld, adam step %ld, samples %llu\n", tr->rank, tr->step, tr->adam.step,
                (unsigned long long)tr->samples);
        bad++;
    }
    return bad;
}

static int run(const char *phase, const char *dir, int E, int ep, int zero) {
    trainer tr;
    make_trainer(&tr, E, ep, zero);
    int rc = 0;
    if (!strcmp(phase, "save")) {
        fill(&tr);
        if (ckpt_save(&tr, dir) != BG_OK) {
            fprintf(stderr, "save: %s\n", bg_last_error());
            rc = 1;
        }
    } else {
        char path[4096];
        snprintf(path, sizeof path, "%s/step_00000007", dir);
        if (ckpt_load(&tr, path) != BG_OK) {
            fprintf(stderr, "load: %s\n", bg_last_error());
            rc = 1;
        } else {
            double bad = (double)check(&tr);
            if (tr.world > 1) dist_allreduce_sum_f64(tr.layout.world, &bad, 1);
            if (bad > 0) {
                if (tr.rank == 0) fprintf(stderr, "%.0f elements differ\n", bad);
                rc = 1;
            }
        }
    }
    free_trainer(&tr);
    return rc;
}

int main(int argc, char **argv) {
    dist_init(&argc, &argv);
    const char *phase = NULL, *dir = NULL;
    int ep = 0, zero = 0, E = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--phase")) phase = argv[i + 1];
        else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--ep")) ep = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--zero")) zero = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--experts")) E = atoi(argv[i + 1]);
    }
    int rc = 0;
    if (phase && dir) {
        rc = run(phase, dir, E, ep, zero);
    } else {
        // One process: ZeRO on and off saved and loaded both ways.
        char tmpl[] = "/tmp/bagualu_ckpt_zero_XXXXXX";
        char *d = mkdtemp(tmpl);
        BG_ASSERT(d);
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/a", d);
        snprintf(b, sizeof b, "%s/b", d);
        TU_CHECK(run("save", a, E, 1, 1) == 0, "save with ZeRO on");
        TU_CHECK(run("load", a, E, 1, 0) == 0, "ZeRO on -> off");
        TU_CHECK(run("save", b, E, 1, 0) == 0, "save with ZeRO off");
        TU_CHECK(run("load", b, E, 1, 1) == 0, "ZeRO off -> on");
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", d);
        rc = tu_failures ? 1 : 0;
    }
    dist_finalize();
    return rc;
}
