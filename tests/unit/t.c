/*
 * t.c — the unit-test runner behind t.h (linked into every unit test binary).
 */
#include "tests/unit/t.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int t_case_failures;
static const char *t_current;

void t_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    t_case_failures++;
    if (t_case_failures > 20) return;  /* one broken loop must not flood the log */
    fprintf(stdout, "  FAIL %s (%s:%d): ", t_current ? t_current : "?", file, line);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

uint64_t t_seed(const char *test_name) {
    const char *env = getenv("T_SEED");
    uint64_t seed;
    if (env && *env)
        seed = strtoull(env, NULL, 10);
    else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid();
    }
    printf("  %s: seed %llu (rerun with T_SEED=%llu)\n", test_name, (unsigned long long)seed,
           (unsigned long long)seed);
    return seed;
}

static char t_dir[256];

static void t_rmdir(void) {
    char cmd[300];
    if (!t_dir[0] || getenv("T_KEEP")) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", t_dir);
}

const char *t_tmpdir(void) {
    if (!t_dir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(t_dir, sizeof t_dir, "%s/ms-unit-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(t_dir)) {
            perror("mkdtemp");
            exit(2);
        }
        atexit(t_rmdir);
    }
    return t_dir;
}

int t_run(const t_case_t *cases, int n, int argc, char **argv) {
    int passed = 0, failed = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < n; i++) {
        bool selected = argc <= 1;
        for (int a = 1; a < argc; a++)
            if (strcmp(argv[a], cases[i].name) == 0) selected = true;
        if (!selected) continue;
        t_current = cases[i].name;
        t_case_failures = 0;
        cases[i].fn();
        if (t_case_failures) {
            failed++;
            printf("not ok %s (%d failed checks)\n", cases[i].name, t_case_failures);
        } else {
            passed++;
            printf("ok %s\n", cases[i].name);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
