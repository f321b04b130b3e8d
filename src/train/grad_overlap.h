#ifndef BG_TRAIN_GRAD_OVERLAP_H
#define BG_TRAIN_GRAD_OVERLAP_H
// The gradient reduction overlapped with the backward (--grad-overlap 1): the sums of
// grad_sync_grads (scatter 0) or grad_sync_reduce_scatter (scatter 1), started as
// model_backward finishes them (its backward_hook) and progressed at every block
// boundary, finished by grad_overlap_end before the norm and the optimizer. The same
// rank-order sums, so the same bits as the blocking calls.
#include "comm/dist.h"
#include "model/model.h"

typedef struct {
    dist_grad_reduce *dense, *experts;  // world; expert-data-parallel group (or NULL)
    size_t *dense_lo, *expert_lo;       // [L]: where layer l's gradients begin
    size_t dense_posted, expert_posted; // [posted, end) is on its way
    // The token embedding's rows no rank's batch holds are final once the LM head's
    // gradient is in (tied) or from the start (untied): they leave at the first block.
    size_t wte_off;                     // its offset; rows of C floats
    int wte_rows, C, tokens;            // tokens: this rank's per step
    int32_t *all_tokens;                // [P * tokens]: the global batch's inputs
    unsigned char *touched;             // [wte_rows]: 1 when a row's gradient waits
    int rows_posted;                    // the untouched rows are on their way
    int scatter, layers;
    model *m;
} grad_overlap;

// For m (whose par is set, after model_prepare) and its layout; scatter: ZeRO-1's
// reduce-scatter.
void grad_overlap_init(grad_overlap *g, model *m, int scatter);
void grad_overlap_free(grad_overlap *g);
// Before model_backward, with this rank's input tokens (m->acts.N; a small all-gather
// over the world): installs the hook. After it: posts what is left (the embeddings'
// rows the batch holds), waits, removes the hook.
void grad_overlap_begin(grad_overlap *g, const int *inputs);
void grad_overlap_end(grad_overlap *g);
#endif
