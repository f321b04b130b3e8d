#include "core/rng.h"

#include <math.h>

void bg_rng_seed(bg_rng *r, uint64_t seed) { r->state = seed ^ 0x6A09E667F3BCC909ull; }

uint64_t bg_rng_u64(bg_rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double bg_rng_uniform(bg_rng *r) { return (bg_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

void bg_rng_normals(bg_rng *r, float *out, int n) {
    for (int i = 0; i < n; i += 2) {
        double u1 = bg_rng_uniform(r), u2 = bg_rng_uniform(r);
        if (u1 < 1e-300) u1 = 1e-300;
        double rad = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
        out[i] = (float)(rad * cos(a));
        if (i + 1 < n) out[i + 1] = (float)(rad * sin(a));
    }
}

float bg_rng_normal(bg_rng *r) {
    double u1 = bg_rng_uniform(r), u2 = bg_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
