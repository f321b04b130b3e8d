#ifndef BG_TRAIN_GRAD_NORM_H
#define BG_TRAIN_GRAD_NORM_H
#include <stddef.h>
// Σ g² over n elements, accumulated in double (per-thread partials added in thread
// order). grad_global_norm is its square root.
double grad_sum_squares(const float *g, size_t n);
// Global L2 norm of the gradient block, accumulated in double. Partial sums are
// combined in a fixed order, so the value is reproducible for a thread count.
double grad_global_norm(const float *g, size_t n);
// Scale that brings the norm down to max_norm (1 when within it or clipping is off).
float grad_clip_scale(double norm, float max_norm);
#endif
