/*
 * cat_collections.c — config.collections in the config server's catalog (bin/configsvr):
 * loading a collection, its versions (collection and per-shard placement: the highest
 * chunk lastmod), creating a sharded collection with its initial chunks in one
 * transaction (the commit of MongoDB's CreateCollectionCoordinator), and dropping it.
 * Part of the catalog module (catalog.c says how the files divide it).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/mem.h"

void cat_coll_from_row(sqlite3_stmt *st, cat_coll_t *out) {
    bson_t key;
    memset(out, 0, sizeof *out);
    cat_copy_str(out->ns, sizeof out->ns, cat_col_text(st, 0));
    cat_col_view(st, 1, &key);
    bson_copy_to(&key, &out->key);
    out->unique = sqlite3_column_int(st, 2) != 0;
    cat_col_oid(st, 3, &out->epoch);
    out->ts.t = (uint32_t)sqlite3_column_int64(st, 4);
    out->ts.i = (uint32_t)sqlite3_column_int64(st, 5);
    ASSERT(sqlite3_column_bytes(st, 6) == 16);
    memcpy(out->uuid, sqlite3_column_blob(st, 6), 16);
    out->created_ms = sqlite3_column_int64(st, 7);
    out->no_balance = sqlite3_column_int(st, 8) != 0;
    out->max_chunk_size_bytes =
        sqlite3_column_type(st, 9) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 9);
    out->allow_migrations = sqlite3_column_int(st, 10) != 0;
    out->enable_auto_merge =
        sqlite3_column_type(st, 11) == SQLITE_NULL ? true : sqlite3_column_int(st, 11) != 0;
    out->defragment = sqlite3_column_int(st, 12) != 0;
    cat_copy_str(out->defrag_phase, sizeof out->defrag_phase, cat_col_text(st, 13));
}

void cat_coll_free(cat_coll_t *coll) {
    if (!coll) return;
    bson_destroy(&coll->key);
    memset(&coll->key, 0, sizeof coll->key);
}

int cat_coll_get_locked(cat_t *c, const char *ns, cat_coll_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, "SELECT " COLL_COLS " FROM collections WHERE ns = ?", &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) cat_coll_from_row(st, out);
    else if (s == SQLITE_DONE)
        rc = err_set(err, MS_ERR_NAMESPACE_NOT_SHARDED, "collection %s is not sharded", ns);
    else rc = err_from_sqlite(err, s, "find collection", c->db);
    sqlite3_finalize(st);
    return rc;
}

int cat_coll_get(cat_t *c, const char *ns, cat_coll_t *out, ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_coll_get_locked(c, ns, out, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Loads the collection and parses its key pattern (both released by the caller:
 * cat_coll_free, keys_pattern_free). */
int cat_coll_pattern_locked(cat_t *c, const char *ns, cat_coll_t *coll, keys_pattern_t *p,
                               ms_error_t *err) {
    int rc = cat_coll_get_locked(c, ns, coll, err);
    if (rc) return rc;
    memset(p, 0, sizeof *p);
    rc = keys_pattern_parse(&coll->key, p, err);
    ASSERT(rc == 0);  /* we only store patterns that parsed */
    return 0;
}

/* Version bounds of a collection: max lastmod. (0,0) when it has no chunk (never, once
 * created: the tiling invariant needs at least one). */
int cat_coll_version_locked(cat_t *c, const char *ns, const char *shard, uint32_t *major,
                               uint32_t *minor, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, shard ? CAT_SQL_SHARD_VERSION : CAT_SQL_COLL_VERSION, &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    if (shard) cat_bind_text(st, 2, shard);
    int s = sqlite3_step(st);
    *major = *minor = 0;
    if (s == SQLITE_ROW) {
        *major = (uint32_t)sqlite3_column_int64(st, 0);
        *minor = (uint32_t)sqlite3_column_int64(st, 1);
    } else if (s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "collection version", c->db);
    }
    sqlite3_finalize(st);
    return rc;
}

int cat_coll_version(cat_t *c, const char *ns, cat_version_t *out, ms_error_t *err) {
    return cat_shard_version(c, ns, NULL, out, err);
}

int cat_shard_version(cat_t *c, const char *ns, const char *shard, cat_version_t *out,
                      ms_error_t *err) {
    cat_coll_t coll;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_coll_get_locked(c, ns, &coll, err);
    if (rc == 0) {
        bson_oid_copy(&coll.epoch, &out->epoch);
        out->ts = coll.ts;
        cat_coll_free(&coll);
        rc = cat_coll_version_locked(c, ns, shard, &out->major, &out->minor, err);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int coll_create_locked(cat_t *c, const cat_coll_t *coll, const keys_pattern_t *p,
                              const cat_chunk_plan_t *plan, int n, const buf_t *encs,
                              ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int64_t exists = 0;
    char db[MS_NS_BYTES_MAX + 1];
    const char *dot = strchr(coll->ns, '.');
    bson_t details = BSON_INITIALIZER;
    int rc;
    (void)p;
    rc = cat_count_locked(c, "SELECT count(*) FROM collections WHERE ns = ?", coll->ns, NULL, &exists, err);
    if (rc) goto out;
    if (exists) {
        rc = err_set(err, MS_ERR_NAMESPACE_EXISTS, "collection %s is already sharded", coll->ns);
        goto out;
    }
    snprintf(db, sizeof db, "%.*s", dot ? (int)(dot - coll->ns) : (int)strlen(coll->ns), coll->ns);
    rc = cat_sql_prep(c, "INSERT INTO collections (ns, db, key, unique_key, epoch, ts_t, ts_i, uuid,"
                    " created_ms, no_balance, max_chunk_size_bytes, allow_migrations,"
                    " enable_auto_merge, defragment, defrag_phase)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, 1, NULL, 0, NULL)", &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, coll->ns);
    cat_bind_text(st, 2, db);
    cat_bind_bson(st, 3, &coll->key);
    sqlite3_bind_int(st, 4, coll->unique ? 1 : 0);
    sqlite3_bind_blob(st, 5, coll->epoch.bytes, 12, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 6, coll->ts.t);
    sqlite3_bind_int64(st, 7, coll->ts.i);
    sqlite3_bind_blob(st, 8, coll->uuid, 16, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 9, coll->created_ms);
    rc = cat_sql_done(c, st, "insert collection", err);
    if (rc) goto out;
    /* shardCollection versions (notes §2.2): (1,0), (1,1), ... one per chunk in key order. */
    for (int i = 0; i < n && rc == 0; i++) {
        bson_oid_t id;
        bson_t hist;
        bson_oid_init(&id, NULL);
        cat_history_one(&hist, coll->ts, plan[i].shard);
        rc = cat_chunk_insert_locked(c, coll->ns, coll->uuid, &id, plan[i].min, plan[i].max,
                                 &encs[2 * i], &encs[2 * i + 1], plan[i].shard, 1, (uint32_t)i,
                                 coll->ts, &hist, err);
        bson_destroy(&hist);
    }
    if (rc) goto out;
    cat_tiling_assert_locked(c, coll->ns);
    BSON_APPEND_INT32(&details, "numChunks", n);
    bson_append_timestamp(&details, "version", -1, 1, (uint32_t)(n - 1));
    rc = cat_log_change_locked(c, "changelog", "shardCollection.end", coll->ns, &details, err);
out:
    sqlite3_finalize(st);
    bson_destroy(&details);
    return rc;
}

int cat_coll_create(cat_t *c, const cat_coll_t *coll, const cat_chunk_plan_t *plan, int n,
                    ms_error_t *err) {
    keys_pattern_t p;
    buf_t *encs = NULL;
    bson_t gmin_doc, gmax_doc;
    buf_t gmin = {0}, gmax = {0};
    int rc;
    memset(&p, 0, sizeof p);
    bson_init(&gmin_doc);
    bson_init(&gmax_doc);
    if (n < 1 || n > CAT_INITIAL_CHUNKS_MAX) {
        rc = err_set(err, MS_ERR_INVALID_OPTIONS, "a collection needs 1..%d initial chunks, not %d",
                     CAT_INITIAL_CHUNKS_MAX, n);
        goto out;
    }
    rc = keys_pattern_parse(&coll->key, &p, err);
    if (rc) goto out;
    /* The plan comes partly from shards (splitVector): check it tiles before writing. */
    keys_global_min(&p, &gmin_doc);
    keys_global_max(&p, &gmax_doc);
    rc = keys_encode_bound(&p, &gmin_doc, &gmin, err);
    if (rc == 0) rc = keys_encode_bound(&p, &gmax_doc, &gmax, err);
    if (rc) goto out;
    encs = calloc((size_t)n * 2, sizeof *encs);
    ASSERT(encs);
    for (int i = 0; i < n; i++) {
        rc = keys_encode_bound(&p, plan[i].min, &encs[2 * i], err);
        if (rc == 0) rc = keys_encode_bound(&p, plan[i].max, &encs[2 * i + 1], err);
        if (rc) {
            err_prefix(err, "chunk %d bounds", i);
            goto out;
        }
        if (cat_buf_cmp(&encs[2 * i], &encs[2 * i + 1]) >= 0 ||
            (i == 0 && cat_buf_cmp(&encs[0], &gmin) != 0) ||
            (i > 0 && cat_buf_cmp(&encs[2 * i], &encs[2 * i - 1]) != 0) ||
            (i == n - 1 && cat_buf_cmp(&encs[2 * i + 1], &gmax) != 0)) {
            rc = err_set(err, MS_ERR_BAD_VALUE,
                         "initial chunks of %s do not tile the key space at chunk %d "
                         "(split points must be strictly increasing, inside MinKey..MaxKey)",
                         coll->ns, i);
            goto out;
        }
    }
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = coll_create_locked(c, coll, &p, plan, n, encs, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) log_info("collection sharded ns=%s chunks=%d", log_str(coll->ns), n);
out:
    if (encs)
        for (int i = 0; i < 2 * n; i++) buf_free(&encs[i]);
    free(encs);
    buf_free(&gmin);
    buf_free(&gmax);
    bson_destroy(&gmin_doc);
    bson_destroy(&gmax_doc);
    keys_pattern_free(&p);
    mem_trim_after((size_t)n);   /* the encoded bounds, the statements' rows */
    return rc;
}

static int coll_drop_locked(cat_t *c, const char *ns, bool *existed, ms_error_t *err) {
    int64_t n = 0;
    int rc = cat_count_locked(c, "SELECT count(*) FROM collections WHERE ns = ?", ns, NULL, &n, err);
    if (rc) return rc;
    *existed = n > 0;
    if (!*existed) return 0;
    rc = cat_coll_delete_locked(c, ns, err);
    if (rc) return rc;
    return cat_log_change_locked(c, "changelog", "dropCollection", ns, NULL, err);
}

int cat_coll_drop(cat_t *c, const char *ns, bool *existed, ms_error_t *err) {
    int rc;
    bool ex = false;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = coll_drop_locked(c, ns, &ex, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0 && existed) *existed = ex;
    return rc;
}
