#include "train/grad_overlap.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

// The parameter block holds the embeddings, layer 0, ..., layer L-1, the final norm
// and the LM head (dense), then layer 0's, ..., layer L-1's experts: when layer l's
// backward is done, everything from layer l's first tensor to the end of each part is
// final, so each layer posts one range of each part. The token embedding, first and
// largest, is written by the embedding's backward last, but only in the rows of the
// step's tokens: the other rows leave at the first block boundary.
void grad_overlap_init(grad_overlap *g, model *m, int scatter) {
    BG_ASSERT(m->par);
    const dist_layout *L = m->par->layout;
    const param_table *t = &m->table;
    int layers = m->cfg.num_hidden_layers;
    *g = (grad_overlap){.scatter = scatter, .layers = layers, .m = m};
    g->dense = dist_grad_reduce_new(L->world);
    if (t->numel > t->dense_numel && L->edp_size > 1) g->experts = dist_grad_reduce_new(L->edp_comm);
    g->dense_lo = bg_malloc(sizeof(size_t) * 2 * (size_t)layers);
    g->expert_lo = g->dense_lo + layers;
    for (int l = 0; l < layers; l++) g->dense_lo[l] = t->dense_numel, g->expert_lo[l] = t->numel;
    for (int i = 0; i < t->count; i++) {
        const param_tensor *p = &t->tensors[i];
        if (p->layer < 0) continue;
        size_t *lo = p->expert >= 0 ? &g->expert_lo[p->layer] : &g->dense_lo[p->layer];
        if (p->offset < *lo) *lo = p->offset;
    }
    // A layer without experts (or a rank without them) begins where the next one does.
    for (int l = layers - 2; l >= 0; l--)
        if (g->expert_lo[l] > g->expert_lo[l + 1]) g->expert_lo[l] = g->expert_lo[l + 1];
    const param_tensor *wte = param_table_find(t, "model.embed_tokens.weight");
    BG_ASSERT(wte && wte->ndim == 2 && (layers == 0 || wte->offset + wte->numel <= g->dense_lo[0]));
    g->wte_off = wte->offset;
    g->wte_rows = (int)wte->shape[0];
    g->C = (int)wte->shape[1];
    g->tokens = m->acts.N;
    g->all_tokens = bg_malloc(sizeof(int32_t) * (size_t)g->tokens * (size_t)L->world_size);
    g->touched = bg_malloc((size_t)g->wte_rows);
}

void grad_overlap_free(grad_overlap *g) {
    dist_grad_reduce_free(g->dense);
    dist_grad_reduce_free(g->experts);
    free(g->dense_lo);
    free(g->all_tokens);
    free(g->touched);
    *g = (grad_overlap){0};
}

// Posts the embedding's rows whose touched flag is `which`, run by run.
static void post_rows(grad_overlap *g, int which) {
    size_t C = (size_t)g->C;
    for (int r = 0; r < g->wte_rows;) {
        if (g->touched[r] != which) {
            r++;
            continue;
        }
        int r1 = r;
        while (r1 < g->wte_rows && g->touched[r1] == which) r1++;
        dist_grad_reduce_post(g->dense, g->wte_off + r * C, g->wte_off + r1 * C);
        r = r1;
    }
}

// Sends leave after an FFN block, whose MoE exchanges are then over, so they drain
// during the attention block's compute instead of delaying the next exchange (over TCP
// both share one connection): at most a socket's buffers' worth in flight (what moves
// without an MPI call; scripts/cluster.sh sets 4 MiB each way).
enum { GRAD_OVERLAP_WINDOW = 8 << 20 };

static void on_block(void *ctx, int layer, int layer_done) {
    grad_overlap *g = ctx;
    size_t D = g->m->table.dense_numel, window = layer_done ? 0 : GRAD_OVERLAP_WINDOW;
    if (!g->rows_posted) post_rows(g, 0), g->rows_posted = 1;
    if (layer_done) {
        size_t lo = g->dense_lo[layer];
        if (lo < g->dense_posted) dist_grad_reduce_post(g->dense, lo, g->dense_posted), g->dense_posted = lo;
        lo = g->expert_lo[layer];
        if (g->experts && lo < g->expert_posted) {
            dist_grad_reduce_post(g->experts, lo - D, g->expert_posted - D);
            g->expert_posted = lo;
        }
    }
    dist_grad_reduce_progress(g->dense, window);
    if (g->experts) dist_grad_reduce_progress(g->experts, window);
}

void grad_overlap_begin(grad_overlap *g, const int *inputs) {
    model *m = g->m;
    size_t D = m->table.dense_numel, X = m->table.numel - D;
    // Every rank must post the same ranges: the rows of the whole global batch.
    dist_allgather_i32(m->par->layout->world, (const int32_t *)inputs, g->all_tokens, g->tokens);
    memset(g->touched, 0, (size_t)g->wte_rows);
    for (size_t i = 0; i < (size_t)g->tokens * (size_t)m->par->layout->world_size; i++)
        g->touched[g->all_tokens[i]] = 1;
    dist_grad_reduce_begin(g->dense, m->grads, D, g->scatter);
    if (g->experts) dist_grad_reduce_begin(g->experts, m->grads + D, X, g->scatter);
    g->dense_posted = D;
    g->expert_posted = m->table.numel;
    g->rows_posted = 0;
    m->backward_hook = on_block;
    m->backward_hook_ctx = g;
}

void grad_overlap_end(grad_overlap *g) {
    model *m = g->m;
    size_t D = m->table.dense_numel, wte_end = g->wte_off + (size_t)g->wte_rows * (size_t)g->C;
    m->backward_hook = NULL;
    m->backward_hook_ctx = NULL;
    if (g->rows_posted) {  // the batch's rows, then what lies around the embedding
        post_rows(g, 1);
        dist_grad_reduce_post(g->dense, 0, g->wte_off);
        if (wte_end < g->dense_posted) dist_grad_reduce_post(g->dense, wte_end, g->dense_posted);
    } else {
        dist_grad_reduce_post(g->dense, 0, g->dense_posted);
    }
    if (g->experts) dist_grad_reduce_post(g->experts, 0, g->expert_posted - D);
    dist_grad_reduce_end(g->dense);
    if (g->experts) dist_grad_reduce_end(g->experts);
}
