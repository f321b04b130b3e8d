#include "bench_util.h"

#include "core/timer.h"

double bench_slowest_ms(dist_comm *c, void (*run)(void *ctx), void *ctx) {
    dist_barrier(c);
    const double t0 = bg_now();
    run(ctx);
    double ms = (bg_now() - t0) * 1e3;
    dist_allreduce_max_f64(c, &ms, 1);
    return ms;
}
