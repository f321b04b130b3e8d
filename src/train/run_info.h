#ifndef BG_TRAIN_RUN_INFO_H
#define BG_TRAIN_RUN_INFO_H
// The metrics log's first line: what the run was (command line, model config, layout,
// options, the CPU and its peak), so a report can be drawn from the log alone.
#include "train/train_state.h"

// The CPU as /proc/cpuinfo names it and its tabled fp32 peak per core: clock x FLOPs
// per cycle of its widest FMA (no timing probe: this runs at every start).
typedef struct {
    char model[128];
    double ghz;             // nominal clock (the model name's "@ x.xxGHz", else cpu MHz)
    int flops_per_cycle;    // fp32, two FMA pipes: 64 AVX-512, 32 AVX2, 8 SSE
    const char *isa;        // "avx512", "avx2", "sse"
    int cores;              // logical CPUs online
} run_cpu;

void run_info_cpu(run_cpu *c);
// {"run":{...}} as one line without its newline (caller frees); NULL when out of memory.
char *run_info_json(const trainer *tr, const char *command_line);
#endif
