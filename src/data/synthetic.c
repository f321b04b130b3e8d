#include "data/synthetic.h"
#include "core/error.h"
#include "core/rng.h"

#include <string.h>

int synth_task_parse(synth_task *task, const char *name) {
    if (strcmp(name, "copy") == 0) *task = SYNTH_COPY;
    else if (strcmp(name, "count") == 0) *task = SYNTH_COUNT;
    else return bg_error("unknown synthetic task \"%s\" (expected copy or count)", name);
    return BG_OK;
}

void synth_generate(uint32_t *tokens, size_t n, synth_task task, int vocab, int span, uint64_t seed) {
    bg_rng rng;
    bg_rng_seed(&rng, seed);
    size_t i = 0;
    while (i < n) {
        if (task == SYNTH_COPY) {
            size_t start = i;
            for (int j = 0; j < span && i < n; j++) tokens[i++] = (uint32_t)(bg_rng_u64(&rng) % vocab);
            for (int j = 0; j < span && i < n; j++) tokens[i++] = tokens[start + j];
        } else {
            uint32_t t = (uint32_t)(bg_rng_u64(&rng) % vocab);
            int run = 2 + (int)(bg_rng_u64(&rng) % (2 * span));
            for (int j = 0; j < run && i < n; j++) tokens[i++] = (t + j) % vocab;
        }
    }
}
