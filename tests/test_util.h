#ifndef BG_TEST_UTIL_H
#define BG_TEST_UTIL_H
// Shared helpers for test programs: checks that count failures, random fills,
// and a relative-error comparison whose tolerance each test states.
#include <stddef.h>
#include <stdint.h>

extern int tu_failures;

#define TU_CHECK(cond, ...) \
    do { if (!(cond)) { tu_fail(__FILE__, __LINE__, __VA_ARGS__); } } while (0)

void tu_fail(const char *file, int line, const char *fmt, ...);
// Exit status for main(): prints "N passed, N failed" style summary of checks.
int tu_finish(const char *test_name);

// The process's resident memory (/proc/self/statm), in bytes; -1 where it cannot be read.
double tu_resident_bytes(void);

// Deterministic random numbers for tests (independent of the library's RNG).
void tu_seed(uint64_t seed);
double tu_uniform(void);            // [0,1)
double tu_normal(void);
void tu_fill_normal(float *x, size_t n, double std);
void tu_fill_normal_d(double *x, size_t n, double std);

// max over i of |a-b| / (atol + rtol*|b|) — a value <= 1 means within tolerance.
double tu_tol_ratio(const float *a, const double *b, size_t n, double atol, double rtol);
// Compare and report: returns 1 if within tolerance.
int tu_expect_close(const char *what, const float *got, const double *want, size_t n,
                    double atol, double rtol);
#endif
