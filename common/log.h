/*
 * log.h — one event per line on stderr, used by every process:
 *   2026-11-22T21:50:52.123Z shardd.shard0 I ready url=tcp://127.0.0.1:27018
 * time (UTC, ms), process name, level letter (D I W E), then a message written as
 * free text followed by key=value pairs. Thread-safe: each line is one write(2).
 *
 * Logs cannot be forged by what clients send: every control character of a formatted
 * message is written escaped (\n \r \t \xNN), so one call is always one line whatever
 * names or error texts it carries; and a value that came from outside (a name, an errmsg)
 * is passed through log_str(), which quotes it when it holds a space, '=', a quote or a
 * backslash, so it cannot end its own field and add a fake key=value pair.
 */
#ifndef MS_LOG_H
#define MS_LOG_H

#include <pthread.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3 };

/* Sets the process name printed on every line (copied) and the lowest level printed.
 * MS_LOG_LEVEL=debug|info|warn|error in the environment overrides min_level. */
void log_init(const char *process_name, enum log_level min_level);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* s as one key=value value (logfmt style): unchanged when it is plain text, else inside
 * double quotes with '"' and '\\' and control characters escaped; "" for NULL. The text
 * lives in a small per-thread ring of buffers (MS_LOG_STR_SLOTS of MS_LOG_VALUE_BYTES_MAX,
 * longer values are cut): use it only as an argument of one log call, at most
 * MS_LOG_STR_SLOTS per call. */
const char *log_str(const char *s);

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

/* Our own invariants only (never input): logs file:line and aborts, in every build. */
#define ASSERT(cond)                                                         \
    do {                                                                     \
        if (!(cond)) log_assert_fail(#cond, __FILE__, __LINE__, __func__);   \
    } while (0)
void log_assert_fail(const char *cond, const char *file, int line, const char *func)
    __attribute__((noreturn));

/* Milliseconds: wall clock since the epoch, and a monotonic clock for durations. */
long long time_now_ms(void);
long long time_mono_ms(void);
long long time_mono_us(void);

/* pthread_cond_timedwait for at most ms milliseconds from now (the condition's clock is
 * CLOCK_REALTIME); returns its result (ETIMEDOUT when the time passed). */
int time_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long long ms);

#endif
