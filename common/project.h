/*
 * project.h — find projections: inclusion ({a: 1, b.c: 1}), exclusion ({a: 0}) and the _id
 * rules (included by default; {_id: 0} allowed in an inclusion). Runs inside the shard
 * daemon (find, findAndModify). Pure logic over BSON. See docs/query-language.md.
 */
#ifndef MS_PROJECT_H
#define MS_PROJECT_H

#include <bson/bson.h>

#include "common/errors.h"

typedef struct projection projection_t;

/* Compiles spec into *out (caller owns; free with projection_free). Borrows spec.
 * Mixing inclusion and exclusion → BadValue with MongoDB's 31254 / 31253 message. */
int projection_compile(const bson_t *spec, projection_t **out, ms_error_t *err);

/* Projects doc into *out (initialised on success; caller destroys). Borrows p and doc. */
int projection_apply(const projection_t *p, const bson_t *doc, bson_t *out, ms_error_t *err);

/* NULL-safe. */
void projection_free(projection_t *p);

#endif
