// The planner: memory from the memory report (the same layout routines the run
// allocates with), time from plan_time.c, and the search over layouts.
#include "plan/plan.h"
#include "comm/dist.h"
#include "core/error.h"
#include "model/model.h"
#include "model/params.h"
#include "plan/plan_time.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *a2a_names[] = {"flat", "hierarchical", "2d"};
const char *plan_a2a_name(plan_a2a a) { return a <= PLAN_A2A_2D ? a2a_names[a] : "?"; }

void plan_layout_defaults(plan_layout *l) {
    memset(l, 0, sizeof *l);
    l->P = 1;
    l->B = 8, l->T = 64;  // train's defaults
    l->dtype = PLAN_FP32;
    l->zero = -1;
    l->a2a_chunks = 1;
    l->capacity = -1;
    l->tp = l->pp = l->micro = 1;
}

static void max_into(memory_report *m, const memory_report *r) {
    size_t *a[] = {&m->params, &m->grads, &m->optimizer, &m->activations, &m->moe_exchange,
                   &m->moe_exchange_heap, &m->workspaces, &m->snapshot, &m->comm_scratch, &m->arena, &m->numel, &m->owned};
    const size_t *b[] = {&r->params, &r->grads, &r->optimizer, &r->activations, &r->moe_exchange,
                         &r->moe_exchange_heap, &r->workspaces, &r->snapshot, &r->comm_scratch, &r->arena, &r->numel, &r->owned};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
        if (*b[i] > *a[i]) *a[i] = *b[i];
    if (r->expert_rows > m->expert_rows) m->expert_rows = r->expert_rows;
}

// One rank's memory as `bagualu train` reports it: each component the largest over the
// ranks (every rank up to 256; beyond, ranks 0 and P-1: every rank holds E/EP experts
// and the ZeRO slices differ by at most one element).
static void plan_memory(memory_report *m, const model_config *c, const plan_layout *l, int ep, int zero, int R,
                        double heap_rows_factor) {
    model_options opt = {.attention = MODEL_ATTN_FLASH, .lm_head_chunk = MODEL_LM_HEAD_CHUNK,
                         .loss_scale = 1, .recompute = l->recompute};
    int P = l->P / (l->tp * l->pp);
    bg_dtype dt = l->dtype == PLAN_FP32 ? BG_FP32 : l->dtype == PLAN_FP16 ? BG_FP16 : BG_BF16;
    memory_plan_input in = {.B = l->B, .T = l->T, .opt = opt, .dtype = dt, .world_size = P,
                            .ep = ep, .a2a_chunks = l->a2a_chunks, .zero = zero,
                            // plan_a2a numbers the algorithms as comm/dist.h does
                            .a2a_algo = (int)l->a2a, .ranks_per_node = R,
                            .heap_rows_factor = heap_rows_factor};
    memset(m, 0, sizeof *m);
    for (int r = 0; r < P; r = P > 256 && r < P - 1 ? P - 1 : r + 1) {
        in.world_rank = r;
        memory_report one;
        memory_plan(&one, c, &in);
        max_into(m, &one);
    }
}

// What a block of bg_aligned_alloc (core/error.c) holds resident beyond its bytes: one
// of 4 MiB or more is rounded up to whole 2 MiB pages and asks for transparent huge
// pages, which are resident whole once touched (M2 dense, one rank: the parameters,
// gradients, m and v, 88.0 MiB each, are 90 MiB mappings, 90 MiB resident).
static double huge_tail(size_t bytes) {
    const size_t page = (size_t)2 << 20;
    return bytes >= 2 * page ? (double)((bytes + page - 1) / page * page - bytes) : 0;
}

// Peak RSS against the report's bytes (expected_total): the huge blocks' tails (the
// parameters, gradients, AdamW's m and v, the activation arena), less the reduction
// scratch a ZeRO-1 run never touches: its reduce-scatter receives the n − 1 other ranks'
// parts and sums its own in place, so 1/n of the P·piece scratch stays unwritten
// (comm/dist_shard.c; M2 dense at P = 2: 32 of its 64 MiB resident on rank 1, 34 on
// rank 0, whose own part holds the scalar all-reduces' parts). The rounded weight
// copies of mixed precision are one block per weight, below the huge size but the
// largest (the LM head's, 8 MiB in bf16, whole pages): not counted.
static double resident_delta(const memory_report *m, const model_config *c, int P, int ep, int zero) {
    const size_t bucket = DIST_BUCKET_BYTES_DEFAULT;
    size_t numel, dense;
    int el = c->num_local_experts > 0 ? c->num_local_experts / ep : 0;
    param_table_numel_local(c, 0, el, &numel, &dense);
    double d = huge_tail(m->numel * sizeof(float)) * 2 + huge_tail(m->owned * sizeof(float)) * 2 +
               huge_tail(m->arena);
    if (zero && P > 1) {
        const int edp = P / ep;
        // The step's scalar all-reduces share the world's slot: their parts lie in its
        // first page, in rank 0's own part.
        const size_t page = (size_t)2 << 20, own = dist_reduce_scatter_scratch_bytes(P, dense, bucket) / P;
        d -= own > page ? (double)(own - page) : 0;
        if (edp > 1) d -= (double)dist_reduce_scatter_scratch_bytes(edp, numel - dense, bucket) / edp;
    }
    return d;
}

// Ranks per node: the layout's, else the cluster's; a one-node cluster (a calibrated
// box) runs every rank on its node.
static int plan_ranks_per_node(const plan_cluster *cl, const plan_layout *l) {
    const int R = l->ranks_per_node > 0 ? l->ranks_per_node : cl->nodes == 1 ? l->P : cl->ranks_per_node;
    return R > l->P ? l->P : R;
}

int plan_run(plan_result *r, const model_config *c0, const plan_cluster *cl, const plan_layout *l) {
    memset(r, 0, sizeof *r);
    model_config cfg = *c0, *c = &cfg;
    if (l->capacity >= 0) c->capacity_factor = l->capacity;
    const int E = c->num_local_experts;
    if (l->P < 1) return bg_error("--ranks must be positive, got %d", l->P);
    if (l->B < 1 || l->T < 1) return bg_error("--batch-size and --seq-len must be positive");
    if (l->T > c->max_position_embeddings)
        return bg_error("--seq-len %d exceeds the model's context %d", l->T, c->max_position_embeddings);
    if (l->tp < 1 || l->pp < 1 || l->micro < 1 || l->P % (l->tp * l->pp))
        return bg_error("tensor x pipeline parallel (%d x %d) must divide --ranks %d", l->tp, l->pp, l->P);
    if (c->hidden_size % l->tp || l->pp > c->num_hidden_layers)
        return bg_error("tensor parallel must divide the hidden size; pipeline stages at most the layers");
    if (!(cl->peak[l->dtype] > 0)) return bg_error("%s offers no %s rate", cl->name, plan_dtype_name(l->dtype));
    int dp = l->P / (l->tp * l->pp);
    int ep = l->ep;
    if (E > 0 && ep == 0)  // bagualu's default: the largest EP dividing both
        for (int d = dp < E ? dp : E; d >= 1; d--)
            if (dp % d == 0 && E % d == 0) { ep = d; break; }
    if (E == 0 || dp == 1) ep = E == 0 ? 1 : (ep ? ep : 1);
    if (ep < 1 || ep > dp || dp % ep || (E > 0 && E % ep))
        return bg_error("expert-parallel degree %d must divide the %d data-parallel ranks and the %d experts", ep, dp, E);
    if (dp == 1) ep = 1;
    r->ep = ep;
    const int R = plan_ranks_per_node(cl, l);
    r->ranks_per_node = R;
    if ((l->P + R - 1) / R > cl->nodes)
        return bg_error("%d ranks at %d per node need %d nodes; %s has %d", l->P, R, (l->P + R - 1) / R,
                        cl->name, cl->nodes);
    // The node's cores and memory bandwidth are shared by its ranks: rates per rank
    // scale with the cores a rank gets (cluster files state them per rank); the memory
    // bandwidth also stops at the node's, which one core's stream does not reach R times.
    // The elementwise kernels are bound by arithmetic over cached tensors: by the cores.
    plan_cluster scaled = *cl;
    plan_cluster_scale_rates(&scaled, (double)cl->ranks_per_node / R);
    if (cl->node_mem_bw > 0) scaled.mem_bw = fmin(scaled.mem_bw, cl->node_mem_bw / R);
    if (cl->node_opt_bw > 0 && scaled.opt_bw > 0) scaled.opt_bw = fmin(scaled.opt_bw, cl->node_opt_bw / R);
    if (cl->node_round_bw > 0 && scaled.round_bw > 0) scaled.round_bw = fmin(scaled.round_bw, cl->node_round_bw / R);
    r->zero = dp > 1 && l->zero != 0;
    plan_memory(&r->mem, c, l, ep, r->zero, R, 0);
    memory_report *m = &r->mem;
    if (l->tp > 1 || l->pp > 1) {
        // Analytic: a stage holds L/pp layers' parameters split tp ways and, in a 1F1B
        // schedule, the activations of up to pp micro-batches, split tp ways.
        double f = 1.0 / (l->tp * (double)l->pp);
        m->params = (size_t)(m->params * f), m->grads = (size_t)(m->grads * f);
        m->optimizer = (size_t)(m->optimizer * f), m->workspaces = (size_t)(m->workspaces * f);
        m->activations = (size_t)((double)m->activations / l->tp / l->pp * l->pp);
    }
    m->total = m->params + m->grads + m->optimizer + m->activations + m->moe_exchange +
               m->moe_exchange_heap + m->workspaces + m->snapshot + m->comm_scratch;
    r->mem_node = (double)m->total * r->ranks_per_node;
    r->fits = r->mem_node <= cl->mem_per_node;
    // A model this small never waits for memory: priced at the cache's rates.
    r->cache_resident = plan_cluster_cache_resident(&scaled, (double)m->total, R);
    size_t numel, dense;
    int el = E > 0 ? E / ep : 0;
    param_table_numel_local(c, 0, el, &numel, &dense);
    double f = 1.0 / (l->tp * (double)l->pp);
    plan_time(r, c, &scaled, l, (size_t)(dense * f), (size_t)(numel * f), (size_t)(m->owned * f));
    r->mem_expected = m->total;
    r->mem_imbalance = r->imbalance;
    if (m->moe_exchange_heap > 0) {
        // A run's peak is set by its most skewed step and layer, and a learned gate starts
        // far from uniform routing (docs/PLANNER.md): unless --imbalance or --load-cv says
        // how skewed, the heap takes the most skewed loads the routing groups allow (a
        // group's tokens all on the same k experts). The step time keeps the expected loads.
        if (l->imbalance <= 0 && l->load_cv <= 0) {
            double keep;
            plan_routing_cost(c, ep, dp, (double)l->B * l->T, l->T, c->capacity_factor, INFINITY,
                              &r->mem_imbalance, &keep, NULL);
        }
        memory_report e;
        plan_memory(&e, c, l, ep, r->zero, R, r->mem_imbalance);
        r->mem_expected = m->total - m->moe_exchange_heap + e.moe_exchange_heap;
    }
    if (l->tp == 1 && l->pp == 1)  // analytic layouts (TP, PP) keep the report's bytes
        r->mem_expected = (size_t)((double)r->mem_expected + resident_delta(m, c, dp, ep, r->zero));
    return BG_OK;
}

typedef struct {
    plan_layout l;
    plan_result r;
} candidate;

static int by_throughput(const void *a, const void *b) {
    double x = ((const candidate *)a)->r.tokens_per_s, y = ((const candidate *)b)->r.tokens_per_s;
    return (x < y) - (x > y);
}

int plan_search(plan_layout *out, plan_result *res, int max, const model_config *c,
                const plan_cluster *cl, const plan_layout *base) {
    int cap = 4096, n = 0;
    candidate *cand = malloc(sizeof *cand * cap);
    if (!cand) return 0;
    const int E = c->num_local_experts, dp = base->P / (base->tp * base->pp);
    const float caps[] = {-1, 1.0f, 1.25f, 2.0f};
    // On one node the three exchanges send the same messages and are priced alike
    // (--a2a auto takes flat there): listing all three would only repeat each layout.
    const int algos = plan_ranks_per_node(cl, base) >= base->P ? 1 : 3;
    for (int ep = 1; ep <= (E > 0 ? dp : 1); ep++) {
        if (E > 0 && (dp % ep || E % ep)) continue;
        for (int B = 1; B <= base->B; B *= 2)
            for (int a2a = 0; a2a < (ep > 1 ? algos : 1); a2a++)
                for (int zero = 0; zero < (dp > 1 ? 2 : 1); zero++)
                    for (int rec = 0; rec < 2; rec++)
                        for (int ci = 0; ci < (E > 0 ? 4 : 1); ci++) {
                            if (ci > 0 && caps[ci] == c->capacity_factor) continue;
                            plan_layout l = *base;
                            l.ep = ep, l.B = B, l.a2a = (plan_a2a)a2a, l.zero = zero;
                            l.recompute = rec, l.capacity = ci ? caps[ci] : base->capacity;
                            candidate x;
                            memset(&x, 0, sizeof x);
                            x.l = l;
                            if (plan_run(&x.r, c, cl, &l) != BG_OK || !x.r.fits) continue;
                            if (n == cap) {
                                candidate *g = realloc(cand, sizeof *cand * cap * 2);
                                if (!g) break;
                                cand = g, cap *= 2;
                            }
                            cand[n++] = x;
                        }
    }
    qsort(cand, n, sizeof *cand, by_throughput);
    if (n > max) n = max;
    for (int i = 0; i < n; i++) out[i] = cand[i].l, res[i] = cand[i].r;
    free(cand);
    return n;
}
