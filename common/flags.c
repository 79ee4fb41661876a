/*
 * flags.c — command-line flags for every binary (see flags.h): `--name value`,
 * `--name=value`, and bare `--name` for booleans; `--` ends the flags.
 */
#include "common/flags.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void flags_usage(FILE *f, const flag_spec_t *specs, const char *usage) {
    fprintf(f, "%s\n\noptions:\n", usage);
    for (const flag_spec_t *s = specs; s->name; s++) {
        const char *arg = s->type == FLAG_INT ? " N" : s->type == FLAG_STR ? " VALUE" : "";
        char left[64];
        snprintf(left, sizeof left, "--%s%s", s->name, arg);
        fprintf(f, "  %-28s %s\n", left, s->help ? s->help : "");
    }
    fprintf(f, "  %-28s %s\n", "--help", "print this help and exit");
}

static void flags_fail(const char *prog, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 2, 3)));
static void flags_fail(const char *prog, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (try --help)\n");
    exit(2);
}

static bool flags_bool_value(const char *v, bool *out) {
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "yes") == 0) *out = true;
    else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0 || strcmp(v, "no") == 0) *out = false;
    else return false;
    return true;
}

int flags_parse(int argc, char **argv, const flag_spec_t *specs, const char *usage) {
    const char *prog = argc > 0 ? argv[0] : "minishard";
    int i = 1;
    while (i < argc) {
        const char *a = argv[i];
        const char *eq, *value = NULL;
        const flag_spec_t *s;
        size_t name_len;

        if (strcmp(a, "--") == 0) return i + 1;
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') return i;
        a += 2;
        if (strcmp(a, "help") == 0) {
            flags_usage(stdout, specs, usage);
            exit(0);
        }
        eq = strchr(a, '=');
        name_len = eq ? (size_t)(eq - a) : strlen(a);
        for (s = specs; s->name; s++)
            if (strlen(s->name) == name_len && strncmp(s->name, a, name_len) == 0) break;
        if (!s->name) flags_fail(prog, "unknown flag '%s'", argv[i]);

        if (eq) value = eq + 1;
        if (s->type == FLAG_BOOL) {
            bool b = true;
            if (value && !flags_bool_value(value, &b))
                flags_fail(prog, "flag '%s' takes true or false", argv[i]);
            *(bool *)s->ptr = b;
            i++;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) flags_fail(prog, "flag '%s' needs a value", argv[i]);
            value = argv[++i];
        }
        if (s->type == FLAG_INT) {
            char *end;
            long v;
            errno = 0;
            v = strtol(value, &end, 10);
            if (errno || end == value || *end != '\0' || v < INT_MIN || v > INT_MAX)
                flags_fail(prog, "bad integer '%s'", value);
            *(int *)s->ptr = (int)v;
        } else {
            *(const char **)s->ptr = value;
        }
        i++;
    }
    return argc;
}
