/*
 * krange.h — sets of shard-key ranges in key-encoding space, used by bin/router and
 * bin/shardd for the multi-write narrowing $_shardKeyRanges (docs/protocol.md; design in
 * docs/versioning-and-routing.md "Multi-document writes across a migration").
 *
 * A range is [lo, hi) of encoded shard keys (the bytes keys_extract and chunk bounds use,
 * hashed fields hashed), compared with memcmp as chunk bounds are. An empty lo is
 * unbounded below and an empty hi unbounded above (an encoded key is never empty), so the
 * ranges cut from a routing table match rtable_find exactly: chunk i is [min_i, min_i+1),
 * the last one unbounded above. A set is sorted and disjoint.
 *
 * Wire form: [{min?: BinData(0, lo), max?: BinData(0, hi)}, ...], sorted, disjoint, each
 * non-empty; a missing bound is unbounded.
 */
#ifndef MS_KRANGE_H
#define MS_KRANGE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/errors.h"

typedef struct krange {
    buf_t lo, hi;          /* len 0: unbounded */
} krange_t;

typedef struct krset {
    krange_t *r;           /* caller owns (krset_free) */
    int n, cap;
} krset_t;

void krset_free(krset_t *s);   /* releases and zeroes; a zeroed set is fine */
/* Appends [lo, hi) after the last range (the caller adds in key order); merged into the
 * last one when it starts where that one ends. */
void krset_add(krset_t *s, const uint8_t *lo, size_t lolen, const uint8_t *hi, size_t hilen);
/* Is the encoded key in one of the ranges? Binary search. */
bool krset_contains(const krset_t *s, const uint8_t *key, size_t len);
/* Appends the wire form as array `key` of dst. */
void krset_append(bson_t *dst, const char *key, const krset_t *s);
/* Parses the wire form at it into *out (zeroed first; caller frees, also on error):
 * BadValue when it is not an array of {min?, max?} binData documents, a range is empty,
 * the ranges are not sorted and disjoint, or there are more than MS_MULTIWRITE_RANGES_MAX.
 * field names the field in the messages. */
int krset_parse(const bson_iter_t *it, const char *field, krset_t *out, ms_error_t *err);

#endif
