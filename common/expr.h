/*
 * expr.h — aggregation expressions ({$add: ["$a", 1]}, "$b.c", {$cond: [...]}, literals,
 * objects and arrays of expressions): parsed once into a tree, evaluated against many
 * documents. Pure logic over BSON, no I/O: the shard's aggregate runs it today; the
 * router's merging half, the config server's aggregate, $expr in filters and `let` on
 * writes are meant to reuse it. MongoDB's semantics and error codes; what is supported
 * is listed in docs/aggregation.md.
 *
 * Values are bson_value_t. A missing value (a field path that finds nothing, $$REMOVE)
 * is a bson_value_t of type BSON_TYPE_EOD: MongoDB's "missing", which $project and
 * $addFields leave out and which compares equal to undefined and below null.
 */
#ifndef MS_EXPR_H
#define MS_EXPR_H

#include <bson/bson.h>
#include <stdbool.h>

#include "common/errors.h"

typedef struct expr expr_t;

/* User variables ($$name): the values of a command's `let`, constant for the command.
 * Names as MongoDB allows them: start with a lower-case letter (or a non-ASCII byte),
 * then letters, digits, '_'. */
typedef struct expr_vars expr_vars_t;

/* An empty set (caller owns; free with expr_vars_free). */
expr_vars_t *expr_vars_new(void);
/* Sets name to a copy of v (v borrowed). Bad names → FailedToParse as MongoDB says
 * ("'X' starts with an invalid character for a user variable name"). */
int expr_vars_set(expr_vars_t *vars, const char *name, const bson_value_t *v, ms_error_t *err);
/* Parses a command's `let` document: each value is an expression evaluated once, with no
 * current document ($$ROOT is {}), and may use the variables defined before it. *out is
 * the caller's on success. */
int expr_vars_from_let(const bson_t *let, expr_vars_t **out, ms_error_t *err);
/* The value of a variable (borrowed) or NULL. */
const bson_value_t *expr_vars_get(const expr_vars_t *vars, const char *name);
void expr_vars_free(expr_vars_t *vars);  /* NULL-safe */

/* Parses the expression at it into *out (caller owns; free with expr_free). Borrows it
 * and vars (vars only to check that $$names are defined: 17276 otherwise; NULL = none).
 * Errors: 168 InvalidPipelineOperator for an unknown $operator, 16020 wrong arity,
 * 15983 an operator object with more than one field, 16410 / 40352 bad field paths,
 * the operator's own shape errors. */
int expr_parse(const bson_iter_t *it, const expr_vars_t *vars, expr_t **out, ms_error_t *err);

/* Evaluates e with $$ROOT = $$CURRENT = root into *out (caller destroys with
 * bson_value_destroy; BSON_TYPE_EOD = missing, nothing to destroy but destroy is safe).
 * Borrows everything. vars must be the set e was parsed with (or a superset). Errors are
 * MongoDB's for the operator (16554 $add of a non-number, 2 "can't $divide by zero",
 * 17124 $size of a non-array, 16702 $concat of a non-string, ...). Out written only on
 * success. */
int expr_eval(const expr_t *e, const bson_t *root, const expr_vars_t *vars, bson_value_t *out,
              ms_error_t *err);

/* True when e is a constant (a literal, $literal, or operators over constants only). */
bool expr_is_const(const expr_t *e);

/* The expression as it would be written (MongoDB's serialize); appended under key. */
void expr_append(const expr_t *e, bson_t *dst, const char *key);

void expr_free(expr_t *e);  /* NULL-safe */

/* ---- value helpers shared with the pipeline (common/agg.c) ---- */

/* MongoDB's Value::compare: canonical type order, numbers by value; missing equals
 * undefined and sorts below null. <0, 0, >0. */
int expr_value_cmp(const bson_value_t *a, const bson_value_t *b);

/* MongoDB's coerceToBool: false for false, null, undefined, missing and numeric zero;
 * true for everything else (empty strings and arrays too). */
bool expr_value_truthy(const bson_value_t *v);

/* True for int32, int64, double, decimal128. */
bool expr_value_is_number(const bson_value_t *v);

/* out = a + b with MongoDB's promotion (int32 → int64 on overflow → double; any double →
 * double). Both must be numbers; decimal128 → NotImplemented (no decimal arithmetic
 * here). out is a plain number (nothing to destroy). */
int expr_num_add(const bson_value_t *a, const bson_value_t *b, bson_value_t *out,
                 ms_error_t *err);

/* Copies the value at it into *out (caller destroys). */
void expr_value_from_iter(const bson_iter_t *it, bson_value_t *out);

/* Appends v under key; a missing value appends nothing. */
void expr_value_append(bson_t *dst, const char *key, const bson_value_t *v);

#endif
