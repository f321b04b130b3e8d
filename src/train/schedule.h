#ifndef BG_TRAIN_SCHEDULE_H
#define BG_TRAIN_SCHEDULE_H
// Learning rate at `step` (0-based): linear warm-up over `warmup` steps to max_lr,
// then cosine decay to min_lr at `total` steps.
float lr_schedule(long step, long total, long warmup, float max_lr, float min_lr);
#endif
