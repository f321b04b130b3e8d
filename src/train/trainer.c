#include "train/trainer.h"
#include "core/error.h"
#include "core/log.h"
#include "core/threads.h"
#include "core/timer.h"
#include "comm/dist.h"
#include "kernels/kernels.h"
#include "train/checkpoint.h"
#include "train/checkpoint_dir.h"
#include "train/checkpoint_shard.h"
#include "train/grad_norm.h"
#include "train/grad_sync.h"
#include "train/metrics.h"
#include "train/rewind.h"
#include "train/routing_health.h"
#include "train/run_info.h"
#include "train/run_report.h"
#include "train/schedule.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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
    o->dtype = BG_FP32;
    o->loss_scale_init = 65536.0f;  // 2^16, as PyTorch's GradScaler
    o->loss_scale_window = 1000;
    o->dead_window = 100;
    o->zero = -1;
    o->save_async = 1;
    o->link_latency_us = -1;
    o->max_skips = 10;
    o->spike_window = 100;
    o->spike_patience = 3;
}

static int validate(const train_options *o) {
    if (o->report_every < 0) return bg_error("--report-every must be >= 0");
    if (o->report_every > 0 && (!o->log_path || !o->report_path))
        return bg_error("--report-every needs --log (the report is drawn from it)");
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
    if (o->dead_window <= 0) return bg_error("--dead-window must be positive, got %ld", o->dead_window);
    if (o->threads < 0) return bg_error("--threads must be positive");
    if (o->expert_parallel < 0) return bg_error("--expert-parallel must be positive");
    if (o->ranks_per_node < 0) return bg_error("--ranks-per-node must be positive");
    if (o->a2a_chunks < 0) return bg_error("--a2a-chunks must be positive");
    if (!(o->comm_timeout >= 0)) return bg_error("--comm-timeout must be >= 0 seconds");
    if (!(o->link_gbit >= 0)) return bg_error("--link-gbit must be >= 0 (0: measure)");
    if (o->zero < -1 || o->zero > 1) return bg_error("--zero must be 0 or 1, got %d", o->zero);
    if (o->save_every < 0) return bg_error("--save-every must be >= 0");
    if (o->keep_last < 0) return bg_error("--keep-last must be >= 0");
    if (o->save_async != 0 && o->save_async != 1) return bg_error("--save-async must be 0 or 1, got %d", o->save_async);
    if ((o->save_every || o->keep_last) && !o->save_dir)
        return bg_error("--save-every and --keep-last need --save-dir");
    if (o->resume && !strcmp(o->resume, "latest") && !o->save_dir)
        return bg_error("--resume latest needs --save-dir");
    if (o->fallback && !(o->resume && !strcmp(o->resume, "latest")))
        return bg_error("--fallback applies only to --resume latest");
    if (!(o->loss_scale_init >= 1) || !isfinite(o->loss_scale_init))
        return bg_error("--loss-scale must be a finite number >= 1");
    if (o->loss_scale_window <= 0) return bg_error("--loss-scale-window must be positive");
    if (o->max_expert_rows < 0) return bg_error("--max-expert-rows must be >= 0 (0: 8x the balanced share)");
    bf16_path bp;  // the kernels take the same (bf16_path_default); a bad variable stops here
    if (bf16_path_select(&bp) != BG_OK) return BG_ERR;
    gemm_f32_impl gi;  // likewise (gemm_f32_impl_default)
    if (gemm_f32_impl_select(&gi) != BG_OK) return BG_ERR;
    if ((long long)o->batch_size * o->seq_len > (1LL << 28))
        return bg_error("--batch-size x --seq-len is too large");
    return rewind_validate(o);
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

// Every rank must take the same branch at each collective step, so failures are
// agreed on: if any rank failed, all fail. The error is printed by rank 0 when it
// failed itself, otherwise by the ranks that failed; the others stay quiet.
static int agree(trainer *tr, int rc) {
    dist_comm *w = dist_comm_world(0);
    int P = dist_size(w), r = dist_rank(w);
    double f[2] = {rc != BG_OK, rc != BG_OK && r == 0};
    if (P > 1) dist_allreduce_max_f64(w, f, 2);
    dist_comm_free(w);
    tr->report_error = rc != BG_OK && (r == 0 || f[1] == 0);
    if (rc == BG_OK && f[0] != 0) return bg_error("stopped: another rank failed");
    return f[0] != 0 ? BG_ERR : BG_OK;
}

static int trainer_load_inputs(trainer *tr, const train_options *o);

// --a2a auto: the cost model's choice for this layout, from the links as given or as
// measured once now (a collective over the expert-parallel group, so every rank of a
// group chooses alike; groups are alike by construction).
static int choose_a2a(trainer *tr, const train_options *o, double tokens) {
    dist_comm *ep = tr->layout.ep_comm;
    const model_config *cfg = &tr->cfg;
    dist_a2a_cost_in in = {.inter_bw = o->link_gbit * 1e9 / 8,
                           .inter_lat = o->link_latency_us * 1e-6, .intra_bw = 1e12};
    dist_link_measure(ep, &in);
    if (o->link_gbit > 0) in.inter_bw = o->link_gbit * 1e9 / 8;
    if (o->link_latency_us >= 0) in.inter_lat = o->link_latency_us * 1e-6;
    in.bytes_per_rank = tokens * (cfg->num_local_experts ? cfg->num_experts_per_tok : 1) *
                        cfg->hidden_size * sizeof(float);
    enum dist_a2a_algo a = dist_a2a_choose(&in);
    tr->a2a_auto = in;
    return a;
}

// The fewest windows of any validation dataset: each is evaluated on its own.
static size_t val_min_windows(const trainer *tr) {
    size_t w = SIZE_MAX;
    for (int d = 0; d < tr->val.count; d++)
        if (tr->val.loaders[d].windows < w) w = tr->val.loaders[d].windows;
    return w;
}

int trainer_init(trainer *tr, const train_options *o) {
    memset(tr, 0, sizeof *tr);
    tr->opt = *o;
    dist_set_timeout(o->comm_timeout);  // before the first collective
    dist_set_skew_probe(o->a2a_skew_probe);
    int rc = trainer_load_inputs(tr, o);
    if (agree(tr, rc) != BG_OK) {
        int report = tr->report_error;
        if (rc == BG_OK) {
            data_source_free(&tr->train), data_source_free(&tr->val), free(tr->val_losses);
        }
        tr->report_error = report;
        return BG_ERR;
    }
    // The layout: expert-parallel groups, their replicas, nodes (core of issue 5).
    int E = tr->cfg.num_local_experts;
    // A dense model is pure data parallelism: a layout of one "expert" per rank group.
    rc = dist_layout_init(&tr->layout, E > 0 ? E : 1, E > 0 ? o->expert_parallel : 1,
                          o->ranks_per_node);
    if (agree(tr, rc) != BG_OK) {
        int report = tr->report_error;
        if (rc == BG_OK) dist_layout_free(&tr->layout);
        data_source_free(&tr->train), data_source_free(&tr->val), free(tr->val_losses);
        tr->report_error = report;
        return BG_ERR;
    }
    tr->has_layout = 1;
    tr->rank = tr->layout.world_rank;
    tr->world = tr->layout.world_size;
    int B = o->batch_size, T = o->seq_len;
    tr->par = (model_parallel){.layout = &tr->layout,
                               .a2a_algo = o->a2a_algo >= 0 ? o->a2a_algo : DIST_A2A_FLAT,
                               .a2a_chunks = o->a2a_chunks > 0 ? o->a2a_chunks : 1,
                               .a2a_sync = o->a2a_sync,
                               .max_expert_rows = o->max_expert_rows};
    if (o->a2a_algo < 0) tr->par.a2a_algo = choose_a2a(tr, o, (double)B * T);
    size_t val_windows = tr->has_val ? val_min_windows(tr) : 0;
    if (tr->has_val && val_windows < (size_t)B * tr->world) {
        size_t w = val_windows;
        rc = bg_error("%s: %zu validation windows of %d tokens is fewer than one global batch of %d",
                      o->val_path, w, T + 1, B * tr->world);
        tr->report_error = tr->rank == 0;
        trainer_free(tr);
        tr->report_error = 1;
        return BG_ERR;
    }
    bg_threads_set(o->threads);
    model_init_parallel(&tr->m, &tr->cfg, o->seed, tr->world > 1 ? &tr->par : NULL);
    tr->m.opt.recompute = o->recompute;
    model_prepare(&tr->m, B, T);
    // ZeRO-1 (on by default in a parallel run): this rank's slices of the optimizer
    // state; one process keeps whole blocks.
    const dist_layout *L = &tr->layout;
    tr->zero = zero_shard_make(tr->world > 1 && o->zero != 0, tr->m.table.dense_numel,
                               tr->m.table.numel, L->world_rank, L->world_size, L->edp_rank,
                               L->edp_size);
    adamw_init(&tr->adam, zero_shard_numel(&tr->zero));
    tr->hp = (adamw_hparams){o->beta1, o->beta2, o->eps, o->weight_decay};
    tr->min_lr = o->min_lr >= 0 ? o->min_lr : o->lr * 0.1f;
    tr->loss_scale = o->dtype == BG_FP16 ? o->loss_scale_init : 1.0f;
    kernel_ctx_set_precision(tr->m.kernels, o->dtype);
    if (o->dtype == BG_BF16 && tr->rank == 0)
        bg_log_info("bf16 path: %s (BAGUALU_BF16_PATH=native|native-gemm|amx|fp32 forces one)",
                    bf16_path_name(kernel_ctx_bf16_path(tr->m.kernels)));
    tr->inputs = bg_malloc(sizeof(int) * B * T);
    tr->targets = bg_malloc(sizeof(int) * B * T);
    train_hooks_read(&tr->hooks);
    // Off while a test injects NaN gradients: they are written after the backward,
    // when the overlapped reduction has already sent the element.
    tr->grad_overlap_on = tr->world > 1 && o->grad_overlap == 1 && tr->hooks.nan_lo <= 0;
    if (tr->grad_overlap_on) grad_overlap_init(&tr->gov, &tr->m, tr->zero.on);
    rc = o->resume ? trainer_resume(tr) : BG_OK;
    if (agree(tr, rc) != BG_OK) {
        int report = tr->report_error;
        trainer_free(tr);
        tr->report_error = report;
        return BG_ERR;
    }
    return BG_OK;
}

// Options, config and data: each rank checks its own inputs.
static int trainer_load_inputs(trainer *tr, const train_options *o) {
    if (validate(o) != BG_OK) return BG_ERR;
    if (o->config_json ? model_config_parse(&tr->cfg, o->config_json, "config") != BG_OK
                       : model_config_load(&tr->cfg, o->config_path) != BG_OK)
        return BG_ERR;
    if (o->seq_len > tr->cfg.max_position_embeddings)
        return bg_error("--seq-len %d is longer than the model's context (max_position_embeddings %d)",
                        o->seq_len, tr->cfg.max_position_embeddings);
    int B = o->batch_size, T = o->seq_len;
    if (model_check_routing_groups(&tr->cfg, B, T) != BG_OK) return BG_ERR;
    dist_comm *world = dist_comm_world(0);
    int verbose = dist_rank(world) == 0;  // one progress line per job
    dist_comm_free(world);
    if (data_source_open(&tr->train, o->data_path, o->data_mix, 1, tr->cfg.vocab_size, T, o->seed, verbose) !=
        BG_OK)
        return BG_ERR;
    if (o->val_path) {
        int named = strchr(o->val_path, '=') || strstr(o->val_path, ".json");
        if (data_source_open(&tr->val, named ? NULL : o->val_path, named ? o->val_path : NULL, 0,
                             tr->cfg.vocab_size, T, o->seed, verbose) != BG_OK) {
            data_source_free(&tr->train);
            return BG_ERR;
        }
        tr->has_val = 1;
        tr->val_losses = bg_calloc((size_t)tr->val.count, sizeof *tr->val_losses);
        if (val_min_windows(tr) < (size_t)B) {
            size_t w = val_min_windows(tr);
            data_source_free(&tr->train), data_source_free(&tr->val);
            free(tr->val_losses);
            tr->has_val = 0;
            return bg_error("%s: %zu validation windows of %d tokens is fewer than one batch of %d",
                            o->val_path, w, T + 1, B);
        }
    }
    return BG_OK;
}

// Test-only faults (train/test_hooks.h), after the backward and before the sums: a NaN
// in rank 0's first local expert's gradient, a loss spike on a poisoned batch.
static void inject_faults(trainer *tr, uint64_t first, uint64_t G) {
    const train_hooks *h = &tr->hooks;
    model *m = &tr->m;
    if (h->nan_lo > 0 && tr->step + 1 >= h->nan_lo && tr->step + 1 <= h->nan_hi && tr->rank == 0) {
        size_t at = 0;
        for (int i = 0; i < m->table.count && !at; i++)
            if (m->table.tensors[i].offset >= m->table.dense_numel) at = m->table.tensors[i].offset;
        m->grads[at] = NAN;
    }
    if (h->spike_lo < h->spike_hi && first < h->spike_hi && first + G > h->spike_lo) m->loss *= 100;
}

int trainer_compute_grads(trainer *tr, double *loss) {
    const train_options *o = &tr->opt;
    int B = o->batch_size;
    model *m = &tr->m;
    // This rank's slice of the global batch: the same tokens whatever the layout. Data
    // that a loss-spike rewind skipped is jumped over (global positions: any layout).
    int P = tr->world > 0 ? tr->world : 1;
    uint64_t G = (uint64_t)B * P;
    if (tr->skips.n) tr->samples = skip_ranges_advance(&tr->skips, tr->samples, G);
    data_source_batch(&tr->train, tr->samples, B * P, tr->rank * B, B, tr->inputs, tr->targets);
    tr->samples += G;
    m->opt.loss_scale = tr->loss_scale;  // the precision was set once, in trainer_init
    m->step = tr->step;                  // routers that draw numbers key them by step
    *loss = NAN;
    if (model_forward(m, tr->inputs, tr->targets) != BG_OK) return BG_ERR;
    grad_sync_loss(m);
    model_zero_grad(m);
    if (tr->grad_overlap_on) grad_overlap_begin(&tr->gov, tr->inputs);  // sums start during the backward
    model_backward(m);
    inject_faults(tr, tr->samples - G, G);
    if (tr->grad_overlap_on) grad_overlap_end(&tr->gov);
    else if (tr->zero.on) grad_sync_reduce_scatter(m);  // each rank sums only the slices it owns
    else grad_sync_grads(m);
    *loss = m->loss;
    return BG_OK;
}


int trainer_apply_grads(trainer *tr) {
    const train_options *o = &tr->opt;
    model *m = &tr->m;
    double norm = grad_sync_norm(m);  // the same on every rank: all skip, or none
    tr->last_lr = lr_schedule(tr->step, o->steps, o->warmup, o->lr, tr->min_lr);
    tr->step++;
    tr->skipped_at = 0;
    tr->skip_reason = NULL;
    if (o->dtype == BG_FP16 && !isfinite(norm)) {
        float was = tr->loss_scale;
        tr->loss_scale = was / 2 > LOSS_SCALE_MIN ? was / 2 : LOSS_SCALE_MIN;
        tr->good_steps = 0;
        tr->skipped_steps++;
        tr->skipped_at = was;
        tr->last_grad_norm = INFINITY;
        tr->skip_reason = "fp16_overflow";
        tr->skips_total++;
        // Overflows the halved scale can cure are the scaler's routine, not a fault.
        if (!(was > LOSS_SCALE_MIN)) tr->skips_in_row++;
        return 0;
    }
    // Any dtype: a non-finite loss (the global mean) or norm (global) is skipped by every
    // rank alike, with no change to the weights, the optimizer or the gates' state.
    if (!isfinite(m->loss) || !isfinite(norm)) {
        tr->skipped_at = tr->loss_scale;
        tr->last_grad_norm = isfinite(norm) ? norm / tr->loss_scale : INFINITY;
        tr->skip_reason = !isfinite(m->loss) ? "nonfinite_loss" : "nonfinite_grad";
        tr->skips_total++;
        tr->skips_in_row++;
        return 0;
    }
    tr->skips_in_row = 0;
    tr->last_grad_norm = norm / tr->loss_scale;
    // Unscaling folds into AdamW's gradient multiplier with the clipping.
    adamw_update_shard(&tr->adam, m->params, m->grads, &m->table, &tr->zero, &tr->hp, tr->last_lr,
                       grad_clip_scale(tr->last_grad_norm, o->clip) / tr->loss_scale);
    if (tr->zero.on) grad_sync_gather_params(m);  // every rank's updated slices to all
    model_router_after_step(m);  // e.g. the bias gate's bias, from this step's global counts
    if (o->dtype == BG_FP16 && ++tr->good_steps >= o->loss_scale_window) {
        tr->good_steps = 0;
        if (tr->loss_scale < 16777216.0f) tr->loss_scale *= 2;  // 2^24: far past any need
    }
    return 1;
}

int trainer_step(trainer *tr, double *loss) {
    if (trainer_compute_grads(tr, loss) != BG_OK) return BG_ERR;
    trainer_apply_grads(tr);
    return BG_OK;
}

// One validation dataset: global batches of its windows in set order; this rank takes
// its slice.
static int evaluate_one(trainer *tr, const data_loader *val, double *loss) {
    int B = tr->opt.batch_size, T = tr->opt.seq_len, P = tr->world > 0 ? tr->world : 1;
    double sum = 0;
    int done = 0;
    for (size_t i = 0; i < (size_t)tr->opt.eval_batches && (i + 1) * B * P <= val->windows; i++) {
        size_t w = i * B * P + (size_t)tr->rank * B;
        for (int b = 0; b < B; b++)
            loader_window(val, w + b, tr->inputs + (size_t)b * T, tr->targets + (size_t)b * T);
        if (model_forward(&tr->m, tr->inputs, tr->targets) != BG_OK) return BG_ERR;
        grad_sync_loss(&tr->m);
        sum += tr->m.loss;
        done++;
    }
    *loss = sum / done;
    return BG_OK;
}

int trainer_evaluate(trainer *tr, double *loss) {
    *loss = NAN;
    if (!tr->has_val) return BG_OK;
    int no_grad = tr->m.opt.no_grad;
    tr->m.opt.no_grad = 1;  // loss only: no LM-head gradient GEMMs during evaluation
    double sum = 0;
    int rc = BG_OK;
    for (int d = 0; d < tr->val.count && rc == BG_OK; d++) {  // named sets: the mean of their losses
        rc = evaluate_one(tr, &tr->val.loaders[d], &tr->val_losses[d]);
        sum += tr->val_losses[d];
    }
    tr->m.opt.no_grad = no_grad;
    if (rc == BG_OK) *loss = sum / tr->val.count;
    return rc;
}

void trainer_free(trainer *tr) {
    if (tr->grad_overlap_on) grad_overlap_free(&tr->gov);
    if (tr->has_layout) dist_layout_free(&tr->layout);
    free(tr->inputs);
    free(tr->targets);
    adamw_free(&tr->adam);
    model_free(&tr->m);
    data_source_free(&tr->train);
    data_source_free(&tr->val);
    free(tr->val_losses);
    memset(tr, 0, sizeof *tr);
}

// A committed save's cost on rank 0, one JSONL object: the step's wait and the writer
// thread's CPU show the overhead without wall-clock noise from other processes.
static void log_save_cost(const ckpt_saver *saver, metrics_sink *sink, long step) {
    ckpt_save_cost c = ckpt_saver_cost(saver);
    char line[256];
    snprintf(line, sizeof line,
             "{\"save_step\":%ld,\"save_async\":%d,\"save_bytes\":%.0f,\"save_block_s\":%.6f,"
             "\"save_writer_s\":%.6f,\"save_writer_cpu_s\":%.6f}",
             step, c.async, c.bytes, c.block_s, c.writer_s, c.writer_cpu_s);
    metrics_log_object(sink, line);
}

// At a step boundary: commits a pending asynchronous save once every writer finished
// (wait: now, as at the final step and on a signal).
static int poll_checkpoint(trainer *tr, ckpt_saver *saver, metrics_sink *sink, int wait) {
    if (!saver || !ckpt_saver_pending(saver)) return BG_OK;
    long step = ckpt_saver_step(saver);
    if (ckpt_saver_poll(saver, wait) != BG_OK) {
        tr->report_error = tr->rank == 0;
        return BG_ERR;
    }
    if (!ckpt_saver_pending(saver)) {
        metrics_note(sink, "saved checkpoint %s/step_%08ld", tr->opt.save_dir, step);
        log_save_cost(saver, sink, step);
    }
    return BG_OK;
}

// Starts a checkpoint of this step (ckpt_saver: every rank writes its part; async
// saves commit at a later step boundary). A save still pending commits first.
static int save_checkpoint(trainer *tr, ckpt_saver *saver, metrics_sink *sink) {
    const train_options *o = &tr->opt;
    // trainer_run created the save directory. If it is gone now (deleted, or a file
    // system unmounted under it), recreating it would silently start a new series of
    // checkpoints, perhaps on the wrong disk: stop instead.
    int rc = BG_OK;
    if (tr->rank == 0) {
        struct stat st;
        int err = stat(o->save_dir, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
        if (err)
            rc = bg_error("checkpoint %s/step_%08ld not saved: the save directory has vanished (%s)",
                          o->save_dir, tr->step, strerror(err));
    }
    if (agree(tr, rc) != BG_OK) return BG_ERR;
    if (poll_checkpoint(tr, saver, sink, 1) != BG_OK) return BG_ERR;  // the previous one first
    if (ckpt_saver_begin(saver) != BG_OK) {
        tr->report_error = tr->rank == 0;
        return BG_ERR;
    }
    if (!ckpt_saver_pending(saver)) {
        metrics_note(sink, "saved checkpoint %s/step_%08ld", o->save_dir, tr->step);
        log_save_cost(saver, sink, tr->step);
    }
    return BG_OK;
}

// All-to-all traffic (the expert-parallel communicator) and all-reduce traffic
// (world and expert-data-parallel) of the last step, summed over this rank.
static void step_traffic(trainer *tr, step_metrics *sm) {
    if (tr->world <= 1) return;
    dist_traffic a2a, ar_world, ar_edp;
    dist_traffic_get(tr->layout.ep_comm, &a2a);
    dist_traffic_get(tr->layout.world, &ar_world);
    dist_traffic_get(tr->layout.edp_comm, &ar_edp);
    sm->a2a_bytes_intra = (double)(a2a.bytes_sent_intra + a2a.bytes_recv_intra);
    sm->a2a_bytes_inter = (double)(a2a.bytes_sent_inter + a2a.bytes_recv_inter);
    sm->a2a_msgs_inter = (double)(a2a.msgs_sent_inter);
    sm->a2a_seconds = a2a.seconds;
    sm->a2a_exposed_seconds = a2a.exposed;
    sm->a2a_skew_seconds = a2a.skew;
    sm->allreduce_seconds = ar_world.seconds + ar_edp.seconds;
    sm->allreduce_exposed_seconds = ar_world.exposed + ar_edp.exposed;
    sm->allreduce_bytes = (double)(ar_world.bytes_sent_intra + ar_world.bytes_sent_inter +
                                   ar_edp.bytes_sent_intra + ar_edp.bytes_sent_inter);
    dist_layout_traffic_reset(&tr->layout);
}

// The memory report of the MoE layers' expert rows, the largest over the ranks: what
// the buffers were sized for (or the dropless limit they may grow to), and, once
// steps ran, the most rows a rank received, the rows its grown buffers hold and the
// largest resident memory of a rank.
void trainer_memory_report(const trainer *tr, memory_report *r) {
    const train_options *o = &tr->opt;
    memory_plan_input in = {
        .B = o->batch_size, .T = o->seq_len, .opt = tr->m.opt, .dtype = o->dtype,
        .world_size = tr->world, .world_rank = tr->rank, .ep = tr->world > 1 ? tr->layout.ep : 1,
        .a2a_chunks = tr->par.a2a_chunks, .max_expert_rows = o->max_expert_rows,
        .zero = tr->zero.on,
        .grad_overlap = tr->grad_overlap_on,
        .snapshot_bytes = o->save_dir && o->save_async ? ckpt_snapshot_bytes(tr) : 0,
        .a2a_algo = tr->par.a2a_algo,
        .ranks_per_node = tr->world > 1 ? (tr->world + tr->layout.n_nodes - 1) / tr->layout.n_nodes : 0,
    };
    memory_plan(r, &tr->cfg, &in);
}

// Scratch this rank's communicators hold: their high-water mark (scratch only grows).
size_t trainer_comm_scratch_held(const trainer *tr) {
    if (tr->world <= 1) return 0;
    const dist_layout *L = &tr->layout;
    dist_comm *c[] = {L->world, L->ep_comm, L->edp_comm, L->node_comm};
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        int seen = !c[i];
        for (int j = 0; j < i && !seen; j++) seen = c[j] == c[i];
        if (!seen) n += dist_scratch_held(c[i]);
    }
    return n;
}

// Peak resident memory of this process so far, MiB.
static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);  // ru_maxrss: KiB on Linux
    return ru.ru_maxrss / 1024.0;
}

// The report at start, printed by rank 0 with each component the largest over the ranks.
static void report_memory(trainer *tr, metrics_sink *sink, memory_report *r) {
    trainer_memory_report(tr, r);
    size_t *f[] = {&r->params, &r->grads, &r->optimizer, &r->activations, &r->moe_exchange,
                   &r->moe_exchange_heap, &r->workspaces, &r->snapshot, &r->comm_scratch, &r->total};
    enum { NF = sizeof f / sizeof f[0] };
    double v[NF];
    for (int i = 0; i < NF; i++) v[i] = (double)*f[i];
    if (tr->world > 1) dist_allreduce_max_f64(tr->layout.world, v, NF);
    for (int i = 0; i < NF; i++) *f[i] = (size_t)v[i];
    metrics_memory(sink, r, tr->world);
}

static void report_expert_rows(trainer *tr, const char *what) {
    if (tr->cfg.num_local_experts == 0) return;
    long bound, limit, hwm, alloc;
    model_expert_rows(&tr->m, &bound, &limit, &hwm, &alloc);
    double r[4] = {(double)hwm, (double)alloc, (double)limit, peak_rss_mib()};
    if (tr->world > 1) dist_allreduce_max_f64(tr->layout.world, r, 4);
    if (tr->rank != 0) return;
    if (!strcmp(what, "bound")) {
        if (bound) printf("expert rows per rank: bounded at %ld (buffers sized once)\n", bound);
        else printf("expert rows per rank: dropless, buffers grown on demand up to --max-expert-rows %.0f\n", r[2]);
    } else {
        printf("expert rows per rank: high-water mark %.0f of %s %.0f", r[0],
               bound ? "bound" : "limit", bound ? (double)bound : r[2]);
        if (!bound) printf(", grown buffers %.0f rows", r[1]);
        printf("; peak memory per rank (RSS) %.0f MiB\n", r[3]);
    }
    fflush(stdout);
}

// A forward that stopped (every rank alike): the error is rank 0's to print.
// The HTML report from the log so far; a report that cannot be written is a note, not
// a reason to stop training.
static void report_refresh(const train_options *o, metrics_sink *sink) {
    if (run_report_write(&o->log_path, 1, o->report_path, NULL) != BG_OK)
        metrics_note(sink, "run report not written: %s", bg_last_error());
}

// A blended run's log line: "data_tokens": tokens drawn from each dataset so far
// (samples x seq_len; the blend's counts are at tr->samples). NULL for a plain run.
static const char *data_tokens_json(const trainer *tr, char *buf, size_t cap) {
    const data_source *src = &tr->train;
    if (!src->named) return NULL;
    size_t n = (size_t)snprintf(buf, cap, "\"data_tokens\":{");
    for (int d = 0; d < src->count && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s\"%s\":%" PRIu64, d ? "," : "", src->names[d],
                              src->blend.taken[d] * (uint64_t)tr->opt.seq_len);
    if (n < cap) snprintf(buf + n, cap - n, "}");
    return buf;
}

// An evaluation's note; named validation sets add each one's loss, to the note and as
// one JSON object line in the log.
static void report_val(const trainer *tr, metrics_sink *sink, const char *label, double v) {
    if (!tr->val.named) {
        metrics_note(sink, "%s: %.4f", label, v);
        return;
    }
    char note[2048], json[2048];
    int n = snprintf(note, sizeof note, "%s: %.4f (", label, v);
    int j = snprintf(json, sizeof json, "{\"step\":%ld,\"val_loss\":%.6f,\"val_loss_by_dataset\":{", tr->step, v);
    for (int d = 0; d < tr->val.count; d++) {
        if (n < (int)sizeof note)
            n += snprintf(note + n, sizeof note - (size_t)n, "%s%s %.4f", d ? ", " : "", tr->val.names[d],
                          tr->val_losses[d]);
        if (j < (int)sizeof json)
            j += snprintf(json + j, sizeof json - (size_t)j, "%s\"%s\":%.6f", d ? "," : "", tr->val.names[d],
                          tr->val_losses[d]);
    }
    if (n < (int)sizeof note) snprintf(note + n, sizeof note - (size_t)n, ")");
    if (j < (int)sizeof json) snprintf(json + j, sizeof json - (size_t)j, "}}");
    metrics_note(sink, "%s", note);
    metrics_log_object(sink, json);
}

static int run_stopped(trainer *tr, metrics_sink *sink, int *report) {
    *report = tr->rank == 0;
    metrics_close(sink);
    trainer_free(tr);
    return TRAIN_BAD_INPUT;
}

// The same once the routing health is gathered.
static int run_stopped_health(trainer *tr, metrics_sink *sink, routing_health *health,
                              int *report) {
    routing_health_free(health);
    return run_stopped(tr, sink, report);
}

int train_run_begin(train_run *r, const train_options *o, int *report) {
    memset(r, 0, sizeof *r);
    r->val_loss = NAN;
    trainer *tr = &r->tr;
    *report = 1;
    if (trainer_init(tr, o) != BG_OK) {
        *report = tr->report_error;
        return TRAIN_BAD_INPUT;
    }
    o = &tr->opt;
    int root = tr->rank == 0;
    // A kill between a save and its prune leaves one checkpoint too many, and a relaunch
    // that finds the job finished saves nothing more: prune here as well. Only when
    // resuming from `latest`: a checkpoint named by --resume DIR is not deleted under
    // the user. (The directory `latest` names is never pruned.)
    if (root && o->save_dir && o->keep_last > 0 && o->resume && !strcmp(o->resume, "latest"))
        ckpt_prune(o->save_dir, o->keep_last);
    // ckpt_init_dir also clears temporaries of interrupted saves and prunes, so it runs
    // before the finished-job check too.
    int rc = o->save_dir && root ? ckpt_init_dir(o->save_dir) : BG_OK;
    if (agree(tr, rc) != BG_OK) {
        *report = tr->report_error;
        trainer_free(tr);
        return TRAIN_BAD_INPUT;
    }
    if (tr->step >= o->steps) {
        if (root) printf("checkpoint is at step %ld of %ld: nothing to do\n", tr->step, o->steps);
        trainer_free(tr);
        return TRAIN_OK;
    }
    metrics_sink *sink = &r->sink;
    rc = metrics_open(sink, root ? o->log_path : NULL, o->steps, !root);
    sink->no_stdout = o->quiet;
    if (agree(tr, rc) != BG_OK) {
        *report = tr->report_error;
        if (rc == BG_OK) metrics_close(sink);
        trainer_free(tr);
        return TRAIN_BAD_INPUT;
    }
    if (root) {
        char *run = run_info_json(tr, o->command_line);
        if (run) metrics_log_line(sink, run);
        free(run);
    }
    const model_config *cfg = &tr->cfg;
    int B = o->batch_size, T = o->seq_len, P = tr->world;
    r->flops_per_step = model_flops_per_token(cfg, T) * B * T * P;
    if (root && !o->quiet) {
        printf("model: %.2fM parameters, %d layers, %d experts (top-%d); batch %d x %d tokens; %d threads",
               model_param_count(cfg) / 1e6, cfg->num_hidden_layers, cfg->num_local_experts,
               cfg->num_local_experts ? cfg->num_experts_per_tok : 0, B * P, T, bg_threads_get());
        if (P > 1)
            printf(" per rank; %d ranks, expert-parallel %d (%d experts per rank), %d node%s, %s all-to-all%s",
                   P, tr->layout.ep, tr->layout.experts_per_rank, tr->layout.n_nodes,
                   tr->layout.n_nodes > 1 ? "s" : "", dist_a2a_name(tr->par.a2a_algo),
                   tr->par.a2a_chunks > 1 ? (o->a2a_sync ? " in chunks, not overlapped" : " in chunks, overlapped")
                                          : "");
        printf("\n");
        if (P > 1 && o->a2a_algo < 0) {
            const dist_a2a_cost_in *in = &tr->a2a_auto;
            printf("a2a auto: %s (inter-node %.2f Gbit/s, %.0f us, gap %.1f us; intra %.2f Gbit/s, %.0f us; "
                   "%.2f ranks per core, sync %.0f us; modelled ms flat %.2f, hierarchical %.2f, 2d %.2f)\n",
                   dist_a2a_name(tr->par.a2a_algo), in->inter_bw * 8e-9, in->inter_lat * 1e6,
                   in->inter_gap * 1e6, in->intra_bw * 8e-9, in->intra_lat * 1e6, in->ranks_per_core,
                   in->sync_s * 1e6, 1e3 * dist_a2a_cost(in, DIST_A2A_FLAT),
                   1e3 * dist_a2a_cost(in, DIST_A2A_HIER), 1e3 * dist_a2a_cost(in, DIST_A2A_2D));
        }
        if (P > 1)
            printf("optimizer state per rank: %zu dense + %zu expert elements (%s)\n",
                   tr->zero.dense_hi - tr->zero.dense_lo, tr->zero.expert_hi - tr->zero.expert_lo,
                   tr->zero.on ? "ZeRO-1" : "replicated");
        fflush(stdout);
    }
    report_memory(tr, sink, &r->memory);
    if (!o->quiet) report_expert_rows(tr, "bound");
    double v;
    if (tr->has_val) {
        if (trainer_evaluate(tr, &v) != BG_OK) return run_stopped(tr, sink, report);
        report_val(tr, sink, tr->step ? "val loss at resume" : "val loss before training", v);
        metrics_val(sink, tr->step, v);
        r->val_loss = v;
    }
    if (P > 1) dist_layout_traffic_reset(&tr->layout);
    rc = routing_health_init(&r->health, &tr->m, P > 1 ? &tr->layout : NULL, o->dead_window, tr->step);
    if (agree(tr, rc) != BG_OK) {
        *report = tr->report_error;
        if (rc == BG_OK) routing_health_free(&r->health);
        metrics_close(sink);
        trainer_free(tr);
        return TRAIN_FAILED;
    }

    // The saver's snapshot (async) is allocated here, once, before the first step.
    r->saver = o->save_dir ? ckpt_saver_new(tr, o->save_dir, o->keep_last, o->save_async) : NULL;
    r->t_start = bg_now();
    r->train_seconds = 0;
    r->first_step = tr->step;
    r->data_json_cap = 32 + (size_t)tr->train.count * 96;  // a name is at most 64 characters
    r->data_json = bg_malloc(r->data_json_cap);
    r->open = 1;
    return TRAIN_OK;
}

// A forward that stopped: everything is freed and the run is closed.
static int run_steps_stopped(train_run *r, int *report) {
    ckpt_saver_free(r->saver);
    free(r->data_json);
    r->open = 0;
    return run_stopped_health(&r->tr, &r->sink, &r->health, report);
}

int train_run_steps(train_run *r, long n, int *report) {
    trainer *tr = &r->tr;
    const train_options *o = &tr->opt;
    metrics_sink *sink = &r->sink;
    ckpt_saver *saver = r->saver;
    int root = tr->rank == 0;
    int B = o->batch_size, T = o->seq_len, P = tr->world;
    long until = n < o->steps - tr->step ? tr->step + n : o->steps;
    double v;
    int rc = TRAIN_OK;
    *report = 1;
    while (tr->step < until) {
        double t0 = bg_now(), loss;
        if (trainer_step(tr, &loss) != BG_OK) return run_steps_stopped(r, report);
        double dt = bg_now() - t0;
        r->train_seconds += dt;
        step_metrics sm = {
            .step = tr->step, .total_steps = o->steps, .loss = loss, .aux_loss = tr->m.aux_loss,
            .z_loss = tr->m.z_loss, .lr = tr->last_lr, .grad_norm = tr->last_grad_norm,
            .tokens_per_s = (double)B * T * P / dt, .gflops = r->flops_per_step / dt / 1e9,
            .step_seconds = dt,
            .eta_seconds = r->train_seconds / (tr->step - r->first_step) * (o->steps - tr->step),
            .ranks = P, .fp16 = o->dtype == BG_FP16, .loss_scale = tr->skipped_at > 0 ? tr->skipped_at : tr->loss_scale,
            .skipped = tr->skipped_at > 0, .routing = &r->health,
            .peak_rss_mib = peak_rss_mib(), .comm_scratch_held = (double)trainer_comm_scratch_held(tr),
            .memory = tr->step == r->first_step + 1 && !tr->rewinds ? &r->memory : NULL,
            .skip_reason = tr->skip_reason, .skips_total = tr->skips_total,
            .extra_json = data_tokens_json(tr, r->data_json, r->data_json_cap),
        };
        if (P > 1 && tr->cfg.num_local_experts > 0) {
            long bound, limit;
            model_expert_rows(&tr->m, &bound, &limit, &sm.expert_rows_hwm, &sm.expert_rows_grown);
        }
        int rewind = !tr->skip_reason && rewind_due(tr, loss);
        long spike_step = tr->step;
        step_traffic(tr, &sm);
        // After the step's traffic was read: its one all-reduce is the metrics', not the
        // step's, so the counters forget it.
        routing_health_update(&r->health, &tr->m, P > 1 ? &tr->layout : NULL, tr->step);
        if (P > 1) dist_layout_traffic_reset(&tr->layout);
        if (rewind) {
            // The step's line says what happened: the rewind's target and skipped data.
            if (trainer_rewind(tr, saver, &sm.rewind_to, &sm.rewind_lo, &sm.rewind_hi) != BG_OK) {
                metrics_step(sink, &sm, &tr->m);
                rc = TRAIN_FAILED;
                *report = root;
                break;
            }
            sm.rewound = 1;
        }
        metrics_step(sink, &sm, &tr->m);
        r->last = sm;
        if (root && o->report_every > 0 && tr->step % o->report_every == 0) report_refresh(o, sink);
        if (tr->skip_reason && !strcmp(tr->skip_reason, "fp16_overflow"))
            metrics_note(sink, "step %ld: fp16 gradients overflowed at loss scale %g: step skipped, loss scale now %g",
                         tr->step, tr->skipped_at, tr->loss_scale);
        else if (tr->skip_reason)
            metrics_note(sink, "step %ld: %s: step skipped (%ld in a row, %ld in all)", tr->step,
                         !strcmp(tr->skip_reason, "nonfinite_loss") ? "the loss is not finite"
                                                                    : "the gradients are not finite",
                         tr->skips_in_row, tr->skips_total);
        if (rewind) {
            metrics_note(sink, "step %ld: loss spike (%d steps above the mean by %g standard deviations): "
                         "rewound to step %ld, samples [%llu, %llu) skipped", spike_step,
                         o->spike_patience, o->spike_rewind, sm.rewind_to,
                         (unsigned long long)sm.rewind_lo, (unsigned long long)sm.rewind_hi);
            r->first_step = tr->step, r->train_seconds = 0;
            continue;
        }
        // Every rank counts the same skips (the loss and norm are global). The last
        // committed checkpoint stays as it was: no save after a skip that stops the run.
        if (tr->skips_in_row >= o->max_skips) {
            rc = TRAIN_FAILED;
            bg_error("training stopped: %ld steps in a row skipped (the last, step %ld: %s; --max-skips %ld)",
                     tr->skips_in_row, tr->step, tr->skip_reason, o->max_skips);
            *report = root;
            break;
        }
        if (tr->has_val && o->eval_every > 0 && tr->step % o->eval_every == 0 && tr->step < o->steps) {
            if (trainer_evaluate(tr, &v) != BG_OK) return run_steps_stopped(r, report);
            char label[64];
            snprintf(label, sizeof label, "step %ld: val loss", tr->step);
            report_val(tr, sink, label, v);
            metrics_val(sink, tr->step, v);
            r->val_loss = v;
        }
        // A signal may reach the ranks at different steps: stop where any rank saw it.
        double stop = o->stop_requested && *o->stop_requested;
        if (P > 1) dist_allreduce_max_f64(tr->layout.world, &stop, 1);
        int last = stop || tr->step == o->steps;
        int save = o->save_dir && (last || (o->save_every && tr->step % o->save_every == 0));
        if (poll_checkpoint(tr, saver, sink, 0) != BG_OK ||
            (save && save_checkpoint(tr, saver, sink) != BG_OK) ||
            (last && poll_checkpoint(tr, saver, sink, 1) != BG_OK)) {
            rc = TRAIN_FAILED;
            *report = tr->report_error;
            break;
        }
        if (stop) {
            metrics_note(sink, "stopped by signal at step %ld", tr->step);
            r->stopped = 1;
            break;
        }
    }
    return rc;
}

int train_run_save(train_run *r) {
    trainer *tr = &r->tr;
    if (!r->saver) return bg_error("no checkpoint saved: no save directory (--save-dir) was given");
    if (save_checkpoint(tr, r->saver, &r->sink) != BG_OK || poll_checkpoint(tr, r->saver, &r->sink, 1) != BG_OK)
        return BG_ERR;
    return BG_OK;
}

int train_run_end(train_run *r, int rc, int *report) {
    trainer *tr = &r->tr;
    const train_options *o = &tr->opt;
    metrics_sink *sink = &r->sink;
    int root = tr->rank == 0;
    int B = o->batch_size, T = o->seq_len, P = tr->world;
    double v;
    r->open = 0;
    if (rc == TRAIN_OK && tr->step == o->steps) {
        if (tr->has_val) {
            if (trainer_evaluate(tr, &v) != BG_OK) {
                ckpt_saver_free(r->saver);
                free(r->data_json);
                return run_stopped_health(tr, sink, &r->health, report);
            }
            report_val(tr, sink, "val loss after training", v);
            metrics_val(sink, tr->step, v);
            r->val_loss = v;
        }
        if (root && o->report_every > 0) report_refresh(o, sink);
        long done = tr->step - r->first_step;
        metrics_note(sink, "trained %ld steps in %.1f s (%.0f tokens/s, %.1f GFLOP/s)", done,
                     bg_now() - r->t_start, (double)done * B * T * P / r->train_seconds,
                     r->flops_per_step * done / r->train_seconds / 1e9);
    }
    // A divergence leaves a save pending: commit it (it holds good state), then stop.
    if (rc != TRAIN_OK && r->saver && ckpt_saver_pending(r->saver)) poll_checkpoint(tr, r->saver, sink, 1);
    ckpt_saver_free(r->saver);
    free(r->data_json);
    if (!o->quiet) report_expert_rows(tr, "high-water mark");
    metrics_close(sink);
    routing_health_free(&r->health);
    trainer_free(tr);
    return rc;
}

int trainer_run(const train_options *o, int *report) {
    train_run *r = bg_malloc(sizeof *r);  // large: a trainer and its sinks
    int rc = train_run_begin(r, o, report);
    if (rc == TRAIN_OK && r->open) rc = train_run_steps(r, o->steps, report);
    if (r->open) rc = train_run_end(r, rc, report);
    free(r);
    return rc;
}
