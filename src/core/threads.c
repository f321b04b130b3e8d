#include "core/threads.h"

#include <omp.h>

void bg_threads_set(int n) {
    if (n > 0) omp_set_num_threads(n);
}

int bg_threads_get(void) { return omp_get_max_threads(); }
