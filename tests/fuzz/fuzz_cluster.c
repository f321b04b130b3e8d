// libFuzzer target: the cluster file parser of `bagualu plan` (plan/cluster.c).
// Invariants on files the parser accepts: the machine is whole (positive counts and
// rates), writing it out and parsing that gives the same cluster
// (plan_cluster_to_json's promise), and the GEMM rate of any shape is finite and > 0.
#include "fuzz_util.h"
#include "plan/cluster.h"

#include <math.h>

// Field by field: -0.0 latencies print as 0, so the bytes may differ.
static int same(const plan_cluster *a, const plan_cluster *b) {
    int eq = !strcmp(a->name, b->name) && a->nodes == b->nodes && a->ranks_per_node == b->ranks_per_node &&
             a->cores_per_rank == b->cores_per_rank && a->gemm_efficiency == b->gemm_efficiency &&
             a->attention_efficiency == b->attention_efficiency && a->mem_per_node == b->mem_per_node &&
             a->mem_bw == b->mem_bw && a->intra_bw == b->intra_bw && a->intra_lat == b->intra_lat &&
             a->inter_bw == b->inter_bw && a->inter_lat == b->inter_lat &&
             a->supernode_nodes == b->supernode_nodes && a->oversubscription == b->oversubscription;
    for (int d = 0; eq && d < PLAN_NDTYPES; d++) {
        eq = a->peak[d] == b->peak[d] && a->attention_rate[d] == b->attention_rate[d];
        for (int k = 0; eq && k < PLAN_GEMM_CLASSES; k++) {
            const plan_gemm_curve *x = &a->gemm[d][k], *y = &b->gemm[d][k];
            eq = x->n == y->n;
            for (int i = 0; eq && i < x->n; i++) eq = x->flops[i] == y->flops[i] && x->rate[i] == y->rate[i];
        }
    }
    return eq;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1 << 20)) return 0;  // plan_cluster_load's bound
    char *text = malloc(size + 1);
    if (size) memcpy(text, data, size);
    text[size] = '\0';
    plan_cluster c, back;
    bg_clear_error();
    if (plan_cluster_parse(&c, text, "fuzz") != BG_OK) {
        fuzz_check_error("fuzz: ");
    } else {
        FUZZ_CHECK(c.nodes >= 1 && c.ranks_per_node >= 1 && c.cores_per_rank >= 1);
        FUZZ_CHECK(c.mem_per_node > 0 && c.mem_bw > 0 && c.intra_bw > 0 && c.inter_bw > 0);
        FUZZ_CHECK(c.supernode_nodes >= 0 && c.oversubscription >= 1);
        char *json = plan_cluster_to_json(&c, "written back");
        FUZZ_CHECK(json);
        FUZZ_CHECK(plan_cluster_parse(&back, json, "written-back") == BG_OK);
        FUZZ_CHECK(same(&c, &back));
        free(json);
        static const double shapes[][3] = {{1, 1, 1}, {4, 4096, 4096}, {512, 512, 512}, {8192, 8192, 8192},
                                           {1e6, 1e6, 1e6}};
        for (int d = 0; d < PLAN_NDTYPES; d++) {
            if (!(c.peak[d] > 0)) continue;
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                double r = plan_gemm_rate(&c, (plan_dtype)d, shapes[s][0], shapes[s][1], shapes[s][2]);
                FUZZ_CHECK(isfinite(r) && r > 0);
            }
        }
    }
    free(text);
    return 0;
}
