// Dispatch plan, permute and combine for the MoE layer. A dropped (token, slot)
// (topk_idx -1) has no row: row_of -1, skipped by every pass.
#include "moe/dispatch.h"

#include "core/error.h"

#include <stddef.h>
#include <string.h>

void moe_dispatch_plan(int *counts, int *offsets, int *row_of, int *token_of,
                       const int *topk_idx, int N, int E, int k) {
    // Serial on purpose: O(N·k) integer work, negligible next to the expert GEMMs,
    // and a single pass in token order is what makes the order stable.
    memset(counts, 0, sizeof(int) * (size_t)E);
    size_t NK = (size_t)N * k;
    for (size_t i = 0; i < NK; i++) {
        int e = topk_idx[i];
        BG_ASSERT(e >= -1 && e < E);
        if (e >= 0) counts[e]++;
    }
    offsets[0] = 0;
    for (int e = 0; e < E; e++) offsets[e + 1] = offsets[e] + counts[e];
    // Scatter with offsets[e] as expert e's next free row. Afterwards offsets[e] has
    // advanced to the old offsets[e+1], so shifting right by one restores the table.
    for (size_t i = 0; i < NK; i++) {
        int e = topk_idx[i];
        if (e < 0) {
            row_of[i] = -1;
            continue;
        }
        int r = offsets[e]++;
        row_of[i] = r;
        token_of[r] = (int)(i / (size_t)k);
    }
    for (int e = E; e > 0; e--) offsets[e] = offsets[e - 1];
    offsets[0] = 0;
}

void moe_permute_forward(float *x_perm, const float *inp, const int *token_of, int rows,
                         int C) {
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++)
        memcpy(x_perm + (size_t)r * C, inp + (size_t)token_of[r] * C, sizeof(float) * (size_t)C);
}

void moe_permute_backward(float *dinp, const float *dx_perm, const int *row_of, int N,
                          int k, int C) {
    if (!dinp) return;
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        float *d = dinp + (size_t)t * C;
        for (int j = 0; j < k; j++) {
            int r = row_of[(size_t)t * k + j];
            if (r < 0) continue;
            const float *g = dx_perm + (size_t)r * C;
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
    }
}

void moe_combine_forward(float *out, const float *y_perm, const float *topk_w,
                         const int *row_of, int N, int k, int C) {
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        float *o = out + (size_t)t * C;
        for (int j = 0; j < k; j++) {
            int r = row_of[(size_t)t * k + j];
            if (r < 0) continue;
            float w = topk_w[(size_t)t * k + j];
            const float *y = y_perm + (size_t)r * C;
            for (int c = 0; c < C; c++) o[c] += w * y[c];
        }
    }
}

// Slots of one token taken together: DOT_LANES dot products advance side by side, each
// still summed over c in order (the same bits as one at a time), so the adds' latency
// overlaps instead of chaining.
enum { DOT_LANES = 8 };

void moe_combine_backward(float *dy_perm, float *dtopk_w, const float *dout,
                          const float *y_perm, const float *topk_w, const int *row_of,
                          int N, int k, int C) {
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *g = dout + (size_t)t * C;
        for (int j0 = 0; j0 < k; j0 += DOT_LANES) {
            const float *y[DOT_LANES];
            size_t slot[DOT_LANES];
            int n = 0;
            for (int j = j0; j < k && j < j0 + DOT_LANES; j++) {
                const size_t i = (size_t)t * k + j;
                if (row_of[i] < 0) {
                    dtopk_w[i] = 0.0f;  // dropped: the weight did not reach the output
                    continue;
                }
                const float w = topk_w[i];
                float *dy = dy_perm + (size_t)row_of[i] * C;
                #pragma omp simd
                for (int c = 0; c < C; c++) dy[c] = w * g[c];
                y[n] = y_perm + (size_t)row_of[i] * C, slot[n++] = i;
            }
            // C can be thousands; a double sum keeps dtopk_w accurate.
            double dot[DOT_LANES] = {0};
            for (int c = 0; c < C; c++)
                for (int q = 0; q < n; q++) dot[q] += (double)g[c] * y[q][c];
            for (int q = 0; q < n; q++) dtopk_w[slot[q]] = (float)dot[q];
        }
    }
}
