#include "train/grad_norm.h"

#include <math.h>
#include <omp.h>

#define GRAD_NORM_MAX_THREADS 256

double grad_sum_squares(const float *g, size_t n) {
    double partial[GRAD_NORM_MAX_THREADS] = {0};
    int threads = omp_get_max_threads();
    if (threads > GRAD_NORM_MAX_THREADS) threads = GRAD_NORM_MAX_THREADS;
    #pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t lo = n * t / nt, hi = n * (t + 1) / nt;
        double s = 0;
        // simd: lanes of partial sums, so the loop runs at memory speed instead of one
        // dependent add per element; the order is fixed for a build and thread count.
        #pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++) s += (double)g[i] * g[i];
        partial[t] = s;
    }
    double total = 0;
    for (int t = 0; t < threads; t++) total += partial[t];
    return total;
}

double grad_global_norm(const float *g, size_t n) { return sqrt(grad_sum_squares(g, n)); }

float grad_clip_scale(double norm, float max_norm) {
    if (max_norm <= 0 || !(norm > max_norm)) return 1.0f;
    return (float)(max_norm / (norm + 1e-6));
}
