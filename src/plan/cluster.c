// Cluster files: parsing with one-line errors, writing, the GEMM rate curve.
#include "plan/cluster.h"
#include "core/error.h"
#include "core/text_file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dtype_names[PLAN_NDTYPES] = {"fp32", "bf16", "fp16", "fp8"};
static const char *class_names[PLAN_GEMM_CLASSES] = {"skinny", "medium", "square"};

double plan_gemm_ai(double M, double K, double N) { return M * K * N / (2 * (M * K + K * N + M * N)); }

plan_gemm_class plan_gemm_class_of(double M, double K, double N) {
    double ai = plan_gemm_ai(M, K, N);
    return ai < 20 ? PLAN_GEMM_SKINNY : ai < 60 ? PLAN_GEMM_MEDIUM : PLAN_GEMM_SQUARE;
}

const char *plan_dtype_name(plan_dtype d) { return d < PLAN_NDTYPES ? dtype_names[d] : "?"; }

int plan_dtype_parse(const char *name, plan_dtype *d) {
    for (int i = 0; i < PLAN_NDTYPES; i++)
        if (!strcmp(name, dtype_names[i])) return *d = (plan_dtype)i, BG_OK;
    return bg_error("dtype must be fp32, bf16, fp16 or fp8, got \"%s\"", name);
}

// A number under `key` of `obj`: required or not, > 0 (positive) or >= 0.
static int get_num(const cJSON *obj, const char *key, const char *where, const char *origin,
                   int required, int positive, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return required ? bg_error("%s: missing key \"%s%s\"", origin, where, key) : BG_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return bg_error("%s: \"%s%s\" must be a number", origin, where, key);
    double x = v->valuedouble;
    if (positive ? !(x > 0) : !(x >= 0))
        return bg_error("%s: \"%s%s\" must be %s, got %g", origin, where, key,
                        positive ? "positive" : "non-negative", x);
    *out = x;
    return BG_OK;
}

static int get_int(const cJSON *obj, const char *key, const char *origin, int required, int *out) {
    double x = *out;
    if (get_num(obj, key, "", origin, required, 1, &x) != BG_OK) return BG_ERR;
    if (x != floor(x) || x > 1e9) return bg_error("%s: \"%s\" must be a whole number, got %g", origin, key, x);
    *out = (int)x;
    return BG_OK;
}

static int check_keys(const cJSON *obj, const char *const *allowed, const char *where,
                      const char *origin) {
    for (const cJSON *v = obj->child; v; v = v->next) {
        int ok = 0;
        for (int i = 0; allowed[i]; i++) ok |= !strcmp(v->string, allowed[i]);
        if (!ok) return bg_error("%s: unknown key \"%s%s\"", origin, where, v->string);
    }
    return BG_OK;
}

static int get_object(const cJSON *root, const char *key, const char *origin, int required,
                      const cJSON **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = NULL;
    if (!v) return required ? bg_error("%s: missing key \"%s\"", origin, key) : BG_OK;
    if (!cJSON_IsObject(v)) return bg_error("%s: \"%s\" must be an object", origin, key);
    *out = v;
    return BG_OK;
}

static int parse_dtype_keys(const cJSON *obj, const char *key, const char *origin) {
    for (const cJSON *v = obj->child; v; v = v->next) {
        plan_dtype d;
        if (plan_dtype_parse(v->string, &d) != BG_OK)
            return bg_error("%s: \"%s\" has key \"%s\": not fp32, bf16, fp16 or fp8", origin, key, v->string);
    }
    return BG_OK;
}

static int parse_curve(plan_gemm_curve *g, const cJSON *arr, const char *dt, const char *origin) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1 || cJSON_GetArraySize(arr) > PLAN_GEMM_POINTS)
        return bg_error("%s: \"gemm.%s\" must be a list of 1..%d [flops, rate] pairs", origin, dt, PLAN_GEMM_POINTS);
    g->n = 0;
    for (const cJSON *p = arr->child; p; p = p->next) {
        // [flops, rate], [flops, rate, intensity] or [flops, rate, intensity, cached rate]
        const int size = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0;
        int good = size >= 2 && size <= 4;
        double v[4] = {0};
        for (int i = 0; good && i < size; i++) {
            const cJSON *x = cJSON_GetArrayItem(p, i);
            good = cJSON_IsNumber(x) && x->valuedouble > 0 && isfinite(x->valuedouble);
            if (good) v[i] = x->valuedouble;
        }
        if (!good)
            return bg_error("%s: \"gemm.%s\" point %d must be [flops > 0, rate > 0], optionally followed by "
                            "intensity > 0 and cached rate > 0", origin, dt, g->n);
        if (g->n && v[0] <= g->flops[g->n - 1])
            return bg_error("%s: \"gemm.%s\" points must have increasing flops", origin, dt);
        g->flops[g->n] = v[0], g->ai[g->n] = v[2], g->cached[g->n] = v[3];
        g->rate[g->n++] = v[1];
    }
    plan_gemm_curve_finish(g);
    return BG_OK;
}

static int parse_root(plan_cluster *c, const cJSON *root, const char *origin) {
    static const char *const top[] = {"name", "sources", "notes", "assumptions", "nodes", "ranks_per_node",
        "cores_per_rank", "node_memory_bandwidth", "activation_bandwidth", "optimizer_bandwidth", "node_optimizer_bandwidth", "rounding_bandwidth", "node_rounding_bandwidth", "node_gemm_speedup", "node_activation_speedup", "peak_flops", "gemm", "gemm_efficiency", "attention_efficiency", "attention_rate",
        "memory_per_node", "memory_bandwidth", "reduce_bandwidth", "cache_bytes", "cache_bandwidth", "intra_node", "inter_node", "topology", NULL};
    static const char *const link[] = {"bandwidth", "latency", "gap", "sync", "exchange_bandwidth", NULL};
    static const char *const intra_keys[] = {"bandwidth", "latency", "gap", "sync", "bulk_bandwidth", NULL};
    static const char *const topo[] = {"supernode_nodes", "oversubscription", NULL};
    if (check_keys(root, top, "", origin) != BG_OK) return BG_ERR;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (name && !cJSON_IsString(name)) return bg_error("%s: \"name\" must be a string", origin);
    snprintf(c->name, sizeof c->name, "%s", name ? name->valuestring : origin);
    if (get_int(root, "nodes", origin, 1, &c->nodes) || get_int(root, "ranks_per_node", origin, 1, &c->ranks_per_node) ||
        get_int(root, "cores_per_rank", origin, 1, &c->cores_per_rank))
        return BG_ERR;
    const cJSON *peak, *gemm, *intra, *inter, *topology;
    if (get_object(root, "peak_flops", origin, 1, &peak) || parse_dtype_keys(peak, "peak_flops", origin))
        return BG_ERR;
    int any = 0;
    for (int d = 0; d < PLAN_NDTYPES; d++) {
        if (get_num(peak, dtype_names[d], "peak_flops.", origin, 0, 1, &c->peak[d])) return BG_ERR;
        any |= c->peak[d] > 0;
    }
    if (!any) return bg_error("%s: \"peak_flops\" names no dtype", origin);
    if (get_object(root, "gemm", origin, 0, &gemm)) return BG_ERR;
    if (gemm) {
        if (parse_dtype_keys(gemm, "gemm", origin)) return BG_ERR;
        for (const cJSON *v = gemm->child; v; v = v->next) {
            plan_dtype d = PLAN_FP32;
            plan_dtype_parse(v->string, &d);
            if (!(c->peak[d] > 0)) return bg_error("%s: \"gemm.%s\" without \"peak_flops.%s\"", origin, v->string, v->string);
            if (cJSON_IsArray(v)) {  // one curve for every class
                if (parse_curve(&c->gemm[d][PLAN_GEMM_MEDIUM], v, v->string, origin)) return BG_ERR;
                continue;
            }
            if (!cJSON_IsObject(v)) return bg_error("%s: \"gemm.%s\" must be a list or an object of classes", origin, v->string);
            for (const cJSON *k = v->child; k; k = k->next) {
                int cls = -1;
                for (int i = 0; i < PLAN_GEMM_CLASSES; i++)
                    if (!strcmp(k->string, class_names[i])) cls = i;
                if (cls < 0) return bg_error("%s: unknown key \"gemm.%s.%s\" (skinny, medium, square)", origin, v->string, k->string);
                char where[32];
                snprintf(where, sizeof where, "%s.%s", v->string, k->string);
                if (parse_curve(&c->gemm[d][cls], k, where, origin)) return BG_ERR;
            }
        }
    }
    const cJSON *att;
    if (get_object(root, "attention_rate", origin, 0, &att)) return BG_ERR;
    if (att) {
        if (parse_dtype_keys(att, "attention_rate", origin)) return BG_ERR;
        for (int d = 0; d < PLAN_NDTYPES; d++)
            if (get_num(att, dtype_names[d], "attention_rate.", origin, 0, 1, &c->attention_rate[d])) return BG_ERR;
    }
    c->gemm_efficiency = 0.7;
    c->attention_efficiency = 0.5;
    if (get_num(root, "gemm_efficiency", "", origin, 0, 1, &c->gemm_efficiency) ||
        get_num(root, "attention_efficiency", "", origin, 0, 1, &c->attention_efficiency))
        return BG_ERR;
    if (c->gemm_efficiency > 1 || c->attention_efficiency > 1)
        return bg_error("%s: efficiencies must be at most 1", origin);
    if (get_num(root, "memory_per_node", "", origin, 1, 1, &c->mem_per_node) ||
        get_num(root, "memory_bandwidth", "", origin, 1, 1, &c->mem_bw) ||
        get_num(root, "node_memory_bandwidth", "", origin, 0, 1, &c->node_mem_bw) ||
        get_num(root, "activation_bandwidth", "", origin, 0, 1, &c->act_bw) ||
        get_num(root, "optimizer_bandwidth", "", origin, 0, 1, &c->opt_bw) ||
        get_num(root, "node_optimizer_bandwidth", "", origin, 0, 1, &c->node_opt_bw) ||
        get_num(root, "rounding_bandwidth", "", origin, 0, 1, &c->round_bw) ||
        get_num(root, "node_rounding_bandwidth", "", origin, 0, 1, &c->node_round_bw) ||
        get_num(root, "reduce_bandwidth", "", origin, 0, 1, &c->reduce_bw) ||
        get_num(root, "node_gemm_speedup", "", origin, 0, 1, &c->node_gemm_speedup) ||
        get_num(root, "node_activation_speedup", "", origin, 0, 1, &c->node_act_speedup) ||
        get_num(root, "cache_bytes", "", origin, 0, 1, &c->cache_bytes) ||
        get_num(root, "cache_bandwidth", "", origin, 0, 1, &c->cache_bw))
        return BG_ERR;
    if ((c->cache_bytes > 0) != (c->cache_bw > 0))
        return bg_error("%s: \"cache_bytes\" and \"cache_bandwidth\" go together", origin);
    if (c->node_gemm_speedup > c->ranks_per_node || c->node_act_speedup > c->ranks_per_node)
        return bg_error("%s: a node speedup must be at most ranks_per_node (%d)", origin, c->ranks_per_node);
    if (get_object(root, "intra_node", origin, 1, &intra) || check_keys(intra, intra_keys, "intra_node.", origin) ||
        get_num(intra, "bandwidth", "intra_node.", origin, 1, 1, &c->intra_bw) ||
        get_num(intra, "bulk_bandwidth", "intra_node.", origin, 0, 1, &c->intra_bulk_bw) ||
        get_num(intra, "latency", "intra_node.", origin, 1, 0, &c->intra_lat))
        return BG_ERR;
    c->intra_gap = -1, c->inter_gap = -1, c->inter_sync = 0, c->inter_xbw = 0;
    if (get_num(intra, "gap", "intra_node.", origin, 0, 0, &c->intra_gap)) return BG_ERR;
    if (cJSON_GetObjectItemCaseSensitive(intra, "sync"))
        return bg_error("%s: \"intra_node.sync\": the phase wait is \"inter_node.sync\"", origin);
    if (get_object(root, "inter_node", origin, c->nodes > 1, &inter)) return BG_ERR;
    c->inter_bw = c->intra_bw, c->inter_lat = c->intra_lat, c->inter_gap = inter ? -1 : c->intra_gap;
    if (inter && (check_keys(inter, link, "inter_node.", origin) ||
                  get_num(inter, "bandwidth", "inter_node.", origin, 1, 1, &c->inter_bw) ||
                  get_num(inter, "latency", "inter_node.", origin, 1, 0, &c->inter_lat) ||
                  get_num(inter, "gap", "inter_node.", origin, 0, 0, &c->inter_gap) ||
                  get_num(inter, "sync", "inter_node.", origin, 0, 0, &c->inter_sync) ||
                  get_num(inter, "exchange_bandwidth", "inter_node.", origin, 0, 1, &c->inter_xbw)))
        return BG_ERR;
    if (c->intra_gap < 0) c->intra_gap = c->intra_lat;  // absent: one latency a message
    if (c->inter_gap < 0) c->inter_gap = c->inter_lat;
    c->supernode_nodes = 0;
    c->oversubscription = 1;
    if (get_object(root, "topology", origin, 0, &topology)) return BG_ERR;
    if (topology) {
        double sn = 0;
        if (check_keys(topology, topo, "topology.", origin) ||
            get_num(topology, "supernode_nodes", "topology.", origin, 0, 0, &sn) ||
            get_num(topology, "oversubscription", "topology.", origin, 0, 1, &c->oversubscription))
            return BG_ERR;
        if (sn != floor(sn) || sn > 1e9)  // as get_int: the value must fit an int
            return bg_error("%s: \"topology.supernode_nodes\" must be a whole number, got %g", origin, sn);
        if (c->oversubscription < 1) return bg_error("%s: \"topology.oversubscription\" must be >= 1", origin);
        c->supernode_nodes = (int)sn;
    }
    return BG_OK;
}

int plan_cluster_parse(plan_cluster *c, const char *json, const char *origin) {
    memset(c, 0, sizeof *c);
    cJSON *root = cJSON_Parse(json);
    if (!root) return bg_error("%s: not valid JSON (near \"%.20s\")", origin,
                               cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "");
    int rc = cJSON_IsObject(root) ? parse_root(c, root, origin)
                                  : bg_error("%s: a cluster file must be a JSON object", origin);
    cJSON_Delete(root);
    return rc;
}

int plan_cluster_load(plan_cluster *c, const char *path) {
    char *text = bg_read_text_file(path, 1 << 20, NULL);
    if (!text) return BG_ERR;
    int rc = plan_cluster_parse(c, text, path);
    free(text);
    return rc;
}

// cJSON prints 15 significant digits whenever they read back within an epsilon, which
// can lose the last bit; the fewest of 15..17 digits that read back exactly keep
// plan_cluster_to_json's promise (and give cJSON's text whenever 15 digits are exact).
static cJSON *exact_number(double x) {
    if (!isfinite(x)) return cJSON_CreateNull();  // as cJSON writes it
    if (x == 0) x = 0;                            // -0 as "0", as cJSON writes it
    char buf[32];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    return cJSON_CreateRaw(buf);
}

static void add_number(cJSON *obj, const char *key, double x) {
    cJSON_AddItemToObject(obj, key, exact_number(x));
}

char *plan_cluster_to_json(const plan_cluster *c, const char *source_note) {
    cJSON *root = cJSON_CreateObject(), *peak = cJSON_CreateObject(), *gemm = cJSON_CreateObject(), *att = NULL;
    cJSON_AddStringToObject(root, "name", c->name);
    if (source_note) cJSON_AddStringToObject(root, "sources", source_note);
    cJSON_AddNumberToObject(root, "nodes", c->nodes);
    cJSON_AddNumberToObject(root, "ranks_per_node", c->ranks_per_node);
    cJSON_AddNumberToObject(root, "cores_per_rank", c->cores_per_rank);
    for (int d = 0; d < PLAN_NDTYPES; d++) {
        if (c->peak[d] > 0) add_number(peak, dtype_names[d], c->peak[d]);
        if (c->attention_rate[d] > 0) {
            if (!att) att = cJSON_CreateObject();
            add_number(att, dtype_names[d], c->attention_rate[d]);
        }
        cJSON *classes = NULL;
        for (int k = 0; k < PLAN_GEMM_CLASSES; k++) {
            const plan_gemm_curve *g = &c->gemm[d][k];
            if (!g->n) continue;
            if (!classes) classes = cJSON_AddObjectToObject(gemm, dtype_names[d]);
            cJSON *arr = cJSON_AddArrayToObject(classes, class_names[k]);
            for (int i = 0; i < g->n; i++) {
                cJSON *p = cJSON_CreateArray();
                cJSON_AddItemToArray(p, exact_number(g->flops[i]));
                cJSON_AddItemToArray(p, exact_number(g->rate[i]));
                if (g->ai[i] > 0) cJSON_AddItemToArray(p, exact_number(g->ai[i]));
                if (g->ai[i] > 0 && g->cached[i] > 0) cJSON_AddItemToArray(p, exact_number(g->cached[i]));
                cJSON_AddItemToArray(arr, p);
            }
        }
    }
    if (att) cJSON_AddItemToObject(root, "attention_rate", att);
    cJSON_AddItemToObject(root, "peak_flops", peak);
    cJSON_AddItemToObject(root, "gemm", gemm);
    add_number(root, "gemm_efficiency", c->gemm_efficiency);
    add_number(root, "attention_efficiency", c->attention_efficiency);
    add_number(root, "memory_per_node", c->mem_per_node);
    add_number(root, "memory_bandwidth", c->mem_bw);
    if (c->node_mem_bw > 0) add_number(root, "node_memory_bandwidth", c->node_mem_bw);
    if (c->act_bw > 0) add_number(root, "activation_bandwidth", c->act_bw);
    if (c->opt_bw > 0) add_number(root, "optimizer_bandwidth", c->opt_bw);
    if (c->node_opt_bw > 0) add_number(root, "node_optimizer_bandwidth", c->node_opt_bw);
    if (c->round_bw > 0) add_number(root, "rounding_bandwidth", c->round_bw);
    if (c->node_round_bw > 0) add_number(root, "node_rounding_bandwidth", c->node_round_bw);
    if (c->reduce_bw > 0) add_number(root, "reduce_bandwidth", c->reduce_bw);
    if (c->node_gemm_speedup > 0) add_number(root, "node_gemm_speedup", c->node_gemm_speedup);
    if (c->node_act_speedup > 0) add_number(root, "node_activation_speedup", c->node_act_speedup);
    if (c->cache_bytes > 0 && c->cache_bw > 0) {
        add_number(root, "cache_bytes", c->cache_bytes);
        add_number(root, "cache_bandwidth", c->cache_bw);
    }
    cJSON *in = cJSON_AddObjectToObject(root, "intra_node"), *out = cJSON_AddObjectToObject(root, "inter_node");
    add_number(in, "bandwidth", c->intra_bw);
    add_number(in, "latency", c->intra_lat);
    add_number(in, "gap", c->intra_gap);
    if (c->intra_bulk_bw > 0) add_number(in, "bulk_bandwidth", c->intra_bulk_bw);
    add_number(out, "bandwidth", c->inter_bw);
    add_number(out, "latency", c->inter_lat);
    add_number(out, "gap", c->inter_gap);
    add_number(out, "sync", c->inter_sync);
    if (c->inter_xbw > 0) add_number(out, "exchange_bandwidth", c->inter_xbw);
    cJSON *t = cJSON_AddObjectToObject(root, "topology");
    cJSON_AddNumberToObject(t, "supernode_nodes", c->supernode_nodes);
    add_number(t, "oversubscription", c->oversubscription);
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

static double curve_at(const plan_gemm_curve *g, double flops) {
    if (flops <= g->flops[0]) return g->rate[0];
    if (flops >= g->flops[g->n - 1]) return g->rate[g->n - 1];
    int i = 1;
    while (g->flops[i] < flops) i++;
    double u = (log(flops) - log(g->flops[i - 1])) / (log(g->flops[i]) - log(g->flops[i - 1]));
    return g->rate[i - 1] + u * (g->rate[i] - g->rate[i - 1]);
}

void plan_gemm_curve_finish(plan_gemm_curve *g) {
    double s = 0;
    g->typical_ai = 0;
    for (int i = 0; i < g->n; i++) {
        if (!(g->ai[i] > 0)) return;
        s += log(g->ai[i]);
    }
    if (g->n) g->typical_ai = exp(s / g->n);
}

// A rank on `share` times the file's cores, with `speedup` measured on all of a node's
// ranks_per_node shares: linear in the cores between 1 and that point.
static double cores_factor(const plan_cluster *c, double share, double speedup) {
    if (share <= 1 || speedup <= 0 || c->ranks_per_node <= 1) return share;
    return 1 + (share - 1) * (speedup - 1) / (c->ranks_per_node - 1);
}

void plan_cluster_scale_rates(plan_cluster *c, double share) {
    const double fg = cores_factor(c, share, c->node_gemm_speedup);
    c->rank_cores = c->cores_per_rank * share;
    c->concurrent_gain = share > 1 && fg > 0 && fg < share ? share / fg : 1;
    for (int d = 0; d < PLAN_NDTYPES; d++) {
        c->peak[d] *= fg, c->attention_rate[d] *= fg;
        for (int k = 0; k < PLAN_GEMM_CLASSES; k++)
            for (int i = 0; i < c->gemm[d][k].n; i++) c->gemm[d][k].rate[i] *= fg, c->gemm[d][k].cached[i] *= fg;
    }
    c->cache_bw *= share;
    c->mem_bw *= share, c->act_bw *= cores_factor(c, share, c->node_act_speedup), c->opt_bw *= share;
    c->round_bw *= share;
    // The reduction's copies and sums are one thread's: slower on a core's share, no
    // faster on more cores.
    const double one = share < 1 ? share : 1;
    c->intra_bulk_bw *= one, c->reduce_bw *= one;
}

double plan_cluster_exchange_bw(const plan_cluster *c) { return c->inter_xbw > 0 ? c->inter_xbw : c->inter_bw; }

int plan_cluster_cache_resident(plan_cluster *c, double r_bytes, int R) {
    // Ranks that take turns on a core (more on the node than the file's) evict each
    // other's state at every switch: tiny_moe at 4 ranks on 2 cores ran at the cold rates.
    if (!(c->cache_bytes > 0 && c->cache_bw > 0) || r_bytes * R > c->cache_bytes || R > c->ranks_per_node)
        return 0;
    for (int d = 0; d < PLAN_NDTYPES; d++)
        for (int k = 0; k < PLAN_GEMM_CLASSES; k++)
            for (int i = 0; i < c->gemm[d][k].n; i++)
                if (c->gemm[d][k].cached[i] > 0) c->gemm[d][k].rate[i] = c->gemm[d][k].cached[i];
    c->mem_bw = fmax(c->mem_bw, c->cache_bw);
    if (c->opt_bw > 0) c->opt_bw = fmax(c->opt_bw, c->cache_bw);
    if (c->round_bw > 0) c->round_bw = fmax(c->round_bw, c->cache_bw);
    return 1;
}

double plan_gemm_rate(const plan_cluster *c, plan_dtype d, double M, double K, double N) {
    // The shape's class, else the nearest class with a curve.
    int cls = plan_gemm_class_of(M, K, N);
    const plan_gemm_curve *g = NULL;
    for (int dist = 0; dist < PLAN_GEMM_CLASSES && !g; dist++)
        for (int s = -1; s <= 1 && !g; s += 2) {
            int k = cls + s * dist;
            if (k >= 0 && k < PLAN_GEMM_CLASSES && c->gemm[d][k].n) g = &c->gemm[d][k];
        }
    if (!g) return c->peak[d] * c->gemm_efficiency;
    double flops = 2 * M * K * N, rate = curve_at(g, flops);
    // Where the curves know their intensities, a shape between the class's typical one
    // and the next class's takes a rate between theirs (log-linear in intensity): near a
    // boundary the two classes' rates differ by up to 2x (a 32-row GEMM is not a 16-row one).
    double ai = plan_gemm_ai(M, K, N), a0 = g == &c->gemm[d][cls] ? g->typical_ai : 0;
    if (a0 > 0 && ai != a0) {
        int nb = ai < a0 ? cls - 1 : cls + 1;
        const plan_gemm_curve *h = nb >= 0 && nb < PLAN_GEMM_CLASSES && c->gemm[d][nb].n ? &c->gemm[d][nb] : NULL;
        double a1 = h ? h->typical_ai : 0;
        if (a1 > 0 && (a1 - a0) * (ai - a0) > 0) {
            double u = log(ai / a0) / log(a1 / a0);
            if (u > 1) u = 1;
            rate += u * (curve_at(h, flops) - rate);
        }
    }
    return rate;
}
