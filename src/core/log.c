#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>

static int bg_level = BG_LOG_INFO;

void bg_log_set_level(int level) { bg_level = level; }
int bg_log_level(void) { return bg_level; }

static void bg_vlog(int level, const char *fmt, va_list ap) {
    if (level > bg_level) return;
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void bg_log_info(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bg_vlog(BG_LOG_INFO, fmt, ap);
    va_end(ap);
}

void bg_log_debug(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bg_vlog(BG_LOG_DEBUG, fmt, ap);
    va_end(ap);
}
