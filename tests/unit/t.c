/*
 * t.c — the unit-test runner behind t.h (linked into every unit test binary).
 */
#include "tests/unit/t.h"

#include <stdarg.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
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

/* Copies src into dst renaming keys "%x" to "$x" at every level. */
static void t_rename_keys(const bson_t *src, bson_t *dst) {
    bson_iter_t it;
    bson_iter_init(&it, src);
    while (bson_iter_next(&it)) {
        char name[64];
        bson_snprintf(name, sizeof name, "%s", bson_iter_key(&it));
        if (name[0] == '%') name[0] = '$';
        if (BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) {
            uint32_t len;
            const uint8_t *data;
            bson_t sub, child;
            bool doc = BSON_ITER_HOLDS_DOCUMENT(&it);
            if (doc) bson_iter_document(&it, &len, &data);
            else bson_iter_array(&it, &len, &data);
            bson_init_static(&sub, data, len);
            if (doc) bson_append_document_begin(dst, name, -1, &child);
            else bson_append_array_begin(dst, name, -1, &child);
            t_rename_keys(&sub, &child);
            if (doc) bson_append_document_end(dst, &child);
            else bson_append_array_end(dst, &child);
        } else {
            bson_append_value(dst, name, -1, bson_iter_value(&it));
        }
    }
}

bool t_json_at(const char *file, int line, const char *json, bson_t *out) {
    bson_error_t e;
    bson_t raw;
    if (!bson_init_from_json(&raw, json, -1, &e)) {
        t_fail(file, line, "bad JSON in table: %s (%s)", json, e.message);
        return false;
    }
    bson_init(out);
    t_rename_keys(&raw, out);
    bson_destroy(&raw);
    return true;
}

const char *t_url(const char *name) {
    static char ring[16][128];
    static int next;
    char *buf = ring[next++ % 16];
    snprintf(buf, sizeof ring[0], "ipc:///tmp/ms-t-%d-%s.sock", (int)getpid(), name);
    return buf;
}

void t_tcp_url(char *buf, size_t cap, int offset) {
    snprintf(buf, cap, "tcp://127.0.0.1:%d", t_free_port(offset));
}

void t_sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int t_free_port(int offset) {
    const char *env = getenv("MS_TEST_PORT");
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    int fd, port = 0;
    if (env && *env) return atoi(env) + offset;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &alen) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}
