/*
 * regex.h — the regular-expression engine of the query language ($regex, /re/ values),
 * used by the filter matcher (common/query.c) in the shard daemon and config server.
 *
 * It reads the PCRE syntax MongoDB users write (the common subset; docs/query-language.md
 * lists it) and matches in time linear in the subject: a pattern is compiled to a small
 * program and run as a Thompson NFA simulation (every live state advanced together, no
 * backtracking), so one match costs at most O(subject bytes x program size) steps and
 * O(program size) memory. Constructs that need backtracking — back-references,
 * lookaround, atomic groups, possessive quantifiers, recursion, conditionals — are
 * refused at compile with BadValue, as are patterns whose program would exceed
 * MS_REGEX_INSTS_MAX. Matching checks the operation's maxTimeMS deadline (op_check).
 *
 * Only whether a match exists is computed (what $regex needs): no capture groups,
 * so lazy and greedy quantifiers give the same answer.
 */
#ifndef MS_REGEX_H
#define MS_REGEX_H

#include <stdbool.h>
#include <stddef.h>

#include "common/errors.h"

/* MongoDB's $options letters. */
#define RX_ICASE     1u   /* i: case-insensitive */
#define RX_MULTILINE 2u   /* m: ^ and $ at line breaks */
#define RX_DOTALL    4u   /* s: . matches a newline too */
#define RX_EXTENDED  8u   /* x: white space and # comments in the pattern are ignored */

typedef struct rx rx_t;

/* Reads option letters ("imsx", and "u", a no-op as MongoDB is always UTF-8) into
 * *flags_out. BadValue "invalid flag in regex options: q" otherwise. */
int rx_parse_options(const char *options, unsigned *flags_out, ms_error_t *err);

/* Compiles the NUL-terminated pattern with RX_* flags into *out (caller owns; free with
 * rx_free). Borrows pattern. Errors: BadValue "Regular expression is invalid: ..." for
 * bad syntax, a refused construct (named in the message) or an exceeded limit. Memory
 * used while compiling is bounded by a constant times the pattern length. */
int rx_compile(const char *pattern, unsigned flags, rx_t **out, ms_error_t *err);

/* Is there a match anywhere in subject (len bytes, UTF-8; invalid bytes are read as one
 * character each)? On success returns 0 and sets *matched. Calls op_check every
 * MS_REGEX_STEPS_PER_CHECK steps and returns its MaxTimeMSExpired once the operation's
 * deadline has passed. Borrows both; rx is not modified, so it may be shared. */
int rx_search(const rx_t *rx, const char *subject, size_t len, bool *matched, ms_error_t *err);

/* The same answer without deadline checks, for callers that cannot report an error
 * (its cost is still linear: at most subject bytes x program size steps). */
bool rx_matches(const rx_t *rx, const char *subject, size_t len);

/* Instructions in the compiled program (for tests and logs). */
size_t rx_program_size(const rx_t *rx);

/* NULL-safe. */
void rx_free(rx_t *rx);

#endif
