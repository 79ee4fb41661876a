/*
 * t.h — the unit-test framework: a table of small functions, checks that record a
 * failure and go on, and a runner that prints one line per failed check and ends with
 * "N passed, N failed" (tests, not checks). `test_x name...` runs only those tests;
 * `T_SEED=n` fixes the seed of randomised tests (each prints the seed it used).
 */
#ifndef MS_T_H
#define MS_T_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct t_case {
    const char *name;
    void (*fn)(void);
} t_case_t;

extern int t_case_failures;  /* failed checks in the running test */

void t_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int t_run(const t_case_t *cases, int n, int argc, char **argv);
/* The seed for randomised tests: T_SEED from the environment, else time-based; printed. */
uint64_t t_seed(const char *test_name);
/* A private temporary directory for this process (created once, removed at exit unless
 * T_KEEP=1); the returned path is static. */
const char *t_tmpdir(void);

/* A free TCP port on 127.0.0.1 (the kernel picks it); MS_TEST_PORT=n gives n + offset
 * instead, for runs that need fixed ports. */
int t_free_port(int offset);

/* "ipc:///tmp/ms-t-<pid>-<name>.sock": a server URL private to this test process (the RPC
 * server has no inproc://). The same name gives the same URL; the string lives until 16
 * more calls. */
const char *t_url(const char *name);

/* "tcp://127.0.0.1:<t_free_port(offset)>" into buf. */
void t_tcp_url(char *buf, size_t cap, int offset);

/* Sleeps ms milliseconds (the rest of it again when a signal interrupts). */
void t_sleep_ms(long ms);

/* Parses a test table's extended JSON into *out (initialised on success; caller destroys).
 * libbson reads {"$type": ..}, {"$regex": ..} and {"$options": ..} as legacy extended JSON,
 * so tables may write query operators as "%type" etc.; every key "%x" becomes "$x".
 * Bad JSON records a failure and returns false. */
bool t_json_at(const char *file, int line, const char *json, bson_t *out);
#define t_json(json, out) t_json_at(__FILE__, __LINE__, (json), (out))

#define CHECK(cond)                                                   \
    do {                                                              \
        if (!(cond)) t_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);  \
    } while (0)
#define CHECK_MSG(cond, ...)                                          \
    do {                                                              \
        if (!(cond)) t_fail(__FILE__, __LINE__, __VA_ARGS__);         \
    } while (0)
#define CHECK_INT(a, b)                                                               \
    do {                                                                              \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);                       \
        if (t_a_ != t_b_) t_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", \
                                 #a, t_a_, #b, t_b_);                                 \
    } while (0)
#define CHECK_STR(a, b)                                                                 \
    do {                                                                                \
        const char *t_a_ = (a), *t_b_ = (b);                                            \
        if (!t_a_ || !t_b_ || strcmp(t_a_, t_b_) != 0)                                  \
            t_fail(__FILE__, __LINE__, "%s == \"%s\", expected \"%s\"", #a,             \
                   t_a_ ? t_a_ : "(null)", t_b_ ? t_b_ : "(null)");                     \
    } while (0)

#define T_CASE(fn) {#fn, fn}
#define T_MAIN(...)                                                        \
    int main(int argc, char **argv) {                                      \
        static const t_case_t cases_[] = {__VA_ARGS__};                    \
        return t_run(cases_, (int)(sizeof cases_ / sizeof cases_[0]), argc, argv); \
    }

#endif
