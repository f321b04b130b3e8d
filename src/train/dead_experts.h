#ifndef BG_TRAIN_DEAD_EXPERTS_H
#define BG_TRAIN_DEAD_EXPERTS_H
// Dead experts: those that received no token over the last `window` steps, per MoE
// layer. A collapsing router starves experts for good, one noisy step does not, so the
// count looks back over a window of steps (`bagualu train --dead-window`).
//
// Tracking starts at the step the run starts (or resumes) from, and is not kept in
// checkpoints: until `window` steps have been seen, the window is the steps seen.

typedef struct {
    int layers, experts;
    long window;
    long first_step;    // steps done before tracking began
    long *last_seen;    // (layers,experts) the last step the expert received a token;
                        // first_step when none yet
} dead_experts;

// window > 0. Allocates once; BG_ERR (bg_error set) when out of memory.
int dead_experts_init(dead_experts *d, int layers, int experts, long window, long first_step);
void dead_experts_free(dead_experts *d);
// Records layer's loads (experts) at `step` (steps done, counting this one; steps
// increase by one, from first_step + 1) and returns how many of its experts had no
// token in each of the last min(window, step − first_step) steps.
int dead_experts_update(dead_experts *d, int layer, long step, const int *counts);
#endif
