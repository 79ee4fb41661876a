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
 * aggregation-pipeline (array) updates → BadValue "not supported". Errors found without a
 * document are reported here: unknown operator, empty operator, conflicting paths (40),
 * positional operators (BadValue "positional operators are not supported"). */
int update_compile(const bson_t *spec, update_t **out, ms_error_t *err);

/* True when u replaces the whole document (no $ operators). */
bool update_is_replacement(const update_t *u);

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
