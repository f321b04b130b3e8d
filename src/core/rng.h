#ifndef BG_CORE_RNG_H
#define BG_CORE_RNG_H
// Deterministic random numbers (splitmix64): the state is one integer, so a
// checkpoint can store it and a resumed run continues the same stream.
#include <stdint.h>

typedef struct {
    uint64_t state;
} bg_rng;

void bg_rng_seed(bg_rng *r, uint64_t seed);
uint64_t bg_rng_u64(bg_rng *r);
double bg_rng_uniform(bg_rng *r);  // [0,1)
float bg_rng_normal(bg_rng *r);    // standard normal (Box-Muller)
// n standard normals: Box-Muller's both outputs of each pair of uniforms (half the
// logarithms and square roots of n calls to bg_rng_normal; a different stream).
void bg_rng_normals(bg_rng *r, float *out, int n);

#endif
