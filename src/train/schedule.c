#include "train/schedule.h"

#include <math.h>

float lr_schedule(long step, long total, long warmup, float max_lr, float min_lr) {
    if (step < warmup) return max_lr * (float)(step + 1) / (float)warmup;
    if (total <= warmup) return max_lr;
    double progress = (double)(step - warmup) / (double)(total - warmup);
    if (progress > 1.0) progress = 1.0;
    double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    return (float)(min_lr + (max_lr - min_lr) * cosine);
}
