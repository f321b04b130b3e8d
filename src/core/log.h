#ifndef BG_CORE_LOG_H
#define BG_CORE_LOG_H
// Human-facing messages on stderr; the level is the one piece of global state.
enum { BG_LOG_QUIET = 0, BG_LOG_INFO = 1, BG_LOG_DEBUG = 2 };
void bg_log_set_level(int level);
int bg_log_level(void);
void bg_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void bg_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#endif
