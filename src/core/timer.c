#include "core/timer.h"

#include <stdlib.h>
#include <time.h>

static double seconds_on(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double bg_now(void) { return seconds_on(CLOCK_MONOTONIC); }
double bg_thread_cpu_now(void) { return seconds_on(CLOCK_THREAD_CPUTIME_ID); }
double bg_process_cpu_now(void) { return seconds_on(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bg_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}
