/*
 * catalog.c — the sharding catalog of the config server (bin/configsvr): one SQLite file
 * in WAL mode whose tables mirror MongoDB's config database (shards, databases,
 * collections, chunks, tags, settings, locks, changelog, actionlog, migrations, mongos,
 * version). This file holds what every part of the catalog shares: the SQLite helpers,
 * the schema, open/close, the cluster clock (cat_next_ts), the changelog, routers and
 * counts. The subjects live beside it, one file each (all prefix cat_, one API in
 * configsvr.h, the shared internals in cat_priv.h):
 *   cat_shards.c       config.shards: addShard's checks and insert, removeShard's steps
 *   cat_databases.c    config.databases: primary choice, drop
 *   cat_collections.c  config.collections: create (with the initial chunks), drop, versions
 *   cat_chunks.c       config.chunks: tiling invariant, split, merge, initial split points
 *   cat_routing.c      getRoutingTable (full and incremental) and the version document
 *   cat_docs.c         config.<name> documents in MongoDB's shapes (find on config)
 *   cat_settings.c     config.settings: read, validate, update
 *
 * Every metadata change is one SQLite transaction, its BEGIN and COMMIT/ROLLBACK in one
 * public function; the *_locked helpers run inside the caller's transaction with the
 * catalog mutex held. One connection guarded by one mutex: metadata traffic is small, and
 * a single writer is what SQLite allows anyway. No function of the catalog makes an RPC.
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/lclock.h"
#include "common/log.h"

/* ---- SQLite helpers -------------------------------------------------------------- */

int cat_sql_exec(cat_t *c, const char *sql, ms_error_t *err) {
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) return err_from_sqlite(err, rc, "exec", c->db);
    return 0;
}

int cat_sql_prep(cat_t *c, const char *sql, sqlite3_stmt **st, ms_error_t *err) {
    int rc = sqlite3_prepare_v2(c->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return err_from_sqlite(err, rc, "prepare", c->db);
    }
    return 0;
}

/* Steps a statement that returns no rows (INSERT/UPDATE/DELETE). */
int cat_sql_done(cat_t *c, sqlite3_stmt *st, const char *what, ms_error_t *err) {
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) return err_from_sqlite(err, rc, what, c->db);
    return 0;
}

void cat_bind_bson(sqlite3_stmt *st, int i, const bson_t *b) {
    sqlite3_bind_blob(st, i, bson_get_data(b), (int)b->len, SQLITE_TRANSIENT);
}

void cat_bind_buf(sqlite3_stmt *st, int i, const buf_t *b) {
    /* A zero-length key never happens (every encoding has a type byte); bind "" anyway. */
    sqlite3_bind_blob(st, i, b->data ? (const void *)b->data : "", (int)b->len, SQLITE_TRANSIENT);
}

void cat_bind_text(sqlite3_stmt *st, int i, const char *s) {
    sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
}

/* A read-only BSON view of a blob column, valid until the next step. Our own rows: a
 * malformed one means the file was corrupted behind our back — an invariant. */
void cat_col_view(sqlite3_stmt *st, int i, bson_t *out) {
    const uint8_t *p = sqlite3_column_blob(st, i);
    int n = sqlite3_column_bytes(st, i);
    ASSERT(p && n >= 5 && bson_init_static(out, p, (size_t)n));
}

void cat_col_oid(sqlite3_stmt *st, int i, bson_oid_t *out) {
    const uint8_t *p = sqlite3_column_blob(st, i);
    ASSERT(p && sqlite3_column_bytes(st, i) == 12);
    bson_oid_init_from_data(out, p);
}

const char *cat_col_text(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? (const char *)t : "";
}

/* memcmp order then length: how SQLite compares BLOBs. */
int cat_blob_cmp(const void *a, size_t alen, const void *b, size_t blen) {
    int r = memcmp(a, b, alen < blen ? alen : blen);
    if (r) return r;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

int cat_buf_cmp(const buf_t *a, const buf_t *b) {
    return cat_blob_cmp(a->data ? a->data : (const uint8_t *)"", a->len,
                    b->data ? b->data : (const uint8_t *)"", b->len);
}

void cat_copy_str(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

void cat_append_ts(bson_t *b, const char *key, cat_ts_t ts) {
    bson_append_timestamp(b, key, -1, ts.t, ts.i);
}

void cat_append_uuid(bson_t *b, const char *key, const uint8_t uuid[16]) {
    bson_append_binary(b, key, -1, BSON_SUBTYPE_UUID, uuid, 16);
}

/* ---- schema ----------------------------------------------------------------------- */

static const char *const SCHEMA =
    "CREATE TABLE IF NOT EXISTS version ("
    "  id INTEGER PRIMARY KEY CHECK (id = 1), cluster_id BLOB NOT NULL,"
    "  ts_t INTEGER NOT NULL, ts_i INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS shards ("
    "  id TEXT PRIMARY KEY, host TEXT NOT NULL UNIQUE, draining INTEGER NOT NULL DEFAULT 0,"
    "  state INTEGER NOT NULL DEFAULT 1, topo_t INTEGER NOT NULL, topo_i INTEGER NOT NULL,"
    "  tags BLOB NOT NULL, max_size INTEGER);"
    "CREATE TABLE IF NOT EXISTS databases ("
    "  name TEXT PRIMARY KEY, primary_shard TEXT NOT NULL, uuid BLOB NOT NULL,"
    "  ts_t INTEGER NOT NULL, ts_i INTEGER NOT NULL, last_mod INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS databases_primary ON databases(primary_shard);"
    "CREATE TABLE IF NOT EXISTS collections ("
    "  ns TEXT PRIMARY KEY, db TEXT NOT NULL, key BLOB NOT NULL, unique_key INTEGER NOT NULL,"
    "  epoch BLOB NOT NULL, ts_t INTEGER NOT NULL, ts_i INTEGER NOT NULL, uuid BLOB NOT NULL,"
    "  created_ms INTEGER NOT NULL, no_balance INTEGER NOT NULL DEFAULT 0,"
    "  max_chunk_size_bytes INTEGER, allow_migrations INTEGER NOT NULL DEFAULT 1,"
    "  enable_auto_merge INTEGER, defragment INTEGER NOT NULL DEFAULT 0, defrag_phase TEXT);"
    "CREATE INDEX IF NOT EXISTS collections_db ON collections(db);"
    /* MongoDB's config.chunks indexes (notes §2.1): unique {uuid, min}, unique {uuid,
     * lastmod}, {uuid, shard, min}. We key by ns (one live generation per ns). */
    "CREATE TABLE IF NOT EXISTS chunks ("
    "  id BLOB PRIMARY KEY, ns TEXT NOT NULL, uuid BLOB NOT NULL,"
    "  min BLOB NOT NULL, max BLOB NOT NULL, min_enc BLOB NOT NULL, max_enc BLOB NOT NULL,"
    "  shard TEXT NOT NULL, major INTEGER NOT NULL, minor INTEGER NOT NULL,"
    "  jumbo INTEGER NOT NULL DEFAULT 0, est_size INTEGER,"
    "  since_t INTEGER NOT NULL, since_i INTEGER NOT NULL, history BLOB NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS chunks_ns_min ON chunks(ns, min_enc);"
    "CREATE UNIQUE INDEX IF NOT EXISTS chunks_ns_lastmod ON chunks(ns, major, minor);"
    "CREATE INDEX IF NOT EXISTS chunks_ns_shard_min ON chunks(ns, shard, min_enc);"
    /* A shard's version (its highest lastmod: every migration commit, merge and refresh
     * asks) as one index probe, not a sort of the shard's chunks. */
    "CREATE INDEX IF NOT EXISTS chunks_ns_shard_lastmod ON chunks(ns, shard, major, minor);"
    "CREATE INDEX IF NOT EXISTS chunks_shard ON chunks(shard);"
    /* The jumbo chunks of a collection (shardctl status, count {uuid, jumbo: true}): a
     * partial index of the few flagged rows, so counting them reads only those. */
    "CREATE INDEX IF NOT EXISTS chunks_jumbo ON chunks(ns) WHERE jumbo = 1;"
    /* Chunks per (collection, shard), and how many of them are jumbo: what the balancer's
     * policy counts, kept by triggers in the same transaction as every insert, delete
     * and owner / jumbo change of a chunk (create, split, merge, commit, drop, rename),
     * so that a round reads a few rows, not the collection (SQLite's count(*) walks the
     * index: linear). An empty table with chunks present (a catalog from before it) is
     * filled at open (cat_open). */
    "CREATE TABLE IF NOT EXISTS chunk_counts ("
    "  ns TEXT NOT NULL, shard TEXT NOT NULL, n INTEGER NOT NULL, jumbo INTEGER NOT NULL,"
    "  PRIMARY KEY (ns, shard)) WITHOUT ROWID;"
    "CREATE TRIGGER IF NOT EXISTS chunk_counts_ins AFTER INSERT ON chunks BEGIN"
    "  INSERT INTO chunk_counts (ns, shard, n, jumbo) VALUES (new.ns, new.shard, 1, new.jumbo != 0)"
    "  ON CONFLICT (ns, shard) DO UPDATE SET n = n + 1, jumbo = jumbo + (new.jumbo != 0);"
    " END;"
    "CREATE TRIGGER IF NOT EXISTS chunk_counts_del AFTER DELETE ON chunks BEGIN"
    "  UPDATE chunk_counts SET n = n - 1, jumbo = jumbo - (old.jumbo != 0)"
    "  WHERE ns = old.ns AND shard = old.shard;"
    "  DELETE FROM chunk_counts WHERE ns = old.ns AND shard = old.shard AND n = 0;"
    " END;"
    "CREATE TRIGGER IF NOT EXISTS chunk_counts_upd AFTER UPDATE OF ns, shard, jumbo ON chunks BEGIN"
    "  UPDATE chunk_counts SET n = n - 1, jumbo = jumbo - (old.jumbo != 0)"
    "  WHERE ns = old.ns AND shard = old.shard;"
    "  DELETE FROM chunk_counts WHERE ns = old.ns AND shard = old.shard AND n = 0;"
    "  INSERT INTO chunk_counts (ns, shard, n, jumbo) VALUES (new.ns, new.shard, 1, new.jumbo != 0)"
    "  ON CONFLICT (ns, shard) DO UPDATE SET n = n + 1, jumbo = jumbo + (new.jumbo != 0);"
    " END;"
    "CREATE TABLE IF NOT EXISTS tags ("
    "  id BLOB PRIMARY KEY, ns TEXT NOT NULL, min BLOB NOT NULL, max BLOB NOT NULL,"
    "  min_enc BLOB NOT NULL, max_enc BLOB NOT NULL, tag TEXT NOT NULL);"
    "CREATE UNIQUE INDEX IF NOT EXISTS tags_ns_min ON tags(ns, min_enc);"
    /* Documents stored whole, keyed by the encoded _id (BSON order). */
    "CREATE TABLE IF NOT EXISTS settings (id_enc BLOB PRIMARY KEY, doc BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS locks (id TEXT PRIMARY KEY, doc BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS migrations (id TEXT PRIMARY KEY, doc BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS mongos ("
    "  id TEXT PRIMARY KEY, ping_ms INTEGER NOT NULL, up INTEGER NOT NULL,"
    "  waiting INTEGER NOT NULL, mongo_version TEXT NOT NULL);"
    /* Capped logs: seq orders them; the oldest rows beyond the cap are deleted. */
    "CREATE TABLE IF NOT EXISTS changelog (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  what TEXT NOT NULL, ns TEXT NOT NULL, doc BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS actionlog (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  what TEXT NOT NULL, ns TEXT NOT NULL, doc BLOB NOT NULL);";

/* The chunk counts of a catalog written before chunk_counts existed (a no-op when the
 * table has rows, or when there are no chunks). */
static const char *const CHUNK_COUNTS_FILL =
    "INSERT INTO chunk_counts (ns, shard, n, jumbo)"
    " SELECT ns, shard, count(*), sum(jumbo != 0) FROM chunks"
    " WHERE NOT EXISTS (SELECT 1 FROM chunk_counts) GROUP BY ns, shard;";

/* ---- identifiers ------------------------------------------------------------------- */

void cat_uuid_new(uint8_t uuid[16]) {
    size_t got = 0;
    while (got < 16) {
        ssize_t r = getrandom(uuid + got, 16 - got, 0);
        ASSERT(r > 0);  /* getrandom on Linux >= 3.17 does not fail for 16 bytes */
        got += (size_t)r;
    }
    uuid[6] = (uint8_t)((uuid[6] & 0x0f) | 0x40);  /* version 4 */
    uuid[8] = (uint8_t)((uuid[8] & 0x3f) | 0x80);  /* RFC 4122 variant */
}

/* ---- open / close ------------------------------------------------------------------ */

int cat_open(const char *path, cat_t **out, ms_error_t *err) {
    cat_t *c = calloc(1, sizeof *c);
    sqlite3_stmt *st = NULL;
    int rc;
    ASSERT(c);
    pthread_mutex_init(&c->mu, NULL);
    cat_copy_str(c->server, sizeof c->server, "configsvr");
    rc = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                         NULL);
    if (rc != SQLITE_OK) {
        rc = err_from_sqlite(err, rc, "open catalog", c->db);
        goto out;
    }
    sqlite3_busy_timeout(c->db, 5000);
    rc = cat_sql_exec(c, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=OFF;", err);
    if (rc) goto out;
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc) goto out;
    rc = cat_sql_exec(c, SCHEMA, err);
    if (rc == 0) rc = cat_sql_exec(c, CHUNK_COUNTS_FILL, err);
    if (rc == 0) rc = cat_sql_prep(c, "SELECT cluster_id, ts_t, ts_i FROM version WHERE id = 1", &st, err);
    if (rc == 0) {
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW) {
            cat_col_oid(st, 0, &c->cluster_id);
            c->ts_last.t = (uint32_t)sqlite3_column_int64(st, 1);
            c->ts_last.i = (uint32_t)sqlite3_column_int64(st, 2);
        } else if (s == SQLITE_DONE) {
            /* First open: a new cluster (MongoDB's config.version clusterId). */
            sqlite3_finalize(st);
            st = NULL;
            bson_oid_init(&c->cluster_id, NULL);
            rc = cat_sql_prep(c, "INSERT INTO version (id, cluster_id, ts_t, ts_i) VALUES (1, ?, 0, 0)",
                         &st, err);
            if (rc == 0) {
                sqlite3_bind_blob(st, 1, c->cluster_id.bytes, 12, SQLITE_TRANSIENT);
                rc = cat_sql_done(c, st, "insert version", err);
            }
        } else {
            rc = err_from_sqlite(err, s, "read version", c->db);
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
    if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
out:
    if (rc) {
        err_prefix(err, "catalog %s", path);
        cat_close(c);
        return rc;
    }
    char hex[25];
    bson_oid_to_string(&c->cluster_id, hex);
    log_info("catalog open path=%s clusterId=%s", path, hex);
    *out = c;
    return 0;
}

void cat_close(cat_t *c) {
    if (!c) return;
    sqlite3_finalize(c->chunk_insert);
    if (c->db) sqlite3_close(c->db);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void cat_set_server(cat_t *c, const char *server) {
    pthread_mutex_lock(&c->mu);
    cat_copy_str(c->server, sizeof c->server, server);
    pthread_mutex_unlock(&c->mu);
}

void cat_cluster_id(const cat_t *c, bson_oid_t *out) {
    bson_oid_copy(&c->cluster_id, out);
}

/* Next cluster Timestamp: (now seconds, 1), or one increment past the last one when the
 * clock has not moved on (or went back). "The last one" is the later of this catalog's
 * and the process's cluster time (common/lclock.h), which then moves up to it: a
 * collection's timestamp or a database version is a cluster time, as in MongoDB.
 * Persisted in the caller's transaction. */
int cat_next_ts_locked(cat_t *c, cat_ts_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    uint32_t now_s = (uint32_t)(time_now_ms() / 1000);
    lclock_ts_t clock = lclock_now();
    cat_ts_t ts, last = c->ts_last;
    int rc;
    if (clock.secs > last.t || (clock.secs == last.t && clock.inc > last.i))
        last = (cat_ts_t){clock.secs, clock.inc};
    if (now_s > last.t) {
        ts.t = now_s;
        ts.i = 1;
    } else {
        ts.t = last.t;
        ts.i = last.i + 1;
        if (ts.i == 0) {  /* 2^32 events in one second: move to the next second */
            ts.t++;
            ts.i = 1;
        }
    }
    if ((rc = lclock_advance((lclock_ts_t){ts.t, ts.i}, err)) != 0) return rc;
    rc = cat_sql_prep(c, "UPDATE version SET ts_t = ?, ts_i = ? WHERE id = 1", &st, err);
    if (rc == 0) {
        sqlite3_bind_int64(st, 1, ts.t);
        sqlite3_bind_int64(st, 2, ts.i);
        rc = cat_sql_done(c, st, "persist cluster time", err);
    }
    sqlite3_finalize(st);
    if (rc) return rc;
    c->ts_last = ts;
    *out = ts;
    return 0;
}

int cat_next_ts(cat_t *c, cat_ts_t *out, ms_error_t *err) {
    int rc;
    cat_ts_t saved;
    pthread_mutex_lock(&c->mu);
    saved = c->ts_last;
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = cat_next_ts_locked(c, out, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) {
            cat_sql_exec(c, "ROLLBACK", NULL);
            c->ts_last = saved;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- changelog (inside the caller's transaction) ----------------------------------- */

/* Appends one entry to config.changelog (or actionlog) in MongoDB's shape (notes §4.7):
 * {_id: "<server>-<ISO time>-<ObjectId>", server, shard: "config", clientAddr, time,
 *  what, ns, details}, and trims the oldest rows beyond the cap. */
int cat_log_change_locked(cat_t *c, const char *table, const char *what, const char *ns,
                             const bson_t *details, ms_error_t *err) {
    return cat_log_change_as_locked(c, table, c->server, "config", what, ns, details, err);
}

int cat_log_change_as_locked(cat_t *c, const char *table, const char *server, const char *shard,
                             const char *what, const char *ns, const bson_t *details,
                             ms_error_t *err) {
    bson_t doc = BSON_INITIALIZER;
    sqlite3_stmt *st = NULL;
    char id[MS_URL_BYTES_MAX + 80], iso[40], hex[25];
    long long now = time_now_ms();
    time_t secs = (time_t)(now / 1000);
    struct tm tm;
    bson_oid_t oid;
    char sql[160];
    int rc;
    gmtime_r(&secs, &tm);
    strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%S", &tm);
    bson_oid_init(&oid, NULL);
    bson_oid_to_string(&oid, hex);
    snprintf(id, sizeof id, "%s-%s.%03lldZ-%s", server, iso, now % 1000, hex);
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "server", server);
    BSON_APPEND_UTF8(&doc, "shard", shard);
    BSON_APPEND_UTF8(&doc, "clientAddr", "");
    BSON_APPEND_DATE_TIME(&doc, "time", now);
    BSON_APPEND_UTF8(&doc, "what", what);
    BSON_APPEND_UTF8(&doc, "ns", ns ? ns : "");
    if (details) BSON_APPEND_DOCUMENT(&doc, "details", details);
    else {
        bson_t empty = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT(&doc, "details", &empty);
        bson_destroy(&empty);
    }
    snprintf(sql, sizeof sql, "INSERT INTO %s (what, ns, doc) VALUES (?, ?, ?)", table);
    rc = cat_sql_prep(c, sql, &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, what);
    cat_bind_text(st, 2, ns ? ns : "");
    cat_bind_bson(st, 3, &doc);
    rc = cat_sql_done(c, st, "insert changelog", err);
    if (rc) goto out;
    sqlite3_finalize(st);
    st = NULL;
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE seq <= ?", table);
    rc = cat_sql_prep(c, sql, &st, err);
    if (rc) goto out;
    sqlite3_bind_int64(st, 1, sqlite3_last_insert_rowid(c->db) -
                                  (strcmp(table, "actionlog") == 0 ? CAT_ACTIONLOG_ROWS_MAX
                                                                   : CAT_CHANGELOG_ROWS_MAX));
    rc = cat_sql_done(c, st, "trim changelog", err);
out:
    sqlite3_finalize(st);
    bson_destroy(&doc);
    return rc;
}

int cat_changelog(cat_t *c, const char *what, const char *ns, const bson_t *details,
                  ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = cat_log_change_locked(c, "changelog", what, ns, details, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- generic count helper ---------------------------------------------------------- */

/* Runs a `SELECT count(*) ...` with up to two text parameters. */
int cat_count_locked(cat_t *c, const char *sql, const char *p1, const char *p2,
                        int64_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, sql, &st, err);
    if (rc) return rc;
    if (p1) cat_bind_text(st, 1, p1);
    if (p2) cat_bind_text(st, 2, p2);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
    else rc = err_from_sqlite(err, s, "count", c->db);
    sqlite3_finalize(st);
    return rc;
}

/* ---- string vectors ---------------------------------------------------------------- */

void cat_strv_free(char **v, int n) {
    if (!v) return;
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* Collects column 0 of a query with up to one text parameter into a string vector. */
int cat_strv_locked(cat_t *c, const char *sql, const char *p1, char ***out, int *n_out,
                       ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    char **v = NULL;
    int n = 0, cap = 0, rc, s;
    rc = cat_sql_prep(c, sql, &st, err);
    if (rc) return rc;
    if (p1) cat_bind_text(st, 1, p1);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            v = xrealloc(v, sizeof *v * (size_t)cap);
        }
        v[n] = strdup(cat_col_text(st, 0));
        ASSERT(v[n]);
        n++;
    }
    sqlite3_finalize(st);
    if (s != SQLITE_DONE) {
        cat_strv_free(v, n);
        return err_from_sqlite(err, s, "list", c->db);
    }
    *out = v;
    *n_out = n;
    return 0;
}

/* ---- routers, status ----------------------------------------------------------------- */

int cat_router_ping(cat_t *c, const char *host, int64_t up_s, bool waiting,
                    const char *version, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = cat_sql_prep(c, "INSERT INTO mongos (id, ping_ms, up, waiting, mongo_version)"
                        " VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
                        " ping_ms = excluded.ping_ms, up = excluded.up, waiting = excluded.waiting,"
                        " mongo_version = excluded.mongo_version", &st, err);
        if (rc == 0) {
            cat_bind_text(st, 1, host);
            sqlite3_bind_int64(st, 2, time_now_ms());
            sqlite3_bind_int64(st, 3, up_s);
            sqlite3_bind_int(st, 4, waiting ? 1 : 0);
            cat_bind_text(st, 5, version);
            rc = cat_sql_done(c, st, "upsert mongos", err);
        }
        sqlite3_finalize(st);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_counts(cat_t *c, int64_t *shards, int64_t *dbs, int64_t *colls, int64_t *chunks,
               ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_count_locked(c, "SELECT count(*) FROM shards", NULL, NULL, shards, err);
    if (rc == 0) rc = cat_count_locked(c, "SELECT count(*) FROM databases", NULL, NULL, dbs, err);
    if (rc == 0) rc = cat_count_locked(c, "SELECT count(*) FROM collections", NULL, NULL, colls, err);
    if (rc == 0) rc = cat_count_locked(c, "SELECT count(*) FROM chunks", NULL, NULL, chunks, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- raw access for cat_settings.c ----------------------------------------------------- */

sqlite3 *cat_db_handle(cat_t *c) { return c->db; }
void cat_lock(cat_t *c) { pthread_mutex_lock(&c->mu); }
void cat_unlock(cat_t *c) { pthread_mutex_unlock(&c->mu); }
