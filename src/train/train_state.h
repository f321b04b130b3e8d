#ifndef BG_TRAIN_TRAIN_STATE_H
#define BG_TRAIN_TRAIN_STATE_H
// A training run's options and state: what the step loop (trainer.h) advances and a
// checkpoint (checkpoint.h) captures. Apart from both, so neither includes the other.
#include <stdint.h>

#include "data/data_source.h"
#include "core/dtype.h"
#include "model/model.h"
#include "train/adamw.h"
#include "train/grad_overlap.h"
#include "model/zero_shard.h"
#include "train/spike.h"
#include "train/test_hooks.h"

typedef struct {
    const char *config_path;
    const char *data_path;      // a shard set (data/shard_set.h); NULL when data_mix
    const char *data_mix;       // NULL, or blended datasets (data/blend.h)
    const char *val_path;       // NULL: no evaluation; a shard set, or name=shards,...
                                // (data/blend.h) for a loss per dataset
    const char *log_path;       // NULL: no JSON Lines log
    long dead_window;           // an expert is dead after this many steps without a token
    int batch_size, seq_len;
    long steps;
    float lr, min_lr;           // cosine decays from lr to min_lr
    long warmup;
    float weight_decay, beta1, beta2, eps, clip;
    uint64_t seed;
    int threads;
    long eval_every;            // 0: only at the start and the end (when val_path)
    int eval_batches;           // batches of validation windows per evaluation
    const char *save_dir;       // NULL: no checkpoints
    long save_every;            // 0: only at the end (and on SIGINT/SIGTERM)
    int keep_last;              // 0: keep every checkpoint
    int save_async;             // 1: snapshot, then a writer thread (train/checkpoint.h)
    const char *resume;         // NULL, a checkpoint directory, or "latest" (in save_dir)
    int fallback;               // resume latest: fall back to an older checkpoint if corrupt
    // Parallel layout (ignored on one process): expert-parallel degree (0 = the
    // largest valid), ranks per emulated node (0 = real nodes), all-to-all algorithm
    // and chunks.
    int expert_parallel;
    int ranks_per_node;
    int a2a_algo;               // enum dist_a2a_algo, or -1: auto (dist_a2a_choose)
    int a2a_chunks;
    int a2a_sync;               // 1: chunks without overlap (--a2a-overlap 0)
    double link_gbit;           // auto: the inter-node link's Gbit/s (0: measure)
    double link_latency_us;     // auto: its per-message latency in us (< 0: measure)
    double comm_timeout;        // the watchdog's seconds (0: off; dist_set_timeout)
    int a2a_skew_probe;         // 1: barrier before each all-to-all (dist_set_skew_probe)
    int grad_overlap;           // 1: the gradient reduction overlaps the backward
                                // (train/grad_overlap.h); 0: it follows it
    int zero;                   // ZeRO-1, optimizer state sharded: 1 on, 0 off, -1 on when
                                // P > 1 (one process holds everything either way)
    long max_expert_rows;       // dropless expert parallelism: rows a rank may receive
                                // in one MoE layer's step (0: 8x the balanced share)
    // Mixed precision: the GEMMs' operand precision (fp32, bf16, fp16); master
    // weights, AdamW state and everything outside the GEMMs stay fp32.
    // fp16 scales the loss dynamically: starts at loss_scale_init, halves on every
    // step whose gradients overflow (the step is skipped), doubles after
    // loss_scale_window good steps in a row.
    bg_dtype dtype;
    model_recompute recompute;  // activation recomputation (model.h); bits unchanged
    float loss_scale_init;
    long loss_scale_window;
    // A step whose loss or gradients are not finite is skipped (any dtype); this many
    // skips in a row stop the run (fp16 overflows that halve the scale do not count).
    long max_skips;
    // Loss spikes: a loss above the mean of the last spike_window steps' by spike_rewind
    // standard deviations, spike_patience steps in a row, rewinds to the newest
    // checkpoint before the spike and skips the data since it. 0: off.
    float spike_rewind;
    int spike_window, spike_patience;
    // Set (by a signal handler) to ask for a checkpoint at the next step boundary
    // and a clean stop; NULL: never.
    volatile int *stop_requested;
    const char *command_line;   // the run's command, for the log's first line (NULL: "")
    const char *report_path;    // the HTML run report (train/run_report.h) rewritten
    long report_every;          // every N steps and at the end; 0: never
    const char *config_json;    // the model config as JSON text instead of config_path
    int quiet;                  // 1: no progress lines on stdout (the log is still written)
} train_options;

// A training run in progress: what a checkpoint will capture.
typedef struct {
    train_options opt;
    model_config cfg;
    dist_layout layout;         // the ranks of this run (one, without MPI)
    int has_layout;
    model_parallel par;         // used when layout.world_size > 1
    dist_a2a_cost_in a2a_auto;  // --a2a auto: the links and shape the choice saw
    int rank, world;            // this rank, and ranks sharing the global batch
    int report_error;           // after a failed init: this rank prints the error
    model m;
    zero_shard zero;            // the optimizer elements this rank owns (model/zero_shard.h)
    adamw_state adam;           // m, v: zero_shard_numel(&zero) elements
    adamw_hparams hp;
    data_source train, val;
    int has_val;
    double *val_losses;         // (val.count) the last evaluation's loss per dataset
    long step;                  // steps completed
    uint64_t samples;           // global samples consumed: the data loader's position
                                // (the global batch is batch_size x world)
    float min_lr;
    int *inputs, *targets;      // (B,T) batch buffers
    double last_grad_norm;      // of the true (unscaled) gradient; inf on a skipped step
    float last_lr;
    float loss_scale;           // 1 unless fp16
    long good_steps;            // fp16: steps since the scale last changed or a skip
    long skipped_steps;         // fp16: steps skipped for overflow in this process
    float skipped_at;           // the last step was skipped at this loss scale; 0: applied
    const char *skip_reason;    // why the last step was skipped (a JSONL word); NULL: applied
    long skips_total;           // steps skipped in this process, for any reason
    long skips_in_row;          // consecutive skips that count towards max_skips
    skip_ranges skips;          // data never trained on (rewinds); in trainer.json
    spike_state spike;          // the detector's window (when spike_rewind > 0); in trainer.json
    long rewinds;               // rewinds in this process
    train_hooks hooks;          // test-only fault injection (train/test_hooks.h)
    int grad_overlap_on;        // the reduction overlaps the backward (P > 1, --grad-overlap 1)
    grad_overlap gov;
} trainer;

// The smallest loss scale: below 1 it would shrink gradients into fp16's underflow.
#define LOSS_SCALE_MIN 1.0f
#endif
