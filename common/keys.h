/*
 * keys.h — the keystone: BSON values encoded into bytes whose memcmp order equals
 * MongoDB's comparison order, so SQLite (which compares BLOBs with memcmp) can
 * index shard keys and index keys and a chunk [min, max) becomes
 * `k >= :min AND k < :max`. Also key patterns, shard-key extraction and MongoDB's
 * hashed-key function. Used by every process.
 *
 * Encoding (see docs/key-encoding.md): one type byte per value ordered by canonical
 * rank, then a payload that is self-delimiting and prefix-free, so compound keys are
 * plain concatenations and a descending field is the byte-wise complement.
 * decimal128 is refused with BadValue naming the field, in every key: index keys, _id,
 * shard keys (hashed too), chunk bounds (docs/key-encoding.md "decimal128").
 */
#ifndef MS_KEYS_H
#define MS_KEYS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "errors.h"
#include "limits.h"

/* Appends the encoding of the value at it, the value of key field `field` (a dotted path,
 * named in errors). Errors: a decimal128 anywhere in the value (BadValue,
 * keys_decimal_refused's message); nothing is appended on error. */
int keys_encode_field(buf_t *out, const bson_iter_t *it, const char *field, ms_error_t *err);
/* The same, naming the iterator's own key as the field. */
int keys_encode_value(buf_t *out, const bson_iter_t *it, ms_error_t *err);
/* True when the value at it is a decimal128 or holds one (in an array or document). */
bool keys_holds_decimal(const bson_iter_t *it);
/* Sets BadValue "decimal128 value in field 'F' cannot be used in an index key or shard key
 * (minishard does not support decimal128 in keys)"; returns its code. err may be NULL. */
int keys_decimal_refused(ms_error_t *err, const char *field);
/* Appends the encoding of MinKey / MaxKey / null / an int64 number. */
void keys_encode_minkey(buf_t *out);
void keys_encode_maxkey(buf_t *out);
void keys_encode_null(buf_t *out);
void keys_encode_int64(buf_t *out, int64_t v);

/* Complements bytes [from, out->len) — turns an ascending encoding into a descending one. */
void keys_invert(buf_t *out, size_t from);

/* Decodes one encoded ascending value back to BSON, appended to dst under key.
 * *pos advances past it. Used to show keys in logs and to check the encoding. */
int keys_decode_value(const uint8_t *data, size_t len, size_t *pos, bson_t *dst,
                      const char *key, ms_error_t *err);

/* MongoDB's hashed value of one element (BSONElementHasher::hash64, seed 0):
 * MD5 over seed + canonical rank + value, numbers squashed to int64 first; the
 * first 8 digest bytes as a little-endian int64. {check: 42} → -944302157085130861. */
int64_t keys_hash64(const bson_iter_t *it);

/* A key pattern: {a: 1, b: -1} (index), {a: 1, b: "hashed"} (shard key). */
typedef struct keys_pattern {
    int nfields;
    char *fields[MS_KEY_FIELDS_MAX];   /* dotted paths, owned */
    int dir[MS_KEY_FIELDS_MAX];        /* 1 or -1 */
    bool hashed[MS_KEY_FIELDS_MAX];
    int hashed_field;                  /* index of the hashed field, -1 when none */
    bson_t spec;                       /* copy of the pattern document */
} keys_pattern_t;

/* Parses a pattern. Values: 1 / -1 (any number sign), or "hashed" (at most one).
 * Errors: empty, too many fields, bad values (BadValue / CannotCreateIndex). */
int keys_pattern_parse(const bson_t *spec, keys_pattern_t *out, ms_error_t *err);
void keys_pattern_free(keys_pattern_t *p);  /* NULL-safe */
bool keys_pattern_equal(const keys_pattern_t *a, const keys_pattern_t *b);
/* True when b's fields start with all of a's fields in the same order (index prefix). */
bool keys_pattern_is_prefix_of(const keys_pattern_t *a, const keys_pattern_t *b);

/* MongoDB's ShardKeyPattern::isUniqueIndexCompatible: a unique index on a sharded
 * collection can be enforced shard by shard only when every document with one index key
 * lives on one shard — when the shard key's field names are a prefix of the index's
 * (directions and "hashed" aside) — or when the index starts with _id (unique anyway).
 * index_key: the index's key pattern document. */
bool keys_unique_index_compatible(const keys_pattern_t *sk, const bson_t *index_key);
/* For an index spec {key, unique?, ...}: CannotCreateIndex (67), MongoDB's message, when it
 * asks for a unique index that shard key sk cannot keep unique; 0 otherwise. */
int keys_unique_index_spec_check(const keys_pattern_t *sk, const bson_t *spec, ms_error_t *err);

/* Shard key of a document: each field by dotted path (embedded documents only); a
 * missing field is null; an array on the path or as value is an error (ShardKeyNotFound
 * family: BadValue "shard key cannot contain an array"); hashed fields are hashed.
 * Appends the encoded key to enc (ascending) and, when key_doc is non-NULL, the key as a
 * document {field: value, ...} (hashed fields as NumberLong). */
int keys_extract(const keys_pattern_t *p, const bson_t *doc, bson_t *key_doc, buf_t *enc,
                 ms_error_t *err);

/* Encodes a key document given in pattern order ({a: MinKey, b: 5}), as chunk bounds
 * are stored. Fields must match the pattern's names in order (BadValue otherwise);
 * values are taken as they are (hashed fields already hold the hash). */
int keys_encode_bound(const keys_pattern_t *p, const bson_t *key_doc, buf_t *enc,
                      ms_error_t *err);

/* A split point given in pattern order (as keys_encode_bound takes it) that some document
 * can fall into (MongoDB's ShardKeyPattern::isShardKey): no field's value is an array or
 * holds one (a document's shard key never does: keys_extract refuses arrays), and a
 * hashed field's value is a NumberLong (what keys_extract stores for it; MinKey and MaxKey
 * pass, the callers' bound checks refuse them). BadValue "new split key ... is not valid
 * for shard key pattern ..." otherwise. */
int keys_split_point_check(const keys_pattern_t *p, const bson_t *point, ms_error_t *err);

/* Builds {f1: MinKey, f2: MinKey...} / MaxKey bounds for a pattern (dst initialised). */
void keys_global_min(const keys_pattern_t *p, bson_t *dst);
void keys_global_max(const keys_pattern_t *p, bson_t *dst);

/* Hex text of an encoded key, for logs (caller frees with bson_free). */
char *keys_hex(const uint8_t *data, size_t len);

#endif
