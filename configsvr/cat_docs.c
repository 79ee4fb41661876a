/*
 * cat_docs.c — the config server's catalog tables served as documents of the config
 * database (bin/configsvr): config.shards, databases, collections, chunks, tags,
 * settings, locks, changelog, actionlog, migrations, mongos and version, each row turned
 * into the document MongoDB keeps (notes §9, docs/catalog.md). find/count on config
 * collections (cfg_query.c) scan them here. Part of the catalog module (catalog.c says
 * how the files divide it).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* config.shards document from a row (id, host, draining, state, topo_t, topo_i, tags,
 * max_size): maxSize (MB) only when addShard gave one (MongoDB 6.0's field). */
void cat_shard_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_t tags;
    BSON_APPEND_UTF8(doc, "_id", cat_col_text(st, 0));
    BSON_APPEND_UTF8(doc, "host", cat_col_text(st, 1));
    BSON_APPEND_INT32(doc, "state", sqlite3_column_int(st, 3));
    if (sqlite3_column_int(st, 2)) BSON_APPEND_BOOL(doc, "draining", true);
    cat_col_view(st, 6, &tags);
    BSON_APPEND_ARRAY(doc, "tags", &tags);
    cat_append_ts(doc, "topologyTime",
              (cat_ts_t){(uint32_t)sqlite3_column_int64(st, 4), (uint32_t)sqlite3_column_int64(st, 5)});
    if (sqlite3_column_type(st, 7) != SQLITE_NULL) BSON_APPEND_INT64(doc, "maxSize", sqlite3_column_int64(st, 7));
}

/* config.collections document from a row (COLL_COLS order). */
void cat_coll_doc(sqlite3_stmt *st, bson_t *doc) {
    cat_coll_t cc;
    cat_coll_from_row(st, &cc);
    BSON_APPEND_UTF8(doc, "_id", cc.ns);
    BSON_APPEND_OID(doc, "lastmodEpoch", &cc.epoch);
    BSON_APPEND_DATE_TIME(doc, "lastmod", cc.created_ms);
    cat_append_ts(doc, "timestamp", cc.ts);
    cat_append_uuid(doc, "uuid", cc.uuid);
    BSON_APPEND_DOCUMENT(doc, "key", &cc.key);
    BSON_APPEND_BOOL(doc, "unique", cc.unique);
    BSON_APPEND_BOOL(doc, "noBalance", cc.no_balance);
    if (cc.max_chunk_size_bytes > 0) BSON_APPEND_INT64(doc, "maxChunkSizeBytes", cc.max_chunk_size_bytes);
    if (cc.defragment) BSON_APPEND_BOOL(doc, "defragmentCollection", true);
    if (cc.defrag_phase[0]) BSON_APPEND_UTF8(doc, "defragmentationPhase", cc.defrag_phase);
    if (sqlite3_column_type(st, 11) != SQLITE_NULL) BSON_APPEND_BOOL(doc, "enableAutoMerge", cc.enable_auto_merge);
    if (!cc.allow_migrations) BSON_APPEND_BOOL(doc, "allowMigrations", false);
    cat_coll_free(&cc);
}

/* config.chunks document from a row (CHUNK_COLS order), notes §9. */
void cat_chunk_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_oid_t id;
    bson_t b;
    uint8_t uuid[16];
    cat_col_oid(st, CC_ID, &id);
    BSON_APPEND_OID(doc, "_id", &id);
    ASSERT(sqlite3_column_bytes(st, CC_UUID) == 16);
    memcpy(uuid, sqlite3_column_blob(st, CC_UUID), 16);
    cat_append_uuid(doc, "uuid", uuid);
    cat_col_view(st, CC_MIN, &b);
    BSON_APPEND_DOCUMENT(doc, "min", &b);
    cat_col_view(st, CC_MAX, &b);
    BSON_APPEND_DOCUMENT(doc, "max", &b);
    BSON_APPEND_UTF8(doc, "shard", cat_col_text(st, CC_SHARD));
    bson_append_timestamp(doc, "lastmod", -1, (uint32_t)sqlite3_column_int64(st, CC_MAJOR),
                          (uint32_t)sqlite3_column_int64(st, CC_MINOR));
    bson_append_timestamp(doc, "onCurrentShardSince", -1,
                          (uint32_t)sqlite3_column_int64(st, CC_SINCE_T),
                          (uint32_t)sqlite3_column_int64(st, CC_SINCE_I));
    cat_col_view(st, CC_HISTORY, &b);
    BSON_APPEND_ARRAY(doc, "history", &b);
    if (sqlite3_column_int(st, CC_JUMBO)) BSON_APPEND_BOOL(doc, "jumbo", true);
    if (sqlite3_column_type(st, CC_EST) != SQLITE_NULL)
        BSON_APPEND_INT64(doc, "estimatedDataSizeBytes", sqlite3_column_int64(st, CC_EST));
}

static const char *const CONFIG_COLLS[] = {
    "shards", "databases", "collections", "chunks", "tags", "settings", "locks",
    "changelog", "actionlog", "migrations", "mongos", "version",
};

const char *cat_config_coll(int i) {
    return i >= 0 && i < (int)(sizeof CONFIG_COLLS / sizeof CONFIG_COLLS[0]) ? CONFIG_COLLS[i]
                                                                             : NULL;
}

bool cat_config_known(const char *coll) {
    for (size_t i = 0; i < sizeof CONFIG_COLLS / sizeof CONFIG_COLLS[0]; i++)
        if (strcmp(coll, CONFIG_COLLS[i]) == 0) return true;
    return false;
}

static void tag_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_oid_t id;
    bson_t b;
    cat_col_oid(st, 0, &id);
    BSON_APPEND_OID(doc, "_id", &id);
    BSON_APPEND_UTF8(doc, "ns", cat_col_text(st, 1));
    cat_col_view(st, 2, &b);
    BSON_APPEND_DOCUMENT(doc, "min", &b);
    cat_col_view(st, 3, &b);
    BSON_APPEND_DOCUMENT(doc, "max", &b);
    BSON_APPEND_UTF8(doc, "tag", cat_col_text(st, 4));
}

static void mongos_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_t arr;
    BSON_APPEND_UTF8(doc, "_id", cat_col_text(st, 0));
    BSON_APPEND_DATE_TIME(doc, "ping", sqlite3_column_int64(st, 1));
    BSON_APPEND_INT64(doc, "up", sqlite3_column_int64(st, 2));
    BSON_APPEND_BOOL(doc, "waiting", sqlite3_column_int(st, 3) != 0);
    BSON_APPEND_UTF8(doc, "mongoVersion", cat_col_text(st, 4));
    BSON_APPEND_ARRAY_BEGIN(doc, "advisoryHostFQDNs", &arr);
    bson_append_array_end(doc, &arr);
}

static void version_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_oid_t id;
    cat_col_oid(st, 0, &id);
    BSON_APPEND_INT32(doc, "_id", 1);
    BSON_APPEND_OID(doc, "clusterId", &id);
}

static void stored_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_t b;
    cat_col_view(st, 0, &b);
    bson_concat(doc, &b);
}

int cat_config_scan(cat_t *c, const char *coll, cat_doc_fn fn, void *arg, ms_error_t *err) {
    const char *sql = NULL;
    void (*build)(sqlite3_stmt *, bson_t *) = NULL;
    sqlite3_stmt *st = NULL;
    int rc, s;
    if (strcmp(coll, "shards") == 0) {
        sql = "SELECT " SHARD_COLS " FROM shards ORDER BY id";
        build = cat_shard_doc;
    } else if (strcmp(coll, "databases") == 0) {
        sql = "SELECT primary_shard, uuid, ts_t, ts_i, last_mod, name FROM databases ORDER BY name";
        build = NULL;  /* below: _id first */
    } else if (strcmp(coll, "collections") == 0) {
        sql = "SELECT " COLL_COLS " FROM collections ORDER BY ns";
        build = cat_coll_doc;
    } else if (strcmp(coll, "chunks") == 0) {
        sql = "SELECT " CHUNK_COLS " FROM chunks ORDER BY ns, min_enc";
        build = cat_chunk_doc;
    } else if (strcmp(coll, "tags") == 0) {
        sql = "SELECT id, ns, min, max, tag FROM tags ORDER BY ns, min_enc";
        build = tag_doc;
    } else if (strcmp(coll, "settings") == 0) {
        sql = "SELECT doc FROM settings ORDER BY id_enc";
        build = stored_doc;
    } else if (strcmp(coll, "locks") == 0) {
        sql = "SELECT doc FROM locks ORDER BY id";
        build = stored_doc;
    } else if (strcmp(coll, "migrations") == 0) {
        sql = "SELECT doc FROM migrations ORDER BY id";
        build = stored_doc;
    } else if (strcmp(coll, "changelog") == 0) {
        sql = "SELECT doc FROM changelog ORDER BY seq";
        build = stored_doc;
    } else if (strcmp(coll, "actionlog") == 0) {
        sql = "SELECT doc FROM actionlog ORDER BY seq";
        build = stored_doc;
    } else if (strcmp(coll, "mongos") == 0) {
        sql = "SELECT id, ping_ms, up, waiting, mongo_version FROM mongos ORDER BY id";
        build = mongos_doc;
    } else if (strcmp(coll, "version") == 0) {
        sql = "SELECT cluster_id FROM version";
        build = version_doc;
    } else {
        return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "config.%s is not a config collection", coll);
    }
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, sql, &st, err);
    if (rc) goto out;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        bson_t doc = BSON_INITIALIZER;
        if (build) {
            build(st, &doc);
        } else {  /* databases: {_id, primary, version} */
            BSON_APPEND_UTF8(&doc, "_id", cat_col_text(st, 5));
            cat_db_version_append(st, &doc);
        }
        rc = fn(arg, &doc);
        bson_destroy(&doc);
        if (rc) goto out;
    }
    if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "scan config collection", c->db);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* The newest n entries of config.changelog or config.actionlog, newest first: one indexed
 * read of the last rows by sequence number, so the web view's feed (http_api.c) costs
 * the same with 20 rows or with CAT_CHANGELOG_ROWS_MAX. */
int cat_log_tail(cat_t *c, const char *coll, int n, cat_doc_fn fn, void *arg, ms_error_t *err) {
    const char *sql;
    sqlite3_stmt *st = NULL;
    int rc, s;
    if (strcmp(coll, "changelog") == 0) sql = "SELECT doc FROM changelog ORDER BY seq DESC LIMIT ?";
    else if (strcmp(coll, "actionlog") == 0) sql = "SELECT doc FROM actionlog ORDER BY seq DESC LIMIT ?";
    else return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "config.%s has no tail", coll);
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, sql, &st, err);
    if (rc) goto out;
    sqlite3_bind_int(st, 1, n);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        bson_t doc = BSON_INITIALIZER;
        stored_doc(st, &doc);
        rc = fn(arg, &doc);
        bson_destroy(&doc);
        if (rc) goto out;
    }
    if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "tail of config log", c->db);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}
