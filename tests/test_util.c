#include "test_util.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int tu_failures = 0;
static int tu_checks_failed_reported = 0;
static uint64_t tu_state = 0x9E3779B97F4A7C15ull;

void tu_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    tu_failures++;
    tu_checks_failed_reported++;
}

int tu_finish(const char *test_name) {
    if (tu_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", test_name, tu_failures);
        return 1;
    }
    printf("%s: all checks passed\n", test_name);
    return 0;
}

void tu_seed(uint64_t seed) { tu_state = seed * 0x9E3779B97F4A7C15ull + 1; }

static uint64_t tu_next(void) {
    uint64_t z = (tu_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tu_uniform(void) { return (tu_next() >> 11) * (1.0 / 9007199254740992.0); }

double tu_normal(void) {
    double u1 = tu_uniform(), u2 = tu_uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void tu_fill_normal(float *x, size_t n, double std) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(std * tu_normal());
}

void tu_fill_normal_d(double *x, size_t n, double std) {
    for (size_t i = 0; i < n; i++) x[i] = std * tu_normal();
}

double tu_tol_ratio(const float *a, const double *b, size_t n, double atol, double rtol) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)a[i] - b[i]) / (atol + rtol * fabs(b[i]));
        if (!(r <= worst)) worst = r;  // NaN propagates as failure
        if (isnan(r)) return INFINITY;
    }
    return worst;
}

int tu_expect_close(const char *what, const float *got, const double *want, size_t n,
                    double atol, double rtol) {
    size_t worst_i = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)got[i] - want[i]) / (atol + rtol * fabs(want[i]));
        if (isnan(r)) r = INFINITY;
        if (r > worst) { worst = r; worst_i = i; }
    }
    if (worst > 1.0) {
        tu_fail(__FILE__, __LINE__, "%s: element %zu got %.9g want %.9g (atol %g rtol %g)",
                what, worst_i, (double)got[worst_i], want[worst_i], atol, rtol);
        return 0;
    }
    return 1;
}

double tu_resident_bytes(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : (double)resident * (double)sysconf(_SC_PAGESIZE);
}
