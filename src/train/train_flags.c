#include "train/train_flags.h"
#include "comm/dist.h"
#include "core/error.h"
#include "train/trainer.h"

#include <string.h>

void train_flags_init(train_flags *f) {
    memset(f, 0, sizeof *f);
    train_options *o = &f->o;
    train_options_defaults(o);
    f->overlap = 1;
    f->link_lat = -1;
    const arg_spec specs[] = {
        {"config", ARG_STR, &o->config_path, 1, "model config (JSON)"},
        {"data", ARG_STR, &o->data_path, 0, "training shards: a file, glob, directory, comma list or @list"},
        {"data-mix", ARG_STR, &o->data_mix, 0, "blended datasets instead of --data: name:weight=shards,... or a .json"},
        {"val", ARG_STR, &o->val_path, 0, "validation shards as --data, or name=shards,... for a loss per dataset"},
        {"batch-size", ARG_INT, &o->batch_size, 0, "sequences per step (default 8)"},
        {"seq-len", ARG_INT, &o->seq_len, 0, "tokens per sequence (default 64)"},
        {"steps", ARG_LONG, &o->steps, 0, "optimizer steps (default 100)"},
        {"lr", ARG_FLOAT, &o->lr, 0, "peak learning rate (default 3e-4)"},
        {"min-lr", ARG_FLOAT, &o->min_lr, 0, "final learning rate of the cosine (default lr/10)"},
        {"warmup", ARG_LONG, &o->warmup, 0, "linear warm-up steps (default 0)"},
        {"weight-decay", ARG_FLOAT, &o->weight_decay, 0, "AdamW decoupled weight decay (default 0.1)"},
        {"beta1", ARG_FLOAT, &o->beta1, 0, "AdamW beta1 (default 0.9)"},
        {"beta2", ARG_FLOAT, &o->beta2, 0, "AdamW beta2 (default 0.95)"},
        {"clip", ARG_FLOAT, &o->clip, 0, "clip the global gradient norm to this (0 = off; default 1)"},
        {"seed", ARG_U64, &o->seed, 0, "seed for initialization and data order (default 1337)"},
        {"threads", ARG_INT, &o->threads, 0, "OpenMP threads (default: all cores)"},
        {"log", ARG_STR, &o->log_path, 0, "write one JSON object per step here"},
        {"dead-window", ARG_LONG, &o->dead_window, 0, "an expert without a token for N steps counts as dead (default 100)"},
        {"eval-every", ARG_LONG, &o->eval_every, 0, "evaluate on --val every K steps"},
        {"eval-batches", ARG_INT, &o->eval_batches, 0, "batches per evaluation (default 4)"},
        {"save-dir", ARG_STR, &o->save_dir, 0, "directory for checkpoints (step_NNNNNNNN/ and latest)"},
        {"save-every", ARG_LONG, &o->save_every, 0, "save every N steps (default: only at the end)"},
        {"keep-last", ARG_INT, &o->keep_last, 0, "keep only the newest K checkpoints (default: all)"},
        {"save-async", ARG_INT, &o->save_async, 0, "1: write checkpoints on a thread while training goes on; 0: wait (default 1)"},
        {"resume", ARG_STR, &o->resume, 0, "checkpoint directory, or latest (from --save-dir; none yet = start)"},
        {"expert-parallel", ARG_INT, &o->expert_parallel, 0, "expert-parallel degree EP under mpirun (default: largest valid)"},
        {"ranks-per-node", ARG_INT, &o->ranks_per_node, 0, "treat every R ranks as one node (default: real nodes)"},
        {"a2a", ARG_STR, &f->a2a, 0, "token exchange: flat, hierarchical, 2d or auto (cost model; default flat)"},
        {"a2a-chunks", ARG_INT, &o->a2a_chunks, 0, "both trips of the exchange in C chunks, overlapped with expert compute"},
        {"a2a-overlap", ARG_INT, &f->overlap, 0, "1: chunks overlap the expert compute (default); 0: the same chunks, each trip waits whole"},
        {"link-gbit", ARG_FLOAT, &f->link_gbit, 0, "--a2a auto: inter-node link in Gbit/s (default: measured at start)"},
        {"link-latency-us", ARG_FLOAT, &f->link_lat, 0, "--a2a auto: inter-node latency per message in us (default: measured)"},
        {"a2a-skew-probe", ARG_SWITCH, &o->a2a_skew_probe, 0, "measuring: a timed barrier before every all-to-all, logged apart as a2a_skew_s (waiting for the slowest rank)"},
        {"comm-timeout", ARG_FLOAT, &f->comm_timeout, 0, "seconds without progress in a collective before a rank names its peer and exits (default 0: off)"},
        {"grad-overlap", ARG_INT, &o->grad_overlap, 0, "1: the gradient reduction overlaps the backward, layer by layer; 0: it follows the backward (default 0)"},
        {"zero", ARG_STR, &f->zero, 0, "ZeRO-1: 1 shards the AdamW state over the ranks, 0 replicates it (default 1 under mpirun)"},
        {"max-expert-rows", ARG_LONG, &o->max_expert_rows, 0, "dropless MoE: stop when a rank would receive more expert rows in a step (default 8x batch-size x seq-len x k)"},
        {"dtype", ARG_STR, &f->dtype, 0, "GEMM precision: fp32, bf16 or fp16 (loss-scaled); default fp32"},
        {"recompute", ARG_STR, &f->recompute, 0, "activations: none (keep every block's) or block (keep block inputs, recompute in the backward); default none"},
        {"loss-scale", ARG_FLOAT, &o->loss_scale_init, 0, "fp16: initial loss scale (default 65536)"},
        {"loss-scale-window", ARG_LONG, &o->loss_scale_window, 0, "fp16: double the scale after N good steps (default 1000)"},
        {"report", ARG_STR, &o->report_path, 0, "the HTML run report --report-every rewrites (default: the log's name with .html)"},
        {"report-every", ARG_LONG, &o->report_every, 0, "rewrite the run report every N steps and at the end (needs --log; default 0: never)"},
        {"fallback", ARG_SWITCH, &o->fallback, 0, "with --resume latest: use an older checkpoint if the newest is corrupt"},
        {"max-skips", ARG_LONG, &o->max_skips, 0, "stop after N steps in a row skipped for a non-finite loss or gradient (default 10)"},
        {"spike-rewind", ARG_FLOAT, &o->spike_rewind, 0, "rewind to the last checkpoint and skip the data when the loss exceeds its running mean by Z standard deviations (default 0: off)"},
        {"spike-window", ARG_INT, &o->spike_window, 0, "steps of the loss's running mean and deviation (default 100)"},
        {"spike-patience", ARG_INT, &o->spike_patience, 0, "spiking steps in a row before a rewind (default 3)"},
    };
    f->count = (int)(sizeof specs / sizeof specs[0]);
    BG_ASSERT(f->count <= TRAIN_FLAGS_MAX);
    memcpy(f->specs, specs, sizeof specs);
}

int train_flags_finish(train_flags *f) {
    train_options *o = &f->o;
    if (!o->data_path == !o->data_mix) return bg_error("train: give one of --data and --data-mix");
    o->a2a_algo = -1;
    for (int i = 0; i < DIST_A2A_ALGOS; i++)
        if (!f->a2a || !strcmp(f->a2a, dist_a2a_name(i))) o->a2a_algo = i;
    if (!f->a2a) o->a2a_algo = DIST_A2A_FLAT;
    if (o->a2a_algo < 0 && strcmp(f->a2a, "auto") != 0)
        return bg_error("train: --a2a must be flat, hierarchical, 2d or auto, got \"%s\"", f->a2a);
    if (f->overlap != 0 && f->overlap != 1)
        return bg_error("train: --a2a-overlap must be 0 or 1, got %d", f->overlap);
    o->a2a_sync = !f->overlap;
    if (o->grad_overlap != 0 && o->grad_overlap != 1)
        return bg_error("train: --grad-overlap must be 0 or 1, got %d", o->grad_overlap);
    o->link_gbit = f->link_gbit;
    o->link_latency_us = f->link_lat;
    o->comm_timeout = f->comm_timeout;
    if (f->dtype && bg_dtype_parse(f->dtype, &o->dtype) != 0)
        return bg_error("train: --dtype must be fp32, bf16 or fp16, got \"%s\"", f->dtype);
    if (f->zero && strcmp(f->zero, "0") != 0 && strcmp(f->zero, "1") != 0)
        return bg_error("train: --zero must be 0 or 1, got \"%s\"", f->zero);
    if (f->zero) o->zero = f->zero[0] - '0';
    if (f->recompute && strcmp(f->recompute, "none") != 0 && strcmp(f->recompute, "block") != 0)
        return bg_error("train: --recompute must be none or block, got \"%s\"", f->recompute);
    o->recompute = f->recompute && !strcmp(f->recompute, "block") ? MODEL_RECOMPUTE_BLOCK : MODEL_RECOMPUTE_NONE;
    return BG_OK;
}
