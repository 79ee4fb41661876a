/*
 * log.c — one event per line on stderr (see log.h). Used by every process.
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static char log_process[64] = "minishard";
static enum log_level log_min = LOG_INFO;

void log_init(const char *process_name, enum log_level min_level) {
    const char *env = getenv("MS_LOG_LEVEL");
    snprintf(log_process, sizeof log_process, "%s", process_name);
    log_min = min_level;
    if (env) {
        if (strcasecmp(env, "debug") == 0) log_min = LOG_DEBUG;
        else if (strcasecmp(env, "info") == 0) log_min = LOG_INFO;
        else if (strcasecmp(env, "warn") == 0) log_min = LOG_WARN;
        else if (strcasecmp(env, "error") == 0) log_min = LOG_ERROR;
    }
}

static void log_vwrite(enum log_level level, const char *fmt, va_list ap) {
    static const char letters[] = "DIWE";
    char line[4096];
    struct timespec ts;
    struct tm tm;
    size_t n;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %s %c ", ts.tv_nsec / 1000000,
                          log_process, letters[level]);
    if (n < sizeof line) {
        int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
        if (m > 0) n += (size_t)m;
    }
    if (n > sizeof line - 2) n = sizeof line - 2;  /* long lines are cut, still one line */
    line[n++] = '\n';
    /* One write(2) per line so lines of concurrent threads never interleave. */
    if (write(STDERR_FILENO, line, n) < 0) { /* nowhere left to report it */ }
}

void log_msg(enum log_level level, const char *fmt, ...) {
    va_list ap;
    if (level < log_min) return;
    va_start(ap, fmt);
    log_vwrite(level, fmt, ap);
    va_end(ap);
}

void log_assert_fail(const char *cond, const char *file, int line, const char *func) {
    log_msg(LOG_ERROR, "assertion failed cond=\"%s\" at=%s:%d func=%s", cond, file, line, func);
    abort();
}

static long long ts_ms(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long time_now_ms(void) { return ts_ms(CLOCK_REALTIME); }
long long time_mono_ms(void) { return ts_ms(CLOCK_MONOTONIC); }
long long time_mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
