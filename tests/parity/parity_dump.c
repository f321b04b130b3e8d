// bagualu's side of the PyTorch parity test (tests/parity/test_parity.sh).
//
//   parity_dump CONFIG SEED B T OUT_DIR
//
// For one model config and seed it writes:
//   OUT_DIR/ckpt/step_00000000/   a real checkpoint (ckpt_save) of the initial weights
//                                 (norm weights and biases moved off 1 and 0); the reference loads it
//   OUT_DIR/dump.safetensors      the batch, bagualu's results on it, and its gradients
//   OUT_DIR/ckpt/step_00000002/   the checkpoint after two AdamW steps (params, m, v, step)
//
// dump.safetensors holds (names are this test's own):
//   inputs, targets               I32 (B,T): a deterministic batch drawn from SEED
//   logits                        F32 (B,T,V) of the initial weights
//   loss, aux_loss, z_loss, objective          F64 scalars (model.h defines them)
//   layers.L.topk_idx (N,k) I32, layers.L.counts (E) I32,
//   layers.L.aux_loss, layers.L.z_loss F64     per MoE layer L (diagnostics: the reference
//                                              computes routing itself and compares)
//   grad.NAME                     F32, d(objective)/d(NAME) at the initial weights
//   step1.NAME                    F32, parameters after AdamW step 1 (lr1, grads grad.*)
//   grad2.NAME                    F32, gradients at the step-1 parameters, same batch
//   (step 2 applies grad2 · grad_scale2 with lr2; its result is the step_00000002 checkpoint)
// and metadata with the AdamW hyperparameters, printed with %.9g (exact for floats).
#include "core/error.h"
#include "core/rng.h"
#include "model/config.h"
#include "model/model.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "io/safetensors.h"
#include "train/trainer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_NAME (PARAM_NAME_MAX + 16)

typedef struct {
    st_tensor_in *t;
    char (*names)[MAX_NAME];
    int count, cap;
} dump_list;

static st_tensor_in *dump_add(dump_list *d, const char *name, st_dtype dtype, const void *data,
                              int ndim, const int64_t *shape) {
    BG_ASSERT(d->count < d->cap);
    st_tensor_in *in = &d->t[d->count];
    memset(in, 0, sizeof *in);
    snprintf(d->names[d->count], MAX_NAME, "%s", name);
    in->name = d->names[d->count];
    in->dtype = dtype;
    in->ndim = ndim;
    for (int i = 0; i < ndim; i++) in->shape[i] = shape[i];
    in->data = data;
    d->count++;
    return in;
}

// One tensor per table entry, "PREFIX.NAME", viewing `block` (which must outlive the write).
static void dump_block(dump_list *d, const char *prefix, const param_table *t, const float *block) {
    char name[MAX_NAME];
    for (int i = 0; i < t->count; i++) {
        const param_tensor *p = &t->tensors[i];
        snprintf(name, sizeof name, "%s.%s", prefix, p->name);
        dump_add(d, name, ST_F32, block + p->offset, p->ndim, p->shape);
    }
}

static float *copy_block(const float *src, size_t n) {
    float *dst = bg_malloc(n * sizeof(float));
    memcpy(dst, src, n * sizeof(float));
    return dst;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: parity_dump CONFIG SEED B T OUT_DIR\n");
        return 2;
    }
    const char *config_path = argv[1], *out_dir = argv[5];
    uint64_t seed = strtoull(argv[2], NULL, 10);
    int B = atoi(argv[3]), T = atoi(argv[4]);
    model_config cfg;
    if (model_config_load(&cfg, config_path) != BG_OK) {
        fprintf(stderr, "parity_dump: %s\n", bg_last_error());
        return 2;
    }
    if (B <= 0 || T <= 0 || T > cfg.max_position_embeddings) {
        fprintf(stderr, "parity_dump: bad B or T\n");
        return 2;
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "parity_dump: cannot create %s\n", out_dir);
        return 1;
    }
    char path[4096];

    // A trainer holding just what ckpt_save reads: the model, AdamW state, options.
    trainer tr;
    memset(&tr, 0, sizeof tr);
    train_options_defaults(&tr.opt);
    tr.opt.seed = seed;
    tr.opt.batch_size = B;
    tr.opt.seq_len = T;
    tr.opt.steps = 2;
    tr.cfg = cfg;
    // Hyperparameters chosen so that every term of the update matters: weight decay large
    // enough to see, beta2 != beta1 so that m and v are told apart, two different
    // learning rates, and a gradient scale (the clipping factor) on step 2. The learning
    // rates are large so that an update (~lr) spans >= 1e4 ulps of the parameter it
    // moves (~1): the fp32 rounding of the stored parameters stays far below 1e-4 of
    // the update, which the reference compares on its own.
    tr.hp = (adamw_hparams){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    const float lr1 = 1e-2f, lr2 = 4e-3f, grad_scale2 = 0.5f;
    tr.opt.lr = lr1;
    tr.min_lr = lr2;
    model_init(&tr.m, &cfg, seed);
    tr.loss_scale = 1.0f;  // what trainer_init sets outside fp16 (trainer.json checks it)
    tr.zero = zero_shard_make(0, tr.m.table.dense_numel, tr.m.table.numel, 0, 1, 0, 1);
    adamw_init(&tr.adam, tr.m.table.numel);
    model *m = &tr.m;
    const param_table *table = &m->table;
    size_t numel = table->numel;
    // Norm weights start at 1 and biases at 0, where a reference that dropped them would
    // agree: move them off those values so the comparison sees them.
    bg_rng init_rng;
    bg_rng_seed(&init_rng, seed + 99);
    for (int i = 0; i < table->count; i++) {
        const param_tensor *p = &table->tensors[i];
        if (p->init != INIT_ONES && p->init != INIT_ZEROS) continue;
        float *x = m->params + p->offset;
        for (size_t j = 0; j < p->numel; j++) x[j] += 0.2f * bg_rng_normal(&init_rng);
    }
    snprintf(path, sizeof path, "%s/ckpt", out_dir);
    if (ckpt_save(&tr, path) != BG_OK) {
        fprintf(stderr, "parity_dump: %s\n", bg_last_error());
        return 1;
    }

    // The batch: token ids drawn from a stream of its own, so it does not depend on
    // how many numbers the initialization used.
    int N = B * T, V = cfg.vocab_size;
    int *inputs = bg_malloc(sizeof(int) * N), *targets = bg_malloc(sizeof(int) * N);
    bg_rng rng;
    bg_rng_seed(&rng, seed * 1000003ull + 17);
    for (int i = 0; i < N; i++) inputs[i] = (int)(bg_rng_u64(&rng) % (uint64_t)V);
    for (int i = 0; i < N; i++) targets[i] = (int)(bg_rng_u64(&rng) % (uint64_t)V);

    model_prepare(m, B, T);
    model_zero_grad(m);
    model_forward(m, inputs, targets);
    // backward overwrites the logits with their gradient: keep a copy
    float *logits = copy_block(m->acts.logits, (size_t)N * V);
    double loss = m->loss, aux = m->aux_loss, z = m->z_loss, objective = m->objective;
    int L = cfg.num_hidden_layers, k = cfg.num_experts_per_tok, E = cfg.num_local_experts;
    int *topk = bg_calloc((size_t)L * N * (k > 0 ? k : 1), sizeof(int));
    int *counts = bg_calloc((size_t)L * (E > 0 ? E : 1), sizeof(int));
    double *layer_aux = bg_calloc((size_t)L, sizeof(double));
    double *layer_z = bg_calloc((size_t)L, sizeof(double));
    for (int l = 0; l < L; l++) {
        if (!model_layer_is_moe(&cfg, l)) continue;
        const moe_acts *ma = &m->acts.layers[l].moe;
        memcpy(topk + (size_t)l * N * k, ma->router.topk_idx, sizeof(int) * (size_t)N * k);
        memcpy(counts + (size_t)l * E, ma->dispatch.counts, sizeof(int) * (size_t)E);
        layer_aux[l] = ma->router.aux_loss;
        layer_z[l] = ma->router.z_loss;
    }
    model_backward(m);
    float *grad1 = copy_block(m->grads, numel);

    adamw_update(&tr.adam, m->params, m->grads, table, &tr.hp, lr1, 1.0f);
    float *params1 = copy_block(m->params, numel);

    model_zero_grad(m);
    model_forward(m, inputs, targets);
    model_backward(m);
    float *grad2 = copy_block(m->grads, numel);
    adamw_update(&tr.adam, m->params, m->grads, table, &tr.hp, lr2, grad_scale2);
    tr.step = 2;
    tr.samples = 2 * (uint64_t)B;
    if (ckpt_save(&tr, path) != BG_OK) {
        fprintf(stderr, "parity_dump: %s\n", bg_last_error());
        return 1;
    }

    dump_list d = {0};
    d.cap = 3 * table->count + 6 * L + 8;
    d.t = bg_calloc((size_t)d.cap, sizeof *d.t);
    d.names = bg_calloc((size_t)d.cap, sizeof *d.names);
    int64_t bt[3] = {B, T, V};
    dump_add(&d, "inputs", ST_I32, inputs, 2, bt);
    dump_add(&d, "targets", ST_I32, targets, 2, bt);
    dump_add(&d, "logits", ST_F32, logits, 3, bt);
    dump_add(&d, "loss", ST_F64, &loss, 0, NULL);
    dump_add(&d, "aux_loss", ST_F64, &aux, 0, NULL);
    dump_add(&d, "z_loss", ST_F64, &z, 0, NULL);
    dump_add(&d, "objective", ST_F64, &objective, 0, NULL);
    char name[MAX_NAME];
    for (int l = 0; l < L; l++) {
        if (!model_layer_is_moe(&cfg, l)) continue;
        int64_t nk[2] = {N, k}, e1[1] = {E};
        snprintf(name, sizeof name, "layers.%d.topk_idx", l);
        dump_add(&d, name, ST_I32, topk + (size_t)l * N * k, 2, nk);
        snprintf(name, sizeof name, "layers.%d.counts", l);
        dump_add(&d, name, ST_I32, counts + (size_t)l * E, 1, e1);
        snprintf(name, sizeof name, "layers.%d.aux_loss", l);
        dump_add(&d, name, ST_F64, &layer_aux[l], 0, NULL);
        snprintf(name, sizeof name, "layers.%d.z_loss", l);
        dump_add(&d, name, ST_F64, &layer_z[l], 0, NULL);
    }
    dump_block(&d, "grad", table, grad1);
    dump_block(&d, "step1", table, params1);
    dump_block(&d, "grad2", table, grad2);

    char hp[6][32];
    snprintf(hp[0], sizeof hp[0], "%.9g", (double)tr.hp.beta1);
    snprintf(hp[1], sizeof hp[1], "%.9g", (double)tr.hp.beta2);
    snprintf(hp[2], sizeof hp[2], "%.9g", (double)tr.hp.eps);
    snprintf(hp[3], sizeof hp[3], "%.9g", (double)tr.hp.weight_decay);
    snprintf(hp[4], sizeof hp[4], "%.9g %.9g", (double)lr1, (double)lr2);
    snprintf(hp[5], sizeof hp[5], "%.9g", (double)grad_scale2);
    st_meta meta[] = {{"beta1", hp[0]}, {"beta2", hp[1]},          {"eps", hp[2]},
                      {"weight_decay", hp[3]}, {"lr", hp[4]}, {"grad_scale2", hp[5]}};
    snprintf(path, sizeof path, "%s/dump.safetensors", out_dir);
    int rc = st_write_file(path, d.t, d.count, meta, 6, NULL);
    if (rc != BG_OK) fprintf(stderr, "parity_dump: %s\n", bg_last_error());
    printf("parity_dump: %s: loss %.6f aux %.6f z %.6f, %d tensors\n", config_path, loss, aux, z,
           table->count);

    free(d.t), free(d.names);
    free(inputs), free(targets), free(logits), free(topk), free(counts);
    free(layer_aux), free(layer_z), free(grad1), free(params1), free(grad2);
    adamw_free(&tr.adam);
    model_free(m);
    return rc == BG_OK ? 0 : 1;
}
