// The whole MoE layer (router + dispatch + experts + shared experts + balance losses)
// against a double-precision reference written from the definitions, and every
// gradient (gate, w_in, w_out, shared weights, inp) against centered finite
// differences of L = Σ dout·out + aux_coef·aux + z_coef·z.
#include "core/arena.h"
#include "kernels/kernels.h"
#include "moe/moe_layer.h"
#include "moe_ref.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Forward: three fp32 GEMM stages of ≤ 12 terms, softmax and a k-term combine; relative
// error ~1e-6 on O(1) outputs. atol 1e-5 / rtol 1e-4 keep a 10x+ margin for the GEMM
// library's own summation order; a wrong expert or weight shows up at O(1e-1).
#define FWD_ATOL 1e-5
#define FWD_RTOL 1e-4
#define LOSS_TOL 1e-5
// Backward vs FD of the double reference (eps 1e-5 on a smooth function: FD error
// < 1e-9): the float backward's rounding through the same stages, ~1e-6. The router
// and shared-expert gradients sum contributions from every token, ~2e-6. Same
// tolerances, with the margin above.
#define BWD_ATOL 1e-5
#define BWD_RTOL 1e-4
#define FD_EPS 1e-5
#define MIN_MARGIN 1e-3  // see test_router.c: top-k must not flip under ±FD_EPS

// One block holding, in order: gate, w_in, w_out, shared_in, shared_out, inp. The
// float parameters, the float gradients and the double reference all use it.
typedef struct {
    size_t gate, w_in, w_out, sh_in, sh_out, inp, total;
} block_layout;

static block_layout layout_of(const moe_shape *s, int N) {
    size_t C = s->C, E = s->E, F = s->F, U = ffn_in_rows(s->act, s->F), S = s->S;
    block_layout b;
    b.gate = 0;
    b.w_in = b.gate + E * C;
    b.w_out = b.w_in + E * U * C;
    b.sh_in = b.w_out + E * C * F;
    b.sh_out = b.sh_in + S * U * C;
    b.inp = b.sh_out + S * C * F;
    b.total = b.inp + (size_t)N * C;
    return b;
}

static moe_params float_views(float *x, const block_layout *b, int S) {
    moe_params p = {x + b->gate, x + b->w_in, x + b->w_out, S ? x + b->sh_in : NULL,
                    S ? x + b->sh_out : NULL};
    return p;
}

typedef struct {
    double *x;  // the block in double
    const block_layout *b;
    const moe_shape *s;
    int N;
    int *idx;   // held fixed
    double *g;  // dout
    double *out;
} layer_ctx;

static double layer_loss(void *vctx) {
    layer_ctx *c = vctx;
    ref_params p = {c->x + c->b->gate, c->x + c->b->w_in, c->x + c->b->w_out,
                    c->x + c->b->sh_in, c->x + c->b->sh_out};
    double aux, z, L = 0;
    ref_moe_forward(c->out, &aux, &z, c->idx, c->x + c->b->inp, &p, c->s, c->N, 0);
    for (size_t i = 0; i < (size_t)c->N * c->s->C; i++) L += c->g[i] * c->out[i];
    return L + c->s->aux_coef * aux + c->s->z_coef * z;
}

typedef struct {
    bg_arena arena;
    moe_acts acts;
    moe_scratch scr;
} layer_state;

// Measure with a capacity-0 arena, then lay out for real: the sizes must agree and
// measuring must not touch memory (all views NULL).
static void state_init(layer_state *st, const moe_shape *s, int N) {
    bg_arena m;
    bg_arena_init(&m, 0);
    moe_acts_layout(&st->acts, &m, s, N);
    moe_scratch_layout(&st->scr, &m, s, N);
    TU_CHECK(st->acts.dispatch.x_perm == NULL && st->scr.dispatch.dy_perm == NULL, "measuring arena gave pointers");
    size_t need = m.used;
    bg_arena_init(&st->arena, need);
    moe_acts_layout(&st->acts, &st->arena, s, N);
    moe_scratch_layout(&st->scr, &st->arena, s, N);
    TU_CHECK(st->arena.used == need, "layout used %zu bytes, measured %zu", st->arena.used, need);
}

static kernel_ctx *g_kc;  // fp32 GEMMs

static void check_layer(moe_shape s, int N, uint64_t seed) {
    printf("moe layer N=%d C=%d E=%d k=%d F=%d S=%d act=%s norm=%d aux_coef=%g z_coef=%g\n", N,
           s.C, s.E, s.k, s.F, s.S, s.act == FFN_SWIGLU ? "swiglu" : "gelu", s.norm_topk_prob,
           s.aux_coef, s.z_coef);
    const int C = s.C, E = s.E, k = s.k, F = s.F;
    const size_t U = ffn_in_rows(s.act, F), nx = (size_t)N * C, NK = (size_t)N * k;
    block_layout b = layout_of(&s, N);
    tu_seed(seed);
    float *x = malloc(sizeof(float) * b.total), *dout = malloc(sizeof(float) * (nx + 1));
    tu_fill_normal(x + b.gate, (size_t)E * C, 0.5);
    tu_fill_normal(x + b.w_in, b.inp - b.w_in, 0.4);
    tu_fill_normal(x + b.inp, nx, 1.0);
    tu_fill_normal(dout, nx, 1.0);
    // Starve the last expert: every token has inp[t][0] >= 2 and the last gate row a
    // weight of -3 there, so its logit sits ~6 below the others and it is never chosen
    // (unless k == E). Its w_in / w_out gradients must stay exactly as they were.
    for (int t = 0; t < N; t++) x[b.inp + (size_t)t * C] = 2.0f + fabsf(x[b.inp + (size_t)t * C]);
    for (int e = 0; e < E; e++) x[b.gate + (size_t)e * C] *= 0.1f;
    x[b.gate + (size_t)(E - 1) * C] = -3.0f;
    moe_params p = float_views(x, &b, s.S);
    const float *inp = x + b.inp;

    layer_state st;
    state_init(&st, &s, N);
    const moe_router_ctx rc = {.layer = 0};  // one process: no communicator
    float *out = malloc(sizeof(float) * (nx + 1));
    for (size_t i = 0; i < nx; i++) out[i] = NAN;  // WRITES: garbage must not leak through
    moe_forward(g_kc, out, &st.acts, inp, &p, &rc, &s, N);

    // Reference forward, choosing experts itself.
    layer_ctx c = {ref_from_float(x, b.total), &b, &s, N, malloc(sizeof(int) * (NK + 1)),
                   ref_from_float(dout, nx), malloc(sizeof(double) * (nx + 1))};
    ref_params rp = {c.x + b.gate, c.x + b.w_in, c.x + b.w_out, c.x + b.sh_in, c.x + b.sh_out};
    double raux, rz;
    ref_moe_forward(c.out, &raux, &rz, c.idx, c.x + b.inp, &rp, &s, N, 1);
    double *rlogits = malloc(sizeof(double) * (N * E + 1));
    ref_logits(rlogits, c.x + b.inp, rp.gate, N, C, E);
    double margin = ref_topk_margin(rlogits, c.idx, N, E, k);
    TU_CHECK(margin > MIN_MARGIN, "test set-up: top-k margin %g too small for FD", margin);
    TU_CHECK(!memcmp(st.acts.router.topk_idx, c.idx, sizeof(int) * NK), "expert choice differs from reference");
    int starved = k < E;
    if (starved) TU_CHECK(st.acts.dispatch.counts[E - 1] == 0, "test set-up: last expert got tokens");
    int total = 0;
    for (int e = 0; e < E; e++) total += st.acts.dispatch.counts[e];
    TU_CHECK(total == (int)NK, "counts sum to %d, want %zu", total, NK);
    ref_expect("layer out", out, c.out, nx, FWD_ATOL, FWD_RTOL);
    TU_CHECK(fabs(st.acts.router.aux_loss - raux) <= LOSS_TOL * (1 + fabs(raux)), "aux %.9g want %.9g",
             st.acts.router.aux_loss, raux);
    TU_CHECK(fabs(st.acts.router.z_loss - rz) <= LOSS_TOL * (1 + fabs(rz)), "z %.9g want %.9g",
             st.acts.router.z_loss, rz);

    // Backward into gradients that already hold values (it must accumulate).
    float *gx = malloc(sizeof(float) * b.total);
    tu_fill_normal(gx, b.total, 1.0);
    float *gx_before = malloc(sizeof(float) * b.total);
    memcpy(gx_before, gx, sizeof(float) * b.total);
    moe_params gp = float_views(gx, &b, s.S);
    // Dirty scratch: backward must not depend on what the workspace held.
    memset(st.scr.dispatch.dy_perm, 0xff, sizeof(float) * NK * C);  // NaN bit patterns
    memset(st.scr.dispatch.dx_perm, 0xff, sizeof(float) * NK * C);
    memset(st.scr.dh, 0xff, sizeof(float) * NK * U);
    memset(st.scr.da, 0xff, sizeof(float) * NK * F);
    memset(st.scr.router.dlogits, 0xff, sizeof(float) * N * E);
    memset(st.scr.router.dprobs, 0xff, sizeof(float) * N * E);
    memset(st.scr.dtopk_w, 0xff, sizeof(float) * NK);
    moe_backward(g_kc, gx + b.inp, &gp, &st.scr, dout, inp, &st.acts, &p, &rc, &s, N);

    double *want = ref_from_float(gx_before, b.total), *fd = malloc(sizeof(double) * b.total);
    ref_fd_grad(fd, c.x, b.total, FD_EPS, layer_loss, &c);
    for (size_t i = 0; i < b.total; i++) want[i] += fd[i];
    ref_expect("layer d gate", gx + b.gate, want + b.gate, b.w_in - b.gate, BWD_ATOL, BWD_RTOL);
    ref_expect("layer d w_in", gx + b.w_in, want + b.w_in, b.w_out - b.w_in, BWD_ATOL, BWD_RTOL);
    ref_expect("layer d w_out", gx + b.w_out, want + b.w_out, b.sh_in - b.w_out, BWD_ATOL, BWD_RTOL);
    if (s.S) {
        ref_expect("layer d shared_in", gx + b.sh_in, want + b.sh_in, b.sh_out - b.sh_in, BWD_ATOL, BWD_RTOL);
        ref_expect("layer d shared_out", gx + b.sh_out, want + b.sh_out, b.inp - b.sh_out, BWD_ATOL, BWD_RTOL);
    }
    ref_expect("layer d inp", gx + b.inp, want + b.inp, nx, BWD_ATOL, BWD_RTOL);
    if (starved) {
        // An expert without tokens costs nothing: its weights' gradients are untouched.
        size_t in0 = b.w_in + (size_t)(E - 1) * U * C, out0 = b.w_out + (size_t)(E - 1) * C * F;
        TU_CHECK(!memcmp(gx + in0, gx_before + in0, sizeof(float) * U * C) &&
                     !memcmp(gx + out0, gx_before + out0, sizeof(float) * C * F),
                 "starved expert's gradient changed");
        // And the finite differences agree that it is exactly zero.
        double worst = 0;
        for (size_t i = 0; i < U * C; i++) worst = fmax(worst, fabs(fd[in0 + i]));
        for (size_t i = 0; i < (size_t)C * F; i++) worst = fmax(worst, fabs(fd[out0 + i]));
        TU_CHECK(worst == 0, "FD of the starved expert is %g, not 0", worst);
    }

    // Determinism: a second forward and backward in a fresh arena give the same bits.
    layer_state st2;
    state_init(&st2, &s, N);
    float *out2 = malloc(sizeof(float) * (nx + 1)), *gx2 = malloc(sizeof(float) * b.total);
    memcpy(gx2, gx_before, sizeof(float) * b.total);
    moe_params gp2 = float_views(gx2, &b, s.S);
    moe_forward(g_kc, out2, &st2.acts, inp, &p, &rc, &s, N);
    moe_backward(g_kc, gx2 + b.inp, &gp2, &st2.scr, dout, inp, &st2.acts, &p, &rc, &s, N);
    TU_CHECK(!memcmp(out, out2, sizeof(float) * nx), "forward not bitwise repeatable");
    TU_CHECK(!memcmp(gx, gx2, sizeof(float) * b.total), "backward not bitwise repeatable");
    TU_CHECK(st.acts.router.aux_loss == st2.acts.router.aux_loss && st.acts.router.z_loss == st2.acts.router.z_loss,
             "losses not bitwise repeatable");
    TU_CHECK(!memcmp(st.acts.dispatch.token_of, st2.acts.dispatch.token_of, sizeof(int) * NK),
             "permutation not repeatable");
    for (int e = 0; e < E; e++)
        for (int q = st.acts.dispatch.offsets[e] + 1; q < st.acts.dispatch.offsets[e + 1]; q++)
            TU_CHECK(st.acts.dispatch.token_of[q - 1] < st.acts.dispatch.token_of[q],
                     "expert %d rows not in token order", e);

    bg_arena_free(&st.arena);
    bg_arena_free(&st2.arena);
    free(x); free(dout); free(out); free(c.x); free(c.idx); free(c.g); free(c.out);
    free(rlogits); free(gx); free(gx_before); free(want); free(fd); free(out2); free(gx2);
}

// N == 0 (e.g. an empty micro-batch on one rank): nothing to do, no crash, losses 0.
static void check_no_tokens(void) {
    moe_shape s = {12, 4, 2, 5, 1, FFN_SWIGLU, 1, 0.01f, 0.001f, NULL, &moe_router_topk, {.groups = 1, .topk_groups = 1}};
    block_layout b = layout_of(&s, 0);
    float *x = malloc(sizeof(float) * b.total), *gx = calloc(b.total, sizeof(float));
    tu_fill_normal(x, b.total, 1.0);
    moe_params p = float_views(x, &b, s.S), gp = float_views(gx, &b, s.S);
    layer_state st;
    state_init(&st, &s, 0);
    const moe_router_ctx rc = {.layer = 0};
    float out = 0, dout = 0;
    st.acts.router.aux_loss = st.acts.router.z_loss = 1;
    moe_forward(g_kc, &out, &st.acts, x + b.inp, &p, &rc, &s, 0);
    moe_backward(g_kc, gx + b.inp, &gp, &st.scr, &dout, x + b.inp, &st.acts, &p, &rc, &s, 0);
    int zero = st.acts.router.aux_loss == 0 && st.acts.router.z_loss == 0;
    for (size_t i = 0; i < b.total; i++) zero &= gx[i] == 0;
    TU_CHECK(zero, "N == 0: losses or gradients not zero");
    bg_arena_free(&st.arena);
    free(x);
    free(gx);
}

int main(void) {
    // moe_shape: C, E, k, F, S, act, norm_topk_prob, aux_coef, z_coef, par, router.
    // Odd sizes on purpose (C = 12, N = 7, F = 5); coefficients far larger than in
    // training so that the aux / z gradients are not lost under the tolerance.
    uint64_t seed = 100;
    g_kc = kernel_ctx_create(BG_FP32);
    check_layer((moe_shape){12, 4, 2, 5, 1, FFN_GELU, 1, 0.5f, 0.2f, NULL, &moe_router_topk, {.groups = 1, .topk_groups = 1}}, 7, seed++);
    check_layer((moe_shape){12, 4, 2, 5, 2, FFN_SWIGLU, 0, 0.5f, 0.2f, NULL, &moe_router_topk, {.groups = 1, .topk_groups = 1}}, 7, seed++);
    check_layer((moe_shape){12, 4, 1, 5, 0, FFN_SWIGLU, 1, 0.5f, 0.2f, NULL, &moe_router_topk, {.groups = 1, .topk_groups = 1}}, 7, seed++);
    check_layer((moe_shape){12, 4, 1, 5, 0, FFN_GELU, 0, 0.5f, 0.2f, NULL, &moe_router_topk, {.groups = 1, .topk_groups = 1}}, 7, seed++);
    check_layer((moe_shape){12, 4, 2, 5, 0, FFN_SWIGLU, 1, 0.0f, 0.0f, NULL, &moe_router_topk, {.groups = 1, .topk_groups = 1}}, 7, seed++);
    check_layer((moe_shape){12, 6, 3, 5, 1, FFN_SWIGLU, 1, 0.01f, 0.001f, NULL, &moe_router_topk, {.groups = 1, .topk_groups = 1}}, 9, seed++);
    check_layer((moe_shape){8, 3, 3, 4, 1, FFN_GELU, 0, 0.5f, 0.2f, NULL, &moe_router_topk, {.groups = 1, .topk_groups = 1}}, 5, seed++);  // k == E
    check_no_tokens();
    kernel_ctx_free(g_kc);
    return tu_finish("moe/test_moe_layer");
}
