/*
 * query.h — filter matching: a MongoDB query filter ({a: {$gt: 5}, b: "x"}) is compiled
 * once into a tree of match expressions and then tested against documents. Used by the shard
 * daemon (find, count, distinct, update, delete, findAndModify) and the config server
 * (find on config collections). Pure logic over
 * BSON: no storage, no I/O. MongoDB semantics incl. arrays and dotted paths; see
 * docs/query-language.md for what is supported and what is refused.
 */
#ifndef MS_QUERY_H
#define MS_QUERY_H

#include <bson/bson.h>
#include <stdbool.h>

#include "common/errors.h"
#include "common/expr.h"

typedef struct query query_t;

/* Compiles filter into *out (caller owns; free with query_free). Borrows filter (copies
 * what it keeps). Errors: BadValue "unknown operator: $foo", "unknown top level operator:
 * $foo", malformed operands ($in needs an array, $size a whole number, ...). */
int query_compile(const bson_t *filter, query_t **out, ms_error_t *err);

/* The same with a command's `let` variables for {$expr: ...} ($$name); vars is borrowed
 * for the life of *out (NULL = none). $expr: at the top level or inside $and / $or /
 * $nor, not inside $elemMatch (BadValue); its expression errors are expr_parse's (168,
 * 17276 undefined variable, ...). Evaluation errors surface from query_match_checked. */
int query_compile_vars(const bson_t *filter, const expr_vars_t *vars, query_t **out,
                       ms_error_t *err);

/* The same from a command's `let` document (NULL = none), evaluated here once; *out owns
 * the variables (so a find's cursor keeps them for its getMores). Errors of `let` are
 * expr_vars_from_let's (bad names: FailedToParse; expression errors). */
int query_compile_let(const bson_t *filter, const bson_t *let, query_t **out, ms_error_t *err);

/* True when doc matches. Borrows both. MongoDB semantics incl. arrays and dotted paths.
 * Never interrupted: regular expressions run to the end (linear in the string). */
bool query_match(const query_t *q, const bson_t *doc);

/* The same for operations with a deadline: 0 with *matched set, or MaxTimeMSExpired when
 * a regular expression ran past the operation's maxTimeMS (op_check) — then *matched is
 * not written and the document must be treated as neither matching nor not. */
int query_match_checked(const query_t *q, const bson_t *doc, bool *matched, ms_error_t *err);

/* True for the empty filter {}: it matches everything. */
bool query_is_empty(const query_t *q);

/* NULL-safe. */
void query_free(query_t *q);

#endif
