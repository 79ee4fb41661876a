/*
 * t_rtable.h — getRoutingTable replies over {x: 1} built from a list of chunks, shared by
 * the routing table's unit tests (test_common_rtable, test_common_rtable_diff) and its
 * benchmark (bench_common_rtable). Static inline, as t_cat.h.
 */
#ifndef MS_T_RTABLE_H
#define MS_T_RTABLE_H

#include <bson/bson.h>
#include <stdio.h>

#include "common/rtable.h"

#define MINK INT64_MIN   /* stands for MinKey in a bound */
#define MAXK INT64_MAX   /* stands for MaxKey */

typedef struct ch {
    int64_t min, max;
    const char *shard;
    uint32_t major, minor;
} ch_t;

static inline void bound(bson_t *dst, const char *key, int64_t v) {
    bson_t d;
    bson_append_document_begin(dst, key, -1, &d);
    if (v == MINK) BSON_APPEND_MINKEY(&d, "x");
    else if (v == MAXK) BSON_APPEND_MAXKEY(&d, "x");
    else BSON_APPEND_INT64(&d, "x", v);
    bson_append_document_end(dst, &d);
}

/* A getRoutingTable reply with shard key x: 1, or "hashed" when hashed (bounds are the
 * int64 hash values then); full = false lists only the chunks given. */
static inline void reply_of_key(bson_t *r, bool hashed, const bson_oid_t *epoch, uint32_t ts,
                                bool full, const ch_t *c, int n) {
    bson_t key, arr;
    bson_init(r);
    BSON_APPEND_INT32(r, "ok", 1);
    BSON_APPEND_UTF8(r, "ns", "db.c");
    BSON_APPEND_DOCUMENT_BEGIN(r, "key", &key);
    if (hashed) BSON_APPEND_UTF8(&key, "x", "hashed");
    else BSON_APPEND_INT32(&key, "x", 1);
    bson_append_document_end(r, &key);
    BSON_APPEND_BOOL(r, "unique", false);
    BSON_APPEND_OID(r, "epoch", epoch);
    BSON_APPEND_TIMESTAMP(r, "timestamp", ts, 1);
    BSON_APPEND_BOOL(r, "full", full);
    BSON_APPEND_ARRAY_BEGIN(r, "chunks", &arr);
    for (int i = 0; i < n; i++) {
        char idx[16];
        bson_t d;
        snprintf(idx, sizeof idx, "%d", i);
        bson_append_document_begin(&arr, idx, -1, &d);
        bound(&d, "min", c[i].min);
        bound(&d, "max", c[i].max);
        BSON_APPEND_UTF8(&d, "shard", c[i].shard);
        BSON_APPEND_TIMESTAMP(&d, "lastmod", c[i].major, c[i].minor);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(r, &arr);
}

/* reply_of_key over {x: 1}. */
static inline void reply_of(bson_t *r, const bson_oid_t *epoch, uint32_t ts, bool full,
                            const ch_t *c, int n) {
    reply_of_key(r, false, epoch, ts, full, c, n);
}

/* Builds t from a reply; returns rtable_from_reply's code, *need_full as it said. */
static inline int build(rtable_t *t, const rtable_t *base, const bson_oid_t *epoch, uint32_t ts,
                 bool full, const ch_t *c, int n, bool *need_full) {
    bson_t r;
    ms_error_t err = {0};
    reply_of(&r, epoch, ts, full, c, n);
    int rc = rtable_from_reply(&r, base, t, need_full, &err);
    bson_destroy(&r);
    return rc;
}

#endif
