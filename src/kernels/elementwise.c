// Elementwise vector ops. Below ELEMENTWISE_PARALLEL_MIN elements starting the
// thread team costs more than the work, so small vectors run on the calling
// thread, as all do where bg_serial_here (one thread). (A branch, not an OpenMP `if`
// clause: libgomp allocates a fresh team for every serialized region, which would put
// malloc on the hot path.) Every element is independent, so the split never changes
// the result.
#include "kernels/kernels.h"

#include "core/threads.h"

#define ELEMENTWISE_PARALLEL_MIN 32768

// out = a + b; out may be a or b
void residual_forward(float *out, const float *a, const float *b, size_t n) {
    if (n < ELEMENTWISE_PARALLEL_MIN || bg_serial_here()) {
        for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
        return;
    }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// y += x
void vec_add(float *y, const float *x, size_t n) {
    if (n < ELEMENTWISE_PARALLEL_MIN || bg_serial_here()) {
        for (size_t i = 0; i < n; i++) y[i] += x[i];
        return;
    }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void vec_zero(float *y, size_t n) {
    if (n < ELEMENTWISE_PARALLEL_MIN || bg_serial_here()) {
        for (size_t i = 0; i < n; i++) y[i] = 0.0f;
        return;
    }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = 0.0f;
}
