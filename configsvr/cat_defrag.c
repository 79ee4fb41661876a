/*
 * cat_defrag.c — the catalog's part of per-collection balancing settings,
 * defragmentation and the auto-merger (bin/configsvr): configureCollectionBalancing's
 * write to config.collections (maxChunkSizeBytes, defragmentCollection, enableAutoMerge),
 * the stored defragmentationPhase, config.chunks estimatedDataSizeBytes, and the
 * chunks' onCurrentShardSince for the auto-merger's horizon. Part of the catalog module
 * (catalog.c says how the files divide it).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

/* Ends defragmentation of ns inside the caller's transaction. */
static int defrag_end_locked(cat_t *c, const char *ns, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, "UPDATE collections SET defragment = 0, defrag_phase = NULL WHERE ns = ?",
                          &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    rc = cat_sql_done(c, st, "defragmentation end", err);
    sqlite3_finalize(st);
    if (rc) return rc;
    rc = cat_sql_prep(c, "UPDATE chunks SET est_size = NULL WHERE ns = ?", &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    rc = cat_sql_done(c, st, "defragmentation: clear estimates", err);
    sqlite3_finalize(st);
    return rc;
}

int cat_coll_configure_balancing(cat_t *c, const char *ns, int chunk_mb, int defrag,
                                 int auto_merge, ms_error_t *err) {
    cat_coll_t coll;
    sqlite3_stmt *st = NULL;
    bson_t details = BSON_INITIALIZER;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc) goto unlock;
    rc = cat_coll_get_locked(c, ns, &coll, err);  /* NamespaceNotSharded */
    if (rc) goto out;
    if (chunk_mb >= 0) {
        rc = cat_sql_prep(c, "UPDATE collections SET max_chunk_size_bytes = ? WHERE ns = ?", &st, err);
        if (rc) goto out_coll;
        if (chunk_mb == 0) sqlite3_bind_null(st, 1);  /* back to the cluster's chunksize */
        else sqlite3_bind_int64(st, 1, (int64_t)chunk_mb * 1024 * 1024);
        cat_bind_text(st, 2, ns);
        rc = cat_sql_done(c, st, "set maxChunkSizeBytes", err);
        sqlite3_finalize(st);
        st = NULL;
        if (rc) goto out_coll;
        BSON_APPEND_INT32(&details, "chunkSizeMB", chunk_mb);
    }
    if (defrag == 1 && !coll.defragment) {
        rc = cat_sql_prep(c, "UPDATE collections SET defragment = 1, defrag_phase = ? WHERE ns = ?",
                          &st, err);
        if (rc) goto out_coll;
        cat_bind_text(st, 1, bal_defrag_phase_name(BAL_DEFRAG_MERGE_MEASURE));
        cat_bind_text(st, 2, ns);
        rc = cat_sql_done(c, st, "start defragmentation", err);
        sqlite3_finalize(st);
        st = NULL;
        if (rc) goto out_coll;
    } else if (defrag == 0 && coll.defragment) {
        rc = defrag_end_locked(c, ns, err);  /* MongoDB's abortCollectionDefragmentation */
        if (rc) goto out_coll;
    }
    if (defrag >= 0) BSON_APPEND_BOOL(&details, "defragmentCollection", defrag == 1);
    if (auto_merge >= 0) {
        rc = cat_sql_prep(c, "UPDATE collections SET enable_auto_merge = ? WHERE ns = ?", &st, err);
        if (rc) goto out_coll;
        sqlite3_bind_int(st, 1, auto_merge);
        cat_bind_text(st, 2, ns);
        rc = cat_sql_done(c, st, "set enableAutoMerge", err);
        sqlite3_finalize(st);
        st = NULL;
        if (rc) goto out_coll;
    }
    rc = cat_log_change_locked(c, "changelog", "configureCollectionBalancing", ns, &details, err);
out_coll:
    cat_coll_free(&coll);
out:
    if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
    if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
unlock:
    pthread_mutex_unlock(&c->mu);
    bson_destroy(&details);
    if (rc == 0)
        log_info("collection balancing configured ns=%s chunk_mb=%d defragment=%d auto_merge=%d",
                 log_str(ns), chunk_mb, defrag, auto_merge);
    return rc;
}

int cat_coll_set_defrag_phase(cat_t *c, const char *ns, const char *phase, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        if (phase) {
            /* Only while still defragmenting: an abort (configureCollectionBalancing
             * defragmentCollection: false) during the step wins. */
            rc = cat_sql_prep(c, "UPDATE collections SET defrag_phase = ? WHERE ns = ? AND defragment = 1",
                              &st, err);
            if (rc == 0) {
                cat_bind_text(st, 1, phase);
                cat_bind_text(st, 2, ns);
                rc = cat_sql_done(c, st, "set defragmentationPhase", err);
                sqlite3_finalize(st);
            }
        } else {
            rc = defrag_end_locked(c, ns, err);
        }
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_chunk_set_est(cat_t *c, const char *ns, const uint8_t *min_enc, size_t min_len,
                      const uint8_t *max_enc, size_t max_len, int64_t bytes, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, "UPDATE chunks SET est_size = ? WHERE ns = ? AND min_enc = ? AND max_enc = ?",
                      &st, err);
    if (rc == 0) {
        sqlite3_bind_int64(st, 1, bytes);
        cat_bind_text(st, 2, ns);
        sqlite3_bind_blob(st, 3, min_enc, (int)min_len, SQLITE_TRANSIENT);
        sqlite3_bind_blob(st, 4, max_enc, (int)max_len, SQLITE_TRANSIENT);
        rc = cat_sql_done(c, st, "set estimatedDataSizeBytes", err);
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_chunks_since(cat_t *c, const char *ns, const bal_chunk_t *chunks, int n,
                     int64_t *since_s, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc, s, k = 0;
    for (int i = 0; i < n; i++) since_s[i] = INT64_MAX;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, "SELECT min_enc, max_enc, since_t FROM chunks WHERE ns = ? ORDER BY min_enc",
                      &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, ns);
        /* Both in key order: a merge join, matching a chunk only when both bounds agree. */
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            const void *mn = sqlite3_column_blob(st, 0), *mx = sqlite3_column_blob(st, 1);
            size_t mnl = (size_t)sqlite3_column_bytes(st, 0), mxl = (size_t)sqlite3_column_bytes(st, 1);
            while (k < n && cat_blob_cmp(chunks[k].min_enc, chunks[k].min_len, mn, mnl) < 0) k++;
            if (k < n && cat_blob_cmp(chunks[k].min_enc, chunks[k].min_len, mn, mnl) == 0 &&
                cat_blob_cmp(chunks[k].max_enc, chunks[k].max_len, mx, mxl) == 0)
                since_s[k] = sqlite3_column_int64(st, 2);
        }
        if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "read onCurrentShardSince", c->db);
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}
