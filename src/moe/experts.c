// Routed experts as a loop of per-expert GEMM pairs over contiguous rows. The matmul
// kernel caches primitives by (K,N) with M a runtime dimension, so every expert and
// every step reuses the same two primitives. With enough experts per thread
// (matmul_concurrent) each thread takes whole experts, its GEMMs, roundings and
// activation running on it alone, with no team to start or join between them (whole
// steps ran faster so: BENCHMARKS.md). Each expert writes its own rows and its own
// weight gradients, so results do not depend on which thread took it; they equal the
// threaded loop's up to oneDNN's split of a GEMM between threads
// (tests/moe/test_experts_concurrent).
#include "moe/experts.h"

#include <stddef.h>

#include "kernels/kernels.h"

// Row r of an (R, width) buffer in the GEMM operand format.
static void *operand_row(const kernel_ctx *kc, const void *base, size_t r, int width) {
    return (char *)base + matmul_operand_bytes(kc, r * (size_t)width);
}

// The arguments of both passes, so that one loop runs either.
typedef struct {
    kernel_ctx *kc;
    float *y_perm, *h, *dx_perm, *dw_in, *dw_out, *da;
    void *a, *dh;
    const float *x_perm, *dy_perm, *w_in, *w_out;
    const int *offsets;
    int C, F, U;
    ffn_act act;
} experts_args;

static void expert_forward(const experts_args *g, int e) {
    const size_t r = (size_t)g->offsets[e];
    const int M = g->offsets[e + 1] - g->offsets[e], C = g->C, F = g->F, U = g->U;
    if (M == 0) return;
    ffn_forward(g->kc, g->y_perm + r * C, g->h + r * U, operand_row(g->kc, g->a, r, F),
                g->x_perm + r * C, g->w_in + (size_t)e * U * C, g->w_out + (size_t)e * C * F, M,
                C, F, g->act);
}

static void expert_backward(const experts_args *g, int e) {
    const size_t r = (size_t)g->offsets[e];
    const int M = g->offsets[e + 1] - g->offsets[e], C = g->C, F = g->F, U = g->U;
    if (M == 0) return;  // no tokens: exactly zero gradient for this expert
    ffn_backward(g->kc, g->dx_perm + r * C, g->dw_in + (size_t)e * U * C,
                 g->dw_out + (size_t)e * C * F, g->da + r * F, operand_row(g->kc, g->dh, r, U),
                 g->dy_perm + r * C, g->x_perm + r * C, g->h + r * U,
                 operand_row(g->kc, g->a, r, F), g->w_in + (size_t)e * U * C,
                 g->w_out + (size_t)e * C * F, M, C, F, g->act);
}

// order[0..E-1] = the experts by rows, most first (ties by index: a stable insertion).
static void experts_by_rows(int *order, const int *offsets, int E) {
    for (int e = 0; e < E; e++) {
        const int rows = offsets[e + 1] - offsets[e];
        int j = e;
        for (; j > 0 && offsets[order[j - 1] + 1] - offsets[order[j - 1]] < rows; j--)
            order[j] = order[j - 1];
        order[j] = e;
    }
}

// Every expert, one per thread when matmul_concurrent says so. A branch, not the
// parallel construct's if clause: a team of one still costs libgomp an allocation.
// Concurrent experts are handed out largest first, so the last ones taken are small
// and the threads finish close together.
static void run_experts(void (*one)(const experts_args *, int), const experts_args *g, int E) {
    if (matmul_concurrent(E)) {
        int order[E];
        experts_by_rows(order, g->offsets, E);
        #pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < E; i++) one(g, order[i]);
    } else {
        for (int e = 0; e < E; e++) one(g, e);
    }
}

void moe_experts_forward(kernel_ctx *kc, float *y_perm, float *h, void *a, const float *x_perm,
                         const float *w_in, const float *w_out, const int *offsets, int E, int C,
                         int F, ffn_act act) {
    const experts_args g = {.kc = kc, .y_perm = y_perm, .h = h, .a = a, .x_perm = x_perm,
                            .w_in = w_in, .w_out = w_out, .offsets = offsets, .C = C, .F = F,
                            .U = ffn_in_rows(act, F), .act = act};
    run_experts(expert_forward, &g, E);
}

void moe_experts_backward(kernel_ctx *kc, float *dx_perm, float *dw_in, float *dw_out, float *da,
                          void *dh, const float *dy_perm, const float *x_perm, const float *h,
                          const void *a, const float *w_in, const float *w_out, const int *offsets,
                          int E, int C, int F, ffn_act act) {
    const experts_args g = {.kc = kc, .dx_perm = dx_perm, .dw_in = dw_in, .dw_out = dw_out,
                            .da = da, .dh = dh, .dy_perm = dy_perm, .x_perm = x_perm,
                            .h = (float *)h, .a = (void *)a, .w_in = w_in, .w_out = w_out,
                            .offsets = offsets, .C = C, .F = F, .U = ffn_in_rows(act, F),
                            .act = act};
    run_experts(expert_backward, &g, E);
}
