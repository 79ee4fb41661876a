/*
 * test_common_flags.c — command-line flags (common/flags.c): values in both spellings,
 * booleans, the end of flags, and the exits for --help (0) and for unknown flags,
 * missing values and bad integers (2), each checked in a forked child.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "common/flags.h"
#include "tests/unit/t.h"

static int port;
static bool verbose;
static const char *name;

static const flag_spec_t specs[] = {
    {"port", FLAG_INT, &port, "a port"},
    {"verbose", FLAG_BOOL, &verbose, "talk more"},
    {"name", FLAG_STR, &name, "a name"},
    {NULL, FLAG_BOOL, NULL, NULL},
};

static int parse(int argc, const char **argv) {
    port = 0, verbose = false, name = NULL;
    return flags_parse(argc, (char **)argv, specs, "usage: prog");
}

static void flags_values(void) {
    const char *a1[] = {"prog", "--port", "27019", "--name=x", "--verbose", "rest", NULL};
    CHECK_INT(parse(6, a1), 5);
    CHECK_INT(port, 27019);
    CHECK_STR(name, "x");
    CHECK(verbose);
    const char *a2[] = {"prog", "--port=-5", "--verbose=false", "--", "--port", NULL};
    CHECK_INT(parse(5, a2), 4);
    CHECK_INT(port, -5);
    CHECK(!verbose);
    const char *a3[] = {"prog", NULL};
    CHECK_INT(parse(1, a3), 1);
    const char *a4[] = {"prog", "--name", "--port", NULL};  /* a value may look like a flag */
    CHECK_INT(parse(3, a4), 3);
    CHECK_STR(name, "--port");
}

/* Runs parse in a child with stdout/stderr silenced; returns its exit status. */
static int exit_status(int argc, const char **argv) {
    int status = 0;
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(43);
        parse(argc, argv);
        _exit(42);
    }
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void flags_exits(void) {
    const char *help[] = {"prog", "--help", NULL};
    const char *unknown[] = {"prog", "--nope", NULL};
    const char *missing[] = {"prog", "--port", NULL};
    const char *badint[] = {"prog", "--port", "12x", NULL};
    const char *huge[] = {"prog", "--port", "99999999999", NULL};
    const char *badbool[] = {"prog", "--verbose=maybe", NULL};
    const char *prefix[] = {"prog", "--por", "1", NULL};
    CHECK_INT(exit_status(2, help), 0);
    CHECK_INT(exit_status(2, unknown), 2);
    CHECK_INT(exit_status(2, missing), 2);
    CHECK_INT(exit_status(3, badint), 2);
    CHECK_INT(exit_status(3, huge), 2);
    CHECK_INT(exit_status(2, badbool), 2);
    CHECK_INT(exit_status(3, prefix), 2);
}

T_MAIN(T_CASE(flags_values), T_CASE(flags_exits))
