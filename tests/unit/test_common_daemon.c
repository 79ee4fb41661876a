/*
 * test_common_daemon.c — unit tests of common/daemon.c, the start-up every daemon
 * shares: the daemon's own flags parsed together with the common ones, the listen URL
 * (tcp://bind:port, or --url as given), the range checks that end in exit code 2, and a
 * command server started and stopped through daemon_start / daemon_exit on ipc://.
 */
#include <stdio.h>
#include <string.h>

#include "common/daemon.h"
#include "tests/unit/t.h"

static const char usage[] = "usage: testd";

/* Parses a NULL-terminated argument list with one own flag, --dbpath. */
static int parse(daemon_t *d, const char **dbpath, const char *const *args) {
    char *argv[32];
    int argc = 0;
    const flag_spec_t own[] = {
        {"dbpath", FLAG_STR, dbpath, "a directory"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    argv[argc++] = (char *)"testd";
    for (; *args && argc < 31; args++) argv[argc++] = (char *)*args;
    argv[argc] = NULL;
    return daemon_parse(d, "testd", 27099, argc, argv, own, usage);
}

static void test_defaults_and_own_flags(void) {
    daemon_t d;
    const char *dbpath = NULL;
    const char *const none[] = {NULL};
    CHECK_INT(parse(&d, &dbpath, none), 0);
    CHECK_STR(d.url, "tcp://127.0.0.1:27099");
    CHECK(!d.test_commands && d.workers == 0 && dbpath == NULL);
    const char *const some[] = {"--dbpath", "/tmp/x", "--port", "4000", "--bind", "0.0.0.0",
                                "--workers", "3", "--enable-test-commands", NULL};
    CHECK_INT(parse(&d, &dbpath, some), 0);
    CHECK_STR(d.url, "tcp://0.0.0.0:4000");
    CHECK_STR(dbpath, "/tmp/x");
    CHECK(d.test_commands && d.workers == 3);
    const char *const url[] = {"--url", "ipc:///tmp/testd.sock", "--port", "5", NULL};
    CHECK_INT(parse(&d, &dbpath, url), 0);
    CHECK_STR(d.url, "ipc:///tmp/testd.sock");  /* --url wins over --port/--bind */
}

static void test_bad_values_exit_2(void) {
    daemon_t d;
    const char *dbpath = NULL;
    const char *const port0[] = {"--port", "0", NULL};
    const char *const port_big[] = {"--port", "65536", NULL};
    const char *const workers[] = {"--workers", "100000", NULL};
    const char *const stray[] = {"--port", "5", "extra", NULL};
    char longurl[MS_URL_BYTES_MAX + 10];
    memset(longurl, 'a', sizeof longurl - 1);
    longurl[sizeof longurl - 1] = '\0';
    const char *const toolong[] = {"--url", longurl, NULL};
    CHECK_INT(parse(&d, &dbpath, port0), 2);
    CHECK_INT(parse(&d, &dbpath, port_big), 2);
    CHECK_INT(parse(&d, &dbpath, workers), 2);
    CHECK_INT(parse(&d, &dbpath, stray), 2);
    CHECK_INT(parse(&d, &dbpath, toolong), 2);
}

static void test_start_and_exit(void) {
    daemon_t d;
    const char *dbpath = NULL;
    const char *const args[] = {"--url", t_url("test-common-daemon"), NULL};
    ms_error_t err = {0};
    CHECK_INT(parse(&d, &dbpath, args), 0);
    const cmd_server_opts_t opts = {.table = NULL, .table_len = 0};
    CHECK_INT(daemon_start(&d, &opts, &err), 0);
    CHECK(d.srv != NULL);
    CHECK_STR(cmd_server_url(d.srv), t_url("test-common-daemon"));
    CHECK_STR(cmd_server_process(d.srv), "testd");
    daemon_ready(&d, "dbpath", "none");
    daemon_stop_serving(&d);
    CHECK(d.srv == NULL);
    daemon_stop_serving(&d);  /* idempotent */
    CHECK_INT(daemon_exit(&d, 0), 0);
    CHECK_INT(daemon_exit(&d, 1), 1);
}

T_MAIN(T_CASE(test_defaults_and_own_flags), T_CASE(test_bad_values_exit_2),
       T_CASE(test_start_and_exit))
