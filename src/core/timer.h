#ifndef BG_CORE_TIMER_H
#define BG_CORE_TIMER_H
// Monotonic wall-clock seconds.
double bg_now(void);
// The calling thread's CPU seconds (user and kernel): its share of a core, whatever
// else runs on the machine.
double bg_thread_cpu_now(void);
// The whole process's CPU seconds (every thread): the work done, whatever else runs.
double bg_process_cpu_now(void);
// The median of n > 0 timings: v sorted in place, then v[n/2] (the upper middle for an
// even n), so v[0] and v[n-1] are the extremes afterwards.
double bg_median(double *v, int n);
#endif
