// SWIPE's integer core: balancing one slot's count matrix and applying a worker's row
// to its tokens. Serial and in fixed orders on purpose: every rank must reach the same
// integers from the same counts, whatever its threads.
#include "moe/swipe.h"

#include "core/error.h"

#include <stddef.h>
#include <string.h>

void moe_swipe_balance(int *sends, int *caps, const int *counts, int W) {
    int drop[W];  // rejected tokens per sender, over all receivers
    memset(drop, 0, sizeof drop);
    // Each receiver accepts senders in worker order while its capacity lasts.
    for (int v = 0; v < W; v++) {
        int cap = caps[v];
        for (int w = 0; w < W; w++) {
            int n = counts[(size_t)w * W + v];
            BG_ASSERT(n >= 0);
            int take = n < cap ? n : cap;
            sends[(size_t)w * W + v] = take;
            drop[w] += n - take;
            cap -= take;
        }
        caps[v] = cap;
    }
    // Rejected tokens, sender by sender, fill the spare capacity of workers 0, 1, ...;
    // the pointer j never moves back (balancing.cu's loop over drop_count and gcap).
    // A receiver that rejected has no capacity left, so none goes back where it was refused.
    int j = 0;
    for (int w = 0; w < W; w++) {
        while (drop[w] > 0) {
            BG_ASSERT(j < W);  // Σ caps >= Σ counts: the spare capacity covers every drop
            int take = drop[w] < caps[j] ? drop[w] : caps[j];
            sends[(size_t)w * W + j] += take;
            caps[j] -= take;
            drop[w] -= take;
            if (drop[w] > 0) j++;  // worker j is full
        }
    }
}

void moe_swipe_count(int *row, const int *ids, int stride, int B, int W, int El) {
    memset(row, 0, sizeof(int) * (size_t)W);
    for (int t = 0; t < B; t++) {
        int v = ids[(size_t)t * stride] / El;
        BG_ASSERT(v >= 0 && v < W);
        row[v]++;
    }
}

void moe_swipe_assign(int *ids, int stride, int B, const int *send, int W, int El, int slot) {
    int left[W];
    memcpy(left, send, sizeof left);
    // First pass, in token order: keep the expert while the receiver's count lasts; -1
    // marks a token to move.
    for (int t = 0; t < B; t++) {
        int *id = &ids[(size_t)t * stride];
        int v = *id / El;
        if (left[v] > 0)
            left[v]--;
        else
            *id = -1;
    }
    // Second pass: the moved tokens, in token order, to the lowest worker with rows left.
    // Their number equals the rows left (both rows of `sends` and of counts sum to B).
    for (int t = 0, v = 0; t < B; t++) {
        int *id = &ids[(size_t)t * stride];
        if (*id != -1) continue;
        while (v < W && left[v] == 0) v++;
        BG_ASSERT(v < W);
        left[v]--;
        *id = v * El + slot % El;
    }
}
