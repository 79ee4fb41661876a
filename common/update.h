/*
 * update.h — update operators: compiles an update specification (a replacement document or
 * {$set: ..., $inc: ...}) and applies it to a document. Runs inside the shard daemon
 * (update, findAndModify, upserts). Pure logic over BSON. See docs/query-language.md.
 */
#ifndef MS_UPDATE_H
#define MS_UPDATE_H

#include <bson/bson.h>
#include <stdbool.h>

#include "common/errors.h"

typedef struct update update_t;

/* Compiles spec into *out (caller owns; free with update_free). Borrows spec (copies it).
 * spec is an operator document or a replacement document; mixing the two → FailedToParse;
 * a spec that looks like an array ({"0": {...}}) is compiled as a pipeline. Errors found
 * without a document are reported here: unknown operator, empty operator, conflicting
 * paths (40); "$[id]" with no arrayFilters → BadValue (see update_compile_opts). */
int update_compile(const bson_t *spec, update_t **out, ms_error_t *err);

/* What an update statement brings besides u (all borrowed for the compile only). */
typedef struct update_opts {
    const bson_t *array_filters;  /* the statement's arrayFilters (a BSON array) or NULL */
    const bson_t *let;            /* the command's let (pipeline updates' $$vars) or NULL */
    const bson_t *query;          /* the statement's filter: which element "$" means */
} update_opts_t;

/* As update_compile, with is_pipeline saying that spec is an array of stages ($set /
 * $addFields, $project, $unset, $replaceRoot / $replaceWith; others InvalidOptions 72),
 * run with common/agg.c (o->let its variables), _id kept when a stage drops it.
 * Operator updates take paths with "$" (the first element of the array before it that
 * the query's predicates on that array accept), "$[]" (every element) and "$[id]" (the
 * elements o->array_filters' {"id...": cond} accepts). MongoDB's errors: an unused
 * identifier or one with two filters → FailedToParse 9; an identifier without a filter,
 * a bad identifier name, "$" first or twice → BadValue 2; arrayFilters with a pipeline
 * or a replacement → FailedToParse 9; at apply time a missing or non-array element under
 * a positional component, or "$" without a match → BadValue 2. o may be NULL. */
int update_compile_opts(const bson_t *spec, bool is_pipeline, const update_opts_t *o,
                        update_t **out, ms_error_t *err);

/* True when u replaces the whole document (no $ operators). */
bool update_is_replacement(const update_t *u);
/* A replacement's top-level '$'-prefixed names as a replacement of an existing document
 * must have them (update_apply checks it there): DollarPrefixedFieldName 52, or
 * InvalidDBRef 55 for a DBRef's parts out of order; 0 for an operator or pipeline update.
 * For a router, which refuses before it targets. */
int update_check_replacement(const update_t *u, ms_error_t *err);

/* Applies u to doc into *out (initialised on success; caller destroys). Borrows u and doc.
 * is_insert = upsert insert ($setOnInsert applies). *changed = false when the result equals
 * doc (nModified). _id may not change (ImmutableField 66). Other errors: TypeMismatch 14,
 * PathNotViable 28, BadValue. */
int update_apply(const update_t *u, const bson_t *doc, bool is_insert, bson_t *out,
                 bool *changed, ms_error_t *err);

/* The base document of an upsert: equality fields of the query ({a: 1}, {a: {$eq: 1}},
 * $and of those; dotted paths become nested docs). Borrows query; *out initialised on
 * success (caller destroys). */
int update_upsert_seed(const bson_t *query, bson_t *out, ms_error_t *err);

/* NULL-safe. */
void update_free(update_t *u);

#endif
