/*
 * sortspec.h — sort specifications ({a: 1, b: -1}) and MongoDB's sort keys. Used by the
 * shard (sorting find results) AND the router (k-way merge of sorted shard streams), so
 * both order documents identically.
 */
#ifndef MS_SORTSPEC_H
#define MS_SORTSPEC_H

#include <bson/bson.h>

#include "errors.h"

typedef struct sortspec sortspec_t;

/* Compiles {a: 1, b: -1} into *out (caller owns; free with sortspec_free). Borrows spec
 * (copies it). Values 1 / -1 only, else BadValue. The empty spec {} is accepted (as in a
 * MongoDB find: no order) and makes every document compare equal. */
int sortspec_compile(const bson_t *spec, sortspec_t **out, ms_error_t *err);

/* Appends the document's sort key as a document {"": v1, "": v2} (MongoDB's $sortKey
 * shape) to dst under key; arrays: ascending uses the smallest element, descending the
 * largest; missing = null; an empty array sorts below null (stored as undefined, as
 * MongoDB does). Paths go through arrays of documents like the matcher. Borrows s and doc. */
void sortspec_key(const sortspec_t *s, const bson_t *doc, bson_t *dst, const char *key);

/* Compares two documents by their sort keys: <0, 0, >0 in sort order. */
int sortspec_compare_docs(const sortspec_t *s, const bson_t *a, const bson_t *b);

/* Compares two sort-key documents as made by sortspec_key: <0, 0, >0 in sort order. */
int sortspec_compare_keys(const sortspec_t *s, const bson_t *ka, const bson_t *kb);

/* The spec as compiled (borrowed; lives as long as s). */
const bson_t *sortspec_spec(const sortspec_t *s);

/* NULL-safe. */
void sortspec_free(sortspec_t *s);

#endif
