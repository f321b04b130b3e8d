// The reductions' one summation (dist_sum_rank_order_f32): out = ((x0 + x1) + x2) + ...
// bit for bit, for every rank count and position of the rank's own part, lengths around
// the accumulator's block, and out written over the rank's own part (the reduce-scatter's
// case) or apart from the parts (the all-reduce's).
#include "comm/dist_impl.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

// Values whose sums round differently in another order.
static float value(int r, size_t i) { return (float)((i * 2654435761u + (size_t)r * 40503u) % 100003) * 1.37e-3f - 60.0f; }

int main(void) {
    const size_t lengths[] = {0, 1, 7, 8191, 8192, 8193, 3 * 8192 + 5};
    for (int P = 1; P <= 5; P++)
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            const size_t n = lengths[li], stride = n + 3;  // parts apart from each other
            float *parts = malloc(sizeof(float) * (P * stride + 1));
            float *want = malloc(sizeof(float) * (n + 1)), *out = malloc(sizeof(float) * (n + 1));
            for (int r = 0; r < P; r++)
                for (size_t i = 0; i < n; i++) parts[r * stride + i] = value(r, i);
            for (size_t i = 0; i < n; i++) {
                float s = value(0, i);
                for (int r = 1; r < P; r++) s += value(r, i);
                want[i] = s;
            }
            dist_sum_rank_order_f32(out, parts, stride, P, 0, NULL, n);
            TU_CHECK(n == 0 || !memcmp(out, want, n * sizeof(float)), "P=%d n=%zu, parts apart: not the rank-order sum",
                     P, n);
            for (int me = 0; me < P; me++) {
                // The own part lives in out and the scratch slot `me` holds garbage.
                for (size_t i = 0; i < n; i++) out[i] = value(me, i), parts[me * stride + i] = 1e30f;
                dist_sum_rank_order_f32(out, parts, stride, P, me, out, n);
                TU_CHECK(n == 0 || !memcmp(out, want, n * sizeof(float)),
                         "P=%d n=%zu me=%d, own part in out: not the rank-order sum", P, n, me);
                for (size_t i = 0; i < n; i++) parts[me * stride + i] = value(me, i);
            }
            free(parts), free(want), free(out);
        }
    return tu_finish("comm/test_sum_rank_order");
}
