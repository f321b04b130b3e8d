#ifndef BG_CORE_THREADS_H
#define BG_CORE_THREADS_H
// One OpenMP thread pool for everything: oneDNN is built on the same OpenMP
// runtime, so setting the count here sizes both and nothing oversubscribes.
void bg_threads_set(int n);  // n <= 0 keeps the runtime default
int bg_threads_get(void);
#endif
