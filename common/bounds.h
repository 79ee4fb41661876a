/*
 * bounds.h — index bounds from a query filter: the ranges of encoded keys (keys.h) that
 * documents matching the filter can have under a key pattern. Used by the shard's planner
 * (which index range to scan) AND the router's targeting (which chunks, hence which shards,
 * a query must visit). Mirrors MongoDB's IndexBoundsBuilder in miniature.
 */
#ifndef MS_BOUNDS_H
#define MS_BOUNDS_H

#include <bson/bson.h>
#include <stdbool.h>

#include "buf.h"
#include "errors.h"
#include "keys.h"

/* One range of encoded keys: compound = concatenation; descending fields inverted; hashed
 * fields: equality values hashed. */
typedef struct bounds_range {
    buf_t lo, hi;
    bool lo_incl, hi_incl;
} bounds_range_t;

/* Ranges sorted and disjoint; all = no useful bound (whole key space; r then holds that
 * one range, [MinKey.., MaxKey..], so callers may also just iterate r). n == 0 and !all:
 * no document can match (e.g. {$in: []}). */
typedef struct bounds {
    int n;
    bounds_range_t *r;
    bool all;
} bounds_t;

/* A superset of the keys (under pattern p) that documents matching filter can have. At most
 * max_ranges ranges (more → fall back to coarser bounds, ultimately all). Understands
 * equality, $eq, $in, $gt/$gte/$lt/$lte (type-bracketed like MongoDB: {$gt: 5} covers
 * numbers only), $and, implicit and, $or (union; any branch unbounded → all),
 * $exists:false / null (null bound). Anything else on a field → that field unbounded. For
 * compound patterns, point-prefixes then one range (MongoDB's bounds "explode"); fields
 * after a range field are MinKey..MaxKey. Borrows filter and p; *out filled on success
 * (caller frees with bounds_free). A document's key is what keys_extract gives per field
 * (missing = null, hashed fields hashed), each field complemented (keys_invert) when its
 * direction is -1. Assumes keys hold no arrays (shard keys; non-multikey indexes): two
 * ranges on one field are intersected. Errors: BadValue for a malformed $or / $and. */
int bounds_from_filter(const bson_t *filter, const keys_pattern_t *p, int max_ranges,
                       bounds_t *out, ms_error_t *err);

/* The same for a MULTIKEY index (some document has an array on an indexed path, one key per
 * element): only one predicate per field is used and only the pattern's first field is
 * bounded (later fields MinKey..MaxKey), because different elements may satisfy different
 * predicates ({a: {$gt: 5, $lt: 3}} matches a: [1, 10]). Additive to the agreed API. */
int bounds_from_filter_multikey(const bson_t *filter, const keys_pattern_t *p, int max_ranges,
                                bounds_t *out, ms_error_t *err);

/* Exactly one range with lo == hi, both inclusive. */
bool bounds_is_point(const bounds_t *b);

/* Releases the ranges; NULL-safe. */
void bounds_free(bounds_t *b);

#endif
