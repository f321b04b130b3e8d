// Many texts encoded at once over the thread pool (bpe.h: bpe_encode_jobs).
#include "data/bpe.h"
#include "core/error.h"
#include "core/threads.h"

typedef struct {
    bpe_encoder **encs;
    int nenc;
    bpe_job *jobs;
    int next;  // encoder slots handed out, one per range
    int failed;
} batch_ctx;

static void encode_range(void *p, size_t i0, size_t i1) {
    batch_ctx *c = p;
    int slot = __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED);
    BG_ASSERT(slot < c->nenc);
    for (size_t i = i0; i < i1; i++) {
        c->jobs[i].out->count = 0;
        if (bpe_encode(c->encs[slot], c->jobs[i].text, c->jobs[i].len, c->jobs[i].out) != BG_OK)
            __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
    }
}

int bpe_encode_jobs(bpe_encoder **encs, int nenc, bpe_job *jobs, size_t n) {
    batch_ctx c = {encs, nenc, jobs, 0, 0};
    bg_parallel_ranges(n, encode_range, &c);
    return c.failed ? bg_error_out_of_memory("out of memory encoding text") : BG_OK;
}
