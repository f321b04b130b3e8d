#ifndef BG_TRAIN_METRICS_H
#define BG_TRAIN_METRICS_H
// What a step reports: a live progress line on a terminal (plain lines otherwise)
// and one JSON object per step in the metrics log (JSON Lines).
#include <stdint.h>
#include <stdio.h>

#include "model/memory_plan.h"
#include "model/model.h"
#include "train/routing_health.h"

typedef struct {
    long step, total_steps;
    double loss, aux_loss, z_loss, lr, grad_norm;
    double tokens_per_s, gflops, step_seconds, eta_seconds;
    int ranks;                  // > 1: a parallel run; the traffic fields are set
    double a2a_bytes_intra, a2a_bytes_inter, a2a_msgs_inter, a2a_seconds;
    double a2a_exposed_seconds; // of a2a_seconds, the time computation waited
    double a2a_skew_seconds;    // --a2a-skew-probe: barrier time before the exchanges
    double allreduce_bytes, allreduce_seconds;
    double allreduce_exposed_seconds;  // of allreduce_seconds, the time the step waited
    int fp16;                   // dynamic loss scaling: the two fields below are logged
    double loss_scale;          // the scale this step ran at
    int skipped;                // its gradients overflowed: no update
    const routing_health *routing;  // MoE layers' routing health; NULL: not reported
    double peak_rss_mib;        // this process's (rank 0's) peak resident memory
    double comm_scratch_held;   // rank 0's communicators' scratch, bytes (> 1 rank: logged)
    long expert_rows_hwm;       // rank 0's most expert rows received in a forward, and the
    long expert_rows_grown;     //   rows its grown (dropless) buffers hold; 0: not logged
    const memory_report *memory;  // the run's memory report: on its first step's line only
    const char *extra_json;     // more "key":value pairs for the log line (blended data); NULL: none
    const char *skip_reason;    // the step was skipped (any dtype): why; NULL: applied
    long skips_total;           // steps skipped so far in this process
    int rewound;                // a loss spike rewound the run after this step:
    long rewind_to;             //   to this step's checkpoint,
    uint64_t rewind_lo, rewind_hi;  //   global samples [lo, hi) skipped from now on
} step_metrics;

typedef struct {
    FILE *log;          // JSON Lines, NULL when not logging
    int tty;            // stdout is a terminal: redraw one line
    int line_open;      // a progress line is on screen without its newline
    long print_every;   // plain-output interval
    int quiet;          // prints nothing (ranks other than 0)
    int no_stdout;      // writes the log but prints nothing (the library's default)
} metrics_sink;

int metrics_open(metrics_sink *s, const char *log_path, long total_steps, int quiet);
void metrics_step(metrics_sink *s, const step_metrics *m, const model *mdl);
// The memory report at start (per rank: each component the largest over `ranks`).
void metrics_memory(metrics_sink *s, const memory_report *r, int ranks);
// A whole line of the log as given (the run's description, train/run_info.h).
void metrics_log_line(metrics_sink *s, const char *json);
// A validation loss: {"val_step":N,"val_loss":x} in the log (no "step": not a step's line).
void metrics_val(metrics_sink *s, long step, double loss);
// A message that must not be overwritten by the progress line (eval results).
void metrics_note(metrics_sink *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// One more JSON object line in the log (per-dataset validation losses).
void metrics_log_object(metrics_sink *s, const char *json);
void metrics_close(metrics_sink *s);
#endif
