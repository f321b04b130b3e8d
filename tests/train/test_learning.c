// A tiny MoE model learns the synthetic copy task.
// The stream repeats each random 8-token segment once (vocab 32). Windows start
// at multiples of 32, so every window holds two segment/copy pairs. An untrained
// model, or one that only learned token frequencies, pays ln 32 = 3.47 nats on
// every token (they are uniform). A model that copies pays ln 32 on the first
// copy only: (8·3.47 + 8·0)/16 ≈ 1.73 nats. The threshold 2.4 sits well below
// anything reachable without copying and well above the copying optimum.
#include <math.h>
#include <stdio.h>

#include "test_util.h"
#include "train_fixture.h"

int main(void) {
    train_fixture f;
    fixture_make(&f, 8);
    train_options o;
    fixture_options(&o, &f);
    o.steps = 400;
    trainer tr;
    TU_CHECK(trainer_init(&tr, &o) == BG_OK, "trainer_init: %s", bg_last_error());
    double before = fixture_evaluate(&tr);
    double first = 0, last = 0;
    while (tr.step < o.steps) {
        double l = fixture_step(&tr);
        if (tr.step == 1) first = l;
        last = l;
    }
    double after = fixture_evaluate(&tr);
    printf("val loss before %.4f after %.4f; train loss first %.4f last %.4f (ln 32 = %.4f)\n",
           before, after, first, last, log(32.0));
    TU_CHECK(fabs(before - log(32.0)) < 0.3, "untrained loss %.4f should be near ln 32", before);
    TU_CHECK(after < 2.4, "val loss %.4f did not fall below 2.4: the model did not learn to copy", after);
    trainer_free(&tr);
    fixture_remove(&f);
    return tu_finish("learning");
}
