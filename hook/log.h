/* log: one-line diagnostics on stderr, prefixed "gslice[pid]:".
 *
 * The level is read once from the config (GSLICE_LOG_LEVEL); the check in
 * gs_log_enabled() is a plain load, so disabled levels cost nothing worth
 * measuring. Never used on the launch fast path. */
#ifndef GSLICE_LOG_H
#define GSLICE_LOG_H

enum gs_log_level { GS_LOG_ERROR = 0, GS_LOG_WARN = 1, GS_LOG_INFO = 2, GS_LOG_DEBUG = 3 };

extern int gs_log_threshold;

void gs_log_set_level(int level);
void gs_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3), cold));

#define gs_log_enabled(level) ((level) <= gs_log_threshold)
#define GS_LOG(level, ...) do { if (gs_log_enabled(level)) gs_log_write((level), __VA_ARGS__); } while (0)
#define GS_ERROR(...) GS_LOG(GS_LOG_ERROR, __VA_ARGS__)
#define GS_WARN(...) GS_LOG(GS_LOG_WARN, __VA_ARGS__)
#define GS_INFO(...) GS_LOG(GS_LOG_INFO, __VA_ARGS__)
#define GS_DEBUG(...) GS_LOG(GS_LOG_DEBUG, __VA_ARGS__)

#endif
