// bagualu plan: predicted memory and step time of a run (src/plan/), the search over
// layouts, and --calibrate, which writes this machine's cluster file.
#include "core/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/config.h"
#include "plan/calibrate.h"
#include "plan/plan.h"
#include "train/optimizer_rate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

static void print_json(FILE *f, const plan_layout *l, const plan_result *r) {
    const memory_report *m = &r->mem;
    fprintf(f, "{\"layout\": {\"ranks\": %d, \"expert_parallel\": %d, \"ranks_per_node\": %d, "
               "\"batch_size\": %d, \"seq_len\": %d, \"dtype\": \"%s\", \"zero\": %d, \"recompute\": \"%s\", "
               "\"a2a\": \"%s\", \"a2a_chunks\": %d, \"capacity\": %g, \"tensor_parallel\": %d, "
               "\"pipeline_parallel\": %d, \"micro_batches\": %d}, ",
            l->P, r->ep, r->ranks_per_node, l->B, l->T, plan_dtype_name(l->dtype), r->zero,
            l->recompute ? "block" : "none", plan_a2a_name(l->a2a), l->a2a_chunks, l->capacity,
            l->tp, l->pp, l->micro);
    fprintf(f, "\"memory\": {\"params\": %zu, \"grads\": %zu, \"optimizer\": %zu, \"activations\": %zu, "
               "\"moe_exchange\": %zu, \"moe_exchange_heap_bound\": %zu, \"workspaces\": %zu, "
               "\"snapshot\": %zu, \"comm_scratch\": %zu, \"total\": %zu, \"expected_total\": %zu, "
               "\"expected_imbalance\": %.4g}, "
               "\"memory_per_node\": %.0f, \"fits\": %s, \"cache_resident\": %s, ",
            m->params, m->grads, m->optimizer, m->activations, m->moe_exchange, m->moe_exchange_heap,
            m->workspaces, m->snapshot, m->comm_scratch, m->total, r->mem_expected, r->mem_imbalance, r->mem_node,
            r->fits ? "true" : "false", r->cache_resident ? "true" : "false");
    fprintf(f, "\"flops_model\": %.6g, \"flops_executed\": %.6g, \"imbalance\": %.4g, \"time\": {"
               "\"gemm_dense_s\": %.6g, \"gemm_expert_s\": %.6g, \"gemm_head_s\": %.6g, \"attention_s\": %.6g, "
               "\"memory_bound_s\": %.6g, \"compute_s\": %.6g, \"a2a_s\": %.6g, \"a2a_hidden_s\": %.6g, "
               "\"tp_s\": %.6g, \"bubble_s\": %.6g, \"grad_s\": %.6g, \"grad_sum_s\": %.6g, \"grad_hidden_s\": %.6g, "
               "\"collectives_s\": %.6g, \"optimizer_s\": %.6g}, \"a2a_bytes_inter\": %.6g, \"a2a_bytes_intra\": %.6g, "
               "\"grad_bytes\": %.6g, \"step_s\": %.6g, \"tokens_per_s\": %.6g, \"mfu\": %.4g}",
            r->flops_model, r->flops_executed, r->imbalance, r->gemm_dense_s, r->gemm_expert_s,
            r->gemm_head_s, r->attention_s, r->memory_bound_s, r->compute_s, r->a2a_s, r->a2a_hidden_s,
            r->tp_s, r->bubble_s, r->grad_s, r->grad_sum_s, r->grad_hidden_s, r->collectives_s, r->optimizer_s,
            r->a2a_bytes_inter, r->a2a_bytes_intra, r->grad_bytes, r->step_s, r->tokens_per_s, r->mfu);
}

static void print_text(const plan_cluster *cl, const plan_layout *l, const plan_result *r) {
    const memory_report *m = &r->mem;
    printf("layout: P=%d EP=%d ranks/node=%d batch=%dx%d per rank, %s, ZeRO-1 %s, recompute %s, "
           "a2a %s, capacity %g%s\n",
           l->P, r->ep, r->ranks_per_node, l->B, l->T, plan_dtype_name(l->dtype), r->zero ? "on" : "off",
           l->recompute ? "block" : "none", plan_a2a_name(l->a2a), l->capacity,
           l->tp > 1 || l->pp > 1 ? " (TP/PP: analytic only)" : "");
    if (l->tp > 1 || l->pp > 1) printf("        TP=%d PP=%d micro-batches=%d\n", l->tp, l->pp, l->micro);
    printf("memory per rank (MiB): parameters %.1f, gradients %.1f, optimizer %.1f, activations %.1f, "
           "MoE exchange %.1f", m->params / MIB, m->grads / MIB, m->optimizer / MIB, m->activations / MIB,
           m->moe_exchange / MIB);
    if (m->moe_exchange_heap) printf(" (+ up to %.1f grown)", m->moe_exchange_heap / MIB);
    printf(", workspaces %.1f, snapshot %.1f, communicators' scratch %.1f, total %.1f", m->workspaces / MIB,
           m->snapshot / MIB, m->comm_scratch / MIB, m->total / MIB);
    if (r->mem_expected != m->total)
        printf(" (expected peak %.1f: the grown heap at expert rows max/mean %.3f and the pages a run makes resident)",
               r->mem_expected / MIB, r->mem_imbalance);
    printf("\n");
    printf("memory per node: %.2f GiB of %.2f GiB: %s%s\n", r->mem_node / (MIB * 1024),
           cl->mem_per_node / (MIB * 1024), r->fits ? "fits" : "DOES NOT FIT",
           r->cache_resident ? "; in the cache, priced at its rates" : "");
    printf("FLOPs per rank per step: %.4g (model), %.4g (executed); expert rows max/mean %.3f\n",
           r->flops_model, r->flops_executed, r->imbalance);
    printf("time per step (s): GEMM dense %.4g, experts %.4g, LM head %.4g, attention %.4g, "
           "memory-bound %.4g | all-to-all %.4g (hidden %.4g) | TP %.4g | bubble %.4g | "
           "gradients %.4g (hidden %.4g) | small all-reduces %.4g | optimizer %.4g\n",
           r->gemm_dense_s, r->gemm_expert_s, r->gemm_head_s, r->attention_s, r->memory_bound_s,
           r->a2a_s, r->a2a_hidden_s, r->tp_s, r->bubble_s, r->grad_s, r->grad_hidden_s, r->collectives_s,
           r->optimizer_s);
    printf("step %.4g s, %.4g tokens/s, MFU %.1f%% (of %s peak)\n", r->step_s, r->tokens_per_s,
           100 * r->mfu, plan_dtype_name(l->dtype));
}

// The links: `plan-probe` at 2 ranks, under mpirun on this machine, or under `launcher`
// (a command prefix that starts one rank on each of two nodes, e.g. the emulated
// cluster's `scripts/cluster.sh run 1 --`) for the inter-node link.
// bulk, reduce: the gradient reduction's transfer and sum rates (plan/probe.c), timed on
// this machine only (the file keeps the local ones): across the emulated nodes' links
// its 128 MiB moves took tens of seconds, and at 4 nodes of 2 ranks the probe failed.
// Locally at np ranks (the node's, so that the reduction runs as crowded as training's).
// The seven numbers plan-probe prints, in its order.
typedef struct {
    double bw, lat, gap, sync, bulk, reduce, xbw;
} probe_rates;

static int probe_links(const char *launcher, int np, probe_rates *r) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return BG_ERR;
    self[n] = 0;
    char cmd[8500];
    if (launcher)
        snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 timeout 120 %s '%s' plan-probe --links-only 2>/dev/null",
                 launcher, self);
    else
        snprintf(cmd, sizeof cmd,
                 "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout 60 "
                 "mpirun --oversubscribe -np %d '%s' plan-probe 2>/dev/null", np, self);
    FILE *p = popen(cmd, "r");
    if (!p) return BG_ERR;
    int got = fscanf(p, "%lf %lf %lf %lf %lf %lf %lf", &r->bw, &r->lat, &r->gap, &r->sync, &r->bulk, &r->reduce,
                     &r->xbw);
    int rc = pclose(p);
    return got == 7 && rc == 0 && r->bw > 0 ? BG_OK : BG_ERR;
}

static int calibrate(const char *config, const char *out, int B, int T, int threads, const char *inter,
                     int inter_nodes) {
    model_config cfg, *c = NULL;
    if (config) {
        if (model_config_load_plan(&cfg, config) != BG_OK) return fprintf(stderr, "bagualu: %s\n", bg_last_error()), 2;
        c = &cfg;
        if (T > cfg.max_position_embeddings) T = cfg.max_position_embeddings;
    }
    plan_cluster cl;
    memset(&cl, 0, sizeof cl);
    snprintf(cl.name, sizeof cl.name, "this machine (bagualu plan --calibrate)");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    // Rates per rank of `threads` cores: the file states cores/threads ranks per node
    // (the planner scales to other counts by the cores a rank gets).
    if (threads <= 0 || threads > cores) threads = (int)cores;
    cl.nodes = 1, cl.ranks_per_node = (int)(cores / threads), cl.oversubscription = 1;
    // The inter-node link first: a launcher that does not work fails before the minute
    // of GEMM timing.
    probe_rates across = {0};
    if (inter && probe_links(inter, 2, &across) != BG_OK) {
        fprintf(stderr, "bagualu: plan: the inter-node probe under \"%s\" failed\n", inter);
        return 2;
    }
    fprintf(stderr, "plan: timing GEMMs on %d of %ld cores...\n", threads, cores);
    plan_calibrate_compute(&cl, c, B, T, threads, 60);
    // The optimizer's passes at a rank's threads and at the node's cores, over 64M
    // elements (4 arrays of 256 MiB, as a model's: at 16M the node's rate came out higher).
    cl.opt_bw = optimizer_bytes_per_s((size_t)64 << 20, threads);
    cl.node_opt_bw = cores > threads ? optimizer_bytes_per_s((size_t)64 << 20, (int)cores) : cl.opt_bw;
    probe_rates local = {0};
    const int np = cl.ranks_per_node > 2 ? cl.ranks_per_node : 2;
    fprintf(stderr, "plan: probing links and the gradient reduction with mpirun -np %d...\n", np);
    if (probe_links(NULL, np, &local) != BG_OK) {
        fprintf(stderr, "plan: the MPI probe failed; intra-node links set to the memory bandwidth\n");
        local = (probe_rates){.bw = cl.mem_bw / 2, .lat = 5e-6, .gap = 5e-6};
    }
    cl.intra_bulk_bw = local.bulk, cl.reduce_bw = local.reduce;
    cl.intra_bw = cl.inter_bw = local.bw;
    cl.intra_lat = cl.inter_lat = local.lat;
    cl.intra_gap = cl.inter_gap = local.gap;
    if (inter) {
        cl.inter_bw = across.bw, cl.inter_lat = across.lat, cl.inter_gap = across.gap, cl.inter_sync = across.sync;
        cl.inter_xbw = across.xbw;
        // Emulated nodes share this machine: a node gets cores/N of its cores and memory;
        // where that is under one rank's `threads`, its one rank runs at that share.
        double node_cores = (double)cores / inter_nodes, share = node_cores / threads;
        cl.nodes = inter_nodes;
        cl.ranks_per_node = share >= 1 ? (int)share : 1;
        // The speedups were measured on all the machine's cores, not a node's share.
        if (cl.ranks_per_node != (int)(cores / threads)) cl.node_gemm_speedup = cl.node_act_speedup = 0;
        cl.mem_per_node /= inter_nodes;
        if (share < 1) plan_cluster_scale_rates(&cl, share);
    }
    char *json = plan_cluster_to_json(&cl, "measured by bagualu plan --calibrate");
    FILE *f = fopen(out, "w");
    if (!f || fputs(json, f) < 0 || fputc('\n', f) < 0 || fclose(f) != 0) {
        free(json);
        fprintf(stderr, "bagualu: cannot write %s\n", out);
        return 1;
    }
    free(json);
    fprintf(stderr, "plan: wrote %s (fp32 peak %.3g, bf16 peak %.3g GFLOP/s, memory %.3g GB/s (node %.3g), "
                    "elementwise kernels %.3g GB/s, all cores x%.2f GEMMs x%.2f elementwise, optimizer %.3g GB/s (node %.3g), "
                    "links %.3g GB/s, %.3g us, bulk %.3g GB/s, reduce %.3g GB/s; inter-node %.3g GB/s (exchanging %.3g), %.3g us, gap %.3g us, sync %.3g us)\n", out,
            cl.peak[PLAN_FP32] / 1e9, cl.peak[PLAN_BF16] / 1e9, cl.mem_bw / 1e9, cl.node_mem_bw / 1e9,
            cl.act_bw / 1e9, cl.node_gemm_speedup, cl.node_act_speedup, cl.opt_bw / 1e9, cl.node_opt_bw / 1e9,
            local.bw / 1e9, local.lat * 1e6, local.bulk / 1e9, local.reduce / 1e9,
            cl.inter_bw / 1e9, plan_cluster_exchange_bw(&cl) / 1e9, cl.inter_lat * 1e6, cl.inter_gap * 1e6, cl.inter_sync * 1e6);
    return 0;
}

int cmd_plan_probe(int argc, char **argv) { return plan_probe(argc, argv); }

int cmd_plan(int argc, char **argv) {
    const char *config = NULL, *cluster = NULL, *a2a = NULL, *dtype = NULL, *zero = NULL;
    const char *recompute = NULL, *out = NULL, *inter = NULL;
    int P = 1, ep = 0, rpn = 0, B = 8, T = 64, chunks = 1, search = 0, json = 0, cal = 0, top = 10;
    int tp = 1, pp = 1, micro = 1, threads = 0, inter_nodes = 2;
    float capacity = -1, imbalance = 0, load_cv = 0, ov_grad = 0, ov_a2a = 0, a2a_bytes = 4;
    const arg_spec specs[] = {
        {"config", ARG_STR, &config, 0, "model config (JSON)"},
        {"cluster", ARG_STR, &cluster, 0, "cluster file (clusters/*.json)"},
        {"ranks", ARG_INT, &P, 0, "ranks P (default 1)"},
        {"expert-parallel", ARG_INT, &ep, 0, "expert-parallel degree (default: train's, the largest valid)"},
        {"ranks-per-node", ARG_INT, &rpn, 0, "ranks per node (default: the cluster's)"},
        {"a2a", ARG_STR, &a2a, 0, "token exchange: flat, hierarchical or 2d"},
        {"a2a-chunks", ARG_INT, &chunks, 0, "chunked exchange overlapping the experts (default 1)"},
        {"batch-size", ARG_INT, &B, 0, "sequences per rank (per micro-batch; default 8; --search: the largest tried)"},
        {"seq-len", ARG_INT, &T, 0, "tokens per sequence (default 64)"},
        {"dtype", ARG_STR, &dtype, 0, "GEMM precision: fp32, bf16, fp16 (fp8: paper runs)"},
        {"zero", ARG_STR, &zero, 0, "ZeRO-1: 0 or 1 (default 1 when P > 1, as train)"},
        {"recompute", ARG_STR, &recompute, 0, "none or block"},
        {"capacity", ARG_FLOAT, &capacity, 0, "gate capacity factor (default: the config's)"},
        {"imbalance", ARG_FLOAT, &imbalance, 0, "expert rows max/mean of a rank (default: from --load-cv)"},
        {"load-cv", ARG_FLOAT, &load_cv, 0,
         "the experts' load variation, train's load_cv (default: independent uniform routing)"},
        {"tensor-parallel", ARG_INT, &tp, 0, "analytic only: Megatron tensor parallelism"},
        {"pipeline-parallel", ARG_INT, &pp, 0, "analytic only: 1F1B pipeline stages"},
        {"micro-batches", ARG_INT, &micro, 0, "analytic only: micro-batches per step (pipeline)"},
        {"overlap-grad", ARG_FLOAT, &ov_grad, 0, "fraction of the gradient reduction hidden (framework; bagualu 0)"},
        {"overlap-a2a", ARG_FLOAT, &ov_a2a, 0, "fraction of the exchange hidden (framework; bagualu 0)"},
        {"a2a-elem-bytes", ARG_FLOAT, &a2a_bytes, 0, "bytes per exchanged element (framework; bagualu 4)"},
        {"search", ARG_SWITCH, &search, 0, "rank the layouts that fit by predicted tokens/s"},
        {"top", ARG_INT, &top, 0, "--search: layouts printed (default 10)"},
        {"json", ARG_SWITCH, &json, 0, "one JSON object (--search: a list)"},
        {"calibrate", ARG_SWITCH, &cal, 0, "measure this machine and write --out"},
        {"out", ARG_STR, &out, 0, "--calibrate: the cluster file to write"},
        {"threads", ARG_INT, &threads, 0, "--calibrate: cores per rank (default: all; 1 for mpirun's one thread per rank)"},
        {"inter-launcher", ARG_STR, &inter, 0,
         "--calibrate: command prefix starting 1 rank on each of 2 nodes, to probe the inter-node link"},
        {"nodes", ARG_INT, &inter_nodes, 0, "--calibrate with --inter-launcher: nodes the file states (default 2)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "plan",
                  "Predict a run's per-rank memory and step time on a cluster, or search layouts."))
        return 0;
    if (args_parse(specs, n, argc, argv, "plan") != BG_OK) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        return 2;
    }
    if (cal) {
        if (!out) return fprintf(stderr, "bagualu: plan: --calibrate needs --out FILE\n"), 2;
        if (inter_nodes < 1) return fprintf(stderr, "bagualu: plan: --nodes must be >= 1\n"), 2;
        return calibrate(config, out, B, T, threads, inter, inter_nodes);
    }
    if (!config || !cluster) return fprintf(stderr, "bagualu: plan: --config and --cluster are required\n"), 2;
    plan_layout l;
    plan_layout_defaults(&l);
    l.P = P, l.ep = ep, l.ranks_per_node = rpn, l.B = B, l.T = T, l.a2a_chunks = chunks;
    l.capacity = capacity, l.imbalance = imbalance, l.load_cv = load_cv, l.tp = tp, l.pp = pp, l.micro = micro;
    l.overlap_grad = ov_grad, l.overlap_a2a = ov_a2a, l.a2a_elem_bytes = a2a_bytes;
    if (a2a) {
        if (!strcmp(a2a, "flat")) l.a2a = PLAN_A2A_FLAT;
        else if (!strcmp(a2a, "hierarchical")) l.a2a = PLAN_A2A_HIER;
        else if (!strcmp(a2a, "2d")) l.a2a = PLAN_A2A_2D;
        else return fprintf(stderr, "bagualu: plan: --a2a must be flat, hierarchical or 2d, got \"%s\"\n", a2a), 2;
    }
    if (dtype && plan_dtype_parse(dtype, &l.dtype) != BG_OK)
        return fprintf(stderr, "bagualu: plan: --%s\n", bg_last_error()), 2;
    if (zero) {
        if (strcmp(zero, "0") && strcmp(zero, "1"))
            return fprintf(stderr, "bagualu: plan: --zero must be 0 or 1, got \"%s\"\n", zero), 2;
        l.zero = zero[0] - '0';
    }
    if (recompute) {
        if (strcmp(recompute, "none") && strcmp(recompute, "block"))
            return fprintf(stderr, "bagualu: plan: --recompute must be none or block, got \"%s\"\n", recompute), 2;
        l.recompute = !strcmp(recompute, "block");
    }
    if (ep < 0 || rpn < 0 || chunks < 1 || top < 1 || imbalance < 0 || load_cv < 0 || ov_grad < 0 || ov_grad > 1 ||
        ov_a2a < 0 || ov_a2a > 1 || !(a2a_bytes > 0))
        return fprintf(stderr, "bagualu: plan: --expert-parallel, --ranks-per-node >= 0, --a2a-chunks, --top >= 1, "
                               "--imbalance, --load-cv >= 0, --overlap-* in [0,1], --a2a-elem-bytes > 0\n"), 2;
    model_config cfg;
    plan_cluster cl;
    if (model_config_load_plan(&cfg, config) != BG_OK || plan_cluster_load(&cl, cluster) != BG_OK)
        return fprintf(stderr, "bagualu: %s\n", bg_last_error()), 2;
    if (!search) {
        plan_result r;
        if (plan_run(&r, &cfg, &cl, &l) != BG_OK) return fprintf(stderr, "bagualu: plan: %s\n", bg_last_error()), 2;
        if (json) print_json(stdout, &l, &r), printf("\n");
        else print_text(&cl, &l, &r);
        return 0;
    }
    plan_layout *ls = malloc(sizeof *ls * top);
    plan_result *rs = malloc(sizeof *rs * top);
    if (!ls || !rs) return free(ls), free(rs), fprintf(stderr, "bagualu: out of memory\n"), 3;
    int found = plan_search(ls, rs, top, &cfg, &cl, &l);
    if (json) {
        printf("[");
        for (int i = 0; i < found; i++) printf(i ? ",\n " : ""), print_json(stdout, &ls[i], &rs[i]);
        printf("]\n");
    } else {
        if (!found) printf("no layout of %d ranks fits %s\n", P, cl.name);
        printf("%3s %5s %4s %5s %-12s %4s %-5s %8s %10s %10s %12s %6s\n", "#", "EP", "B", "ZeRO", "a2a",
               "cap", "recmp", "MiB/rank", "GiB/node", "step s", "tokens/s", "MFU%");
        for (int i = 0; i < found; i++)
            printf("%3d %5d %4d %5d %-12s %4.3g %-5s %8.1f %10.2f %10.4g %12.5g %6.2f\n", i + 1, rs[i].ep, ls[i].B,
                   rs[i].zero, plan_a2a_name(ls[i].a2a), ls[i].capacity < 0 ? cfg.capacity_factor : ls[i].capacity,
                   ls[i].recompute ? "block" : "none", rs[i].mem.total / MIB, rs[i].mem_node / (MIB * 1024),
                   rs[i].step_s, rs[i].tokens_per_s, 100 * rs[i].mfu);
    }
    free(ls), free(rs);
    return 0;
}
