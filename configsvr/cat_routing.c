/*
 * cat_routing.c — the routing table of the config server's catalog (bin/configsvr):
 * getRoutingTable's reply (full, or incremental: the chunks changed since a version, as
 * MongoDB's catalog cache refresh asks) and the version document {e, t, v} (MongoDB's
 * ChunkVersion). The reply's contract is in shardd/shardver.h and common/rtable.h. Part
 * of the catalog module (catalog.c says how the files divide it).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

void cat_version_append(bson_t *dst, const char *key, const cat_version_t *v) {
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(dst, key, &d);
    BSON_APPEND_OID(&d, "e", &v->epoch);
    cat_append_ts(&d, "t", v->ts);
    bson_append_timestamp(&d, "v", -1, v->major, v->minor);
    bson_append_document_end(dst, &d);
}

int cat_version_parse(const bson_t *doc, cat_version_t *out, ms_error_t *err) {
    bson_iter_t it;
    bool he = false, ht = false, hv = false;
    memset(out, 0, sizeof *out);
    if (!bson_iter_init(&it, doc)) return err_set(err, MS_ERR_BAD_VALUE, "malformed version");
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "e") == 0 && BSON_ITER_HOLDS_OID(&it)) {
            bson_oid_copy(bson_iter_oid(&it), &out->epoch);
            he = true;
        } else if (strcmp(k, "t") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &out->ts.t, &out->ts.i);
            ht = true;
        } else if (strcmp(k, "v") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &out->major, &out->minor);
            hv = true;
        }
    }
    if (!he || !ht || !hv)
        return err_set(err, MS_ERR_BAD_VALUE,
                       "a version must be {e: ObjectId, t: Timestamp, v: Timestamp(major, minor)}");
    return 0;
}

static int routing_locked(cat_t *c, const char *ns, const cat_version_t *since, bson_t *reply,
                          ms_error_t *err) {
    cat_coll_t coll;
    sqlite3_stmt *st = NULL;
    cat_version_t cv;
    bson_t arr;
    bool full;
    int rc, s = SQLITE_DONE, i = 0;
    rc = cat_coll_get_locked(c, ns, &coll, err);
    if (rc) return rc;
    bson_oid_copy(&coll.epoch, &cv.epoch);
    cv.ts = coll.ts;
    rc = cat_coll_version_locked(c, ns, NULL, &cv.major, &cv.minor, err);
    if (rc) goto out;
    full = !since || !bson_oid_equal(&since->epoch, &coll.epoch) || since->ts.t != coll.ts.t ||
           since->ts.i != coll.ts.i;
    BSON_APPEND_UTF8(reply, "ns", ns);
    BSON_APPEND_DOCUMENT(reply, "key", &coll.key);
    BSON_APPEND_BOOL(reply, "unique", coll.unique);
    cat_append_uuid(reply, "uuid", coll.uuid);
    BSON_APPEND_OID(reply, "epoch", &coll.epoch);
    cat_append_ts(reply, "timestamp", coll.ts);
    BSON_APPEND_BOOL(reply, "full", full);
    cat_version_append(reply, "collectionVersion", &cv);
    /* Incremental: the chunks with lastmod >= sinceVersion.v (MongoDB's refresh query),
     * which include every chunk created or changed since. */
    rc = cat_sql_prep(c, full ? "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ?1 ORDER BY min_enc"
                         : CAT_SQL_ROUTING_SINCE,
                 &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, ns);
    if (!full) {
        sqlite3_bind_int64(st, 2, since->major);
        sqlite3_bind_int64(st, 3, since->minor);
    }
    bson_append_array_begin(reply, "chunks", -1, &arr);
    /* Stop as soon as the table cannot fit one message: a full table of a million chunks
     * would otherwise be built whole (90 MB) under the catalog lock, only to be refused. */
    while (arr.len <= MS_MSG_BYTES_MAX && (s = sqlite3_step(st)) == SQLITE_ROW) {
        char idx[16];
        bson_t d, b;
        snprintf(idx, sizeof idx, "%d", i++);
        bson_append_document_begin(&arr, idx, -1, &d);
        cat_col_view(st, CC_MIN, &b);
        BSON_APPEND_DOCUMENT(&d, "min", &b);
        cat_col_view(st, CC_MAX, &b);
        BSON_APPEND_DOCUMENT(&d, "max", &b);
        BSON_APPEND_UTF8(&d, "shard", cat_col_text(st, CC_SHARD));
        bson_append_timestamp(&d, "lastmod", -1, (uint32_t)sqlite3_column_int64(st, CC_MAJOR),
                              (uint32_t)sqlite3_column_int64(st, CC_MINOR));
        if (sqlite3_column_int(st, CC_JUMBO)) BSON_APPEND_BOOL(&d, "jumbo", true);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(reply, &arr);
    if (s != SQLITE_DONE && s != SQLITE_ROW) rc = err_from_sqlite(err, s, "routing table", c->db);
    else if (s == SQLITE_ROW || reply->len > MS_MSG_BYTES_MAX)
        rc = err_set(err, MS_ERR_BSON_OBJECT_TOO_LARGE,
                     "routing table of %s is over the %d-byte message limit (%d chunks read)",
                     ns, MS_MSG_BYTES_MAX, i);
out:
    sqlite3_finalize(st);
    cat_coll_free(&coll);
    return rc;
}

int cat_routing_table(cat_t *c, const char *ns, const cat_version_t *since, bson_t *reply,
                      ms_error_t *err) {
    int rc;
    bson_t tmp = BSON_INITIALIZER;
    pthread_mutex_lock(&c->mu);
    rc = routing_locked(c, ns, since, &tmp, err);
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) bson_concat(reply, &tmp);
    bson_destroy(&tmp);
    return rc;
}
