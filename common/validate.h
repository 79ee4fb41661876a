/*
 * validate.h — MongoDB's rules for names and numeric command arguments, one module used by
 * every daemon (common/cmd.c dispatch calls it for every command, so the router, the shard
 * and the config server answer the same input with the same code and text).
 *
 *   database name    not empty, < 64 bytes, none of  / \ . space " $ * < > : | ?  and no NUL
 *                    or other control character (MongoDB's NamespaceString::validDBName with
 *                    its Windows set on every platform, plus control characters)
 *   collection name  not empty, no NUL, no '$', not starting with '.'
 *                    (NamespaceString::validCollectionName); writes and creation also refuse
 *                    "system.*" except MongoDB's legal client system collections
 *                    (isLegalClientSystemNS)
 *   namespace        "<db>.<collection>" at most MS_NS_BYTES_MAX (255) bytes
 *   every violation  InvalidNamespace (73)
 *
 *   numbers          skip / limit / batchSize / ntoreturn: an integer (a double only when
 *                    integral), finite, within int64 — FailedToParse (9) otherwise, with the
 *                    texts of MongoDB's BSONElement::parseIntegerElementToLong; a bound below
 *                    which the value is refused with the IDL validator's code 51024
 *                    ("BSON field 'skip' value must be >= 0, actual value '-1'") or, for
 *                    getMore's batchSize, BadValue (2) as MongoDB's getMore answers.
 *
 * Names come from the wire as (pointer, length) pairs because a BSON string may hold a NUL:
 * a C-string view of "admin\0x" reads "admin", which is how a write reached the wrong
 * database before this check existed.
 */
#ifndef MS_VALIDATE_H
#define MS_VALIDATE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

/* A database name: 0 or InvalidNamespace. name borrows len bytes (need not end in NUL). */
int val_db_name(const char *name, size_t len, ms_error_t *err);

/* A collection name of database db (db already valid): 0 or InvalidNamespace. write: the
 * command writes to or creates the collection, so "system.*" is refused except MongoDB's
 * legal client system collections. Checks the full namespace length too. */
int val_coll_name(const char *db, const char *coll, size_t len, bool write, ms_error_t *err);

/* A full namespace "db.coll" (shardCollection, split, getRoutingTable ...): both parts as
 * above. */
int val_full_ns(const char *ns, size_t len, bool write, ms_error_t *err);

/* The value at it as an exact int64 (int32, int64, integral double or decimal in range):
 * 0 with *out set, or FailedToParse naming field. Non-numbers are the caller's to refuse
 * (dispatch's type check runs first). */
int val_int64(const bson_iter_t *it, const char *field, int64_t *out, ms_error_t *err);

/* val_int64, then value >= min, else code 51024 with the IDL validator's text. */
int val_int64_min(const bson_iter_t *it, const char *field, int64_t min, int64_t *out,
                  ms_error_t *err);

/* renameCollection's two namespaces (each already a valid "db.c"): the same database
 * (minishard does not rename across databases: IllegalOperation 20) and not the same
 * collection (IllegalOperation 20, MongoDB's "Can't rename a collection to itself"). */
int val_rename(const char *from, const char *to, ms_error_t *err);

/* The `scale` of dbStats / collStats: a number whose integer part is used (MongoDB's
 * docs: 1023.999 scales by 1023), >= 1 else 51024; NaN is FailedToParse. Values past
 * INT64_MAX read as INT64_MAX (every size then scales to 0). */
int val_scale(const bson_iter_t *it, const char *field, int64_t *out, ms_error_t *err);

/* How dispatch checks a numeric field (cmd_field_t.check). */
enum val_num_check {
    VAL_NONE = 0,
    VAL_I64,          /* an exact int64 */
    VAL_I64_NONNEG,   /* an exact int64 >= 0 (51024 below) */
    VAL_GETMORE_BATCH /* an exact int64 >= 0 (BadValue below, getMore's own text) */
};

/* Applies check to the value at it (field names it in errors). */
int val_num_field(const bson_iter_t *it, const char *field, int check, ms_error_t *err);

#endif
