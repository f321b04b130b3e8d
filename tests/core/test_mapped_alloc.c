// bg_mapped_alloc: a buffer regrown by an eighth at a time, as dropless expert
// parallelism's rows grow (moe/exchange.c), leaves only its last size resident. With
// malloc, once glibc has freed one mapped block its threshold rises and the earlier
// sizes stay in its heap. Blocks stay 64-byte aligned and keep what was written; a size
// that cannot be mapped, or whose length would wrap, goes to the out-of-memory handler.
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "test_util.h"

static jmp_buf oom_jump;
static size_t oom_bytes;

static void oom_handler(size_t bytes) {
    oom_bytes = bytes;
    longjmp(oom_jump, 1);
}

// Whether bg_mapped_alloc(bytes) reached the handler with that size instead of returning.
static int refused(size_t bytes) {
    oom_bytes = 0;
    if (setjmp(oom_jump) == 0) {
        void *p = bg_mapped_alloc(bytes);
        bg_mapped_free(p);
        return 0;
    }
    return oom_bytes == bytes;
}

static double resident_mib(void) { return tu_resident_bytes() / (1 << 20); }

int main(void) {
#if defined(__SANITIZE_ADDRESS__)
    puts("skip: under AddressSanitizer bg_mapped_alloc is malloc's, so that it checks the blocks");
    return 77;
#endif
    if (resident_mib() < 0) {
        puts("skip: no /proc/self/statm");
        return 77;
    }
    // What a step's libraries do first (oneDNN's scratchpads): a mapped block freed,
    // which raises glibc's threshold.
    free(malloc((size_t)24 << 20));
    enum { BUFS = 4, GROWTHS = 14 };
    float *buf[BUFS] = {0};
    size_t floats = (size_t)1 << 18, last = 0;  // from 1 MiB
    const double before = resident_mib();
    for (int g = 0; g < GROWTHS; g++, last = floats, floats += floats / 8)
        for (int b = 0; b < BUFS; b++) {
            bg_mapped_free(buf[b]);
            buf[b] = bg_mapped_alloc(floats * sizeof(float));
            TU_CHECK((uintptr_t)buf[b] % 64 == 0, "block %d not 64-byte aligned", b);
            for (size_t i = 0; i < floats; i++) buf[b][i] = (float)(i + b);
        }
    floats = last;
    const double grown = resident_mib() - before, live = BUFS * (double)floats * sizeof(float) / (1 << 20);
    printf("%d buffers grown %d times to %.1f MiB in all: resident +%.1f MiB\n", BUFS, GROWTHS, live, grown);
    TU_CHECK(grown <= live + 2.0, "resident grew by %.1f MiB for %.1f MiB of live blocks", grown, live);
    for (int b = 0; b < BUFS; b++) {
        TU_CHECK(buf[b][floats - 1] == (float)(floats - 1 + b), "block %d lost its last float", b);
        bg_mapped_free(buf[b]);
    }
    TU_CHECK(resident_mib() - before <= 2.0, "freed blocks still resident: +%.1f MiB", resident_mib() - before);
    bg_mapped_free(NULL);
    bg_set_out_of_memory_handler(oom_handler);
    TU_CHECK(refused((size_t)1 << 60), "2^60 bytes mapped, or the handler not told their size");
    TU_CHECK(refused(SIZE_MAX - 8), "a size whose mapping length wraps was not refused");
    bg_set_out_of_memory_handler(NULL);
    return tu_finish("core/test_mapped_alloc");
}
