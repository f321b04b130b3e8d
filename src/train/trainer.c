#include "train/trainer.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/loader.h"
#include "data/shard.h"
#include "model/model.h"
#include "train/adamw.h"
#include "train/grad_norm.h"
#include "train/metrics.h"
#include "train/schedule.h"

#include <math.h>
#include <string.h>

void train_options_defaults(train_options *o) {
    memset(o, 0, sizeof *o);
    o->batch_size = 8;
    o->seq_len = 64;
    o->steps = 100;
    o->lr = 3e-4f;
    o->min_lr = -1.0f;  // -1: lr/10
    o->warmup = 0;
    o->weight_decay = 0.1f;
    o->beta1 = 0.9f;
    o->beta2 = 0.95f;
    o->eps = 1e-8f;
    o->clip = 1.0f;
    o->seed = 1337;
    o->eval_batches = 4;
}

static int validate(const train_options *o) {
    if (o->batch_size <= 0) return bg_error("--batch-size must be positive, got %d", o->batch_size);
    if (o->seq_len <= 0) return bg_error("--seq-len must be positive, got %d", o->seq_len);
    if (o->steps <= 0) return bg_error("--steps must be positive, got %ld", o->steps);
    if (!(o->lr > 0) || !isfinite(o->lr)) return bg_error("--lr must be a positive number");
    if (o->warmup < 0) return bg_error("--warmup must be >= 0");
    if (!(o->weight_decay >= 0)) return bg_error("--weight-decay must be >= 0");
    if (!(o->clip >= 0)) return bg_error("--clip must be >= 0 (0 disables clipping)");
    if (o->eval_every < 0) return bg_error("--eval-every must be >= 0");
    if ((long long)o->batch_size * o->seq_len > (1LL << 28))
        return bg_error("--batch-size x --seq-len is too large");
    return BG_OK;
}

// Mean cross-entropy over the first `batches` batches of validation windows, in file order.
static double evaluate(model *m, data_loader *val, int batches, int *inputs, int *targets) {
    int B = m->acts.B, T = m->acts.T;
    size_t w = 0;
    double sum = 0;
    int done = 0;
    for (int i = 0; i < batches; i++) {
        if (w + B > val->windows) break;
        for (int b = 0; b < B; b++, w++)
            loader_window(val, w, inputs + (size_t)b * T, targets + (size_t)b * T);
        model_forward(m, inputs, targets);
        sum += m->loss;
        done++;
    }
    return done ? sum / done : NAN;
}

int trainer_run(const train_options *o) {
    if (validate(o) != BG_OK) return BG_ERR;
    model_config cfg;
    if (model_config_load(&cfg, o->config_path) != BG_OK) return BG_ERR;
    if (o->seq_len > cfg.max_position_embeddings)
        return bg_error("--seq-len %d is longer than the model's context (max_position_embeddings %d)",
                        o->seq_len, cfg.max_position_embeddings);
    int B = o->batch_size, T = o->seq_len;
    token_shard train_shard, val_shard;
    data_loader train, val;
    memset(&val, 0, sizeof val);
    memset(&val_shard, 0, sizeof val_shard);
    if (shard_load(&train_shard, o->data_path, cfg.vocab_size) != BG_OK) return BG_ERR;
    if (loader_init(&train, &train_shard, T, o->seed, o->data_path) != BG_OK) {
        shard_free(&train_shard);
        return BG_ERR;
    }
    if (o->val_path) {
        if (shard_load(&val_shard, o->val_path, cfg.vocab_size) != BG_OK ||
            loader_init(&val, &val_shard, T, o->seed, o->val_path) != BG_OK) {
            loader_free(&train);
            shard_free(&train_shard);
            shard_free(&val_shard);
            return BG_ERR;
        }
        if (val.windows < (size_t)B) {
            loader_free(&train), loader_free(&val);
            shard_free(&train_shard), shard_free(&val_shard);
            return bg_error("%s: %zu validation windows is fewer than one batch of %d", o->val_path,
                            val.windows, B);
        }
    }
    metrics_sink sink;
    if (metrics_open(&sink, o->log_path, o->steps) != BG_OK) {
        loader_free(&train), loader_free(&val);
        shard_free(&train_shard), shard_free(&val_shard);
        return BG_ERR;
    }
    bg_threads_set(o->threads);

    model m;
    model_init(&m, &cfg, o->seed);
    model_prepare(&m, B, T);
    adamw_state opt;
    adamw_init(&opt, m.table.numel);
    adamw_hparams hp = {o->beta1, o->beta2, o->eps, o->weight_decay};
    float min_lr = o->min_lr >= 0 ? o->min_lr : o->lr * 0.1f;
    int *inputs = bg_malloc(sizeof(int) * B * T), *targets = bg_malloc(sizeof(int) * B * T);
    double flops_per_step = model_flops_per_token(&cfg, T) * B * T;

    printf("model: %zu parameters (%.1fM), %d layers, %d experts top-%d; batch %d x %d; %d threads\n",
           m.table.numel, m.table.numel / 1e6, cfg.num_hidden_layers, cfg.num_local_experts,
           cfg.num_local_experts ? cfg.num_experts_per_tok : 0, B, T, bg_threads_get());
    if (o->val_path)
        metrics_note(&sink, "val loss before training: %.4f",
                     evaluate(&m, &val, o->eval_batches, inputs, targets));

    double t_start = bg_now(), train_seconds = 0;
    for (long step = 0; step < o->steps; step++) {
        double t0 = bg_now();
        loader_samples(&train, (uint64_t)step * B, B, inputs, targets);
        model_forward(&m, inputs, targets);
        model_zero_grad(&m);
        model_backward(&m);
        double norm = grad_global_norm(m.grads, m.table.numel);
        float lr = lr_schedule(step, o->steps, o->warmup, o->lr, min_lr);
        adamw_update(&opt, m.params, m.grads, &m.table, &hp, lr, grad_clip_scale(norm, o->clip));
        double dt = bg_now() - t0;
        train_seconds += dt;
        step_metrics sm = {
            .step = step + 1, .total_steps = o->steps, .loss = m.loss, .aux_loss = m.aux_loss,
            .z_loss = m.z_loss, .lr = lr, .grad_norm = norm, .tokens_per_s = B * T / dt,
            .gflops = flops_per_step / dt / 1e9, .step_seconds = dt,
            .eta_seconds = train_seconds / (step + 1) * (o->steps - step - 1),
        };
        metrics_step(&sink, &sm, &m);
        if (!isfinite(m.loss)) {
            metrics_close(&sink);
            fprintf(stderr, "bagualu: loss is not finite at step %ld; stopping\n", step + 1);
            break;
        }
        if (o->val_path && o->eval_every > 0 && (step + 1) % o->eval_every == 0 && step + 1 < o->steps)
            metrics_note(&sink, "step %ld: val loss %.4f", step + 1,
                         evaluate(&m, &val, o->eval_batches, inputs, targets));
    }
    if (o->val_path)
        metrics_note(&sink, "val loss after training: %.4f",
                     evaluate(&m, &val, o->eval_batches, inputs, targets));
    metrics_note(&sink, "trained %ld steps in %.1f s (%.0f tokens/s)", o->steps, bg_now() - t_start,
                 (double)o->steps * B * T / train_seconds);
    int rc = isfinite(m.loss) ? BG_OK : bg_error("training diverged (non-finite loss)");
    metrics_close(&sink);
    free(inputs);
    free(targets);
    adamw_free(&opt);
    model_free(&m);
    loader_free(&train);
    loader_free(&val);
    shard_free(&train_shard);
    shard_free(&val_shard);
    return rc;
}
