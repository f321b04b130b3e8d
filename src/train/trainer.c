#include "train/trainer.h"
#include "core/error.h"
#include "core/log.h"
#include "train/checkpoint.h"
#include "core/threads.h"
#include "core/timer.h"
#include "train/grad_norm.h"
#include "train/metrics.h"
#include "train/schedule.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

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
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
        return bg_error("--beta1 and --beta2 must be in [0, 1)");
    if (!(o->clip >= 0)) return bg_error("--clip must be >= 0 (0 disables clipping)");
    if (o->eval_every < 0) return bg_error("--eval-every must be >= 0");
    if (o->eval_batches <= 0) return bg_error("--eval-batches must be positive");
    if (o->threads < 0) return bg_error("--threads must be positive");
    if (o->save_every < 0) return bg_error("--save-every must be >= 0");
    if (o->keep_last < 0) return bg_error("--keep-last must be >= 0");
    if ((o->save_every || o->keep_last) && !o->save_dir)
        return bg_error("--save-every and --keep-last need --save-dir");
    if (o->resume && !strcmp(o->resume, "latest") && !o->save_dir)
        return bg_error("--resume latest needs --save-dir");
    if (o->fallback && !(o->resume && !strcmp(o->resume, "latest")))
        return bg_error("--fallback applies only to --resume latest");
    if ((long long)o->batch_size * o->seq_len > (1LL << 28))
        return bg_error("--batch-size x --seq-len is too large");
    return BG_OK;
}

// --resume DIR loads DIR. --resume latest loads what SAVE_DIR/latest names, or
// starts from scratch when there is none yet (so one command line both launches
// and relaunches a job); with --fallback a corrupt newest checkpoint is reported
// and the next older one tried.
static int trainer_resume(trainer *tr) {
    const train_options *o = &tr->opt;
    if (strcmp(o->resume, "latest") != 0) {
        if (ckpt_load(tr, o->resume) != BG_OK) return BG_ERR;
        bg_log_info("resumed from %s at step %ld", o->resume, tr->step);
        return BG_OK;
    }
    char dir[4096];
    int found;
    if (ckpt_latest(o->save_dir, dir, sizeof dir, &found) != BG_OK) {
        if (!o->fallback) return BG_ERR;
        bg_log_info("bagualu: %s", bg_last_error());
        found = 0;
        dir[0] = '\0';
    } else if (!found) {
        // No pointer but step directories: a crash fell between the first save's rename
        // and its pointer (or the pointer was deleted). Step directories are complete
        // whenever they carry their final name, so the newest one is the checkpoint.
        char **dirs;
        int n;
        if (ckpt_list(o->save_dir, &dirs, &n) != BG_OK) return BG_ERR;
        if (n > 0) {
            snprintf(dir, sizeof dir, "%s", dirs[0]);
            found = 1;
            bg_log_info("no \"latest\" in %s: using the newest step directory %s", o->save_dir, dir);
        }
        for (int i = 0; i < n; i++) free(dirs[i]);
        free(dirs);
        if (n == 0) {
            bg_log_info("no checkpoint in %s yet: starting from scratch", o->save_dir);
            return BG_OK;
        }
    }
    if (found) {
        if (ckpt_load(tr, dir) == BG_OK) {
            bg_log_info("resumed from %s at step %ld", dir, tr->step);
            return BG_OK;
        }
        if (!o->fallback) return BG_ERR;
        bg_log_info("bagualu: %s; trying an older checkpoint (--fallback)", bg_last_error());
    }
    // Fallback: every step directory older than the failed one, newest first (by step
    // number: `latest` may name an unpadded "step_5"). ckpt_load leaves the state
    // untouched when it fails, so each attempt starts from the fresh initialization.
    char **dirs;
    int n, rc = BG_ERR;
    long failed_step = found ? ckpt_dir_step(dir) : -1;
    if (ckpt_list(o->save_dir, &dirs, &n) != BG_OK) return BG_ERR;
    for (int i = 0; i < n && rc != BG_OK; i++) {
        if (found && ckpt_dir_step(dirs[i]) >= failed_step) continue;
        if (ckpt_load(tr, dirs[i]) == BG_OK) {
            bg_log_info("resumed from %s at step %ld (fallback)", dirs[i], tr->step);
            rc = BG_OK;
        } else {
            bg_log_info("bagualu: %s", bg_last_error());
        }
    }
    for (int i = 0; i < n; i++) free(dirs[i]);
    free(dirs);
    if (rc != BG_OK) return bg_error("%s: no loadable checkpoint", o->save_dir);
    return BG_OK;
}

int trainer_init(trainer *tr, const train_options *o) {
    memset(tr, 0, sizeof *tr);
    tr->opt = *o;
    if (validate(o) != BG_OK) return BG_ERR;
    if (model_config_load(&tr->cfg, o->config_path) != BG_OK) return BG_ERR;
    if (o->seq_len > tr->cfg.max_position_embeddings)
        return bg_error("--seq-len %d is longer than the model's context (max_position_embeddings %d)",
                        o->seq_len, tr->cfg.max_position_embeddings);
    int B = o->batch_size, T = o->seq_len;
    if (shard_load(&tr->train_shard, o->data_path, tr->cfg.vocab_size) != BG_OK) return BG_ERR;
    if (loader_init(&tr->train, &tr->train_shard, T, o->seed, o->data_path) != BG_OK) {
        shard_free(&tr->train_shard);
        return BG_ERR;
    }
    if (o->val_path) {
        if (shard_load(&tr->val_shard, o->val_path, tr->cfg.vocab_size) != BG_OK ||
            loader_init(&tr->val, &tr->val_shard, T, o->seed, o->val_path) != BG_OK) {
            loader_free(&tr->train);
            shard_free(&tr->train_shard);
            shard_free(&tr->val_shard);
            return BG_ERR;
        }
        if (tr->val.windows < (size_t)B) {
            size_t w = tr->val.windows;
            loader_free(&tr->train), loader_free(&tr->val);
            shard_free(&tr->train_shard), shard_free(&tr->val_shard);
            return bg_error("%s: %zu validation windows of %d tokens is fewer than one batch of %d",
                            o->val_path, w, T + 1, B);
        }
        tr->has_val = 1;
    }
    bg_threads_set(o->threads);
    model_init(&tr->m, &tr->cfg, o->seed);
    model_prepare(&tr->m, B, T);
    adamw_init(&tr->adam, tr->m.table.numel);
    tr->hp = (adamw_hparams){o->beta1, o->beta2, o->eps, o->weight_decay};
    tr->min_lr = o->min_lr >= 0 ? o->min_lr : o->lr * 0.1f;
    tr->inputs = bg_malloc(sizeof(int) * B * T);
    tr->targets = bg_malloc(sizeof(int) * B * T);
    if (o->resume && trainer_resume(tr) != BG_OK) {
        trainer_free(tr);
        return BG_ERR;
    }
    return BG_OK;
}

double trainer_step(trainer *tr) {
    const train_options *o = &tr->opt;
    int B = o->batch_size;
    model *m = &tr->m;
    loader_samples(&tr->train, tr->samples, B, tr->inputs, tr->targets);
    tr->samples += (uint64_t)B;
    model_forward(m, tr->inputs, tr->targets);
    model_zero_grad(m);
    model_backward(m);
    model_reduce_grads(m);
    tr->last_grad_norm = model_grad_norm(m);
    tr->last_lr = lr_schedule(tr->step, o->steps, o->warmup, o->lr, tr->min_lr);
    adamw_update(&tr->adam, m->params, m->grads, &m->table, &tr->hp, tr->last_lr,
                 grad_clip_scale(tr->last_grad_norm, o->clip));
    tr->step++;
    return m->loss;
}

double trainer_evaluate(trainer *tr) {
    if (!tr->has_val) return NAN;
    int B = tr->opt.batch_size, T = tr->opt.seq_len;
    size_t w = 0;
    double sum = 0;
    int done = 0;
    for (int i = 0; i < tr->opt.eval_batches && w + B <= tr->val.windows; i++) {
        for (int b = 0; b < B; b++, w++)
            loader_window(&tr->val, w, tr->inputs + (size_t)b * T, tr->targets + (size_t)b * T);
        model_forward(&tr->m, tr->inputs, tr->targets);
        sum += tr->m.loss;
        done++;
    }
    return sum / done;
}

void trainer_free(trainer *tr) {
    free(tr->inputs);
    free(tr->targets);
    adamw_free(&tr->adam);
    model_free(&tr->m);
    loader_free(&tr->train);
    loader_free(&tr->val);
    shard_free(&tr->train_shard);
    shard_free(&tr->val_shard);
    memset(tr, 0, sizeof *tr);
}

static int save_checkpoint(trainer *tr, metrics_sink *sink) {
    const train_options *o = &tr->opt;
    // trainer_run created the save directory. If it is gone now (deleted, or a file
    // system unmounted under it), recreating it would silently start a new series of
    // checkpoints, perhaps on the wrong disk: stop instead.
    struct stat st;
    int err = stat(o->save_dir, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    if (err)
        return bg_error("checkpoint %s/step_%08ld not saved: the save directory has vanished (%s)",
                        o->save_dir, tr->step, strerror(err));
    if (ckpt_save(tr, o->save_dir) != BG_OK) return BG_ERR;
    if (ckpt_prune(o->save_dir, o->keep_last) != BG_OK) return BG_ERR;
    metrics_note(sink, "saved checkpoint %s/step_%08ld", o->save_dir, tr->step);
    return BG_OK;
}

int trainer_run(const train_options *o) {
    trainer tr;
    if (trainer_init(&tr, o) != BG_OK) return TRAIN_BAD_INPUT;
    if (tr.step >= o->steps) {
        printf("checkpoint is at step %ld of %ld: nothing to do\n", tr.step, o->steps);
        trainer_free(&tr);
        return TRAIN_OK;
    }
    if (o->save_dir && ckpt_init_dir(o->save_dir) != BG_OK) {
        trainer_free(&tr);
        return TRAIN_BAD_INPUT;
    }
    metrics_sink sink;
    if (metrics_open(&sink, o->log_path, o->steps) != BG_OK) {
        trainer_free(&tr);
        return TRAIN_BAD_INPUT;
    }
    const model_config *cfg = &tr.cfg;
    int B = o->batch_size, T = o->seq_len;
    double flops_per_step = model_flops_per_token(cfg, T) * B * T;
    printf("model: %.2fM parameters, %d layers, %d experts (top-%d); batch %d x %d tokens; %d threads\n",
           tr.m.table.numel / 1e6, cfg->num_hidden_layers, cfg->num_local_experts,
           cfg->num_local_experts ? cfg->num_experts_per_tok : 0, B, T, bg_threads_get());
    if (tr.has_val) metrics_note(&sink, "val loss %s: %.4f", tr.step ? "at resume" : "before training",
                                 trainer_evaluate(&tr));

    double t_start = bg_now(), train_seconds = 0;
    long first_step = tr.step;
    int rc = TRAIN_OK;
    while (tr.step < o->steps) {
        double t0 = bg_now();
        double loss = trainer_step(&tr);
        double dt = bg_now() - t0;
        train_seconds += dt;
        step_metrics sm = {
            .step = tr.step, .total_steps = o->steps, .loss = loss, .aux_loss = tr.m.aux_loss,
            .z_loss = tr.m.z_loss, .lr = tr.last_lr, .grad_norm = tr.last_grad_norm,
            .tokens_per_s = B * T / dt, .gflops = flops_per_step / dt / 1e9, .step_seconds = dt,
            .eta_seconds = train_seconds / (tr.step - first_step) * (o->steps - tr.step),
        };
        metrics_step(&sink, &sm, &tr.m);
        if (!isfinite(loss)) {
            rc = TRAIN_FAILED;
            bg_error("training diverged: loss is not finite at step %ld", tr.step);
            break;
        }
        if (tr.has_val && o->eval_every > 0 && tr.step % o->eval_every == 0 && tr.step < o->steps)
            metrics_note(&sink, "step %ld: val loss %.4f", tr.step, trainer_evaluate(&tr));
        int stop = o->stop_requested && *o->stop_requested;
        if (o->save_dir && (stop || tr.step == o->steps || (o->save_every && tr.step % o->save_every == 0))) {
            if (save_checkpoint(&tr, &sink) != BG_OK) {
                rc = TRAIN_FAILED;
                break;
            }
        }
        if (stop) {
            metrics_note(&sink, "stopped by signal at step %ld", tr.step);
            break;
        }
    }
    if (rc == TRAIN_OK && tr.step == o->steps) {
        if (tr.has_val) metrics_note(&sink, "val loss after training: %.4f", trainer_evaluate(&tr));
        long done = tr.step - first_step;
        metrics_note(&sink, "trained %ld steps in %.1f s (%.0f tokens/s, %.1f GFLOP/s)", done,
                     bg_now() - t_start, (double)done * B * T / train_seconds,
                     flops_per_step * done / train_seconds / 1e9);
    }
    metrics_close(&sink);
    trainer_free(&tr);
    return rc;
}
