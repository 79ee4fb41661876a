/*
 * catalog.c — the sharding catalog of the config server (bin/configsvr): one SQLite file
 * in WAL mode whose tables mirror MongoDB's config database (shards, databases,
 * collections, chunks, tags, settings, locks, changelog, actionlog, migrations, mongos,
 * version). Every metadata change is one SQLite transaction; every transaction that
 * changes chunks asserts, before COMMIT, that the collection's chunks still tile
 * [MinKey, MaxKey) — our invariant, so a violation is a bug and aborts the process.
 *
 * Chunk bounds are stored twice: as BSON (what users and routers see) and encoded with
 * common/keys.h (memcmp order = MongoDB's BSON order), so ordering, containment and
 * tiling checks are plain BLOB comparisons in SQLite. Versions follow notes §2.2; the
 * document shapes served as config.<name> follow notes §9 (docs/catalog.md).
 *
 * One connection guarded by one mutex: metadata traffic is small, and a single writer
 * is what SQLite allows anyway. No function here makes an RPC.
 */
#include "configsvr/configsvr.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/buf.h"
#include "common/log.h"

struct cat {
    sqlite3 *db;
    pthread_mutex_t mu;
    bson_oid_t cluster_id;
    cat_ts_t ts_last;                 /* last cluster Timestamp handed out (persisted) */
    char server[MS_URL_BYTES_MAX];    /* changelog `server` */
};

/* ---- SQLite helpers -------------------------------------------------------------- */

static int db_exec(cat_t *c, const char *sql, ms_error_t *err) {
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) return err_from_sqlite(err, rc, "exec", c->db);
    return 0;
}

static int db_prep(cat_t *c, const char *sql, sqlite3_stmt **st, ms_error_t *err) {
    int rc = sqlite3_prepare_v2(c->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return err_from_sqlite(err, rc, "prepare", c->db);
    }
    return 0;
}

/* Steps a statement that returns no rows (INSERT/UPDATE/DELETE). */
static int db_done(cat_t *c, sqlite3_stmt *st, const char *what, ms_error_t *err) {
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) return err_from_sqlite(err, rc, what, c->db);
    return 0;
}

static void bind_bson(sqlite3_stmt *st, int i, const bson_t *b) {
    sqlite3_bind_blob(st, i, bson_get_data(b), (int)b->len, SQLITE_TRANSIENT);
}

static void bind_buf(sqlite3_stmt *st, int i, const buf_t *b) {
    /* A zero-length key never happens (every encoding has a type byte); bind "" anyway. */
    sqlite3_bind_blob(st, i, b->data ? (const void *)b->data : "", (int)b->len, SQLITE_TRANSIENT);
}

static void bind_text(sqlite3_stmt *st, int i, const char *s) {
    sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
}

/* A read-only BSON view of a blob column, valid until the next step. Our own rows: a
 * malformed one means the file was corrupted behind our back — an invariant. */
static void col_view(sqlite3_stmt *st, int i, bson_t *out) {
    const uint8_t *p = sqlite3_column_blob(st, i);
    int n = sqlite3_column_bytes(st, i);
    ASSERT(p && n >= 5 && bson_init_static(out, p, (size_t)n));
}

static void col_oid(sqlite3_stmt *st, int i, bson_oid_t *out) {
    const uint8_t *p = sqlite3_column_blob(st, i);
    ASSERT(p && sqlite3_column_bytes(st, i) == 12);
    bson_oid_init_from_data(out, p);
}

static const char *col_text(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? (const char *)t : "";
}

/* memcmp order then length: how SQLite compares BLOBs. */
static int blob_cmp(const void *a, size_t alen, const void *b, size_t blen) {
    int r = memcmp(a, b, alen < blen ? alen : blen);
    if (r) return r;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

static int buf_cmp2(const buf_t *a, const buf_t *b) {
    return blob_cmp(a->data ? a->data : (const uint8_t *)"", a->len,
                    b->data ? b->data : (const uint8_t *)"", b->len);
}

static void copy_str(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

static void append_ts(bson_t *b, const char *key, cat_ts_t ts) {
    bson_append_timestamp(b, key, -1, ts.t, ts.i);
}

static void append_uuid(bson_t *b, const char *key, const uint8_t uuid[16]) {
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
    "  tags BLOB NOT NULL);"
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
    "CREATE INDEX IF NOT EXISTS chunks_shard ON chunks(shard);"
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

/* ---- pure helpers ------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

void cat_hashed_split_points(int n, int64_t *out) {
    /* MongoDB's calculateHashedSplitPoints: points symmetric around 0, interval =
     * (INT64_MAX / n) * 2; even n includes 0 itself, odd n starts half an interval out. */
    ASSERT(n >= 1);
    if (n == 1) return;  /* one chunk, no point (and (INT64_MAX / 1) * 2 would overflow) */
    const int64_t interval = (INT64_MAX / n) * 2;
    int k = 0;
    int64_t cur = 0;
    if (n % 2 == 0) {
        out[k++] = 0;
        cur = interval;
    } else {
        cur = interval / 2;
    }
    for (int i = 0; i < (n - 1) / 2; i++) {
        out[k++] = cur;
        out[k++] = -cur;
        cur += interval;
    }
    ASSERT(k == n - 1);
    qsort(out, (size_t)k, sizeof *out, cmp_i64);
    for (int i = 1; i < k; i++) ASSERT(out[i - 1] < out[i]);
}

void cat_hashed_initial_bounds(const keys_pattern_t *p, int n, bson_t *bounds) {
    int64_t *pts = malloc(sizeof(int64_t) * (size_t)(n > 1 ? n - 1 : 1));
    ASSERT(pts && p->hashed_field == 0 && n >= 1);
    cat_hashed_split_points(n, pts);
    for (int i = 0; i <= n; i++) bson_init(&bounds[i]);
    keys_global_min(p, &bounds[0]);
    keys_global_max(p, &bounds[n]);
    for (int i = 1; i < n; i++) {
        BSON_APPEND_INT64(&bounds[i], p->fields[0], pts[i - 1]);
        for (int f = 1; f < p->nfields; f++) bson_append_minkey(&bounds[i], p->fields[f], -1);
    }
    free(pts);
}

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
    copy_str(c->server, sizeof c->server, "configsvr");
    rc = sqlite3_open_v2(path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                         NULL);
    if (rc != SQLITE_OK) {
        rc = err_from_sqlite(err, rc, "open catalog", c->db);
        goto out;
    }
    sqlite3_busy_timeout(c->db, 5000);
    rc = db_exec(c, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=OFF;", err);
    if (rc) goto out;
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc) goto out;
    rc = db_exec(c, SCHEMA, err);
    if (rc == 0) rc = db_prep(c, "SELECT cluster_id, ts_t, ts_i FROM version WHERE id = 1", &st, err);
    if (rc == 0) {
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW) {
            col_oid(st, 0, &c->cluster_id);
            c->ts_last.t = (uint32_t)sqlite3_column_int64(st, 1);
            c->ts_last.i = (uint32_t)sqlite3_column_int64(st, 2);
        } else if (s == SQLITE_DONE) {
            /* First open: a new cluster (MongoDB's config.version clusterId). */
            sqlite3_finalize(st);
            st = NULL;
            bson_oid_init(&c->cluster_id, NULL);
            rc = db_prep(c, "INSERT INTO version (id, cluster_id, ts_t, ts_i) VALUES (1, ?, 0, 0)",
                         &st, err);
            if (rc == 0) {
                sqlite3_bind_blob(st, 1, c->cluster_id.bytes, 12, SQLITE_TRANSIENT);
                rc = db_done(c, st, "insert version", err);
            }
        } else {
            rc = err_from_sqlite(err, s, "read version", c->db);
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    if (rc == 0) rc = db_exec(c, "COMMIT", err);
    if (rc) db_exec(c, "ROLLBACK", NULL);
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
    if (c->db) sqlite3_close(c->db);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void cat_set_server(cat_t *c, const char *server) {
    pthread_mutex_lock(&c->mu);
    copy_str(c->server, sizeof c->server, server);
    pthread_mutex_unlock(&c->mu);
}

void cat_cluster_id(const cat_t *c, bson_oid_t *out) {
    bson_oid_copy(&c->cluster_id, out);
}

/* Next cluster Timestamp: (now seconds, 1), or one increment past the last one when the
 * clock has not moved on (or went back). Persisted in the caller's transaction. */
static int next_ts_locked(cat_t *c, cat_ts_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    uint32_t now_s = (uint32_t)(time_now_ms() / 1000);
    cat_ts_t ts;
    int rc;
    if (now_s > c->ts_last.t) {
        ts.t = now_s;
        ts.i = 1;
    } else {
        ts.t = c->ts_last.t;
        ts.i = c->ts_last.i + 1;
        if (ts.i == 0) {  /* 2^32 events in one second: move to the next second */
            ts.t++;
            ts.i = 1;
        }
    }
    rc = db_prep(c, "UPDATE version SET ts_t = ?, ts_i = ? WHERE id = 1", &st, err);
    if (rc == 0) {
        sqlite3_bind_int64(st, 1, ts.t);
        sqlite3_bind_int64(st, 2, ts.i);
        rc = db_done(c, st, "persist cluster time", err);
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
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = next_ts_locked(c, out, err);
        if (rc == 0) rc = db_exec(c, "COMMIT", err);
        if (rc) {
            db_exec(c, "ROLLBACK", NULL);
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
static int log_change_locked(cat_t *c, const char *table, const char *what, const char *ns,
                             const bson_t *details, ms_error_t *err) {
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
    snprintf(id, sizeof id, "%s-%s.%03lldZ-%s", c->server, iso, now % 1000, hex);
    BSON_APPEND_UTF8(&doc, "_id", id);
    BSON_APPEND_UTF8(&doc, "server", c->server);
    BSON_APPEND_UTF8(&doc, "shard", "config");
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
    rc = db_prep(c, sql, &st, err);
    if (rc) goto out;
    bind_text(st, 1, what);
    bind_text(st, 2, ns ? ns : "");
    bind_bson(st, 3, &doc);
    rc = db_done(c, st, "insert changelog", err);
    if (rc) goto out;
    sqlite3_finalize(st);
    st = NULL;
    snprintf(sql, sizeof sql, "DELETE FROM %s WHERE seq <= ?", table);
    rc = db_prep(c, sql, &st, err);
    if (rc) goto out;
    sqlite3_bind_int64(st, 1, sqlite3_last_insert_rowid(c->db) -
                                  (strcmp(table, "actionlog") == 0 ? CAT_ACTIONLOG_ROWS_MAX
                                                                   : CAT_CHANGELOG_ROWS_MAX));
    rc = db_done(c, st, "trim changelog", err);
out:
    sqlite3_finalize(st);
    bson_destroy(&doc);
    return rc;
}

int cat_changelog(cat_t *c, const char *what, const char *ns, const bson_t *details,
                  ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = log_change_locked(c, "changelog", what, ns, details, err);
        if (rc == 0) rc = db_exec(c, "COMMIT", err);
        if (rc) db_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- generic count helper ---------------------------------------------------------- */

/* Runs a `SELECT count(*) ...` with up to two text parameters. */
static int count_locked(cat_t *c, const char *sql, const char *p1, const char *p2,
                        int64_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = db_prep(c, sql, &st, err);
    if (rc) return rc;
    if (p1) bind_text(st, 1, p1);
    if (p2) bind_text(st, 2, p2);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) *out = sqlite3_column_int64(st, 0);
    else rc = err_from_sqlite(err, s, "count", c->db);
    sqlite3_finalize(st);
    return rc;
}

/* ---- shards ------------------------------------------------------------------------ */

static int shard_check_locked(cat_t *c, const char *name, const char *host, char *name_out,
                              size_t cap, bool *already, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc, s;
    *already = false;
    /* The host already a shard? Identical request → idempotent (MongoDB), else refused. */
    rc = db_prep(c, "SELECT id FROM shards WHERE host = ?", &st, err);
    if (rc) return rc;
    bind_text(st, 1, host);
    s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        const char *existing = col_text(st, 0);
        if (!name || strcmp(name, existing) == 0) {
            copy_str(name_out, cap, existing);
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
        rc = count_locked(c, "SELECT count(*) FROM shards WHERE id = ?", name, NULL, &n, err);
        if (rc) return rc;
        if (n > 0)
            return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                           "a shard named '%s' already exists with another host", name);
        copy_str(name_out, cap, name);
        return 0;
    }
    /* Default names shard0, shard1, ...: one past the highest number in use, so a removed
     * shard's name is never reused for a different host. */
    long long next = 0;
    rc = db_prep(c, "SELECT id FROM shards WHERE id GLOB 'shard[0-9]*'", &st, err);
    if (rc) return rc;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = col_text(st, 0);
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

int cat_shard_insert(cat_t *c, const char *name, const char *host, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    char check[CAT_SHARD_NAME_BYTES_MAX];
    bool already = false;
    bson_t tags = BSON_INITIALIZER, details = BSON_INITIALIZER;
    cat_ts_t ts;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc) goto out;
    rc = shard_check_locked(c, name, host, check, sizeof check, &already, err);
    if (rc == 0 && already) rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "shard '%s' already added", name);
    if (rc == 0) rc = next_ts_locked(c, &ts, err);
    if (rc == 0)
        rc = db_prep(c, "INSERT INTO shards (id, host, draining, state, topo_t, topo_i, tags)"
                        " VALUES (?, ?, 0, 1, ?, ?, ?)", &st, err);
    if (rc == 0) {
        bind_text(st, 1, name);
        bind_text(st, 2, host);
        sqlite3_bind_int64(st, 3, ts.t);
        sqlite3_bind_int64(st, 4, ts.i);
        bind_bson(st, 5, &tags);
        rc = db_done(c, st, "insert shard", err);
    }
    if (rc == 0) {
        BSON_APPEND_UTF8(&details, "name", name);
        BSON_APPEND_UTF8(&details, "host", host);
        rc = log_change_locked(c, "changelog", "addShard", "", &details, err);
    }
    if (rc == 0) rc = db_exec(c, "COMMIT", err);
    if (rc) db_exec(c, "ROLLBACK", NULL);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    bson_destroy(&tags);
    bson_destroy(&details);
    return rc;
}

static int shard_host_locked(cat_t *c, const char *name, char *host_out, size_t cap,
                             bool *draining, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = db_prep(c, "SELECT host, draining FROM shards WHERE id = ?", &st, err);
    if (rc) return rc;
    bind_text(st, 1, name);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        if (host_out) copy_str(host_out, cap, col_text(st, 0));
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
    rc = shard_host_locked(c, name, host_out, host_cap, draining, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* config.shards document from a row (id, host, draining, state, topo_t, topo_i, tags). */
static void shard_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_t tags;
    BSON_APPEND_UTF8(doc, "_id", col_text(st, 0));
    BSON_APPEND_UTF8(doc, "host", col_text(st, 1));
    BSON_APPEND_INT32(doc, "state", sqlite3_column_int(st, 3));
    if (sqlite3_column_int(st, 2)) BSON_APPEND_BOOL(doc, "draining", true);
    col_view(st, 6, &tags);
    BSON_APPEND_ARRAY(doc, "tags", &tags);
    append_ts(doc, "topologyTime",
              (cat_ts_t){(uint32_t)sqlite3_column_int64(st, 4), (uint32_t)sqlite3_column_int64(st, 5)});
}

#define SHARD_COLS "id, host, draining, state, topo_t, topo_i, tags"

int cat_shards_append(cat_t *c, bson_t *dst, const char *key, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    bson_t arr;
    int rc, s, i = 0;
    pthread_mutex_lock(&c->mu);
    rc = db_prep(c, "SELECT " SHARD_COLS " FROM shards ORDER BY id", &st, err);
    if (rc) goto out;
    bson_append_array_begin(dst, key, -1, &arr);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        char idx[16];
        bson_t doc;
        snprintf(idx, sizeof idx, "%d", i++);
        bson_append_document_begin(&arr, idx, -1, &doc);
        shard_doc(st, &doc);
        bson_append_document_end(&arr, &doc);
    }
    bson_append_array_end(dst, &arr);
    if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "list shards", c->db);
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void cat_strv_free(char **v, int n) {
    if (!v) return;
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* Collects column 0 of a query with up to one text parameter into a string vector. */
static int strv_locked(cat_t *c, const char *sql, const char *p1, char ***out, int *n_out,
                       ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    char **v = NULL;
    int n = 0, cap = 0, rc, s;
    rc = db_prep(c, sql, &st, err);
    if (rc) return rc;
    if (p1) bind_text(st, 1, p1);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            v = xrealloc(v, sizeof *v * (size_t)cap);
        }
        v[n] = strdup(col_text(st, 0));
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

int cat_shard_names(cat_t *c, bool include_draining, char ***names_out, int *n_out,
                    ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = strv_locked(c, include_draining ? "SELECT id FROM shards ORDER BY id"
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
    int rc = strv_locked(c, "SELECT name FROM databases WHERE primary_shard = ? ORDER BY name", name,
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
    int rc = shard_host_locked(c, name, NULL, 0, &draining, err);
    if (rc) goto out;
    rc = count_locked(c, "SELECT count(*) FROM shards", NULL, NULL, &nshards, err);
    if (rc) goto out;
    if (!draining) {
        /* MongoDB's preconditions: never the last shard, one draining shard at a time. */
        if (nshards <= 1) {
            rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                         "Operation not allowed because it would remove the last shard");
            goto out;
        }
        rc = count_locked(c, "SELECT count(*) FROM shards WHERE draining = 1 AND id != ?", name,
                          NULL, &ndraining_other, err);
        if (rc) goto out;
        if (ndraining_other > 0) {
            rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                         "Can't have more than one draining shard at a time");
            goto out;
        }
        rc = db_prep(c, "UPDATE shards SET draining = 1 WHERE id = ?", &st, err);
        if (rc) goto out;
        bind_text(st, 1, name);
        rc = db_done(c, st, "mark draining", err);
        if (rc) goto out;
        BSON_APPEND_UTF8(&details, "shard", name);
        rc = log_change_locked(c, "changelog", "removeShard.start", "", &details, err);
        if (rc) goto out;
        BSON_APPEND_UTF8(reply, "msg", "draining started successfully");
        BSON_APPEND_UTF8(reply, "state", "started");
        BSON_APPEND_UTF8(reply, "shard", name);
        BSON_APPEND_UTF8(reply, "note",
                         "you need to drop or movePrimary these databases; this config server "
                         "has no balancer yet, so chunks are not moved off a draining shard "
                         "automatically (move or drop them)");
        rc = dbs_to_move_locked(c, name, reply, err);
        goto out;
    }
    rc = count_locked(c, "SELECT count(*) FROM chunks WHERE shard = ?", name, NULL, &nchunks, err);
    if (rc == 0)
        rc = count_locked(c, "SELECT count(*) FROM chunks WHERE shard = ? AND jumbo = 1", name, NULL,
                          &njumbo, err);
    if (rc == 0)
        rc = count_locked(c, "SELECT count(*) FROM databases WHERE primary_shard = ?", name, NULL,
                          &ndbs, err);
    if (rc) goto out;
    if (nchunks == 0 && ndbs == 0) {
        rc = db_prep(c, "DELETE FROM shards WHERE id = ?", &st, err);
        if (rc) goto out;
        bind_text(st, 1, name);
        rc = db_done(c, st, "delete shard", err);
        if (rc) goto out;
        BSON_APPEND_UTF8(&details, "shard", name);
        rc = log_change_locked(c, "changelog", "removeShard", "", &details, err);
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
    BSON_APPEND_UTF8(reply, "note",
                     "you need to drop or movePrimary these databases; chunks are not moved off "
                     "a draining shard automatically until the balancer exists (move or drop them)");
    rc = dbs_to_move_locked(c, name, reply, err);
out:
    sqlite3_finalize(st);
    bson_destroy(&details);
    return rc;
}

int cat_shard_remove_step(cat_t *c, const char *name, bson_t *reply, ms_error_t *err) {
    int rc;
    bson_t tmp = BSON_INITIALIZER;
    pthread_mutex_lock(&c->mu);
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = remove_step_locked(c, name, &tmp, err);
        if (rc == 0) rc = db_exec(c, "COMMIT", err);
        if (rc) db_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) bson_concat(reply, &tmp);
    bson_destroy(&tmp);
    return rc;
}

/* ---- databases --------------------------------------------------------------------- */

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
static void db_version_append(sqlite3_stmt *st, bson_t *out) {
    bson_t v;
    uint8_t uuid[16];
    const void *p = sqlite3_column_blob(st, 1);
    ASSERT(p && sqlite3_column_bytes(st, 1) == 16);
    memcpy(uuid, p, 16);
    BSON_APPEND_UTF8(out, "primary", col_text(st, 0));
    BSON_APPEND_DOCUMENT_BEGIN(out, "version", &v);
    append_uuid(&v, "uuid", uuid);
    append_ts(&v, "timestamp",
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
    rc = db_prep(c, "SELECT primary_shard, uuid, ts_t, ts_i, last_mod FROM databases WHERE name = ?",
                 &st, err);
    if (rc) return rc;
    bind_text(st, 1, db);
    s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        if (primary && strcmp(primary, col_text(st, 0)) != 0)
            rc = err_set(err, MS_ERR_NAMESPACE_EXISTS,
                         "database %s already exists with primary shard %s, not %s", db,
                         col_text(st, 0), primary);
        else if (out)
            db_version_append(st, out);
        sqlite3_finalize(st);
        return rc;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (s != SQLITE_DONE) return err_from_sqlite(err, s, "find database", c->db);

    if (primary) {
        bool draining = false;
        rc = shard_host_locked(c, primary, NULL, 0, &draining, err);
        if (rc) return rc;
        if (draining)
            return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                           "shard %s is draining and cannot become a primary shard", primary);
        copy_str(chosen, sizeof chosen, primary);
    } else {
        /* MongoDB picks the shard with the least data; we pick the one that is primary
         * for the fewest databases (ties by name) — what we can know without asking. */
        rc = db_prep(c, "SELECT s.id FROM shards s WHERE s.draining = 0 ORDER BY"
                        " (SELECT count(*) FROM databases d WHERE d.primary_shard = s.id), s.id"
                        " LIMIT 1", &st, err);
        if (rc) return rc;
        s = sqlite3_step(st);
        if (s == SQLITE_ROW) copy_str(chosen, sizeof chosen, col_text(st, 0));
        sqlite3_finalize(st);
        st = NULL;
        if (s == SQLITE_DONE) return err_set(err, MS_ERR_SHARD_NOT_FOUND, "No shards found");
        if (s != SQLITE_ROW) return err_from_sqlite(err, s, "pick primary", c->db);
    }
    rc = next_ts_locked(c, &ts, err);
    if (rc) return rc;
    cat_uuid_new(uuid);
    rc = db_prep(c, "INSERT INTO databases (name, primary_shard, uuid, ts_t, ts_i, last_mod)"
                    " VALUES (?, ?, ?, ?, ?, 1)", &st, err);
    if (rc) return rc;
    bind_text(st, 1, db);
    bind_text(st, 2, chosen);
    sqlite3_bind_blob(st, 3, uuid, 16, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, ts.t);
    sqlite3_bind_int64(st, 5, ts.i);
    rc = db_done(c, st, "insert database", err);
    sqlite3_finalize(st);
    st = NULL;
    if (rc) return rc;
    if (out) {
        bson_t v;
        BSON_APPEND_UTF8(out, "primary", chosen);
        BSON_APPEND_DOCUMENT_BEGIN(out, "version", &v);
        append_uuid(&v, "uuid", uuid);
        append_ts(&v, "timestamp", ts);
        BSON_APPEND_INT32(&v, "lastMod", 1);
        bson_append_document_end(out, &v);
    }
    *created = true;
    log_info("database created db=%s primary=%s", db, chosen);
    return 0;
}

int cat_db_ensure(cat_t *c, const char *db, const char *primary, bool *created, bson_t *out,
                  ms_error_t *err) {
    int rc = db_name_check(db, err);
    bson_t tmp = BSON_INITIALIZER;
    bool made = false;
    if (rc) return rc;
    pthread_mutex_lock(&c->mu);
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = db_ensure_locked(c, db, primary, &made, &tmp, err);
        if (rc == 0) rc = db_exec(c, "COMMIT", err);
        if (rc) db_exec(c, "ROLLBACK", NULL);
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
    rc = db_prep(c, "SELECT primary_shard FROM databases WHERE name = ?", &st, err);
    if (rc == 0) {
        bind_text(st, 1, db);
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW) copy_str(primary_out, cap, col_text(st, 0));
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
    rc = strv_locked(c, "SELECT ns FROM collections WHERE db = ? ORDER BY ns", db, ns_out, n_out, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Deletes a collection's rows (collection, chunks, zones). */
static int coll_delete_locked(cat_t *c, const char *ns, ms_error_t *err) {
    static const char *const sqls[] = {
        "DELETE FROM chunks WHERE ns = ?",
        "DELETE FROM tags WHERE ns = ?",
        "DELETE FROM collections WHERE ns = ?",
    };
    for (size_t i = 0; i < sizeof sqls / sizeof sqls[0]; i++) {
        sqlite3_stmt *st = NULL;
        int rc = db_prep(c, sqls[i], &st, err);
        if (rc) return rc;
        bind_text(st, 1, ns);
        rc = db_done(c, st, "drop collection rows", err);
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
    rc = count_locked(c, "SELECT count(*) FROM databases WHERE name = ?", db, NULL, &n, err);
    if (rc) goto out;
    *existed = n > 0;
    rc = strv_locked(c, "SELECT ns FROM collections WHERE db = ?", db, &colls, &ncolls, err);
    if (rc) goto out;
    for (int i = 0; i < ncolls && rc == 0; i++) rc = coll_delete_locked(c, colls[i], err);
    if (rc) goto out;
    rc = db_prep(c, "DELETE FROM databases WHERE name = ?", &st, err);
    if (rc) goto out;
    bind_text(st, 1, db);
    rc = db_done(c, st, "delete database", err);
    if (rc) goto out;
    if (*existed || ncolls > 0) {
        BSON_APPEND_INT32(&details, "collections", ncolls);
        rc = log_change_locked(c, "changelog", "dropDatabase", db, &details, err);
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
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = db_drop_locked(c, db, &ex, err);
        if (rc == 0) rc = db_exec(c, "COMMIT", err);
        if (rc) db_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0 && existed) *existed = ex;
    return rc;
}

/* ---- collections ------------------------------------------------------------------- */

#define COLL_COLS                                                                  \
    "ns, key, unique_key, epoch, ts_t, ts_i, uuid, created_ms, no_balance,"       \
    " max_chunk_size_bytes, allow_migrations, enable_auto_merge, defragment, defrag_phase"

static void coll_from_row(sqlite3_stmt *st, cat_coll_t *out) {
    bson_t key;
    memset(out, 0, sizeof *out);
    copy_str(out->ns, sizeof out->ns, col_text(st, 0));
    col_view(st, 1, &key);
    bson_copy_to(&key, &out->key);
    out->unique = sqlite3_column_int(st, 2) != 0;
    col_oid(st, 3, &out->epoch);
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
    copy_str(out->defrag_phase, sizeof out->defrag_phase, col_text(st, 13));
}

/* config.collections document from a row (COLL_COLS order). */
static void coll_doc(sqlite3_stmt *st, bson_t *doc) {
    cat_coll_t cc;
    coll_from_row(st, &cc);
    BSON_APPEND_UTF8(doc, "_id", cc.ns);
    BSON_APPEND_OID(doc, "lastmodEpoch", &cc.epoch);
    BSON_APPEND_DATE_TIME(doc, "lastmod", cc.created_ms);
    append_ts(doc, "timestamp", cc.ts);
    append_uuid(doc, "uuid", cc.uuid);
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

void cat_coll_free(cat_coll_t *coll) {
    if (!coll) return;
    bson_destroy(&coll->key);
    memset(&coll->key, 0, sizeof coll->key);
}

static int coll_get_locked(cat_t *c, const char *ns, cat_coll_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = db_prep(c, "SELECT " COLL_COLS " FROM collections WHERE ns = ?", &st, err);
    if (rc) return rc;
    bind_text(st, 1, ns);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) coll_from_row(st, out);
    else if (s == SQLITE_DONE)
        rc = err_set(err, MS_ERR_NAMESPACE_NOT_SHARDED, "collection %s is not sharded", ns);
    else rc = err_from_sqlite(err, s, "find collection", c->db);
    sqlite3_finalize(st);
    return rc;
}

int cat_coll_get(cat_t *c, const char *ns, cat_coll_t *out, ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = coll_get_locked(c, ns, out, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Loads the collection and parses its key pattern (both released by the caller:
 * cat_coll_free, keys_pattern_free). */
static int coll_pattern_locked(cat_t *c, const char *ns, cat_coll_t *coll, keys_pattern_t *p,
                               ms_error_t *err) {
    int rc = coll_get_locked(c, ns, coll, err);
    if (rc) return rc;
    memset(p, 0, sizeof *p);
    rc = keys_pattern_parse(&coll->key, p, err);
    ASSERT(rc == 0);  /* we only store patterns that parsed */
    return 0;
}

/* Version bounds of a collection: max lastmod. (0,0) when it has no chunk (never, once
 * created: the tiling invariant needs at least one). */
static int coll_version_locked(cat_t *c, const char *ns, const char *shard, uint32_t *major,
                               uint32_t *minor, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = db_prep(c, shard ? "SELECT major, minor FROM chunks WHERE ns = ? AND shard = ?"
                                " ORDER BY major DESC, minor DESC LIMIT 1"
                              : "SELECT major, minor FROM chunks WHERE ns = ?"
                                " ORDER BY major DESC, minor DESC LIMIT 1",
                     &st, err);
    if (rc) return rc;
    bind_text(st, 1, ns);
    if (shard) bind_text(st, 2, shard);
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
    rc = coll_get_locked(c, ns, &coll, err);
    if (rc == 0) {
        bson_oid_copy(&coll.epoch, &out->epoch);
        out->ts = coll.ts;
        cat_coll_free(&coll);
        rc = coll_version_locked(c, ns, shard, &out->major, &out->minor, err);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* The tiling invariant of ns: ordered by min, the first chunk starts at the global min,
 * each starts where the previous ended, min < max, and the last ends at the global max. */
static int tiling_check_locked(cat_t *c, const char *ns, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    bson_t gmin_doc, gmax_doc;
    buf_t gmin = {0}, gmax = {0}, prev = {0};
    sqlite3_stmt *st = NULL;
    int64_t n = 0;
    int rc, s;
    rc = coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) return rc;
    bson_init(&gmin_doc);
    bson_init(&gmax_doc);
    keys_global_min(&p, &gmin_doc);
    keys_global_max(&p, &gmax_doc);
    rc = keys_encode_bound(&p, &gmin_doc, &gmin, err);
    if (rc == 0) rc = keys_encode_bound(&p, &gmax_doc, &gmax, err);
    if (rc) goto out;
    buf_put(&prev, gmin.data, gmin.len);
    rc = db_prep(c, "SELECT min_enc, max_enc FROM chunks WHERE ns = ? ORDER BY min_enc", &st, err);
    if (rc) goto out;
    bind_text(st, 1, ns);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const void *mn = sqlite3_column_blob(st, 0), *mx = sqlite3_column_blob(st, 1);
        size_t mnl = (size_t)sqlite3_column_bytes(st, 0), mxl = (size_t)sqlite3_column_bytes(st, 1);
        n++;
        int gap = blob_cmp(mn, mnl, prev.data, prev.len);
        if (gap != 0) {
            rc = err_set(err, MS_ERR_INTERNAL, "chunks of %s %s before chunk #%lld", ns,
                         gap > 0 ? "leave a gap" : "overlap", (long long)n);
            goto out;
        }
        if (blob_cmp(mn, mnl, mx, mxl) >= 0) {
            rc = err_set(err, MS_ERR_INTERNAL, "chunk #%lld of %s has min >= max", (long long)n, ns);
            goto out;
        }
        buf_reset(&prev);
        buf_put(&prev, mx, mxl);
    }
    if (s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "tiling scan", c->db);
        goto out;
    }
    if (n == 0) rc = err_set(err, MS_ERR_INTERNAL, "collection %s has no chunks", ns);
    else if (buf_cmp2(&prev, &gmax) != 0)
        rc = err_set(err, MS_ERR_INTERNAL, "chunks of %s do not reach MaxKey", ns);
out:
    sqlite3_finalize(st);
    buf_free(&gmin);
    buf_free(&gmax);
    buf_free(&prev);
    bson_destroy(&gmin_doc);
    bson_destroy(&gmax_doc);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
    return rc;
}

/* Our invariant, checked inside every transaction that changes chunks, before COMMIT. */
static void tiling_assert_locked(cat_t *c, const char *ns) {
    ms_error_t e = {0};
    int rc = tiling_check_locked(c, ns, &e);
    if (rc) log_error("tiling invariant broken ns=%s err=\"%s\"", ns, e.msg);
    ASSERT(rc == 0);
}

int cat_verify_tiling(cat_t *c, const char *ns, ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = tiling_check_locked(c, ns, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* History array [{validAfter, shard}] (newest first, as MongoDB keeps it). */
static void history_one(bson_t *arr_out, cat_ts_t valid_after, const char *shard) {
    bson_t e;
    bson_init(arr_out);
    BSON_APPEND_DOCUMENT_BEGIN(arr_out, "0", &e);
    append_ts(&e, "validAfter", valid_after);
    BSON_APPEND_UTF8(&e, "shard", shard);
    bson_append_document_end(arr_out, &e);
}

static int chunk_insert_locked(cat_t *c, const char *ns, const uint8_t uuid[16],
                               const bson_oid_t *id, const bson_t *min, const bson_t *max,
                               const buf_t *min_enc, const buf_t *max_enc, const char *shard,
                               uint32_t major, uint32_t minor, cat_ts_t since,
                               const bson_t *history, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = db_prep(c, "INSERT INTO chunks (id, ns, uuid, min, max, min_enc, max_enc, shard,"
                        " major, minor, jumbo, est_size, since_t, since_i, history)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?, ?)", &st, err);
    if (rc) return rc;
    sqlite3_bind_blob(st, 1, id->bytes, 12, SQLITE_TRANSIENT);
    bind_text(st, 2, ns);
    sqlite3_bind_blob(st, 3, uuid, 16, SQLITE_TRANSIENT);
    bind_bson(st, 4, min);
    bind_bson(st, 5, max);
    bind_buf(st, 6, min_enc);
    bind_buf(st, 7, max_enc);
    bind_text(st, 8, shard);
    sqlite3_bind_int64(st, 9, major);
    sqlite3_bind_int64(st, 10, minor);
    sqlite3_bind_int64(st, 11, since.t);
    sqlite3_bind_int64(st, 12, since.i);
    bind_bson(st, 13, history);
    rc = db_done(c, st, "insert chunk", err);
    sqlite3_finalize(st);
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
    rc = count_locked(c, "SELECT count(*) FROM collections WHERE ns = ?", coll->ns, NULL, &exists, err);
    if (rc) goto out;
    if (exists) {
        rc = err_set(err, MS_ERR_NAMESPACE_EXISTS, "collection %s is already sharded", coll->ns);
        goto out;
    }
    snprintf(db, sizeof db, "%.*s", dot ? (int)(dot - coll->ns) : (int)strlen(coll->ns), coll->ns);
    rc = db_prep(c, "INSERT INTO collections (ns, db, key, unique_key, epoch, ts_t, ts_i, uuid,"
                    " created_ms, no_balance, max_chunk_size_bytes, allow_migrations,"
                    " enable_auto_merge, defragment, defrag_phase)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, 1, NULL, 0, NULL)", &st, err);
    if (rc) goto out;
    bind_text(st, 1, coll->ns);
    bind_text(st, 2, db);
    bind_bson(st, 3, &coll->key);
    sqlite3_bind_int(st, 4, coll->unique ? 1 : 0);
    sqlite3_bind_blob(st, 5, coll->epoch.bytes, 12, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 6, coll->ts.t);
    sqlite3_bind_int64(st, 7, coll->ts.i);
    sqlite3_bind_blob(st, 8, coll->uuid, 16, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 9, coll->created_ms);
    rc = db_done(c, st, "insert collection", err);
    if (rc) goto out;
    /* shardCollection versions (notes §2.2): (1,0), (1,1), ... one per chunk in key order. */
    for (int i = 0; i < n && rc == 0; i++) {
        bson_oid_t id;
        bson_t hist;
        bson_oid_init(&id, NULL);
        history_one(&hist, coll->ts, plan[i].shard);
        rc = chunk_insert_locked(c, coll->ns, coll->uuid, &id, plan[i].min, plan[i].max,
                                 &encs[2 * i], &encs[2 * i + 1], plan[i].shard, 1, (uint32_t)i,
                                 coll->ts, &hist, err);
        bson_destroy(&hist);
    }
    if (rc) goto out;
    tiling_assert_locked(c, coll->ns);
    BSON_APPEND_INT32(&details, "numChunks", n);
    bson_append_timestamp(&details, "version", -1, 1, (uint32_t)(n - 1));
    rc = log_change_locked(c, "changelog", "shardCollection.end", coll->ns, &details, err);
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
        if (buf_cmp2(&encs[2 * i], &encs[2 * i + 1]) >= 0 ||
            (i == 0 && buf_cmp2(&encs[0], &gmin) != 0) ||
            (i > 0 && buf_cmp2(&encs[2 * i], &encs[2 * i - 1]) != 0) ||
            (i == n - 1 && buf_cmp2(&encs[2 * i + 1], &gmax) != 0)) {
            rc = err_set(err, MS_ERR_BAD_VALUE,
                         "initial chunks of %s do not tile the key space at chunk %d "
                         "(split points must be strictly increasing, inside MinKey..MaxKey)",
                         coll->ns, i);
            goto out;
        }
    }
    pthread_mutex_lock(&c->mu);
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = coll_create_locked(c, coll, &p, plan, n, encs, err);
        if (rc == 0) rc = db_exec(c, "COMMIT", err);
        if (rc) db_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) log_info("collection sharded ns=%s chunks=%d", coll->ns, n);
out:
    if (encs)
        for (int i = 0; i < 2 * n; i++) buf_free(&encs[i]);
    free(encs);
    buf_free(&gmin);
    buf_free(&gmax);
    bson_destroy(&gmin_doc);
    bson_destroy(&gmax_doc);
    keys_pattern_free(&p);
    return rc;
}

static int coll_drop_locked(cat_t *c, const char *ns, bool *existed, ms_error_t *err) {
    int64_t n = 0;
    int rc = count_locked(c, "SELECT count(*) FROM collections WHERE ns = ?", ns, NULL, &n, err);
    if (rc) return rc;
    *existed = n > 0;
    if (!*existed) return 0;
    rc = coll_delete_locked(c, ns, err);
    if (rc) return rc;
    return log_change_locked(c, "changelog", "dropCollection", ns, NULL, err);
}

int cat_coll_drop(cat_t *c, const char *ns, bool *existed, ms_error_t *err) {
    int rc;
    bool ex = false;
    pthread_mutex_lock(&c->mu);
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = coll_drop_locked(c, ns, &ex, err);
        if (rc == 0) rc = db_exec(c, "COMMIT", err);
        if (rc) db_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0 && existed) *existed = ex;
    return rc;
}

/* ---- chunks ------------------------------------------------------------------------ */

#define CHUNK_COLS                                                                       \
    "id, min, max, shard, major, minor, jumbo, est_size, since_t, since_i, history, uuid," \
    " min_enc, max_enc"
enum { CC_ID, CC_MIN, CC_MAX, CC_SHARD, CC_MAJOR, CC_MINOR, CC_JUMBO, CC_EST, CC_SINCE_T,
       CC_SINCE_I, CC_HISTORY, CC_UUID, CC_MIN_ENC, CC_MAX_ENC };

/* config.chunks document from a row (CHUNK_COLS order), notes §9. */
static void chunk_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_oid_t id;
    bson_t b;
    uint8_t uuid[16];
    col_oid(st, CC_ID, &id);
    BSON_APPEND_OID(doc, "_id", &id);
    ASSERT(sqlite3_column_bytes(st, CC_UUID) == 16);
    memcpy(uuid, sqlite3_column_blob(st, CC_UUID), 16);
    append_uuid(doc, "uuid", uuid);
    col_view(st, CC_MIN, &b);
    BSON_APPEND_DOCUMENT(doc, "min", &b);
    col_view(st, CC_MAX, &b);
    BSON_APPEND_DOCUMENT(doc, "max", &b);
    BSON_APPEND_UTF8(doc, "shard", col_text(st, CC_SHARD));
    bson_append_timestamp(doc, "lastmod", -1, (uint32_t)sqlite3_column_int64(st, CC_MAJOR),
                          (uint32_t)sqlite3_column_int64(st, CC_MINOR));
    bson_append_timestamp(doc, "onCurrentShardSince", -1,
                          (uint32_t)sqlite3_column_int64(st, CC_SINCE_T),
                          (uint32_t)sqlite3_column_int64(st, CC_SINCE_I));
    col_view(st, CC_HISTORY, &b);
    BSON_APPEND_ARRAY(doc, "history", &b);
    if (sqlite3_column_int(st, CC_JUMBO)) BSON_APPEND_BOOL(doc, "jumbo", true);
    if (sqlite3_column_type(st, CC_EST) != SQLITE_NULL)
        BSON_APPEND_INT64(doc, "estimatedDataSizeBytes", sqlite3_column_int64(st, CC_EST));
}

/* {min, max, lastmod} of a row, for changelog details. */
static void chunk_brief(sqlite3_stmt *st, bson_t *dst, const char *key) {
    bson_t d, b;
    BSON_APPEND_DOCUMENT_BEGIN(dst, key, &d);
    col_view(st, CC_MIN, &b);
    BSON_APPEND_DOCUMENT(&d, "min", &b);
    col_view(st, CC_MAX, &b);
    BSON_APPEND_DOCUMENT(&d, "max", &b);
    bson_append_timestamp(&d, "lastmod", -1, (uint32_t)sqlite3_column_int64(st, CC_MAJOR),
                          (uint32_t)sqlite3_column_int64(st, CC_MINOR));
    bson_append_document_end(dst, &d);
}

static void brief_of(bson_t *dst, const char *key, const bson_t *min, const bson_t *max,
                     uint32_t major, uint32_t minor) {
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(dst, key, &d);
    BSON_APPEND_DOCUMENT(&d, "min", min);
    BSON_APPEND_DOCUMENT(&d, "max", max);
    bson_append_timestamp(&d, "lastmod", -1, major, minor);
    bson_append_document_end(dst, &d);
}

/* Loads the chunk of ns whose encoded bounds are exactly [min_enc, max_enc): returns the
 * prepared statement positioned on the row (caller finalizes) or BadValue. */
static int chunk_exact_locked(cat_t *c, const char *ns, const buf_t *min_enc,
                              const buf_t *max_enc, const bson_t *min, const bson_t *max,
                              sqlite3_stmt **out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = db_prep(c, "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ? AND min_enc = ?", &st, err);
    if (rc) return rc;
    bind_text(st, 1, ns);
    bind_buf(st, 2, min_enc);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW &&
        blob_cmp(sqlite3_column_blob(st, CC_MAX_ENC), (size_t)sqlite3_column_bytes(st, CC_MAX_ENC),
                 max_enc->data, max_enc->len) == 0) {
        *out = st;
        return 0;
    }
    sqlite3_finalize(st);
    if (s != SQLITE_ROW && s != SQLITE_DONE) return err_from_sqlite(err, s, "find chunk", c->db);
    char *a = bson_as_relaxed_extended_json(min, NULL), *b = bson_as_relaxed_extended_json(max, NULL);
    rc = err_set(err, MS_ERR_BAD_VALUE,
                 "could not meet precondition: no chunk [%s, %s) in %s; the boundaries may be "
                 "stale", a ? a : "?", b ? b : "?", ns);
    bson_free(a);
    bson_free(b);
    return rc;
}

int cat_chunk_exact(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                    char *shard_out, size_t cap, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t mn = {0}, mx = {0};
    sqlite3_stmt *st = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) goto unlock;
    rc = keys_encode_bound(&p, min, &mn, err);
    if (rc == 0) rc = keys_encode_bound(&p, max, &mx, err);
    if (rc == 0) rc = chunk_exact_locked(c, ns, &mn, &mx, min, max, &st, err);
    if (rc == 0) copy_str(shard_out, cap, col_text(st, CC_SHARD));
    sqlite3_finalize(st);
    buf_free(&mn);
    buf_free(&mx);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
unlock:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_chunk_containing(cat_t *c, const char *ns, const bson_t *key, bson_t *min_out,
                         bson_t *max_out, char *shard_out, size_t cap, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t k = {0};
    sqlite3_stmt *st = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) goto unlock;
    rc = keys_encode_bound(&p, key, &k, err);
    if (rc == 0)
        rc = db_prep(c, "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ? AND min_enc <= ?"
                        " ORDER BY min_enc DESC LIMIT 1", &st, err);
    if (rc == 0) {
        bind_text(st, 1, ns);
        bind_buf(st, 2, &k);
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW &&
            blob_cmp(k.data, k.len, sqlite3_column_blob(st, CC_MAX_ENC),
                     (size_t)sqlite3_column_bytes(st, CC_MAX_ENC)) < 0) {
            bson_t b;
            col_view(st, CC_MIN, &b);
            bson_copy_to(&b, min_out);
            col_view(st, CC_MAX, &b);
            bson_copy_to(&b, max_out);
            copy_str(shard_out, cap, col_text(st, CC_SHARD));
        } else if (s == SQLITE_ROW || s == SQLITE_DONE) {
            /* Only MaxKey itself lies outside every chunk. */
            rc = err_set(err, MS_ERR_BAD_VALUE, "no chunk of %s contains that key", ns);
        } else {
            rc = err_from_sqlite(err, s, "find chunk", c->db);
        }
    }
    sqlite3_finalize(st);
    buf_free(&k);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
unlock:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Appends shard and shardVersion {e, t, v} (the given placement) to info. */
static void info_append(bson_t *info, const char *shard, const cat_coll_t *coll, uint32_t major,
                        uint32_t minor) {
    cat_version_t v;
    if (!info) return;
    bson_oid_copy(&coll->epoch, &v.epoch);
    v.ts = coll->ts;
    v.major = major;
    v.minor = minor;
    BSON_APPEND_UTF8(info, "shard", shard);
    cat_version_append(info, "shardVersion", &v);
}

static int split_locked(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                        const bson_t *const *points, int n, bson_t *info, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t mn = {0}, mx = {0};
    buf_t *pts = NULL;
    sqlite3_stmt *st = NULL, *up = NULL;
    bson_t before = BSON_INITIALIZER, hist_copy, details;
    char shard[CAT_SHARD_NAME_BYTES_MAX];
    uint8_t uuid[16];
    cat_ts_t since;
    uint32_t cM = 0, cm = 0;
    bson_oid_t first_id;
    int rc;
    bson_init(&hist_copy);
    rc = coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) {
        bson_destroy(&hist_copy);
        bson_destroy(&before);
        return rc;
    }
    rc = keys_encode_bound(&p, min, &mn, err);
    if (rc == 0) rc = keys_encode_bound(&p, max, &mx, err);
    if (rc) goto out;
    if (n < 1 || n > CAT_SPLIT_POINTS_MAX) {
        rc = err_set(err, MS_ERR_INVALID_OPTIONS, "a split needs 1..%d split keys, got %d",
                     CAT_SPLIT_POINTS_MAX, n);
        goto out;
    }
    rc = chunk_exact_locked(c, ns, &mn, &mx, min, max, &st, err);
    if (rc) goto out;
    /* Split keys: strictly increasing, strictly inside (min, max) (MongoDB's checks). */
    pts = calloc((size_t)n, sizeof *pts);
    ASSERT(pts);
    for (int i = 0; i < n; i++) {
        rc = keys_encode_bound(&p, points[i], &pts[i], err);
        if (rc) {
            err_prefix(err, "split key %d", i);
            goto out;
        }
        if (buf_cmp2(&pts[i], &mn) == 0) {
            rc = err_set(err, MS_ERR_INVALID_OPTIONS,
                         "cannot split on initial or final chunk's key (split key equals the "
                         "chunk's min)");
            goto out;
        }
        if (buf_cmp2(&pts[i], &mn) < 0 || buf_cmp2(&pts[i], &mx) >= 0) {
            rc = err_set(err, MS_ERR_INVALID_OPTIONS, "split key %d is not within the chunk's bounds", i);
            goto out;
        }
        if (i > 0 && buf_cmp2(&pts[i - 1], &pts[i]) >= 0) {
            rc = err_set(err, MS_ERR_INVALID_OPTIONS,
                         "split keys must be specified in strictly increasing order");
            goto out;
        }
    }
    copy_str(shard, sizeof shard, col_text(st, CC_SHARD));
    col_oid(st, CC_ID, &first_id);
    memcpy(uuid, sqlite3_column_blob(st, CC_UUID), 16);
    since.t = (uint32_t)sqlite3_column_int64(st, CC_SINCE_T);
    since.i = (uint32_t)sqlite3_column_int64(st, CC_SINCE_I);
    {
        bson_t h;
        col_view(st, CC_HISTORY, &h);
        bson_destroy(&hist_copy);
        bson_copy_to(&h, &hist_copy);
    }
    chunk_brief(st, &before, "before");
    sqlite3_finalize(st);
    st = NULL;

    rc = coll_version_locked(c, ns, NULL, &cM, &cm, err);
    if (rc) goto out;
    if ((uint64_t)cm + (uint64_t)n + 1 > UINT32_MAX) {
        rc = err_set(err, MS_ERR_OVERFLOW, "minor version of %s would overflow", ns);
        goto out;
    }
    /* Pieces in key order get (collM, collm+1), (collM, collm+2), ...; the first keeps
     * the chunk's _id (notes §2.2). */
    rc = db_prep(c, "UPDATE chunks SET max = ?, max_enc = ?, major = ?, minor = ?, jumbo = 0,"
                    " est_size = NULL WHERE id = ?", &up, err);
    if (rc) goto out;
    bind_bson(up, 1, points[0]);
    bind_buf(up, 2, &pts[0]);
    sqlite3_bind_int64(up, 3, cM);
    sqlite3_bind_int64(up, 4, (int64_t)cm + 1);
    sqlite3_bind_blob(up, 5, first_id.bytes, 12, SQLITE_TRANSIENT);
    rc = db_done(c, up, "split: shrink chunk", err);
    if (rc) goto out;
    for (int i = 0; i < n && rc == 0; i++) {
        bson_oid_t id;
        bson_oid_init(&id, NULL);
        const bson_t *hi = i + 1 < n ? points[i + 1] : max;
        const buf_t *hie = i + 1 < n ? &pts[i + 1] : &mx;
        rc = chunk_insert_locked(c, ns, uuid, &id, points[i], hi, &pts[i], hie, shard, cM,
                                 cm + 2 + (uint32_t)i, since, &hist_copy, err);
    }
    if (rc) goto out;
    ASSERT(cm + 1 + (uint32_t)n > cm);  /* version only grows */
    tiling_assert_locked(c, ns);

    /* Changelog: `split` {before, left, right, owningShard} for two pieces, else one
     * `multi-split` {before, number, of, chunk, owningShard} per piece. */
    for (int i = 0; i <= n && rc == 0; i++) {
        const bson_t *lo = i == 0 ? min : points[i - 1];
        const bson_t *hi = i < n ? points[i] : max;
        if (n == 1 && i == 1) break;
        bson_init(&details);
        bson_concat(&details, &before);
        if (n == 1) {
            brief_of(&details, "left", min, points[0], cM, cm + 1);
            brief_of(&details, "right", points[0], max, cM, cm + 2);
        } else {
            BSON_APPEND_INT32(&details, "number", i + 1);
            BSON_APPEND_INT32(&details, "of", n + 1);
            brief_of(&details, "chunk", lo, hi, cM, cm + 1 + (uint32_t)i);
        }
        BSON_APPEND_UTF8(&details, "owningShard", shard);
        rc = log_change_locked(c, "changelog", n == 1 ? "split" : "multi-split", ns, &details, err);
        bson_destroy(&details);
    }
    if (rc == 0) info_append(info, shard, &coll, cM, cm + 1 + (uint32_t)n);
out:
    sqlite3_finalize(st);
    sqlite3_finalize(up);
    if (pts)
        for (int i = 0; i < n; i++) buf_free(&pts[i]);
    free(pts);
    buf_free(&mn);
    buf_free(&mx);
    bson_destroy(&before);
    bson_destroy(&hist_copy);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
    return rc;
}

int cat_chunk_split(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                    const bson_t *const *points, int n, bson_t *info, ms_error_t *err) {
    int rc;
    bson_t tmp = BSON_INITIALIZER;
    pthread_mutex_lock(&c->mu);
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = split_locked(c, ns, min, max, points, n, &tmp, err);
        if (rc == 0) rc = db_exec(c, "COMMIT", err);
        if (rc) db_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) {
        log_info("chunk split ns=%s pieces=%d", ns, n + 1);
        if (info) bson_concat(info, &tmp);
    }
    bson_destroy(&tmp);
    return rc;
}

static int merge_locked(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                        bson_t *info, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t mn = {0}, mx = {0}, last_max = {0};
    sqlite3_stmt *st = NULL, *up = NULL;
    char shard[CAT_SHARD_NAME_BYTES_MAX] = "";
    bson_oid_t first_id;
    cat_ts_t latest = {0, 0};
    uint32_t cM = 0, cm = 0, sM = 0, sm = 0;
    bson_t hist, details = BSON_INITIALIZER;
    int64_t count = 0;
    int rc, s;
    bson_init(&hist);
    rc = coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) {
        bson_destroy(&hist);
        bson_destroy(&details);
        return rc;
    }
    rc = keys_encode_bound(&p, min, &mn, err);
    if (rc == 0) rc = keys_encode_bound(&p, max, &mx, err);
    if (rc) goto out;
    if (buf_cmp2(&mn, &mx) >= 0) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "mergeChunks: min must be less than max");
        goto out;
    }
    rc = db_prep(c, "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ? AND min_enc >= ? AND min_enc < ?"
                    " ORDER BY min_enc", &st, err);
    if (rc) goto out;
    bind_text(st, 1, ns);
    bind_buf(st, 2, &mn);
    bind_buf(st, 3, &mx);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const void *cmin = sqlite3_column_blob(st, CC_MIN_ENC);
        size_t cminl = (size_t)sqlite3_column_bytes(st, CC_MIN_ENC);
        if (count == 0) {
            if (blob_cmp(cmin, cminl, mn.data, mn.len) != 0) break;  /* reported below */
            copy_str(shard, sizeof shard, col_text(st, CC_SHARD));
            col_oid(st, CC_ID, &first_id);
        } else if (strcmp(shard, col_text(st, CC_SHARD)) != 0) {
            rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                         "could not merge chunks of %s: the range is not all on one shard "
                         "(%s and %s)", ns, shard, col_text(st, CC_SHARD));
            goto out;
        }
        /* Latest validAfter among the pieces becomes the merged chunk's single history
         * entry (notes §2.2). */
        bson_t h;
        bson_iter_t it, e;
        col_view(st, CC_HISTORY, &h);
        if (bson_iter_init_find(&it, &h, "0") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &e) && bson_iter_find(&e, "validAfter") &&
            BSON_ITER_HOLDS_TIMESTAMP(&e)) {
            cat_ts_t va;
            bson_iter_timestamp(&e, &va.t, &va.i);
            if (va.t > latest.t || (va.t == latest.t && va.i > latest.i)) latest = va;
        }
        buf_reset(&last_max);
        buf_put(&last_max, sqlite3_column_blob(st, CC_MAX_ENC), (size_t)sqlite3_column_bytes(st, CC_MAX_ENC));
        count++;
    }
    if (s != SQLITE_ROW && s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "merge scan", c->db);
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (count == 0) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                     "could not merge chunks, collection %s does not contain a chunk starting "
                     "at the given min", ns);
        goto out;
    }
    if (buf_cmp2(&last_max, &mx) != 0) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                     "could not merge chunks, collection %s does not contain a chunk ending at "
                     "the given max", ns);
        goto out;
    }
    rc = coll_version_locked(c, ns, NULL, &cM, &cm, err);
    if (rc) goto out;
    if (count == 1) {  /* already one chunk: MongoDB answers ok without a change */
        rc = coll_version_locked(c, ns, shard, &sM, &sm, err);
        if (rc == 0) info_append(info, shard, &coll, sM, sm);
        goto out;
    }
    if (cm == UINT32_MAX) {
        rc = err_set(err, MS_ERR_OVERFLOW, "minor version of %s would overflow", ns);
        goto out;
    }
    rc = coll_version_locked(c, ns, shard, &sM, &sm, err);  /* prevPlacementVersion */
    if (rc) goto out;
    history_one(&hist, latest, shard);
    rc = db_prep(c, "DELETE FROM chunks WHERE ns = ? AND min_enc > ? AND min_enc < ?", &up, err);
    if (rc) goto out;
    bind_text(up, 1, ns);
    bind_buf(up, 2, &mn);
    bind_buf(up, 3, &mx);
    rc = db_done(c, up, "merge: delete pieces", err);
    if (rc) goto out;
    sqlite3_finalize(up);
    up = NULL;
    rc = db_prep(c, "UPDATE chunks SET max = ?, max_enc = ?, major = ?, minor = ?, jumbo = 0,"
                    " est_size = NULL, history = ?, since_t = ?, since_i = ? WHERE id = ?", &up, err);
    if (rc) goto out;
    bind_bson(up, 1, max);
    bind_buf(up, 2, &mx);
    sqlite3_bind_int64(up, 3, cM);
    sqlite3_bind_int64(up, 4, (int64_t)cm + 1);
    bind_bson(up, 5, &hist);
    sqlite3_bind_int64(up, 6, latest.t);
    sqlite3_bind_int64(up, 7, latest.i);
    sqlite3_bind_blob(up, 8, first_id.bytes, 12, SQLITE_TRANSIENT);
    rc = db_done(c, up, "merge: extend first chunk", err);
    if (rc) goto out;
    tiling_assert_locked(c, ns);

    /* Changelog `merge` {prevPlacementVersion, mergedVersion, owningShard, min, max, numChunks}. */
    bson_append_timestamp(&details, "prevPlacementVersion", -1, sM, sm);
    bson_append_timestamp(&details, "mergedVersion", -1, cM, cm + 1);
    BSON_APPEND_UTF8(&details, "owningShard", shard);
    BSON_APPEND_DOCUMENT(&details, "min", min);
    BSON_APPEND_DOCUMENT(&details, "max", max);
    BSON_APPEND_INT64(&details, "numChunks", count);
    rc = log_change_locked(c, "changelog", "merge", ns, &details, err);
    if (rc == 0) info_append(info, shard, &coll, cM, cm + 1);
out:
    sqlite3_finalize(st);
    sqlite3_finalize(up);
    buf_free(&mn);
    buf_free(&mx);
    buf_free(&last_max);
    bson_destroy(&hist);
    bson_destroy(&details);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
    return rc;
}

int cat_chunk_merge(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                    bson_t *info, ms_error_t *err) {
    int rc;
    bson_t tmp = BSON_INITIALIZER;
    pthread_mutex_lock(&c->mu);
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = merge_locked(c, ns, min, max, &tmp, err);
        if (rc == 0) rc = db_exec(c, "COMMIT", err);
        if (rc) db_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) {
        log_info("chunks merged ns=%s", ns);
        if (info) bson_concat(info, &tmp);
    }
    bson_destroy(&tmp);
    return rc;
}

/* ---- routing ----------------------------------------------------------------------- */

void cat_version_append(bson_t *dst, const char *key, const cat_version_t *v) {
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(dst, key, &d);
    BSON_APPEND_OID(&d, "e", &v->epoch);
    append_ts(&d, "t", v->ts);
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
    int rc, s, i = 0;
    rc = coll_get_locked(c, ns, &coll, err);
    if (rc) return rc;
    bson_oid_copy(&coll.epoch, &cv.epoch);
    cv.ts = coll.ts;
    rc = coll_version_locked(c, ns, NULL, &cv.major, &cv.minor, err);
    if (rc) goto out;
    full = !since || !bson_oid_equal(&since->epoch, &coll.epoch) || since->ts.t != coll.ts.t ||
           since->ts.i != coll.ts.i;
    BSON_APPEND_UTF8(reply, "ns", ns);
    BSON_APPEND_DOCUMENT(reply, "key", &coll.key);
    BSON_APPEND_BOOL(reply, "unique", coll.unique);
    append_uuid(reply, "uuid", coll.uuid);
    BSON_APPEND_OID(reply, "epoch", &coll.epoch);
    append_ts(reply, "timestamp", coll.ts);
    BSON_APPEND_BOOL(reply, "full", full);
    cat_version_append(reply, "collectionVersion", &cv);
    /* Incremental: the chunks with lastmod >= sinceVersion.v (MongoDB's refresh query),
     * which include every chunk created or changed since. */
    rc = db_prep(c, full ? "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ? ORDER BY min_enc"
                         : "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ? AND"
                           " (major > ? OR (major = ? AND minor >= ?)) ORDER BY min_enc",
                 &st, err);
    if (rc) goto out;
    bind_text(st, 1, ns);
    if (!full) {
        sqlite3_bind_int64(st, 2, since->major);
        sqlite3_bind_int64(st, 3, since->major);
        sqlite3_bind_int64(st, 4, since->minor);
    }
    bson_append_array_begin(reply, "chunks", -1, &arr);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        char idx[16];
        bson_t d, b;
        snprintf(idx, sizeof idx, "%d", i++);
        bson_append_document_begin(&arr, idx, -1, &d);
        col_view(st, CC_MIN, &b);
        BSON_APPEND_DOCUMENT(&d, "min", &b);
        col_view(st, CC_MAX, &b);
        BSON_APPEND_DOCUMENT(&d, "max", &b);
        BSON_APPEND_UTF8(&d, "shard", col_text(st, CC_SHARD));
        bson_append_timestamp(&d, "lastmod", -1, (uint32_t)sqlite3_column_int64(st, CC_MAJOR),
                              (uint32_t)sqlite3_column_int64(st, CC_MINOR));
        if (sqlite3_column_int(st, CC_JUMBO)) BSON_APPEND_BOOL(&d, "jumbo", true);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(reply, &arr);
    if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "routing table", c->db);
    else if (reply->len > MS_MSG_BYTES_MAX)
        rc = err_set(err, MS_ERR_BSON_OBJECT_TOO_LARGE,
                     "routing table of %s is %u bytes, over the %d-byte message limit", ns,
                     reply->len, MS_MSG_BYTES_MAX);
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

/* ---- config collections as documents ----------------------------------------------- */

static const char *const CONFIG_COLLS[] = {
    "shards", "databases", "collections", "chunks", "tags", "settings", "locks",
    "changelog", "actionlog", "migrations", "mongos", "version",
};

bool cat_config_known(const char *coll) {
    for (size_t i = 0; i < sizeof CONFIG_COLLS / sizeof CONFIG_COLLS[0]; i++)
        if (strcmp(coll, CONFIG_COLLS[i]) == 0) return true;
    return false;
}

static void tag_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_oid_t id;
    bson_t b;
    col_oid(st, 0, &id);
    BSON_APPEND_OID(doc, "_id", &id);
    BSON_APPEND_UTF8(doc, "ns", col_text(st, 1));
    col_view(st, 2, &b);
    BSON_APPEND_DOCUMENT(doc, "min", &b);
    col_view(st, 3, &b);
    BSON_APPEND_DOCUMENT(doc, "max", &b);
    BSON_APPEND_UTF8(doc, "tag", col_text(st, 4));
}

static void mongos_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_t arr;
    BSON_APPEND_UTF8(doc, "_id", col_text(st, 0));
    BSON_APPEND_DATE_TIME(doc, "ping", sqlite3_column_int64(st, 1));
    BSON_APPEND_INT64(doc, "up", sqlite3_column_int64(st, 2));
    BSON_APPEND_BOOL(doc, "waiting", sqlite3_column_int(st, 3) != 0);
    BSON_APPEND_UTF8(doc, "mongoVersion", col_text(st, 4));
    BSON_APPEND_ARRAY_BEGIN(doc, "advisoryHostFQDNs", &arr);
    bson_append_array_end(doc, &arr);
}

static void version_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_oid_t id;
    col_oid(st, 0, &id);
    BSON_APPEND_INT32(doc, "_id", 1);
    BSON_APPEND_OID(doc, "clusterId", &id);
}

static void stored_doc(sqlite3_stmt *st, bson_t *doc) {
    bson_t b;
    col_view(st, 0, &b);
    bson_concat(doc, &b);
}

int cat_config_scan(cat_t *c, const char *coll, cat_doc_fn fn, void *arg, ms_error_t *err) {
    const char *sql = NULL;
    void (*build)(sqlite3_stmt *, bson_t *) = NULL;
    sqlite3_stmt *st = NULL;
    int rc, s;
    if (strcmp(coll, "shards") == 0) {
        sql = "SELECT " SHARD_COLS " FROM shards ORDER BY id";
        build = shard_doc;
    } else if (strcmp(coll, "databases") == 0) {
        sql = "SELECT primary_shard, uuid, ts_t, ts_i, last_mod, name FROM databases ORDER BY name";
        build = NULL;  /* below: _id first */
    } else if (strcmp(coll, "collections") == 0) {
        sql = "SELECT " COLL_COLS " FROM collections ORDER BY ns";
        build = coll_doc;
    } else if (strcmp(coll, "chunks") == 0) {
        sql = "SELECT " CHUNK_COLS " FROM chunks ORDER BY ns, min_enc";
        build = chunk_doc;
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
    rc = db_prep(c, sql, &st, err);
    if (rc) goto out;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        bson_t doc = BSON_INITIALIZER;
        if (build) {
            build(st, &doc);
        } else {  /* databases: {_id, primary, version} */
            BSON_APPEND_UTF8(&doc, "_id", col_text(st, 5));
            db_version_append(st, &doc);
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

/* ---- settings ---------------------------------------------------------------------- */

int cat_settings_get(cat_t *c, const char *id, bson_t *out, bool *found, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    bson_t key = BSON_INITIALIZER;
    bson_iter_t it;
    buf_t enc = {0};
    int rc;
    *found = false;
    BSON_APPEND_UTF8(&key, "_id", id);
    bson_iter_init_find(&it, &key, "_id");
    rc = keys_encode_value(&enc, &it, err);
    bson_destroy(&key);
    if (rc) return rc;
    pthread_mutex_lock(&c->mu);
    rc = db_prep(c, "SELECT doc FROM settings WHERE id_enc = ?", &st, err);
    if (rc == 0) {
        bind_buf(st, 1, &enc);
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW) {
            bson_t v;
            col_view(st, 0, &v);
            bson_copy_to(&v, out);
            *found = true;
        } else if (s != SQLITE_DONE) {
            rc = err_from_sqlite(err, s, "read settings", c->db);
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    buf_free(&enc);
    return rc;
}

int64_t cat_chunk_size_bytes(cat_t *c) {
    bson_t doc;
    bool found = false;
    bson_iter_t it;
    int64_t mb = CAT_CHUNKSIZE_MB_DEFAULT;
    if (cat_settings_get(c, "chunksize", &doc, &found, NULL) == 0 && found) {
        int64_t v;
        if (bson_iter_init_find(&it, &doc, "value") && bsonx_as_int64(&it, &v) &&
            v >= CAT_CHUNKSIZE_MB_MIN && v <= CAT_CHUNKSIZE_MB_MAX)
            mb = v;
        bson_destroy(&doc);
    }
    return mb * 1024 * 1024;
}

/* "HH:MM" with 0 <= HH <= 23 and 0 <= MM <= 59 → minutes since midnight, else -1. */
static int hhmm(const char *s) {
    if (!s || strlen(s) != 5 || s[2] != ':') return -1;
    for (int i = 0; i < 5; i++)
        if (i != 2 && (s[i] < '0' || s[i] > '9')) return -1;
    int h = (s[0] - '0') * 10 + (s[1] - '0'), m = (s[3] - '0') * 10 + (s[4] - '0');
    if (h > 23 || m > 59) return -1;
    return h * 60 + m;
}

int cat_settings_validate(const bson_t *doc, ms_error_t *err) {
    bson_iter_t it;
    const char *id;
    if (!bson_iter_init_find(&it, doc, "_id"))
        return err_set(err, MS_ERR_BAD_VALUE, "a settings document needs an _id");
    if (!BSON_ITER_HOLDS_UTF8(&it)) return 0;  /* not one of ours: stored as given */
    id = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init(&it, doc)) return err_set(err, MS_ERR_BAD_VALUE, "malformed settings document");
    if (strcmp(id, "balancer") == 0) {
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "mode") == 0) {
                const char *m = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
                if (!m || (strcmp(m, "full") != 0 && strcmp(m, "off") != 0))
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "balancer mode must be \"full\" or \"off\"");
            } else if (strcmp(k, "stopped") == 0 || strcmp(k, "_waitForDelete") == 0 ||
                       strcmp(k, "attemptToBalanceJumboChunks") == 0) {
                if (!BSON_ITER_HOLDS_BOOL(&it))
                    return err_set(err, MS_ERR_BAD_VALUE, "balancer setting %s must be a boolean", k);
            } else if (strcmp(k, "_secondaryThrottle") == 0) {
                if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_DOCUMENT(&it))
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "_secondaryThrottle must be a boolean or a write concern document");
            } else if (strcmp(k, "activeWindow") == 0) {
                bson_iter_t w;
                const char *start = NULL, *stop = NULL;
                if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &w))
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "activeWindow must be {start: \"HH:MM\", stop: \"HH:MM\"}");
                while (bson_iter_next(&w)) {
                    const char *wk = bson_iter_key(&w);
                    const char *v = BSON_ITER_HOLDS_UTF8(&w) ? bson_iter_utf8(&w, NULL) : NULL;
                    if (strcmp(wk, "start") == 0) start = v ? v : "";
                    else if (strcmp(wk, "stop") == 0) stop = v ? v : "";
                    else
                        return err_set(err, MS_ERR_BAD_VALUE, "activeWindow: unknown field %s", wk);
                }
                int a = hhmm(start), b = hhmm(stop);
                if (a < 0 || b < 0)
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "activeWindow start and stop must both be \"HH:MM\" times");
                if (a == b)
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "activeWindow start and stop cannot be the same time");
            }
        }
        return 0;
    }
    if (strcmp(id, "chunksize") == 0) {
        int64_t v = 0;
        if (!bson_iter_find(&it, "value") || !bsonx_as_int64_exact(&it, &v))
            return err_set(err, MS_ERR_BAD_VALUE, "chunksize needs an integral value in MB");
        if (v < CAT_CHUNKSIZE_MB_MIN || v > CAT_CHUNKSIZE_MB_MAX)
            return err_set(err, MS_ERR_BAD_VALUE, "chunksize value must be between %d and %d MB, not %lld",
                           CAT_CHUNKSIZE_MB_MIN, CAT_CHUNKSIZE_MB_MAX, (long long)v);
        return 0;
    }
    if (strcmp(id, "autosplit") == 0 || strcmp(id, "automerge") == 0) {
        if (bson_iter_find(&it, "enabled") && !BSON_ITER_HOLDS_BOOL(&it))
            return err_set(err, MS_ERR_BAD_VALUE, "%s.enabled must be a boolean", id);
        return 0;
    }
    return 0;
}

/* ---- routers, status ----------------------------------------------------------------- */

int cat_router_ping(cat_t *c, const char *host, int64_t up_s, bool waiting,
                    const char *version, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = db_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = db_prep(c, "INSERT INTO mongos (id, ping_ms, up, waiting, mongo_version)"
                        " VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
                        " ping_ms = excluded.ping_ms, up = excluded.up, waiting = excluded.waiting,"
                        " mongo_version = excluded.mongo_version", &st, err);
        if (rc == 0) {
            bind_text(st, 1, host);
            sqlite3_bind_int64(st, 2, time_now_ms());
            sqlite3_bind_int64(st, 3, up_s);
            sqlite3_bind_int(st, 4, waiting ? 1 : 0);
            bind_text(st, 5, version);
            rc = db_done(c, st, "upsert mongos", err);
        }
        sqlite3_finalize(st);
        if (rc == 0) rc = db_exec(c, "COMMIT", err);
        if (rc) db_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_counts(cat_t *c, int64_t *shards, int64_t *dbs, int64_t *colls, int64_t *chunks,
               ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = count_locked(c, "SELECT count(*) FROM shards", NULL, NULL, shards, err);
    if (rc == 0) rc = count_locked(c, "SELECT count(*) FROM databases", NULL, NULL, dbs, err);
    if (rc == 0) rc = count_locked(c, "SELECT count(*) FROM collections", NULL, NULL, colls, err);
    if (rc == 0) rc = count_locked(c, "SELECT count(*) FROM chunks", NULL, NULL, chunks, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- raw access for cat_settings.c ----------------------------------------------------- */

sqlite3 *cat_db_handle(cat_t *c) { return c->db; }
void cat_lock(cat_t *c) { pthread_mutex_lock(&c->mu); }
void cat_unlock(cat_t *c) { pthread_mutex_unlock(&c->mu); }
