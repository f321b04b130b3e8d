#ifndef BG_TRAIN_CHECKPOINT_SHARD_H
#define BG_TRAIN_CHECKPOINT_SHARD_H
// One rank's files of a checkpoint (its plan, train/checkpoint_plan.h): written from the
// live blocks (a synchronous save), or from a snapshot copied at a step boundary and
// written by a thread while training goes on (an asynchronous save). The thread only
// writes and fsyncs this rank's two files: no MPI, no trainer access; the commit that
// needs every rank (checkpoint.c) runs on the main thread.
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "train/checkpoint_plan.h"
#include "train/train_state.h"

typedef struct {
    ckpt_plan plan;
    param_table st;              // the gates' state table
    int n_model;                 // plan.n_model, + st.count on the rank writing the state
    const float **model_src;     // each model tensor's elements
    const float **m_src, **v_src;  // each piece's m and v
    // Async only: both files' images (length, header, data) in one block allocated once
    // and reused by every save; the headers are written at init, a save copies the data.
    void *snapshot_alloc;
    uint8_t *image[2];           // model, optimizer file; IO_DIRECT_ALIGN-aligned
    size_t image_len[2], data_at[2];  // bytes of each image; where its data section starts
    double block_s;              // the last async save: seconds the step waited (the copy),
    double writer_s, writer_cpu_s;  // the writer's seconds and its thread's CPU seconds
    pthread_t thread;
    int running;                 // a thread was started and not yet joined
    atomic_int done;             // the thread finished (rc and sums are final)
    long delay_ms;               // tests: BAGUALU_TEST_SAVE_DELAY_MS before writing
    char dir[4096];
    int rc;                      // BG_OK, or BG_ERR with message
    char message[1024];
    uint64_t sums[2];            // XXH64 of the model and optimizer files
} ckpt_shard;

// This rank's part of tr's checkpoints; with async, the snapshot buffer too.
void ckpt_shard_init(ckpt_shard *s, const trainer *tr, int async);
void ckpt_shard_free(ckpt_shard *s);  // waits for a running writer first
// Bytes of the snapshot an asynchronous save needs on this rank (allocates nothing
// lasting: the memory report's number).
size_t ckpt_snapshot_bytes(const trainer *tr);
// Writes this rank's files into dir from tr's live blocks (synchronous).
int ckpt_shard_write_now(ckpt_shard *s, const trainer *tr, const char *dir);
// Copies tr's part into the snapshot and starts the writer thread on dir.
int ckpt_shard_start(ckpt_shard *s, const trainer *tr, const char *dir);
// Bytes of this rank's two files.
double ckpt_shard_bytes(const ckpt_shard *s);
// 1 when no writer is running or it has finished (does not block).
int ckpt_shard_finished(ckpt_shard *s);
// Joins a started writer; its outcome (BG_ERR with bg_error set to its message).
int ckpt_shard_join(ckpt_shard *s);
#endif
