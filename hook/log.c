/* log: formats into a stack buffer and writes it with one write(2), so
 * lines from several threads or processes never interleave mid-line. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int gs_log_threshold = GS_LOG_WARN;

void gs_log_set_level(int level) { gs_log_threshold = level; }

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void gs_log_write(int level, const char *fmt, ...)
{
    int saved_errno = errno;   /* logging must not change what the app sees */
    char line[1024];
    int n;
    if (level >= GS_LOG_DEBUG) {
        /* Debug lines carry CLOCK_MONOTONIC (Python's time.monotonic()), so
         * a slice's life can be lined up with tokend's and the GPU's. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        n = snprintf(line, sizeof line, "gslice[%d]: %s %ld.%06ld: ", (int)getpid(), level_names[3],
                     (long)ts.tv_sec, ts.tv_nsec / 1000);
    } else {
        n = snprintf(line, sizeof line, "gslice[%d]: %s: ", (int)getpid(),
                     level_names[level < 0 ? 0 : level]);
    }
    if (n < 0) {
        errno = saved_errno;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
    errno = saved_errno;
}
