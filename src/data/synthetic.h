#ifndef BG_DATA_SYNTHETIC_H
#define BG_DATA_SYNTHETIC_H
// Learnable synthetic token streams for demos and tests.
//   copy:  a random segment of `span` tokens, then the same segment again, repeated.
//          The first half is unpredictable (loss ln V), the second half is fully
//          predictable, so a model that learned the task reaches about ln(V)/2.
//   count: ascending runs t, t+1, t+2, ... (mod V) of random length from a random
//          start; only the run starts are unpredictable.
#include <stddef.h>
#include <stdint.h>

typedef enum { SYNTH_COPY = 0, SYNTH_COUNT = 1 } synth_task;

int synth_task_parse(synth_task *task, const char *name);
void synth_generate(uint32_t *tokens, size_t n, synth_task task, int vocab, int span, uint64_t seed);
#endif
