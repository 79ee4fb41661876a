/*
 * log.c — one event per line on stderr (see log.h). Used by every process. Every control
 * character of a message is escaped at the one output point (log_vwrite), and log_str()
 * quotes values that came from clients, so client text can neither start a line nor add a
 * field.
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/limits.h"

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

/* Bytes of one log line (longer messages are cut, still one line). */
#define LOG_LINE_BYTES_MAX 4096

/* Appends ch to dst[*n] escaped when it is a control character (or, in a quoted value,
 * '"' or '\\'); never writes past cap - 1. */
static void log_put(char *dst, size_t cap, size_t *n, unsigned char ch, bool quoted) {
    char esc[5];
    size_t k = 0;
    if (ch == '\n') memcpy(esc, "\\n", (k = 2));
    else if (ch == '\r') memcpy(esc, "\\r", (k = 2));
    else if (ch == '\t') memcpy(esc, "\\t", (k = 2));
    else if (ch < 0x20 || ch == 0x7f) k = (size_t)snprintf(esc, sizeof esc, "\\x%02x", ch);
    else if (quoted && (ch == '"' || ch == '\\')) {
        esc[0] = '\\';
        esc[1] = (char)ch;
        k = 2;
    } else {
        esc[0] = (char)ch;
        k = 1;
    }
    if (*n + k >= cap) return;
    memcpy(dst + *n, esc, k);
    *n += k;
}

const char *log_str(const char *s) {
    static _Thread_local char ring[MS_LOG_STR_SLOTS][MS_LOG_VALUE_BYTES_MAX];
    static _Thread_local unsigned next;
    char *out = ring[next++ % MS_LOG_STR_SLOTS];
    size_t n = 0;
    bool plain = s && *s;
    if (!s) s = "";
    for (const unsigned char *p = (const unsigned char *)s; *p && plain; p++)
        if (*p <= 0x20 || *p == 0x7f || *p == '"' || *p == '=' || *p == '\\') plain = false;
    if (plain) {
        snprintf(out, MS_LOG_VALUE_BYTES_MAX, "%s", s);
        return out;
    }
    out[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        log_put(out, MS_LOG_VALUE_BYTES_MAX - 1, &n, *p, true);
    out[n++] = '"';
    out[n] = '\0';
    return out;
}

static void log_vwrite(enum log_level level, const char *fmt, va_list ap) {
    static const char letters[] = "DIWE";
    char line[LOG_LINE_BYTES_MAX], msg[LOG_LINE_BYTES_MAX];
    struct timespec ts;
    struct tm tm;
    size_t n;
    int m;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %s %c ", ts.tv_nsec / 1000000,
                          log_process, letters[level]);
    /* The one output point: whatever the arguments held, no control character reaches
     * the line raw, so a newline in a name cannot start a fake line of its own. */
    m = vsnprintf(msg, sizeof msg, fmt, ap);
    for (size_t i = 0; m > 0 && i < (size_t)m && i < sizeof msg - 1; i++)
        log_put(line, sizeof line - 1, &n, (unsigned char)msg[i], false);
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

int time_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long long ms) {
    struct timespec ts;
    if (ms < 0) ms = 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(cv, mu, &ts);
}
