// Dead experts over a window of steps (train/dead_experts.h): an expert is dead when it
// had no token in each of the last min(window, steps seen) steps; one token revives it.
#include "core/error.h"
#include "train/dead_experts.h"
#include "test_util.h"

#include <stdio.h>

int main(void) {
    printf("dead experts, window 3\n");
    dead_experts d;
    // Tracking starts after 10 steps (a resume): the first step recorded is 11.
    TU_CHECK(dead_experts_init(&d, 2, 3, 3, 10) == BG_OK, "init");
    // Layer 0, experts 0..2: expert 0 always loaded, expert 1 only at step 11, expert 2
    // only at step 13. Layer 1 all loaded, except expert 2 never.
    const int l0[][3] = {{4, 1, 0}, {5, 0, 0}, {5, 0, 1}, {5, 0, 0}, {5, 0, 0}, {5, 0, 0}, {5, 0, 0}};
    // Steps 11..17. Expert 1 is dead from step 14 (steps 12-14 empty). Expert 2 is
    // dead at 11 and 12 (every step seen so far empty), alive at 13-15, dead from 16
    // (steps 14-16 empty).
    const int want0[] = {1, 1, 0, 1, 1, 2, 2};
    const int l1[3] = {1, 1, 0};
    for (int i = 0; i < 7; i++) {
        long step = 11 + i;
        int got = dead_experts_update(&d, 0, step, l0[i]);
        TU_CHECK(got == want0[i], "layer 0 step %ld: %d dead, want %d", step, got, want0[i]);
        got = dead_experts_update(&d, 1, step, l1);
        TU_CHECK(got == 1, "layer 1 step %ld: %d dead, want 1", step, got);
    }
    // One token brings expert 1 back at once.
    const int back[3] = {1, 1, 0};
    int got = dead_experts_update(&d, 0, 18, back);
    TU_CHECK(got == 1, "step 18: %d dead, want 1 (expert 2)", got);
    dead_experts_free(&d);

    printf("dead experts, window 1: dead means empty this step\n");
    TU_CHECK(dead_experts_init(&d, 1, 2, 1, 0) == BG_OK, "init");
    const int a[2] = {0, 3}, b[2] = {2, 0};
    TU_CHECK(dead_experts_update(&d, 0, 1, a) == 1, "window 1, step 1");
    TU_CHECK(dead_experts_update(&d, 0, 2, b) == 1, "window 1, step 2");
    TU_CHECK(dead_experts_update(&d, 0, 3, b) == 1, "window 1, step 3");
    dead_experts_free(&d);
    return tu_finish("test_dead_experts");
}
