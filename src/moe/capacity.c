// Capacity and drops: the one place where assignments beyond an expert's capacity
// become -1, whatever gate chose them.
#include "moe/capacity.h"

#include "core/error.h"
#include "moe/router.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int moe_routing_group_tokens(const moe_shape *s, int N) {
    return s->routing.group_tokens > 0 ? s->routing.group_tokens : N;
}

long moe_capacity_per_group(const moe_shape *s, int G) {
    double x = (double)s->routing.capacity_factor * G * s->k / s->E;
    return (long)ceil(x * (1.0 - 1e-7));
}

size_t moe_expert_rows_bound(const moe_shape *s, int N) {
    size_t worst = moe_expert_rows_cap(s, N), bound = 0;
    if (!s->par || (s->router && s->router->balanced_rows)) bound = (size_t)N * s->k;
    if (s->routing.capacity_factor > 0 && N > 0) {
        int G = moe_routing_group_tokens(s, N);
        size_t cap = (size_t)s->E * (size_t)(N / G) * (size_t)moe_capacity_per_group(s, G);
        if (!bound || cap < bound) bound = cap;
    }
    if (!bound) return 0;
    return bound < worst ? bound : worst;
}

int moe_expert_rows_growable(const moe_shape *s, int N) {
    return moe_expert_rows_bound(s, N) == 0 ||
           (s->router && s->router->balanced_rows && !(s->routing.capacity_factor > 0));
}

// Floats as unsigned integers in the same order (sign flipped, negatives reversed).
static uint32_t float_order(float w) {
    uint32_t u;
    memcpy(&u, &w, sizeof u);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

// Ascending heapsort in place: glibc's qsort may allocate a merge buffer, and a step
// must not allocate.
static void sift_down(uint64_t *a, size_t i, size_t n) {
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && a[c + 1] > a[c]) c++;
        if (a[i] >= a[c]) return;
        uint64_t t = a[i];
        a[i] = a[c], a[c] = t, i = c;
    }
}

static void sort_u64(uint64_t *a, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift_down(a, i, n);
    for (size_t end = n; end-- > 1;) {
        uint64_t t = a[0];
        a[0] = a[end], a[end] = t;
        sift_down(a, 0, end);
    }
}

// Assignment i takes a place of its expert while the expert has fewer than cap, else it
// is dropped: 1 when dropped.
static int take_or_drop(int *idx, float *w, size_t i, int *taken, long cap) {
    if (taken[idx[i]] < cap) {
        taken[idx[i]]++;
        return 0;
    }
    idx[i] = -1, w[i] = 0.0f;
    return 1;
}

// One group: idx, w (G,k). Returns the drops.
static long group_apply(int *idx, float *w, uint64_t *keys, int G, int k, int E, long cap,
                        moe_drop_policy policy) {
    int taken[E];
    memset(taken, 0, sizeof taken);
    long dropped = 0;
    const size_t Gk = (size_t)G * k;
    if (policy == MOE_DROP_POSITION) {
        for (int j = 0; j < k; j++)
            for (int t = 0; t < G; t++) {
                size_t i = (size_t)t * k + j;
                if (idx[i] >= 0) dropped += take_or_drop(idx, w, i, taken, cap);
            }
        return dropped;
    }
    // Sorted by (weight descending, token ascending): the index t·k + j orders tokens,
    // and a token names an expert once, so each expert meets its rows in policy order.
    size_t n = 0;
    for (size_t i = 0; i < Gk; i++)
        if (idx[i] >= 0) keys[n++] = (uint64_t)(~float_order(w[i])) << 32 | (uint64_t)i;
    sort_u64(keys, n);
    for (size_t x = 0; x < n; x++) {
        dropped += take_or_drop(idx, w, (size_t)(keys[x] & 0xffffffffu), taken, cap);
    }
    return dropped;
}

long moe_capacity_apply(int *topk_idx, float *topk_w, uint64_t *keys, const moe_shape *s, int N) {
    if (N == 0) return 0;
    const int G = moe_routing_group_tokens(s, N), k = s->k;
    BG_ASSERT(G > 0 && N % G == 0 && (uint64_t)G * k <= 0xffffffffu);
    const long cap = moe_capacity_per_group(s, G);
    long dropped = 0;
    // Groups are independent; serial keeps the integer outcome free of thread effects
    // (it is O(N·k log), small beside the expert GEMMs).
    for (int g = 0; g < N / G; g++) {
        size_t off = (size_t)g * G * k;
        dropped += group_apply(topk_idx + off, topk_w + off, keys, G, k, s->E, cap,
                               s->routing.drop_policy);
    }
    return dropped;
}
