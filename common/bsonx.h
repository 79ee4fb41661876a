/*
 * bsonx.h — BSON helpers shared by every process: MongoDB's comparison order
 * (a plain comparator, written independently of the key encoding in keys.h so
 * each checks the other), type names and aliases, dotted-path lookup, input
 * validation, numbers, and extended JSON.
 */
#ifndef MS_BSONX_H
#define MS_BSONX_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "errors.h"

/* MongoDB's canonical type rank (notes §7): MinKey -1, undefined 0, null 5, numbers 10,
 * string/symbol 15, object 20, array 25, binData 30, ObjectId 35, bool 40, date 45,
 * timestamp 47, regex 50, dbPointer 55, code 60, codeWScope 65, MaxKey 127. */
int bsonx_canonical_rank(bson_type_t t);

/* Compares the values at a and b in MongoDB's order (woCompare without field names):
 * rank first, then value; numbers by value across int32/int64/double (exact for int64
 * beyond 2^53; NaN below every other number and equal to NaN; -0.0 == 0). decimal128
 * is compared after conversion to double (approximate; keys refuse decimal128).
 * Returns <0, 0, >0. */
int bsonx_compare_values(const bson_iter_t *a, const bson_iter_t *b);

/* Compares two documents as MongoDB's BSONObj::woCompare does: element by element,
 * rank, then field name, then value; the shorter document is smaller. */
int bsonx_compare_docs(const bson_t *a, const bson_t *b);

/* "double", "string", "object", "array", "binData", "undefined", "objectId", "bool",
 * "date", "null", "regex", "dbPointer", "javascript", "symbol", "javascriptWithScope",
 * "int", "timestamp", "long", "decimal", "minKey", "maxKey" ($type aliases). */
const char *bsonx_type_name(bson_type_t t);
/* Alias → type; "number" gives BSON_TYPE_EOD with *is_number = true. -1 if unknown. */
int bsonx_type_from_alias(const char *alias, bool *is_number);

/* Looks up a dotted path through embedded documents only (no array traversal).
 * Returns true and positions *out on the element when found. */
bool bsonx_find_path(const bson_t *doc, const char *dotted, bson_iter_t *out);

/* A read-only view of the embedded document or array at it (no copy); false when the
 * value is neither. */
bool bsonx_view_container(const bson_iter_t *it, bson_t *out);

/* True for int32, int64, double, decimal128. */
bool bsonx_is_number(const bson_iter_t *it);
/* Numeric value as int64 / double; false when not a number (or not integral, for
 * bsonx_as_int64_exact). */
bool bsonx_as_int64(const bson_iter_t *it, int64_t *out);        /* truncates doubles */
/* The string field key of doc (borrowed from doc), or dflt when absent or not a string. */
const char *bsonx_utf8_or(const bson_t *doc, const char *key, const char *dflt);
/* The numeric field key of doc as bsonx_as_int64 reads it, or dflt. */
int64_t bsonx_int64_or(const bson_t *doc, const char *key, int64_t dflt);
bool bsonx_as_int64_exact(const bson_iter_t *it, int64_t *out);  /* refuses 1.5, NaN */
bool bsonx_as_double(const bson_iter_t *it, double *out);
/* Truthiness as MongoDB reads flags: bool, numbers != 0, anything else present = true. */
bool bsonx_truthy(const bson_iter_t *it);

/* Validates raw bytes as one BSON document (a message): length, structure, UTF-8,
 * nesting depth <= MS_MSG_DEPTH_MAX. On success *out is a read-only view into data. */
int bsonx_view(const uint8_t *data, size_t len, bson_t *out, ms_error_t *err);

/* Checks a document a user wants to store: size <= MS_DOC_BYTES_MAX, depth <=
 * MS_DOC_DEPTH_MAX (Overflow, as MongoDB's insert and update answer), no empty field
 * name at any level (EmptyFieldName), no field name starting with '$' at the top level
 * nor anywhere inside a document _id (DollarPrefixedFieldName; embedded documents may
 * have them, as since MongoDB 5.0), `_id` not an array / regex / undefined
 * (InvalidIdField). */
int bsonx_check_storable(const bson_t *doc, ms_error_t *err);

/* Nesting depth of a document as MongoDB counts it: a flat document is 1, an empty
 * embedded document or array adds nothing. Values past MS_MSG_DEPTH_MAX read as
 * MS_MSG_DEPTH_MAX + 1. */
int bsonx_depth(const bson_t *doc);

/* Array keys. MongoDB ignores the keys of a BSON array, so a client may send
 * {"a": 1, "b": 2} as an array; libbson warns on stderr ("invalid array detected") when
 * such an array is appended (bson_append_array / bson_append_iter / bson_append_value),
 * and the keys would be stored and returned as sent. cmd_dispatch renumbers every
 * command that holds one, once, before any handler sees it.
 * bsonx_arrays_numbered: true when every array at any depth (of a document that passed
 * bsonx_view) has the keys "0", "1", ... in order; *renumbered_len (may be NULL) = the
 * length in bytes of the document bsonx_renumber_arrays would make of it (longer when
 * the keys sent were shorter than the indexes: "" → "1000000"), so a caller can refuse
 * before it allocates.
 * bsonx_renumber_arrays: *out (initialised here; caller destroys) = doc with every
 * array's elements renamed "0", "1", ...; values and order unchanged. */
bool bsonx_arrays_numbered(const bson_t *doc, int64_t *renumbered_len);
void bsonx_renumber_arrays(const bson_t *doc, bson_t *out);

/* Relaxed extended JSON on one line; caller frees with bson_free. */
char *bsonx_to_json(const bson_t *doc);
/* Canonical extended JSON; caller frees with bson_free. */
char *bsonx_to_canonical_json(const bson_t *doc);
/* Parses extended JSON (relaxed or canonical) into *out (caller destroys on success). */
int bsonx_from_json(const char *json, bson_t *out, ms_error_t *err);

/* Appends the value at it under key (a copy). */
void bsonx_append_iter(bson_t *dst, const char *key, const bson_iter_t *it);

#endif
