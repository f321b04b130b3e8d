#ifndef BG_CORE_TIMER_H
#define BG_CORE_TIMER_H
// Monotonic wall-clock seconds.
double bg_now(void);
#endif
