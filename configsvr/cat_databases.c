/*
 * cat_databases.c — config.databases in the config server's catalog (bin/configsvr):
 * creation with a primary shard and a database version {uuid, timestamp, lastMod}
 * (MongoDB's _configsvrCreateDatabase), lookups, and dropDatabase's metadata removal
 * (the database with its collections, chunks and zones in one transaction). Part of the
 * catalog module (catalog.c says how the files divide it).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* MongoDB's database name rules (NamespaceString::validDBName) plus the reserved ones. */
static int db_name_check(const char *db, ms_error_t *err) {
    size_t n = strlen(db);
    if (n == 0) return err_set(err, MS_ERR_INVALID_NAMESPACE, "database name cannot be empty");
    if (n >= CAT_DB_NAME_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "database name '%s' is too long", db);
    if (strpbrk(db, "/\\. \"$"))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "invalid database name '%s'", db);
    if (strcmp(db, "admin") == 0 || strcmp(db, "config") == 0 || strcmp(db, "local") == 0)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION, "can't shard %s database", db);
    return 0;
}

/* Appends primary and version {uuid, timestamp, lastMod} of a databases row
 * (primary_shard, uuid, ts_t, ts_i, last_mod). */
void cat_db_version_append(sqlite3_stmt *st, bson_t *out) {
    bson_t v;
    uint8_t uuid[16];
    const void *p = sqlite3_column_blob(st, 1);
    ASSERT(p && sqlite3_column_bytes(st, 1) == 16);
    memcpy(uuid, p, 16);
    BSON_APPEND_UTF8(out, "primary", cat_col_text(st, 0));
    BSON_APPEND_DOCUMENT_BEGIN(out, "version", &v);
    cat_append_uuid(&v, "uuid", uuid);
    cat_append_ts(&v, "timestamp",
              (cat_ts_t){(uint32_t)sqlite3_column_int64(st, 2), (uint32_t)sqlite3_column_int64(st, 3)});
    BSON_APPEND_INT32(&v, "lastMod", sqlite3_column_int(st, 4));
    bson_append_document_end(out, &v);
}

static int db_ensure_locked(cat_t *c, const char *db, const char *primary, bool *created,
                            bson_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    char chosen[CAT_SHARD_NAME_BYTES_MAX];
    uint8_t uuid[16];
    cat_ts_t ts;
    int rc, s;
    *created = false;
    rc = cat_sql_prep(c, "SELECT primary_shard, uuid, ts_t, ts_i, last_mod FROM databases WHERE name = ?",
                 &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, db);
    s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        if (primary && strcmp(primary, cat_col_text(st, 0)) != 0)
            rc = err_set(err, MS_ERR_NAMESPACE_EXISTS,
                         "database %s already exists with primary shard %s, not %s", db,
                         cat_col_text(st, 0), primary);
        else if (out)
            cat_db_version_append(st, out);
        sqlite3_finalize(st);
        return rc;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (s != SQLITE_DONE) return err_from_sqlite(err, s, "find database", c->db);

    if (primary) {
        bool draining = false;
        rc = cat_shard_host_locked(c, primary, NULL, 0, &draining, err);
        if (rc) return rc;
        if (draining)
            return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                           "shard %s is draining and cannot become a primary shard", primary);
        cat_copy_str(chosen, sizeof chosen, primary);
    } else {
        /* MongoDB picks the shard with the least data; we pick the one that is primary
         * for the fewest databases (ties by name) — what we can know without asking. */
        rc = cat_sql_prep(c, "SELECT s.id FROM shards s WHERE s.draining = 0 ORDER BY"
                        " (SELECT count(*) FROM databases d WHERE d.primary_shard = s.id), s.id"
                        " LIMIT 1", &st, err);
        if (rc) return rc;
        s = sqlite3_step(st);
        if (s == SQLITE_ROW) cat_copy_str(chosen, sizeof chosen, cat_col_text(st, 0));
        sqlite3_finalize(st);
        st = NULL;
        if (s == SQLITE_DONE) return err_set(err, MS_ERR_SHARD_NOT_FOUND, "No shards found");
        if (s != SQLITE_ROW) return err_from_sqlite(err, s, "pick primary", c->db);
    }
    rc = cat_next_ts_locked(c, &ts, err);
    if (rc) return rc;
    cat_uuid_new(uuid);
    rc = cat_sql_prep(c, "INSERT INTO databases (name, primary_shard, uuid, ts_t, ts_i, last_mod)"
                    " VALUES (?, ?, ?, ?, ?, 1)", &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, db);
    cat_bind_text(st, 2, chosen);
    sqlite3_bind_blob(st, 3, uuid, 16, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, ts.t);
    sqlite3_bind_int64(st, 5, ts.i);
    rc = cat_sql_done(c, st, "insert database", err);
    sqlite3_finalize(st);
    st = NULL;
    if (rc) return rc;
    if (out) {
        bson_t v;
        BSON_APPEND_UTF8(out, "primary", chosen);
        BSON_APPEND_DOCUMENT_BEGIN(out, "version", &v);
        cat_append_uuid(&v, "uuid", uuid);
        cat_append_ts(&v, "timestamp", ts);
        BSON_APPEND_INT32(&v, "lastMod", 1);
        bson_append_document_end(out, &v);
    }
    *created = true;
    log_info("database created db=%s primary=%s", log_str(db), log_str(chosen));
    return 0;
}

int cat_db_ensure(cat_t *c, const char *db, const char *primary, bool *created, bson_t *out,
                  ms_error_t *err) {
    int rc = db_name_check(db, err);
    bson_t tmp = BSON_INITIALIZER;
    bool made = false;
    if (rc) return rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = db_ensure_locked(c, db, primary, &made, &tmp, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) {
        if (created) *created = made;
        if (out) bson_concat(out, &tmp);
    }
    bson_destroy(&tmp);
    return rc;
}

int cat_db_primary(cat_t *c, const char *db, char *primary_out, size_t cap, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, "SELECT primary_shard FROM databases WHERE name = ?", &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, db);
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW) cat_copy_str(primary_out, cap, cat_col_text(st, 0));
        else if (s == SQLITE_DONE)
            rc = err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "database %s not found", db);
        else rc = err_from_sqlite(err, s, "find database", c->db);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_db_collections(cat_t *c, const char *db, char ***ns_out, int *n_out, ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_strv_locked(c, "SELECT ns FROM collections WHERE db = ? ORDER BY ns", db, ns_out, n_out, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Deletes a collection's rows (collection, chunks, zones). */
int cat_coll_delete_locked(cat_t *c, const char *ns, ms_error_t *err) {
    static const char *const sqls[] = {
        "DELETE FROM chunks WHERE ns = ?",
        "DELETE FROM tags WHERE ns = ?",
        "DELETE FROM collections WHERE ns = ?",
    };
    for (size_t i = 0; i < sizeof sqls / sizeof sqls[0]; i++) {
        sqlite3_stmt *st = NULL;
        int rc = cat_sql_prep(c, sqls[i], &st, err);
        if (rc) return rc;
        cat_bind_text(st, 1, ns);
        rc = cat_sql_done(c, st, "drop collection rows", err);
        sqlite3_finalize(st);
        if (rc) return rc;
    }
    return 0;
}

static int db_drop_locked(cat_t *c, const char *db, bool *existed, ms_error_t *err) {
    char **colls = NULL;
    int ncolls = 0, rc;
    int64_t n = 0;
    sqlite3_stmt *st = NULL;
    bson_t details = BSON_INITIALIZER;
    rc = cat_count_locked(c, "SELECT count(*) FROM databases WHERE name = ?", db, NULL, &n, err);
    if (rc) goto out;
    *existed = n > 0;
    rc = cat_strv_locked(c, "SELECT ns FROM collections WHERE db = ?", db, &colls, &ncolls, err);
    if (rc) goto out;
    for (int i = 0; i < ncolls && rc == 0; i++) rc = cat_coll_delete_locked(c, colls[i], err);
    if (rc) goto out;
    rc = cat_sql_prep(c, "DELETE FROM databases WHERE name = ?", &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, db);
    rc = cat_sql_done(c, st, "delete database", err);
    if (rc) goto out;
    if (*existed || ncolls > 0) {
        BSON_APPEND_INT32(&details, "collections", ncolls);
        rc = cat_log_change_locked(c, "changelog", "dropDatabase", db, &details, err);
    }
out:
    sqlite3_finalize(st);
    cat_strv_free(colls, ncolls);
    bson_destroy(&details);
    return rc;
}

int cat_db_drop(cat_t *c, const char *db, bool *existed, ms_error_t *err) {
    int rc;
    bool ex = false;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = db_drop_locked(c, db, &ex, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0 && existed) *existed = ex;
    return rc;
}

/* movePrimary's commit: the new primary and lastMod + 1 (same uuid and timestamp, as
 * MongoDB's commitMovePrimary bumps only lastMod), so a shard or router holding the old
 * version gets StaleDbVersion and refreshes. The target shard must exist and not drain
 * (re-checked here, inside the transaction). Changelog movePrimary. */
int cat_db_set_primary(cat_t *c, const char *db, const char *from, const char *to,
                       ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    bson_t details = BSON_INITIALIZER;
    bool draining = false;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc) goto out;
    rc = cat_shard_host_locked(c, to, NULL, 0, &draining, err);
    if (rc == 0 && draining)
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "cannot move primary to draining shard %s", to);
    if (rc == 0)
        rc = cat_sql_prep(c, "UPDATE databases SET primary_shard = ?, last_mod = last_mod + 1"
                             " WHERE name = ? AND primary_shard = ?", &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, to);
        cat_bind_text(st, 2, db);
        cat_bind_text(st, 3, from);
        rc = cat_sql_done(c, st, "switch primary", err);
        if (rc == 0 && sqlite3_changes(c->db) != 1)
            rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                         "database %s changed during movePrimary (no longer on %s)", db, from);
    }
    if (rc == 0) {
        BSON_APPEND_UTF8(&details, "database", db);
        BSON_APPEND_UTF8(&details, "from", from);
        BSON_APPEND_UTF8(&details, "to", to);
        rc = cat_log_change_locked(c, "changelog", "movePrimary", db, &details, err);
    }
    if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
    if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    bson_destroy(&details);
    return rc;
}
