/*
 * cat_shards.c — config.shards in the config server's catalog (bin/configsvr): the
 * duplicate checks and default names of addShard (MongoDB: addShard is idempotent for
 * the same host and name), the insert, host lookups, and removeShard's state machine
 * (started → ongoing → completed), each change one transaction. Part of the catalog
 * module (catalog.c says how the files divide it).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/log.h"

static int shard_check_locked(cat_t *c, const char *name, const char *host, char *name_out,
                              size_t cap, bool *already, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc, s;
    *already = false;
    /* The host already a shard? Identical request → idempotent (MongoDB), else refused. */
    rc = cat_sql_prep(c, "SELECT id FROM shards WHERE host = ?", &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, host);
    s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        const char *existing = cat_col_text(st, 0);
        if (!name || strcmp(name, existing) == 0) {
            cat_copy_str(name_out, cap, existing);
            *already = true;
            rc = 0;
        } else {
            rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                         "'%s' is already a member of the existing shard '%s'", host, existing);
        }
        sqlite3_finalize(st);
        return rc;
    }
    sqlite3_finalize(st);
    if (s != SQLITE_DONE) return err_from_sqlite(err, s, "find shard by host", c->db);

    if (name) {
        int64_t n = 0;
        rc = cat_count_locked(c, "SELECT count(*) FROM shards WHERE id = ?", name, NULL, &n, err);
        if (rc) return rc;
        if (n > 0)
            return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                           "a shard named '%s' already exists with another host", name);
        cat_copy_str(name_out, cap, name);
        return 0;
    }
    /* Default names shard0, shard1, ...: one past the highest number in use, so a removed
     * shard's name is never reused for a different host. */
    long long next = 0;
    rc = cat_sql_prep(c, "SELECT id FROM shards WHERE id GLOB 'shard[0-9]*'", &st, err);
    if (rc) return rc;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = cat_col_text(st, 0);
        char *end = NULL;
        long long v = strtoll(id + 5, &end, 10);
        if (end && *end == '\0' && v >= next) next = v + 1;
    }
    sqlite3_finalize(st);
    if (s != SQLITE_DONE) return err_from_sqlite(err, s, "list shard names", c->db);
    snprintf(name_out, cap, "shard%lld", next);
    return 0;
}

int cat_shard_prepare(cat_t *c, const char *name, const char *host, char *name_out,
                      size_t name_cap, bool *already, ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = shard_check_locked(c, name, host, name_out, name_cap, already, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_shard_insert(cat_t *c, const char *name, const char *host, int64_t max_size_mb,
                     ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    char check[CAT_SHARD_NAME_BYTES_MAX];
    bool already = false;
    bson_t tags = BSON_INITIALIZER, details = BSON_INITIALIZER;
    cat_ts_t ts;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc) goto out;
    rc = shard_check_locked(c, name, host, check, sizeof check, &already, err);
    if (rc == 0 && already) rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "shard '%s' already added", name);
    if (rc == 0) rc = cat_next_ts_locked(c, &ts, err);
    if (rc == 0)
        rc = cat_sql_prep(c, "INSERT INTO shards (id, host, draining, state, topo_t, topo_i, tags,"
                        " max_size) VALUES (?, ?, 0, 1, ?, ?, ?, ?)", &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, name);
        cat_bind_text(st, 2, host);
        sqlite3_bind_int64(st, 3, ts.t);
        sqlite3_bind_int64(st, 4, ts.i);
        cat_bind_bson(st, 5, &tags);
        if (max_size_mb > 0) sqlite3_bind_int64(st, 6, max_size_mb);
        else sqlite3_bind_null(st, 6);
        rc = cat_sql_done(c, st, "insert shard", err);
    }
    if (rc == 0) {
        BSON_APPEND_UTF8(&details, "name", name);
        BSON_APPEND_UTF8(&details, "host", host);
        if (max_size_mb > 0) BSON_APPEND_INT64(&details, "maxSize", max_size_mb);
        rc = cat_log_change_locked(c, "changelog", "addShard", "", &details, err);
    }
    if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
    if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    bson_destroy(&tags);
    bson_destroy(&details);
    return rc;
}

int cat_shard_host_locked(cat_t *c, const char *name, char *host_out, size_t cap,
                             bool *draining, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, "SELECT host, draining FROM shards WHERE id = ?", &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, name);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        if (host_out) cat_copy_str(host_out, cap, cat_col_text(st, 0));
        if (draining) *draining = sqlite3_column_int(st, 1) != 0;
    } else if (s == SQLITE_DONE) {
        rc = err_set(err, MS_ERR_SHARD_NOT_FOUND, "Shard %s not found", name);
    } else {
        rc = err_from_sqlite(err, s, "find shard", c->db);
    }
    sqlite3_finalize(st);
    return rc;
}

int cat_shard_host(cat_t *c, const char *name, char *host_out, size_t host_cap,
                   bool *draining, ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_shard_host_locked(c, name, host_out, host_cap, draining, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_shards_append(cat_t *c, bson_t *dst, const char *key, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    bson_t arr;
    int rc, s, i = 0;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, "SELECT " SHARD_COLS " FROM shards ORDER BY id", &st, err);
    if (rc) goto out;
    bson_append_array_begin(dst, key, -1, &arr);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        char idx[16];
        bson_t doc;
        snprintf(idx, sizeof idx, "%d", i++);
        bson_append_document_begin(&arr, idx, -1, &doc);
        cat_shard_doc(st, &doc);
        bson_append_document_end(&arr, &doc);
    }
    bson_append_array_end(dst, &arr);
    if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "list shards", c->db);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_shard_names(cat_t *c, bool include_draining, char ***names_out, int *n_out,
                    ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_strv_locked(c, include_draining ? "SELECT id FROM shards ORDER BY id"
                                         : "SELECT id FROM shards WHERE draining = 0 ORDER BY id",
                     NULL, names_out, n_out, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Appends dbsToMove: the databases whose primary is the shard. */
static int dbs_to_move_locked(cat_t *c, const char *name, bson_t *reply, ms_error_t *err) {
    char **v = NULL;
    int n = 0;
    bson_t arr;
    int rc = cat_strv_locked(c, "SELECT name FROM databases WHERE primary_shard = ? ORDER BY name", name,
                         &v, &n, err);
    if (rc) return rc;
    bson_append_array_begin(reply, "dbsToMove", -1, &arr);
    for (int i = 0; i < n; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        BSON_APPEND_UTF8(&arr, idx, v[i]);
    }
    bson_append_array_end(reply, &arr);
    cat_strv_free(v, n);
    return 0;
}

static int remove_step_locked(cat_t *c, const char *name, bson_t *reply, ms_error_t *err) {
    bool draining = false;
    int64_t nshards = 0, ndraining_other = 0, nchunks = 0, njumbo = 0, ndbs = 0;
    bson_t details = BSON_INITIALIZER;
    sqlite3_stmt *st = NULL;
    int rc = cat_shard_host_locked(c, name, NULL, 0, &draining, err);
    if (rc) goto out;
    rc = cat_count_locked(c, "SELECT count(*) FROM shards", NULL, NULL, &nshards, err);
    if (rc) goto out;
    if (!draining) {
        /* MongoDB's preconditions: never the last shard, one draining shard at a time. */
        if (nshards <= 1) {
            rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                         "Operation not allowed because it would remove the last shard");
            goto out;
        }
        rc = cat_count_locked(c, "SELECT count(*) FROM shards WHERE draining = 1 AND id != ?", name,
                          NULL, &ndraining_other, err);
        if (rc) goto out;
        if (ndraining_other > 0) {
            rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                         "Can't have more than one draining shard at a time");
            goto out;
        }
        /* MongoDB: never the last shard of a zone that a range still uses. */
        rc = cat_zone_check_shard_removable_locked(c, name, err);
        if (rc) goto out;
        rc = cat_sql_prep(c, "UPDATE shards SET draining = 1 WHERE id = ?", &st, err);
        if (rc) goto out;
        cat_bind_text(st, 1, name);
        rc = cat_sql_done(c, st, "mark draining", err);
        if (rc) goto out;
        BSON_APPEND_UTF8(&details, "shard", name);
        rc = cat_log_change_locked(c, "changelog", "removeShard.start", "", &details, err);
        if (rc) goto out;
        BSON_APPEND_UTF8(reply, "msg", "draining started successfully");
        BSON_APPEND_UTF8(reply, "state", "started");
        BSON_APPEND_UTF8(reply, "shard", name);
        BSON_APPEND_UTF8(reply, "note", "you need to drop or movePrimary these databases");
        rc = dbs_to_move_locked(c, name, reply, err);
        goto out;
    }
    rc = cat_count_locked(c, "SELECT count(*) FROM chunks WHERE shard = ?", name, NULL, &nchunks, err);
    if (rc == 0)
        rc = cat_count_locked(c, "SELECT count(*) FROM chunks WHERE shard = ? AND jumbo = 1", name, NULL,
                          &njumbo, err);
    if (rc == 0)
        rc = cat_count_locked(c, "SELECT count(*) FROM databases WHERE primary_shard = ?", name, NULL,
                          &ndbs, err);
    if (rc) goto out;
    if (nchunks == 0 && ndbs == 0) {
        rc = cat_sql_prep(c, "DELETE FROM shards WHERE id = ?", &st, err);
        if (rc) goto out;
        cat_bind_text(st, 1, name);
        rc = cat_sql_done(c, st, "delete shard", err);
        if (rc) goto out;
        BSON_APPEND_UTF8(&details, "shard", name);
        rc = cat_log_change_locked(c, "changelog", "removeShard", "", &details, err);
        if (rc) goto out;
        BSON_APPEND_UTF8(reply, "msg", "removeshard completed successfully");
        BSON_APPEND_UTF8(reply, "state", "completed");
        BSON_APPEND_UTF8(reply, "shard", name);
        goto out;
    }
    BSON_APPEND_UTF8(reply, "msg", "draining ongoing");
    BSON_APPEND_UTF8(reply, "state", "ongoing");
    {
        bson_t rem;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "remaining", &rem);
        BSON_APPEND_INT64(&rem, "chunks", nchunks);
        BSON_APPEND_INT64(&rem, "dbs", ndbs);
        BSON_APPEND_INT64(&rem, "jumboChunks", njumbo);
        bson_append_document_end(reply, &rem);
    }
    BSON_APPEND_UTF8(reply, "note", "you need to drop or movePrimary these databases");
    rc = dbs_to_move_locked(c, name, reply, err);
out:
    sqlite3_finalize(st);
    bson_destroy(&details);
    return rc;
}

int cat_shard_remove_step(cat_t *c, const char *name, bson_t *reply, ms_error_t *err) {
    int rc;
    bson_t tmp = BSON_INITIALIZER;
    fp_early_t fpe;
    fp_eval_early(CFG_FP_REMOVE_SHARD_BEFORE_COMMIT, &fpe);   /* hang: unlocked */
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = remove_step_locked(c, name, &tmp, err);
        if (rc == 0) rc = fp_late(&fpe, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) bson_concat(reply, &tmp);
    bson_destroy(&tmp);
    return rc;
}
