#ifndef BG_KERNELS_CHANNEL_BLOCKS_H
#define BG_KERNELS_CHANNEL_BLOCKS_H
// Splitting the channel axis between threads, for gradients that are sums over
// rows (norm weights, embeddings). A thread owning whole channels adds the rows in
// order, so the result is deterministic — even across thread counts — with no
// atomics and no per-thread partial buffers. A block is 16 floats, summed in
// registers over all rows: one cache line when rows are 64-byte aligned
// (bg_aligned_alloc and C % 16 == 0), so threads do not write the same line.
// (Streaming each row through a thread's whole channel range instead keeps the sums
// in memory, which was slower.) Internal to kernels/.
enum { CHANNEL_BLOCK = 16 };

static inline int channel_block_count(int C) { return (C + CHANNEL_BLOCK - 1) / CHANNEL_BLOCK; }

static inline int channel_block_end(int blk, int C) {
    int end = (blk + 1) * CHANNEL_BLOCK;
    return end < C ? end : C;
}
#endif
