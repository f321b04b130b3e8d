// The analytic time of one training step, term by term as docs/PLANNER.md lists them.
// Every term is per rank; the step is the slowest rank's (the expert-row imbalance).
#include "plan/plan_time.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <math.h>

typedef struct {
    const plan_cluster *cl;
    plan_dtype dt;
    double gemm_s, flops;
} gemm_acc;

// Seconds per FLOP of (M,K)x(K,N) GEMMs whose M varies with variation cv about its mean
// (the experts' rows under an unequal gate), M at most M_max: taller products run faster
// and hold more of the FLOPs. M is taken as gamma-distributed; a FLOP then lies in a
// product of M rows with the size-biased density, a gamma of shape a = 1/cv² + 1 (mean
// M·(1 + cv²)), averaged at 48 midpoints within 8 standard deviations of its mean, the
// density taken relative to its mode (no overflow at large a). Below cv 0.05 the
// density is narrow: the rate at its mean.
static double spread_s_per_flop(const gemm_acc *g, double M, double cv, double M_max, double K, double N) {
    if (cv < 0.05) return 1 / plan_gemm_rate(g->cl, g->dt, fmin(M * (1 + cv * cv), M_max), K, N);
    const int n = 48;
    const double a = 1 / (cv * cv) + 1, mode = a - 1, scale = M * cv * cv;
    const double lo = fmax(0, a - 8 * sqrt(a)), h = (a + 8 * sqrt(a) - lo) / n;
    double s = 0, w = 0;
    for (int i = 0; i < n; i++) {
        const double x = lo + (i + 0.5) * h, d = exp(mode * log(x / mode) - (x - mode));
        s += d / plan_gemm_rate(g->cl, g->dt, fmin(fmax(scale * x, 1), M_max), K, N), w += d;
    }
    return s / w;
}

// count calls of (M,K)x(K,N) GEMMs at s_per_flop seconds a FLOP.
static void gemm_priced(gemm_acc *g, double M, double K, double N, double count, double s_per_flop) {
    if (M <= 0 || K <= 0 || N <= 0 || count <= 0) return;
    double f = 2 * M * K * N;
    g->gemm_s += count * f * s_per_flop;
    g->flops += count * f;
}

// count calls of an (M,K)x(K,N) GEMM, each priced at the curve's rate for its size.
static void gemm(gemm_acc *g, double M, double K, double N, double count) {
    if (M > 0 && K > 0 && N > 0) gemm_priced(g, M, K, N, count, 1 / plan_gemm_rate(g->cl, g->dt, M, K, N));
}

// Bytes over a node's links at bw bytes/s: the part leaving the supernode runs at
// 1/oversubscription of it (the upper fat-tree level), g = nodes the traffic spreads over.
static double inter_at(const plan_cluster *cl, double node_bytes, double g, double bw) {
    if (node_bytes <= 0) return 0;
    double t = node_bytes / bw;
    int sn = cl->supernode_nodes;
    if (sn > 0 && g > sn && cl->oversubscription > 1) {
        double beyond = (g - sn) / (g - 1);
        double t2 = node_bytes * beyond * cl->oversubscription / bw;
        if (t2 > t) t = t2;
    }
    return t;
}
static double inter_s(const plan_cluster *cl, double node_bytes, double g) {
    return inter_at(cl, node_bytes, g, cl->inter_bw);
}

// What a phase in which a rank sends waits for the phase's ranks to get a core (emulated
// nodes sharing cores; the file's sync is per rank per node, R ranks per node): each
// phase ends when the last of them, descheduled, has sent; --a2a auto's model pays it
// per phase too (comm/dist_a2a_model.c).
static double wait_s(const plan_cluster *cl, int R) { return cl->inter_sync * R; }

// The phases of bagualu's all-reduce among n ranks (comm/dist_allreduce.c): its exchange,
// posted at once, then MPI's all-gather, whose rounds (ceil(log2 n) for Bruck's or
// recursive doubling) each wait for their senders.
static double allreduce_phases(int n) { return 1 + ceil(log2(n)); }

double plan_allreduce_s(const plan_cluster *cl, double intra_bw, int R, double bytes, int n, int m) {
    if (n <= 1 || bytes <= 0) return 0;
    if (m < 1) m = 1;
    if (m > n) m = n;
    double v = 2.0 * (n - 1) / n * bytes;  // reduce-scatter + all-gather, per rank
    double v_intra = v * (m - 1) / (n - 1), v_inter = v * (n - m) / (n - 1);
    double g = ceil((double)n / m);
    // The ranks of a node that take part share its links (R of them at once).
    double ranks_on_links = R < m ? m : R;
    double t = fmax(v_intra / intra_bw, inter_s(cl, v_inter * ranks_on_links, g));
    return t + 2.0 * (n - 1) * (n > m ? cl->inter_lat : cl->intra_lat) + allreduce_phases(n) * wait_s(cl, R);
}

// An all-reduce of a few scalars among n ranks, m of them on each node: latency and a
// wait per phase.
static double small_allreduce_s(const plan_cluster *cl, int R, int n, int m) {
    if (n <= 1) return 0;
    return allreduce_phases(n) * ((n > m ? cl->inter_lat : cl->intra_lat) + wait_s(cl, R));
}

// One phase of an exchange in which a rank sends n_in intra-node and n_out inter-node
// messages together: the first costs a latency, each further one a gap, and the phase
// its wait. With gap = latency this is one latency a message, as messages sent one by one.
static double phase_s(const plan_cluster *cl, int R, double n_in, double n_out) {
    if (n_in + n_out <= 0) return 0;
    double first = n_out > 0 ? cl->inter_lat : cl->intra_lat;
    return first + n_in * cl->intra_gap + n_out * cl->inter_gap - (n_out > 0 ? cl->inter_gap : cl->intra_gap) +
           wait_s(cl, R);
}

// One trip of expert rows, its phases' waits included: b bytes sent per rank in an EP
// group of `ep` ranks, r_in of them on this node, R ranks per node sharing its links.
// The receiving side's imbalance scales the bandwidth terms.
static double a2a_trip_s(const plan_cluster *cl, plan_a2a algo, double b, int ep, int r_in, int R,
                         double imb) {
    if (ep <= 1 || b <= 0) return 0;
    double g = ceil((double)ep / r_in);
    double f_intra = (double)(r_in - 1) / ep, f_inter = (double)(ep - r_in) / ep;
    if (g <= 1) algo = PLAN_A2A_FLAT;  // inside one node every algorithm is the flat one
    const double xbw = plan_cluster_exchange_bw(cl);  // every rank exchanging at once
    switch (algo) {
    case PLAN_A2A_HIER:
        // Inter-node rows gathered to the node leader (with the direct intra rows), one
        // message per node pair, then scattered: three phases, two intra-node passes of
        // the node's inter bytes through the leader.
        return imb * (b * f_intra / cl->intra_bw + 2 * (r_in - 1) * b * f_inter / cl->intra_bw +
                      inter_at(cl, R * b * f_inter, g, xbw)) +
               phase_s(cl, R, 2 * (r_in - 1), 0) + phase_s(cl, R, 0, g - 1) + phase_s(cl, R, r_in - 1, 0);
    case PLAN_A2A_2D: {
        // Two dimensions: first among the group's ranks of one supernode (one node's
        // where the cluster has no supernodes), to the rank that shares the
        // destination's position, then among those positions across the supernodes.
        int S = cl->supernode_nodes > 0 ? cl->supernode_nodes : 1;
        double d1 = fmin(ep, (double)r_in * S), d2 = ceil(ep / d1);
        double t1 = b * (r_in - 1) / d1 / cl->intra_bw + R * b * (d1 - r_in) / d1 / xbw;
        double t2 = d2 > 1 ? R * b * (d2 - 1) / d2 * (S > 1 ? cl->oversubscription : 1) / xbw : 0;
        return imb * (t1 + t2) + phase_s(cl, R, r_in - 1, d1 - r_in) + phase_s(cl, R, 0, d2 - 1);
    }
    default:
        return imb * fmax(b * f_intra / cl->intra_bw, inter_at(cl, R * b * f_inter, g, xbw)) +
               phase_s(cl, R, r_in - 1, ep - r_in);
    }
}

// The expected largest of n independent standard normals, by Blom's approximation
// Φ⁻¹((n − 0.375)/(n + 0.25)) (0.59, 1.05, 1.77 for n = 2, 4, 16 against 0.56, 1.03,
// 1.77 exactly): Φ⁻¹ by bisection.
static double normal_max(int n) {
    if (n < 2) return 0;
    const double p = (n - 0.375) / (n + 0.25);
    double lo = 0, hi = 10;
    for (int i = 0; i < 60; i++) {
        const double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2)) < p) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

// The first two moments of min(X, cap)/mu for an expert's load X in a routing group of
// G tokens, each token taking the expert with probability m0 = k/E on average: X is
// beta-binomial (the probability itself varies over the groups as a beta, a skewed gate;
// every token of the group draws it alike), with the intra-group correlation rho that
// gives X the variation v: var = mu·(1 − m0)·(1 + (G − 1)·rho). rho = 0 is the
// multinomial's binomial (uniform routing, v² ≈ E/(G·k)), rho = 1 every token on the
// same k experts (v² = E/k − 1): the family spans the gate from uniform to collapsed.
// It keeps what train keeps where a gamma of the same v (shape 1/v²) kept 17% more
// (tests/plan/test_plan_capacity.c: 0.40 vs 0.47 at a group's v of 1.6). Below the
// binomial's v the loads are taken as binomial. Only x < cap enter: E[min(X, cap)] =
// cap − Σ (cap − x)·P(x), E[min²] = cap² − Σ (cap² − x²)·P(x), P by its ratio recurrence.
static void capped_load_moments(double G, double m0, double v, double cap, double *m1, double *m2) {
    const double mu = G * m0;
    double rho = (v * v * mu / (1 - m0) - 1) / (G - 1);
    rho = G > 1 ? fmin(fmax(rho, 0), 1 - 1e-9) : 0;
    double p, a = 0, b = 0;  // P(0); the beta's parameters
    if (rho > 0) {
        a = m0 * (1 / rho - 1), b = (1 - m0) * (1 / rho - 1);
        p = exp(lgamma(a + b) + lgamma(b + G) - lgamma(b) - lgamma(a + b + G));
    } else {
        p = exp(G * log1p(-m0));
    }
    double s1 = 0, s2 = 0;
    for (double x = 0; x < cap && x <= G; x++) {
        s1 += (cap - x) * p, s2 += (cap * cap - x * x) * p;
        p *= (G - x) / (x + 1) * (rho > 0 ? (x + a) / (G - x - 1 + b) : m0 / (1 - m0));
    }
    *m1 = (cap - s1) / mu, *m2 = (cap * cap - s2) / (mu * mu);
}

// The routing's cost, from one statistic: cv, the coefficient of variation of the
// experts' loads over the global batch of dp ranks' tokens (train's load_cv; 0:
// independent uniform routing). It is taken as the variation of a routing group's loads
// (G tokens, a sequence unless configured; S_w = dp·N/G groups in the batch), v =
// cv·√S_w, the groups independent: M2's runs (cf 1) had cv 1.23, 0.88, 0.67 at 2, 4, 8
// groups, v 1.74-1.90, and dropped 64% of the rows at each. Uniform routing's v is the
// multinomial's √(E/(G·k)). v is at most √(E/k − 1): every token of the group on the
// same k experts. SWIPE balances the ranks by construction (imbalance 1); within a rank
// its experts' rows vary as the gate routes them (moved tokens land on one expert of the
// receiver, moe/swipe.c), and a capacity drops from them as from any gate's.
// A rank holds E/EP experts and receives the S = EP·N/G groups of its EP group, so its
// load is S·E/EP group loads: its variation v_r = v_t/√(S·E/EP), and the largest of EP
// near-normal rank loads lies normal_max(EP) such deviations above the mean (imb).
// Without a capacity v_t = v. With one, train drops each group's assignments beyond
// cap = ⌈cf·G·k/E⌉ per expert (moe/capacity.c) and the experts run the kept rows only:
// keep = E[min(X, cap)]/mu and v_t the variation of min(X, cap) (beta-binomial X, above); the
// slowest rank holds at most cap per group and expert, (cap/mu)/keep of the kept mean.
void plan_routing_cost(const model_config *c, int ep, int dp, double N, double T, float cf, double cv,
                       double *imb, double *keep, double *rows_cv) {
    const int E = c->num_local_experts, k = c->num_experts_per_tok;
    const double G = c->routing_group_tokens > 0 ? c->routing_group_tokens : T, mu = G * k / E;
    const double S = ep * N / G;
    const char *gate = model_router_type_name(c->router_type);
    double v = cv > 0 ? cv * sqrt(dp * N / G) : sqrt(E / (G * k));
    v = fmin(v, sqrt(fmax((double)E / k - 1, 0)));
    double vt = v, cap = 0;
    *keep = 1;
    if (cf > 0) {
        cap = ceil(cf * mu * (1.0 - 1e-7));  // moe_capacity_per_group's rounding
        double m1, m2;
        if (v > 0 && k < E) capped_load_moments(G, (double)k / E, v, cap, &m1, &m2);
        else m1 = fmin(cap / mu, 1), m2 = m1 * m1;  // k = E: every expert at the mean
        cap /= mu;
        *keep = fmax(m1, 0.01);
        vt = sqrt(fmax(m2 - m1 * m1, 0)) / *keep;
    }
    if (rows_cv) *rows_cv = vt / sqrt(S / ep);  // S/ep groups: the EP group's tokens
    *imb = 1 + vt / sqrt(S * E / ep) * normal_max(ep);
    if (cf > 0 && *imb > cap / *keep) *imb = cap / *keep;
    if (gate && !__builtin_strcmp(gate, "swipe")) *imb = 1;
}

void plan_time(plan_result *r, const model_config *c, const plan_cluster *cl,
               const plan_layout *l, size_t dense, size_t numel, size_t owned) {
    const int tp = l->tp, pp = l->pp, micro = l->micro, EP = r->ep, R = r->ranks_per_node;
    const double N = (double)l->B * l->T, T = l->T, C = c->hidden_size, V = c->vocab_size;
    const int E = c->num_local_experts, k = c->num_experts_per_tok;
    const int swiglu = c->hidden_act == FFN_SWIGLU, rec = l->recompute == MODEL_RECOMPUTE_BLOCK;
    const double in_mult = swiglu ? 2 : 1;  // w_in holds gate and up for SwiGLU
    const float cf = l->capacity >= 0 ? l->capacity : c->capacity_factor;
    const double elem = 4;                  // activations are fp32
    const double row_bytes = C * (l->a2a_elem_bytes > 0 ? l->a2a_elem_bytes : 4);
    gemm_acc g = {cl, l->dtype, 0, 0}, g32 = {cl, cl->peak[PLAN_FP32] > 0 ? PLAN_FP32 : l->dtype, 0, 0};
    gemm_acc ge = g;
    int experts_concurrent = 0;
    // Passes of the elementwise kernels over a layer's activations (act_bytes), and of
    // streaming ones (the logits: mem_bytes), and mixed precision's rounding of GEMM
    // operands, activations and weights (round_bytes).
    double act_bytes = 0, mem_bytes = 0, round_bytes = 0;
    double attn_s = 0, attn_flops = 0, a2a_s = 0, a2a_inter = 0, a2a_intra = 0;
    double cast = l->dtype == PLAN_FP32 ? 0 : 6;  // bytes per operand element rounded
    r->imbalance = r->keep = 1;
    double rows_cv = 0;
    if (E > 0)
        plan_routing_cost(c, EP, l->P / (tp * pp), N, T, cf, l->load_cv, &r->imbalance, &r->keep, &rows_cv);
    if (E > 0 && l->imbalance > 0) r->imbalance = l->imbalance;
    const double imb = r->imbalance, keep = r->keep;
    // With tensor parallelism (sequence parallel, expert TP 1: Megatron's MoE folding)
    // each rank of a TP group routes 1/tp of the tokens. The experts' GEMMs are priced at
    // a balanced expert's rows, their time times imb below: the slowest rank's extra rows
    // land unevenly on its experts, so they run at the typical expert's rate, not at that
    // of uniformly taller products. Unequal loads put most of the FLOPs in the taller
    // experts, whose products run faster: each expert's rows vary by rows_cv, at most
    // the group's tokens. The same in every MoE layer: priced once.
    const double Nm = N / tp, Im = c->moe_intermediate_size, rows = E > 0 ? keep * Nm * k * EP / E : 0;
    const int local = E > 0 ? E / EP : 0;
    double se_in = 0, se_out = 0;  // the experts' seconds per FLOP
    if (E > 0) {
        se_in = spread_s_per_flop(&ge, rows, rows_cv, Nm * EP, C, in_mult * Im);
        se_out = spread_s_per_flop(&ge, rows, rows_cv, Nm * EP, Im, C);
    }
    const int L = c->num_hidden_layers, Ls = (L + pp - 1) / pp;  // layers of the (first) stage
    const int r_in = EP < R ? EP : R;
    int moe_layers = 0;
    // fwd (1), bwd (2), recompute (+1 forward of the block, less o_proj)
    for (int layer = 0; layer < Ls; layer++) {
        // Attention block: qkv, o_proj GEMMs (columns split over tp), the causal core.
        double fw = 3 + rec;
        double W, hd, core_fwd;  // q/k/v widths, the score's head size, the core's forward FLOPs
        if (model_config_mla(c)) {
            // Latent attention: down-projections to the latents (replicated over tp), the
            // heads' up-projections and o split over tp; scores over qk dims, values of v dims.
            const double H = c->num_attention_heads, ql = c->q_lora_rank, kl = c->kv_lora_rank;
            const double qk = c->qk_nope_head_dim + c->qk_rope_head_dim, dv = c->v_head_dim;
            if (ql > 0) {
                gemm(&g, N, C, ql, fw);
                gemm(&g, N, ql, H * qk / tp, fw);
            } else {
                gemm(&g, N, C, H * qk / tp, fw);
            }
            gemm(&g, N, C, kl + c->qk_rope_head_dim, fw);
            gemm(&g, N, kl, H * (c->qk_nope_head_dim + dv) / tp, fw);
            gemm(&g, N, H * dv / tp, C, 3);
            W = H * (qk + qk + dv), hd = qk;
            core_fwd = N * T * H * (qk + dv) / tp;
        } else {
            W = model_qkv_width(c);  // q, and k, v of the kv heads
            gemm(&g, N, C, W / tp, fw);
            gemm(&g, N, C / tp, C, 3);
            hd = C / c->num_attention_heads;
            core_fwd = 2 * N * T * C / tp;
        }
        round_bytes += cast * (2 * N * C + N * W / tp) * 2;
        double core = core_fwd * (1 + 2.5) + rec * core_fwd;
        double rate = cl->attention_rate[l->dtype] > 0
                          ? cl->attention_rate[l->dtype]
                          : plan_gemm_rate(cl, l->dtype, T, hd, T) * cl->attention_efficiency;
        attn_s += core / rate;
        attn_flops += core;
        act_bytes += elem * N * C * (20 + rec * 9);  // norm, RoPE, residual: fwd 9, bwd 11 passes
        // FFN block
        act_bytes += elem * N * C * (11 + rec * 5);
        double act_fwd = swiglu ? 3 : 2, act_bwd = swiglu ? 5 : 3;
        if (model_layer_is_moe(c, layer)) {
            moe_layers++;
            experts_concurrent = matmul_concurrent_for(local, cl->rank_cores);  // one per thread
            gemm(&g32, Nm, C, E, 3 + rec);  // the router: fp32 whatever --dtype says
            gemm_priced(&ge, rows, C, in_mult * Im, (3 + rec) * local, se_in);
            gemm_priced(&ge, rows, Im, C, (3 + rec) * local, se_out);
            double R_all = imb * rows * local;
            round_bytes += cast * R_all * (2 * C + Im) * 2;
            act_bytes += elem * R_all * Im * (act_fwd * (1 + rec) + act_bwd);
            act_bytes += elem * (Nm * E * (6 + 3 * rec) + Nm * k * C * (7 + 3 * rec) + 2 * Nm * C);
            if (c->num_shared_experts > 0) {
                double Is = Im * c->num_shared_experts;
                gemm(&g, N, C, in_mult * Is / tp, 3 + rec);
                gemm(&g, N, Is / tp, C, 3 + rec);
                act_bytes += elem * N * Is / tp * (act_fwd * (1 + rec) + act_bwd);
            }
            if (EP > 1) {
                double b = Nm * k * keep * row_bytes, trips = 4 + 2 * rec;
                a2a_s += trips * a2a_trip_s(cl, l->a2a, b, EP, r_in, R, imb);
                a2a_s += phase_s(cl, R, r_in - 1, EP - r_in);  // the count exchange
                a2a_intra += trips * b * (r_in - 1) / EP;
                a2a_inter += trips * b * (EP - r_in) / EP;
            }
        } else {
            double I = c->intermediate_size;
            gemm(&g, N, C, in_mult * I / tp, 3 + rec);
            gemm(&g, N, I / tp, C, 3 + rec);
            round_bytes += cast * N * (2 * C + I) * 2;
            act_bytes += elem * N * I / tp * (act_fwd * (1 + rec) + act_bwd);
        }
    }
    // LM head (fused with the loss: logits chunks written, soft-maxed, turned into their
    // gradient) on the last stage; with a pipeline the stages are balanced, so it counts once.
    gemm(&g, N, C, V / tp, 3);
    mem_bytes += elem * N * V / tp * 4;
    round_bytes += cast * N * C * 3;
    // Mixed precision: every weight rounded once per step into the kernels' copy.
    round_bytes += l->dtype == PLAN_FP32 ? 0 : (double)numel * (4 + (l->dtype == PLAN_FP16 ? 4 : 2)) / micro;
    if (experts_concurrent && cl->concurrent_gain > 1) ge.gemm_s /= cl->concurrent_gain;
    ge.gemm_s *= imb, ge.flops *= imb;
    r->gemm_dense_s = g.gemm_s + g32.gemm_s - 0;  // head separated below
    r->gemm_expert_s = ge.gemm_s;
    {
        gemm_acc h = {cl, l->dtype, 0, 0};
        gemm(&h, N, C, V / tp, 3);
        r->gemm_head_s = h.gemm_s;
        r->gemm_dense_s -= h.gemm_s;
    }
    r->attention_s = attn_s;
    r->memory_bound_s =
        mem_bytes / cl->mem_bw + act_bytes / (cl->act_bw > 0 ? cl->act_bw : cl->mem_bw) +
        round_bytes / (cl->round_bw > 0 ? cl->round_bw : cl->mem_bw);
    // Chunked exchange: chunk j's experts compute while chunk j+1 travels.
    double hidden = 0;
    if (l->a2a_chunks > 1) hidden = fmin(a2a_s, r->gemm_expert_s) * (1 - 1.0 / l->a2a_chunks);
    double compute_micro = r->gemm_dense_s + r->gemm_head_s + r->gemm_expert_s + r->attention_s +
                           r->memory_bound_s;
    hidden += l->overlap_a2a * fmin(a2a_s - hidden, compute_micro);
    // Tensor parallelism: 2 all-reduces of the (N,C) activations forward, 2 backward per
    // layer (bf16), among tp ranks of one node.
    double tp_s = tp > 1 ? Ls * (4 + 2 * rec) * plan_allreduce_s(cl, cl->intra_bw, R, N * C * 2, tp, tp) : 0;
    // One micro-batch's step through the stage, then the pipeline's fill and drain.
    double micro_s = compute_micro + a2a_s - hidden + tp_s;
    double p2p = pp > 1 ? 2 * N * C * 2 / fmin(cl->inter_bw, cl->intra_bw) + 2 * cl->inter_lat : 0;
    micro_s += p2p;
    r->a2a_s = a2a_s * micro, r->a2a_hidden_s = hidden * micro, r->tp_s = tp_s * micro;
    r->bubble_s = (pp - 1) * micro_s;
    r->compute_s = compute_micro * micro;
    r->gemm_dense_s *= micro, r->gemm_expert_s *= micro, r->gemm_head_s *= micro;
    r->attention_s *= micro, r->memory_bound_s *= micro;
    // Gradients: dense summed over the data-parallel ranks, experts over their EDP
    // group (strided by EP: on other nodes once EP >= R); ZeRO-1's reduce-scatter plus
    // all-gather moves the all-reduce's volume.
    int dp = l->P / (tp * pp), S = dp / EP;
    int m_dense = R / (tp < R ? tp : R), m_exp = EP < R ? R / EP : 1;
    size_t X = numel - dense;
    // Gradients are past the caches: inside a node they move at the bulk rate where the
    // cluster file has one.
    const double grad_bw = cl->intra_bulk_bw > 0 ? cl->intra_bulk_bw : cl->intra_bw;
    double gd = plan_allreduce_s(cl, grad_bw, R, 4.0 * dense, dp, m_dense < dp ? m_dense : dp);
    double gx = X ? plan_allreduce_s(cl, grad_bw, R, 4.0 * X, S, m_exp < S ? m_exp : S) : 0;
    // bagualu's deterministic reduction sums on the CPU: each rank adds its 1/n segment
    // over the n ranks in rank order, reading the n parts and writing the sum once
    // (comm/dist_common.c, dist_sum_rank_order_f32).
    const double sum_bw = cl->reduce_bw > 0 ? cl->reduce_bw : cl->mem_bw;
    r->grad_sum_s = 0;
    if (dp > 1) r->grad_sum_s += 4.0 * dense / dp * (dp + 1) / sum_bw;
    if (X && S > 1) r->grad_sum_s += 4.0 * X / S * (S + 1) / sum_bw;
    r->grad_s = gd + gx + r->grad_sum_s;
    r->grad_bytes = dp > 1 ? 2.0 * (dp - 1) / dp * 4 * dense : 0;
    if (S > 1) r->grad_bytes += 2.0 * (S - 1) / S * 4 * X;
    // The step's small all-reduces over the data-parallel ranks (train/trainer.c's step):
    // the loss and the gradient norm; per MoE layer and forward its router statistics,
    // and with a capacity its dropped rows (the metrics' routing health and stop flag
    // follow the step, outside train's step_s).
    const double small = 1 + micro * (1 + moe_layers * (cf > 0 ? 2 : 1));
    r->collectives_s = small * small_allreduce_s(cl, R, dp, m_dense < dp ? m_dense : dp);
    r->grad_hidden_s = fmin(l->overlap_grad * r->grad_s, (2.0 / 3) * r->compute_s);
    // AdamW reads p, g, m, v and writes p, m, v over the owned elements; gradients are
    // zeroed and the norm reads the owned slice; fp16 checks every gradient.
    double opt_bytes = 28.0 * owned + 4.0 * numel + 4.0 * owned + (l->dtype == PLAN_FP16 ? 4.0 * numel : 0);
    r->optimizer_s = opt_bytes / (cl->opt_bw > 0 ? cl->opt_bw : cl->mem_bw);
    r->step_s = micro * micro_s + r->bubble_s + r->grad_s - r->grad_hidden_s + r->collectives_s + r->optimizer_s;
    r->a2a_bytes_inter = a2a_inter * micro, r->a2a_bytes_intra = a2a_intra * micro;
    double tokens = N * micro * dp;
    r->flops_model = model_flops_per_token(c, l->T) * N * micro / (tp * pp);
    r->flops_executed = (g.flops + g32.flops + ge.flops + attn_flops) * micro;
    r->tokens_per_s = tokens / r->step_s;
    double peak = cl->peak[l->dtype] > 0 ? cl->peak[l->dtype] : cl->peak[PLAN_FP32];
    r->mfu = model_flops_per_token(c, l->T) * r->tokens_per_s / (l->P * peak);
}
