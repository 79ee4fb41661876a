/*
 * flags.h — command-line flags for every binary: a table of --name value options,
 * --help printing usage plus the table, clear errors for unknown or malformed flags.
 */
#ifndef MS_FLAGS_H
#define MS_FLAGS_H

#include <stdbool.h>

enum flag_type { FLAG_BOOL, FLAG_INT, FLAG_STR };

typedef struct flag_spec {
    const char *name;      /* without the leading "--"; NULL ends the table */
    enum flag_type type;
    void *ptr;             /* bool*, int*, or const char** (points into argv) */
    const char *help;
} flag_spec_t;

/* Parses argv[1..]. --help prints `usage` then the table to stdout and exits 0.
 * Unknown flags, missing values and bad integers print a message and exit 2.
 * Returns the index of the first non-flag argument (argc when there is none). */
int flags_parse(int argc, char **argv, const flag_spec_t *specs, const char *usage);

#endif
