#ifndef BG_TRAIN_TRAIN_FLAGS_H
#define BG_TRAIN_TRAIN_FLAGS_H
// `bagualu train`'s flags, one table for the CLI (args_parse over argv) and the library
// (bagualu_set_option: args_set by name), so both accept the same names and values.
#include "core/args.h"
#include "train/train_state.h"

enum { TRAIN_FLAGS_MAX = 64 };

typedef struct {
    train_options o;
    // Flags given as text or in other units, turned into o by train_flags_finish.
    const char *a2a, *dtype, *zero, *recompute;
    int overlap;
    float link_gbit, link_lat, comm_timeout;
    arg_spec specs[TRAIN_FLAGS_MAX];  // each dest points into this struct: it must not move
    int count;
} train_flags;

// train_options_defaults and the table.
void train_flags_init(train_flags *f);
// The text flags into f->o (a2a, dtype, zero, recompute, overlap, the link and timeout
// figures) and the one-data-source check: BG_ERR naming the flag ("train: --dtype ...").
int train_flags_finish(train_flags *f);
#endif
