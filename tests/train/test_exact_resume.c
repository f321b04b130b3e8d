// Exact resume: N steps straight, and K steps + ckpt_save + a fresh trainer that resumes
// + N-K steps, give bitwise-identical losses at every step and bitwise-identical final
// parameters, AdamW m and v, AdamW step, trainer step and data position.
//
// Tolerance: none (memcmp). A step is a deterministic function of (parameters, m, v,
// optimizer step, LR-schedule step, data position, seed); the checkpoint stores all of
// them in fp32/int64 exactly, so any difference means state was lost or altered.
// Why it can fail: a tensor or moment not saved/loaded (or saved from the wrong view), the
// optimizer step count not restored (bias correction changes), the data position not
// restored (another batch), the LR schedule restarted (K inside the warm-up shows it:
// the LR there changes every step), or a lossy round trip (a dtype conversion).
// Several K: 1 and 3 stop inside the warm-up (warmup = 8 > K), 8 at its end, N-1 one step
// before the end; K = 5 resumes through "latest" (with a newer and an older checkpoint
// present) instead of a directory.
// All of it twice: in fp32, and in fp16 with a loss-scale window of 3 steps, so the
// dynamic loss scale and its count of good steps change across every stop and must
// come back from trainer.json. (Scaling by powers of two is exact, so the losses alone
// would not show a lost scale: the scale and the count are compared directly.)
// Then once more in fp32 with the `bias` gate (sigmoid scores): its per-expert biases
// are state outside the parameters, moved every step, and must come back from
// model.safetensors (compared directly too: a lost bias changes the routing only when
// it crosses a margin).
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "train/checkpoint.h"
#include "train_fixture.h"

#define N 12
#define WARMUP 8

typedef struct {
    double losses[N];
    float *params, *m, *v;
    size_t numel;
    long adam_step, step;
    uint64_t samples;
    float loss_scale;
    long good_steps;
    float *router_state;  // the gates' state (NULL: none)
    size_t state_bytes;
} run_result;

static bg_dtype g_dtype;

static void options(train_options *o, const train_fixture *f) {
    fixture_options(o, f);
    o->steps = N;
    o->warmup = WARMUP;
    o->threads = 1;
    o->batch_size = 4;
    o->seq_len = 16;
    o->dtype = g_dtype;
    o->loss_scale_window = 3;
}

static void capture(run_result *r, const trainer *tr) {
    r->numel = tr->m.table.numel;
    r->params = bg_malloc(r->numel * sizeof(float));
    r->m = bg_malloc(r->numel * sizeof(float));
    r->v = bg_malloc(r->numel * sizeof(float));
    memcpy(r->params, tr->m.params, r->numel * sizeof(float));
    memcpy(r->m, tr->adam.m, r->numel * sizeof(float));
    memcpy(r->v, tr->adam.v, r->numel * sizeof(float));
    r->adam_step = tr->adam.step;
    r->step = tr->step;
    r->samples = tr->samples;
    r->loss_scale = tr->loss_scale;
    r->good_steps = tr->good_steps;
    r->state_bytes = tr->m.router_state ? tr->m.router_state_bytes * tr->m.cfg.num_hidden_layers : 0;
    r->router_state = r->state_bytes ? bg_malloc(r->state_bytes) : NULL;
    if (r->state_bytes) memcpy(r->router_state, tr->m.router_state, r->state_bytes);
}

static void release(run_result *r) {
    free(r->params), free(r->m), free(r->v), free(r->router_state);
    memset(r, 0, sizeof *r);
}

static void run_straight(const train_fixture *f, run_result *r) {
    train_options o;
    options(&o, f);
    trainer tr;
    BG_ASSERT(trainer_init(&tr, &o) == BG_OK);
    for (int i = 0; i < N; i++) r->losses[i] = fixture_step(&tr);
    capture(r, &tr);
    trainer_free(&tr);
}

// K steps, save into save_dir, free; a fresh trainer resumes (from `resume`, a directory
// or "latest") and runs the remaining steps.
static int run_split(const train_fixture *f, int K, const char *save_dir, const char *resume,
                     run_result *r) {
    train_options o;
    options(&o, f);
    trainer tr;
    BG_ASSERT(trainer_init(&tr, &o) == BG_OK);
    for (int i = 0; i < K; i++) r->losses[i] = fixture_step(&tr);
    if (ckpt_save(&tr, save_dir) != BG_OK) {
        tu_fail(__FILE__, __LINE__, "K=%d: ckpt_save: %s", K, bg_last_error());
        trainer_free(&tr);
        return 0;
    }
    // Scribble over the live state before freeing: nothing may leak from the first trainer
    // into the second one through reused memory.
    memset(tr.m.params, 0x7f, tr.m.table.numel * sizeof(float));
    if (tr.m.router_state) memset(tr.m.router_state, 0x7f, tr.m.router_state_bytes);
    trainer_free(&tr);

    options(&o, f);
    o.save_dir = save_dir;
    o.resume = resume;
    if (trainer_init(&tr, &o) != BG_OK) {
        tu_fail(__FILE__, __LINE__, "K=%d: resume from %s: %s", K, resume, bg_last_error());
        return 0;
    }
    TU_CHECK(tr.step == K, "K=%d: resumed at step %ld", K, tr.step);
    TU_CHECK(tr.samples == (uint64_t)K * o.batch_size, "K=%d: resumed data position %llu", K,
             (unsigned long long)tr.samples);
    TU_CHECK(tr.adam.step == K, "K=%d: resumed optimizer step %ld", K, tr.adam.step);
    for (int i = K; i < N; i++) r->losses[i] = fixture_step(&tr);
    capture(r, &tr);
    trainer_free(&tr);
    return 1;
}

static void compare(int K, const run_result *ref, const run_result *got) {
    for (int i = 0; i < N; i++)
        TU_CHECK(memcmp(&ref->losses[i], &got->losses[i], sizeof(double)) == 0,
                 "K=%d: loss at step %d differs: %.17g straight, %.17g resumed", K, i + 1,
                 ref->losses[i], got->losses[i]);
    TU_CHECK(memcmp(ref->params, got->params, ref->numel * sizeof(float)) == 0,
             "K=%d: final parameters differ", K);
    TU_CHECK(memcmp(ref->m, got->m, ref->numel * sizeof(float)) == 0, "K=%d: final AdamW m differs", K);
    TU_CHECK(memcmp(ref->v, got->v, ref->numel * sizeof(float)) == 0, "K=%d: final AdamW v differs", K);
    TU_CHECK(ref->adam_step == got->adam_step, "K=%d: AdamW step %ld vs %ld", K, ref->adam_step,
             got->adam_step);
    TU_CHECK(ref->step == got->step && ref->samples == got->samples,
             "K=%d: trainer step / data position differ", K);
    TU_CHECK(ref->loss_scale == got->loss_scale && ref->good_steps == got->good_steps,
             "K=%d: loss scale %g after %ld good steps straight, %g after %ld resumed", K,
             ref->loss_scale, ref->good_steps, got->loss_scale, got->good_steps);
    TU_CHECK(ref->state_bytes == got->state_bytes &&
                 (!ref->state_bytes || !memcmp(ref->router_state, got->router_state, ref->state_bytes)),
             "K=%d: final router state (the bias gate's bias) differs", K);
}

static void check_all_k(const train_fixture *fp, const char *dtype_name) {
    const train_fixture f = *fp;
    run_result ref = {0};
    run_straight(&f, &ref);

    // The reference itself must move: identical losses at every step would make the
    // comparisons below vacuous.
    TU_CHECK(ref.losses[0] != ref.losses[N - 1], "training does not change the loss");
    int moved = 0;
    for (size_t i = 0; i < ref.state_bytes / sizeof(float); i++) moved |= ref.router_state[i] != 0;
    TU_CHECK(!ref.state_bytes || moved, "the router state never moved");

    const int ks[] = {1, 3, WARMUP, 5, N - 1};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        int K = ks[i];
        char save_dir[400], resume[420];
        snprintf(save_dir, sizeof save_dir, "%s/ckpt_k%d", f.dir, K);
        const char *from = resume;
        if (K == 5) {
            // Through `latest`: an older checkpoint (step 2, from a separate run) exists
            // beside the one latest names; the newest is the one that must be used.
            train_options o;
            options(&o, &f);
            trainer tr;
            BG_ASSERT(trainer_init(&tr, &o) == BG_OK);
            for (int s = 0; s < 2; s++) fixture_step(&tr);
            BG_ASSERT(ckpt_save(&tr, save_dir) == BG_OK);
            trainer_free(&tr);
            from = "latest";
        } else {
            snprintf(resume, sizeof resume, "%s/step_%08d", save_dir, K);
        }
        run_result got = {0};
        if (run_split(&f, K, save_dir, from, &got)) compare(K, &ref, &got);
        printf("%s K=%2d (%s, warm-up %s): %s\n", dtype_name, K, K == 5 ? "latest" : "directory",
               K < WARMUP ? "interrupted" : "done", tu_failures ? "FAILED so far" : "bitwise identical");
        release(&got);
        char cmd[500];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", save_dir);
        BG_ASSERT(system(cmd) == 0);
    }
    release(&ref);
}

int main(void) {
    train_fixture f;
    fixture_make(&f, 8);
    g_dtype = BG_FP32;
    check_all_k(&f, "fp32");
    g_dtype = BG_FP16;
    check_all_k(&f, "fp16");
    FILE *c = fopen(f.config, "w");
    BG_ASSERT(c);
    fprintf(c, "%.*s, \"router_type\": \"bias\", \"router_score\": \"sigmoid\","
               " \"router_bias_update_rate\": 0.01}", (int)strlen(tiny_moe_json) - 1, tiny_moe_json);
    fclose(c);
    g_dtype = BG_FP32;
    check_all_k(&f, "fp32 bias gate");
    fixture_remove(&f);
    return tu_finish("exact_resume");
}
