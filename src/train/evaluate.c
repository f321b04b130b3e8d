#include "train/evaluate.h"
#include "core/error.h"
#include "data/loader.h"
#include "data/shard_set.h"

#include <stdlib.h>

int eval_shard_loss(model *m, const char *data, int B, int T, int *batches, double *loss) {
    if (model_check_routing_groups(&m->cfg, B, T) != BG_OK) return BG_ERR;
    shard_set set;
    data_loader loader;
    if (shard_set_open(&set, data, m->cfg.vocab_size, 1) != BG_OK) return BG_ERR;
    if (loader_init(&loader, &set, T, 0, data) != BG_OK) {
        shard_set_free(&set);
        return BG_ERR;
    }
    if (loader.windows < (size_t)B) {
        bg_error("%s: %zu windows of %d tokens, fewer than one batch of %d sequences (lower --batch-size)",
                 data, loader.windows, T + 1, B);
        loader_free(&loader);
        shard_set_free(&set);
        return BG_ERR;
    }
    size_t available = loader.windows / (size_t)B;
    if (!*batches || (size_t)*batches > available) *batches = (int)available;
    // Loss only: the fused LM head (long batches) then skips its two gradient GEMMs.
    int no_grad = m->opt.no_grad;
    m->opt.no_grad = 1;
    int *inputs = bg_malloc(sizeof(int) * (size_t)B * T), *targets = bg_malloc(sizeof(int) * (size_t)B * T);
    double sum = 0;
    size_t w = 0;
    for (int i = 0; i < *batches; i++) {
        for (int b = 0; b < B; b++, w++)
            loader_window(&loader, w, inputs + (size_t)b * T, targets + (size_t)b * T);
        // One process: no exchange, nothing that can stop the forward.
        int ok = model_forward(m, inputs, targets);
        BG_ASSERT(ok == BG_OK);
        sum += m->loss;
    }
    m->opt.no_grad = no_grad;
    *loss = sum / *batches;
    free(inputs);
    free(targets);
    loader_free(&loader);
    shard_set_free(&set);
    return BG_OK;
}
