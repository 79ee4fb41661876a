/*
 * store.c — the shard daemon's storage: one SQLite file (WAL) holding every collection,
 * the catalog and the secondary indexes. Here: connections and their statement caches,
 * open/recovery, transactions, the catalog and collection DDL, index keys, point reads,
 * stats and meta. Runs in bin/shardd. THE single write path (store_write_doc), through
 * which every insert, update and delete of a document on this shard passes, is
 * store_write.c; index DDL and builds are store_index.c. See docs/storage.md for the
 * tables and why they look the way they do.
 *
 * Tables:
 *   meta(k PRIMARY KEY, v)                          shard identity, table counter
 *   shard_docs(coll, id, doc)                       migration documents (store_docs.c)
 *   collections(ns PRIMARY KEY, id, uuid, key, key_unique, options)
 *   indexes(ns, name, id, spec, multikey, ready)    secondary index specs (_id_ is implicit);
 *                                                   ready = 0 while being built
 *   c<id>(rid INTEGER PRIMARY KEY, id BLOB UNIQUE, sk BLOB, doc BLOB)   + index on sk
 *   i<id>(k, rid) WITHOUT ROWID                     one row per index key (multikey: many)
 */
#include "shardd/store_priv.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/lclock.h"
#include "common/log.h"
#include "common/mem.h"

/* ---- connections and statements ---------------------------------------------------- */

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static void conn_close(conn_t *c) {
    if (!c) return;
    store_cache_clear(c);
    sqlite3_close(c->db);
    free(c);
}

static int conn_exec(conn_t *c, const char *sql, ms_error_t *err) {
    char *msg = NULL;
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        int code = err_from_sqlite(err, rc, sql, c->db);
        sqlite3_free(msg);
        return code;
    }
    return 0;
}

static int conn_open(store_t *st, bool writer, conn_t **out, ms_error_t *err) {
    conn_t *c = calloc(1, sizeof *c);
    int rc;
    char pragmas[256];
    if (!c) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    rc = sqlite3_open_v2(st->path, &c->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        int code = err_from_sqlite(err, rc, "open", c->db);
        conn_close(c);
        return code;
    }
    sqlite3_busy_timeout(c->db, 30000);
    /* WAL: readers never block the writer; synchronous NORMAL survives a process crash
     * (kill -9), FULL also survives power loss (docs/storage.md). */
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA journal_mode=WAL; PRAGMA synchronous=%s; PRAGMA temp_store=MEMORY;"
             " PRAGMA cache_size=-%d;",
             st->sync_full ? "FULL" : "NORMAL", writer ? 65536 : 16384);
    if ((rc = conn_exec(c, pragmas, err)) != 0) {
        conn_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

void store_cache_clear(conn_t *c) {
    for (int i = 0; i < c->ncache; i++) {
        sqlite3_finalize(c->cache[i].st);
        free(c->cache[i].sql);
    }
    c->ncache = 0;
}

/* Prepares sql and keeps it in the connection's cache under (hash, kind, table). */
static sqlite3_stmt *cache_add(conn_t *c, const char *sql, uint64_t hash, int kind, int64_t table,
                               ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL);
    if (rc != SQLITE_OK) {
        err_from_sqlite(err, rc, sql, c->db);
        return NULL;
    }
    /* Full (many collections): drop the whole cache; statements are cheap to remake. */
    if (c->ncache == STMT_CACHE_MAX) store_cache_clear(c);
    c->cache[c->ncache] = (stmt_ent_t){hash, kind, table, strdup(sql), st};
    c->ncache++;
    return st;
}

void *store_stmt(store_txn_t *t, const char *sql, ms_error_t *err) {
    conn_t *c = t->c;
    uint64_t h = fnv1a(sql);
    for (int i = 0; i < c->ncache; i++)
        if (c->cache[i].kind == 0 && c->cache[i].hash == h && strcmp(c->cache[i].sql, sql) == 0) {
            sqlite3_reset(c->cache[i].st);
            sqlite3_clear_bindings(c->cache[i].st);
            return c->cache[i].st;
        }
    return cache_add(c, sql, h, 0, 0, err);
}

void *store_sk_range_stmt(store_txn_t *t, const store_coll_t *c, const char *cols,
                          const char *tail, const buf_t *min, const buf_t *max, ms_error_t *err) {
    char sql[256];
    sqlite3_stmt *s;
    snprintf(sql, sizeof sql, "SELECT %s FROM c%lld WHERE sk >= ?1 AND sk < ?2%s%s", cols,
             (long long)c->id, tail && tail[0] ? " " : "", tail ? tail : "");
    if (!(s = store_stmt(t, sql, err))) return NULL;
    sqlite3_bind_blob(s, 1, min->data, (int)min->len, SQLITE_STATIC);
    sqlite3_bind_blob(s, 2, max->data, (int)max->len, SQLITE_STATIC);
    return s;
}

const char *const store_tstmt_sql[TS_KINDS] = {
    [TS_DOC_INSERT] = "INSERT INTO c%lld(id, sk, doc) VALUES(?,?,?)",
    [TS_DOC_UPDATE] = "UPDATE c%lld SET sk = ?, doc = ? WHERE rid = ?",
    [TS_DOC_DELETE] = "DELETE FROM c%lld WHERE rid = ?",
    [TS_DOC_BY_ROWID] = "SELECT doc FROM c%lld WHERE rid = ?",
    [TS_KEY_INSERT] = "INSERT INTO i%lld(k, rid) VALUES(?,?)",
    [TS_KEY_DELETE] = "DELETE FROM i%lld WHERE k = ? AND rid = ?",
    /* table unused (0): the per-document savepoint of store_write_doc */
    [TS_SAVEPOINT] = "SAVEPOINT wdoc",
    [TS_RELEASE] = "RELEASE wdoc",
    [TS_ROLLBACK_TO] = "ROLLBACK TO wdoc",
};

sqlite3_stmt *store_table_stmt(store_txn_t *t, enum tstmt kind, int64_t table,
                               ms_error_t *err) {
    conn_t *c = t->c;
    char sql[96];
    for (int i = 0; i < c->ncache; i++)
        if (c->cache[i].kind == (int)kind && c->cache[i].table == table) {
            sqlite3_reset(c->cache[i].st);
            return c->cache[i].st;
        }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(sql, sizeof sql, store_tstmt_sql[kind], (long long)table);
#pragma GCC diagnostic pop
    return cache_add(c, sql, 0, (int)kind, table, err);
}

/* A thread's reader connection: its own while it lives, so one thread's reads never wait
 * on another's. Threads come and go (a migration's recipient and session puller, the
 * range deleter's batches, ...): when one ends, its connection goes back to the store's
 * list (reader_conn_release, the key's destructor) for the next new thread, so the number
 * of open SQLite connections stays at the most threads that ever read at once. */
static conn_t *reader_conn(store_t *st, ms_error_t *err) {
    conn_t *c = pthread_getspecific(st->rkey);
    if (c) return c;
    pthread_mutex_lock(&st->rmu);
    for (c = st->readers; c && c->in_use; c = c->next) {}
    if (c) c->in_use = true;
    pthread_mutex_unlock(&st->rmu);
    if (!c) {
        if (conn_open(st, false, &c, err) != 0) return NULL;
        c->owner = st;
        c->in_use = true;
        pthread_mutex_lock(&st->rmu);
        c->next = st->readers;
        st->readers = c;
        pthread_mutex_unlock(&st->rmu);
    }
    pthread_setspecific(st->rkey, c);
    return c;
}

/* The reader key's destructor: the ending thread's connection is free for another. */
static void reader_conn_release(void *arg) {
    conn_t *c = arg;
    pthread_mutex_lock(&c->owner->rmu);
    c->in_use = false;
    pthread_mutex_unlock(&c->owner->rmu);
}

/* ---- catalog in memory -------------------------------------------------------------- */

void store_index_free(store_index_t *ix) {
    if (!ix) return;
    keys_pattern_free(&ix->pat);
    bson_destroy(&ix->spec);
    free(ix);
}

static void coll_free(store_coll_t *c) {
    if (!c) return;
    for (int i = 0; i < c->nindexes; i++) store_index_free(c->ix[i]);
    for (int i = 0; i < c->nbuilding; i++) store_index_free(c->bix[i]);
    if (c->sharded) keys_pattern_free(&c->sk);
    bson_destroy(&c->options);
    free(c);
}

static void catalog_clear(store_t *st) {
    for (int i = 0; i < st->ncolls; i++) coll_free(st->colls[i]);
    st->ncolls = 0;
}

static void catalog_add(store_t *st, store_coll_t *c) {
    if (st->ncolls == st->capcolls) {
        int cap = st->capcolls ? st->capcolls * 2 : 16;
        store_coll_t **n = realloc(st->colls, (size_t)cap * sizeof *n);
        ASSERT(n != NULL);
        st->colls = n;
        st->capcolls = cap;
    }
    st->colls[st->ncolls++] = c;
}

int store_index_new(const bson_t *spec, int64_t id, bool multikey, store_index_t **out,
                    ms_error_t *err) {
    store_index_t *ix = mem_calloc_aligned(1, sizeof *ix);
    bson_iter_t it, kit;
    bson_t key;
    const uint8_t *data;
    uint32_t len;
    int rc;
    if (!ix) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    if (!bson_iter_init_find(&kit, spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&kit)) {
        free(ix);
        return err_set(err, MS_ERR_CANNOT_CREATE_INDEX, "index spec has no key document");
    }
    bson_iter_document(&kit, &len, &data);
    if (!bson_init_static(&key, data, len)) {
        free(ix);
        return err_set(err, MS_ERR_INVALID_BSON, "bad index key document");
    }
    if ((rc = keys_pattern_parse(&key, &ix->pat, err)) != 0) {
        free(ix);
        return rc;
    }
    bson_copy_to(spec, &ix->spec);
    if (bson_iter_init_find(&it, spec, "name") && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(ix->name, sizeof ix->name, "%s", bson_iter_utf8(&it, NULL));
    ix->unique = bson_iter_init_find(&it, spec, "unique") && bsonx_truthy(&it);
    ix->id = id;
    ix->is_id = (id == 0);
    ix->multikey = multikey;
    *out = ix;
    return 0;
}

static void id_index_spec(bson_t *spec) {
    bson_t key;
    bson_init(spec);
    BSON_APPEND_INT32(spec, "v", 2);
    BSON_APPEND_DOCUMENT_BEGIN(spec, "key", &key);
    BSON_APPEND_INT32(&key, "_id", 1);
    bson_append_document_end(spec, &key);
    BSON_APPEND_UTF8(spec, "name", "_id_");
}

static int coll_new(const char *ns, int64_t id, const uint8_t *uuid, store_coll_t **out,
                    ms_error_t *err) {
    store_coll_t *c = mem_calloc_aligned(1, sizeof *c);
    bson_t spec;
    int rc;
    if (!c) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    snprintf(c->ns, sizeof c->ns, "%s", ns);
    c->id = id;
    memcpy(c->uuid, uuid, 16);
    bson_init(&c->options);
    id_index_spec(&spec);
    rc = store_index_new(&spec, 0, false, &c->ix[0], err);
    bson_destroy(&spec);
    if (rc != 0) {
        coll_free(c);
        return rc;
    }
    c->nindexes = 1;
    *out = c;
    return 0;
}

int store_bind_blob(sqlite3_stmt *s, int i, const void *p, size_t n) {
    return sqlite3_bind_blob(s, i, n ? p : "", (int)n, SQLITE_STATIC);
}

/* The fast counts of every collection: from coll_counts, or counted once (a file made
 * before fast counts existed; the next write of the collection stores them). */
static int counts_load(store_t *st, conn_t *cn, ms_error_t *err) {
    for (int i = 0; i < st->ncolls; i++) {
        store_coll_t *c = st->colls[i];
        char sql[128];
        sqlite3_stmt *s = NULL;
        int src = sqlite3_prepare_v2(cn->db, "SELECT n, bytes FROM coll_counts WHERE id = ?", -1,
                                     &s, NULL);
        if (src != SQLITE_OK) return err_from_sqlite(err, src, "load counts", cn->db);
        sqlite3_bind_int64(s, 1, c->id);
        src = sqlite3_step(s);
        if (src != SQLITE_ROW) {
            sqlite3_finalize(s);
            if (src != SQLITE_DONE) return err_from_sqlite(err, src, "load counts", cn->db);
            snprintf(sql, sizeof sql, "SELECT count(*), total(length(doc)) FROM c%lld",
                     (long long)c->id);
            if ((src = sqlite3_prepare_v2(cn->db, sql, -1, &s, NULL)) != SQLITE_OK)
                return err_from_sqlite(err, src, "count collection", cn->db);
            if ((src = sqlite3_step(s)) != SQLITE_ROW) {
                sqlite3_finalize(s);
                return err_from_sqlite(err, src, "count collection", cn->db);
            }
            c->fast_n = sqlite3_column_int64(s, 0);
            c->fast_bytes = (int64_t)sqlite3_column_double(s, 1);
        } else {
            c->fast_n = sqlite3_column_int64(s, 0);
            c->fast_bytes = sqlite3_column_int64(s, 1);
        }
        sqlite3_finalize(s);
    }
    return 0;
}

static int catalog_load(store_t *st, conn_t *cn, ms_error_t *err) {
    sqlite3_stmt *s = NULL;
    int rc = 0, src;
    catalog_clear(st);
    src = sqlite3_prepare_v2(cn->db,
                             "SELECT ns, id, uuid, key, key_unique, options FROM collections"
                             " ORDER BY id", -1, &s, NULL);
    if (src != SQLITE_OK) return err_from_sqlite(err, src, "load collections", cn->db);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        store_coll_t *c = NULL;
        const char *ns = (const char *)sqlite3_column_text(s, 0);
        const void *uuid = sqlite3_column_blob(s, 2);
        uint8_t u[16] = {0};
        if (uuid && sqlite3_column_bytes(s, 2) == 16) memcpy(u, uuid, 16);
        if ((rc = coll_new(ns, sqlite3_column_int64(s, 1), u, &c, err)) != 0) goto out;
        if (sqlite3_column_type(s, 3) == SQLITE_BLOB) {
            bson_t key;
            if (!bson_init_static(&key, sqlite3_column_blob(s, 3),
                                  (size_t)sqlite3_column_bytes(s, 3)) ||
                (rc = keys_pattern_parse(&key, &c->sk, err)) != 0) {
                coll_free(c);
                rc = rc ? rc : err_set(err, MS_ERR_INVALID_BSON, "bad shard key in catalog");
                goto out;
            }
            c->sharded = true;
            c->sk_unique = sqlite3_column_int(s, 4) != 0;
        }
        if (sqlite3_column_type(s, 5) == SQLITE_BLOB) {
            bson_t opt;
            if (bson_init_static(&opt, sqlite3_column_blob(s, 5),
                                 (size_t)sqlite3_column_bytes(s, 5))) {
                bson_destroy(&c->options);
                bson_copy_to(&opt, &c->options);
            }
        }
        catalog_add(st, c);
    }
    if (src != SQLITE_DONE) {
        rc = err_from_sqlite(err, src, "load collections", cn->db);
        goto out;
    }
    sqlite3_finalize(s);
    s = NULL;
    src = sqlite3_prepare_v2(cn->db, "SELECT ns, id, spec, multikey, ready FROM indexes ORDER BY id",
                             -1, &s, NULL);
    if (src != SQLITE_OK) {
        rc = err_from_sqlite(err, src, "load indexes", cn->db);
        goto out;
    }
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        const char *ns = (const char *)sqlite3_column_text(s, 0);
        store_coll_t *c = NULL;
        store_index_t *ix = NULL;
        bson_t spec;
        for (int i = 0; i < st->ncolls; i++)
            if (strcmp(st->colls[i]->ns, ns) == 0) c = st->colls[i];
        if (!c || c->nindexes + c->nbuilding >= MS_INDEXES_MAX) continue;
        if (!bson_init_static(&spec, sqlite3_column_blob(s, 2),
                              (size_t)sqlite3_column_bytes(s, 2))) {
            rc = err_set(err, MS_ERR_INVALID_BSON, "bad index spec in catalog");
            goto out;
        }
        if ((rc = store_index_new(&spec, sqlite3_column_int64(s, 1),
                                  sqlite3_column_int(s, 3) != 0, &ix, err)) != 0)
            goto out;
        if (sqlite3_column_int(s, 4) != 0) {
            c->ix[c->nindexes++] = ix;
        } else {
            /* At run time a build in progress (start-up removes those a crash left). */
            ix->building = true;
            c->bix[c->nbuilding++] = ix;
        }
    }
    if (src != SQLITE_DONE) rc = err_from_sqlite(err, src, "load indexes", cn->db);
out:
    sqlite3_finalize(s);
    if (rc == 0) rc = counts_load(st, cn, err);
    return rc;
}

/* ---- open / close ------------------------------------------------------------------- */

static const char *SCHEMA =
    "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v BLOB);"
    "CREATE TABLE IF NOT EXISTS collections(ns TEXT PRIMARY KEY, id INTEGER NOT NULL UNIQUE,"
    " uuid BLOB NOT NULL, key BLOB, key_unique INTEGER NOT NULL DEFAULT 0, options BLOB);"
    "CREATE TABLE IF NOT EXISTS indexes(ns TEXT NOT NULL, name TEXT NOT NULL,"
    " id INTEGER NOT NULL UNIQUE, spec BLOB NOT NULL, multikey INTEGER NOT NULL DEFAULT 0,"
    " ready INTEGER NOT NULL DEFAULT 1, PRIMARY KEY(ns, name));"
    /* the shard's own persisted documents (store_docs.c) */
    "CREATE TABLE IF NOT EXISTS shard_docs(coll TEXT NOT NULL, id TEXT NOT NULL,"
    " doc BLOB NOT NULL, PRIMARY KEY(coll, id));"
    /* fast counts of collection c<id> (store_coll_t.fast_n / fast_bytes) */
    "CREATE TABLE IF NOT EXISTS coll_counts(id INTEGER PRIMARY KEY, n INTEGER NOT NULL,"
    " bytes INTEGER NOT NULL);"
    /* retryable-write records (sessions.c): one row per session, one per statement; seq
     * orders records for session migration. Few b-trees on purpose: every retryable write
     * commits pages of each. */
    "CREATE TABLE IF NOT EXISTS sess_txn(lsid BLOB PRIMARY KEY, txn INTEGER NOT NULL,"
    " incomplete INTEGER NOT NULL DEFAULT 0, last_ms INTEGER NOT NULL,"
    " last_ts INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS sess_stmt(seq INTEGER PRIMARY KEY,"
    " lsid BLOB NOT NULL, txn INTEGER NOT NULL, stmt INTEGER NOT NULL, ns TEXT NOT NULL,"
    " key BLOB, result BLOB NOT NULL, date_ms INTEGER NOT NULL, UNIQUE(lsid, txn, stmt));";

/* A file made before index builds had a `ready` column gets it (every index there is
 * ready). Then every build a crash interrupted is removed: its side table holds an
 * unknown part of the documents, and its command was never answered (docs/storage.md
 * "Index builds": after a crash an index is complete or absent). */
static int schema_upgrade_and_recover(conn_t *c, ms_error_t *err) {
    sqlite3_stmt *s = NULL;
    buf_t drops = {0};
    int rc, src;
    if (sqlite3_prepare_v2(c->db, "SELECT ready FROM indexes LIMIT 0", -1, &s, NULL) != SQLITE_OK) {
        if ((rc = conn_exec(c, "ALTER TABLE indexes ADD COLUMN ready INTEGER NOT NULL DEFAULT 1",
                            err)) != 0)
            return rc;
    }
    sqlite3_finalize(s);
    s = NULL;
    if ((rc = conn_exec(c, "BEGIN IMMEDIATE", err)) != 0) return rc;
    src = sqlite3_prepare_v2(c->db, "SELECT id, ns, name FROM indexes WHERE ready = 0", -1, &s,
                             NULL);
    if (src != SQLITE_OK) {
        rc = err_from_sqlite(err, src, "unfinished index builds", c->db);
        goto out;
    }
    /* The statement must be finished before DROP TABLE ("database table is locked"). */
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        char sql[64];
        int l = snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS i%lld;",
                         (long long)sqlite3_column_int64(s, 0));
        buf_put(&drops, sql, (size_t)l);
        log_warn("index build interrupted by a crash removed ns=%s name=%s table=i%lld",
                 (const char *)sqlite3_column_text(s, 1), (const char *)sqlite3_column_text(s, 2),
                 (long long)sqlite3_column_int64(s, 0));
    }
    sqlite3_finalize(s);
    s = NULL;
    if (src != SQLITE_DONE) {
        rc = err_from_sqlite(err, src, "unfinished index builds", c->db);
        goto out;
    }
    {
        static const char del[] = "DELETE FROM indexes WHERE ready = 0;";
        buf_put(&drops, del, sizeof del);  /* with its NUL: the whole text is one C string */
    }
    rc = conn_exec(c, (const char *)drops.data, err);
out:
    sqlite3_finalize(s);
    buf_free(&drops);
    if (rc == 0 && (rc = conn_exec(c, "COMMIT", err)) == 0) return 0;
    conn_exec(c, "ROLLBACK", NULL);
    return rc;
}

int store_open(const char *dir, const store_opts_t *opts, store_t **out, ms_error_t *err) {
    store_t *st = calloc(1, sizeof *st);
    pthread_rwlockattr_t ra;
    int rc;
    if (!st) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        free(st);
        return err_set(err, MS_ERR_BAD_VALUE, "cannot create dbpath %s: %s", dir, strerror(errno));
    }
    if ((size_t)snprintf(st->path, sizeof st->path, "%s/shard.sqlite", dir) >= sizeof st->path) {
        free(st);
        return err_set(err, MS_ERR_BAD_VALUE, "dbpath too long");
    }
    st->sync_full = opts && opts->sync_full;
    pthread_mutex_init(&st->wmu, NULL);
    pthread_mutex_init(&st->rmu, NULL);
    pthread_rwlockattr_init(&ra);
    /* Writers (DDL) must not starve behind a stream of readers. */
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&st->cat_lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_key_create(&st->rkey, reader_conn_release);
    if ((rc = conn_open(st, true, &st->writer, err)) != 0) goto fail;
    if ((rc = conn_exec(st->writer, SCHEMA, err)) != 0) goto fail;
    {
        sqlite3_stmt *s = NULL;
        st->next_id = 1;
        if (sqlite3_prepare_v2(st->writer->db,
                               "SELECT max(m) FROM (SELECT max(id) AS m FROM collections UNION ALL"
                               " SELECT max(id) FROM indexes)", -1, &s, NULL) == SQLITE_OK &&
            sqlite3_step(s) == SQLITE_ROW)
            st->next_id = sqlite3_column_int64(s, 0) + 1;
        sqlite3_finalize(s);
    }
    /* After next_id: the tables of removed builds keep their numbers unused. */
    if ((rc = schema_upgrade_and_recover(st->writer, err)) != 0) goto fail;
    if ((rc = catalog_load(st, st->writer, err)) != 0) goto fail;
    log_info("store open path=%s collections=%d sync=%s", log_str(st->path), st->ncolls,
             st->sync_full ? "full" : "normal");
    *out = st;
    return 0;
fail:
    store_close(st);
    return rc;
}

void store_close(store_t *st) {
    conn_t *c, *n;
    if (!st) return;
    /* First: a thread that ends from here on no longer hands its connection back. */
    pthread_key_delete(st->rkey);
    catalog_clear(st);
    free(st->colls);
    free(st->dirty);
    for (c = st->readers; c; c = n) {
        n = c->next;
        conn_close(c);
    }
    conn_close(st->writer);
    pthread_rwlock_destroy(&st->cat_lock);
    pthread_mutex_destroy(&st->wmu);
    pthread_mutex_destroy(&st->rmu);
    store_ib_free_all(st);
    free(st);
}

const char *store_path(const store_t *st) { return st->path; }

int store_set_write_observer(store_t *st, store_write_observer_fn fn, store_write_end_fn end,
                             void *arg, ms_error_t *err) {
    int rc = 0;
    pthread_mutex_lock(&st->wmu);
    if ((fn || end) && (st->obs || st->obs_end)) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "another write observer is installed on this store");
    } else {
        st->obs = fn;
        st->obs_end = end;
        st->obs_arg = arg;
    }
    pthread_mutex_unlock(&st->wmu);
    return rc;
}

void *store_txn_db(store_txn_t *t) { return t->c->db; }
store_t *store_txn_store(store_txn_t *t) { return t->st; }
lclock_ts_t store_txn_time(const store_txn_t *t) { return t->time; }

/* ---- transactions ------------------------------------------------------------------- */

int store_read(store_t *st, store_txn_fn fn, void *arg, ms_error_t *err) {
    store_txn_t t = {st, NULL, false, {0, 0}};
    int rc;
    if (!(t.c = reader_conn(st, err))) return err ? err->code : MS_ERR_INTERNAL;
    pthread_rwlock_rdlock(&st->cat_lock);
    if ((rc = conn_exec(t.c, "BEGIN", err)) == 0) {
        rc = fn(&t, arg, err);
        /* A read transaction has nothing to keep: COMMIT just ends the snapshot. */
        if (conn_exec(t.c, rc == 0 ? "COMMIT" : "ROLLBACK", rc == 0 ? err : NULL) != 0 && rc == 0)
            rc = err ? err->code : MS_ERR_INTERNAL;
    }
    pthread_rwlock_unlock(&st->cat_lock);
    return rc;
}

int store_read_fenced(store_t *st, void (*fence)(void *farg), void *farg, store_txn_fn fn,
                      void *arg, ms_error_t *err) {
    store_txn_t t = {st, NULL, false, {0, 0}};
    int rc;
    if (!(t.c = reader_conn(st, err))) return err ? err->code : MS_ERR_INTERNAL;
    if ((rc = conn_exec(t.c, "BEGIN", err)) != 0) return rc;
    /* WAL: a read transaction's snapshot is fixed by its first read. Under the writer lock
     * no write transaction is open, so the snapshot and the fence see the same point. */
    pthread_mutex_lock(&st->wmu);
    rc = conn_exec(t.c, "SELECT count(*) FROM meta", err);
    if (rc == 0 && fence) fence(farg);
    pthread_mutex_unlock(&st->wmu);
    if (rc == 0) {
        pthread_rwlock_rdlock(&st->cat_lock);
        rc = fn(&t, arg, err);
        pthread_rwlock_unlock(&st->cat_lock);
    }
    if (conn_exec(t.c, rc == 0 ? "COMMIT" : "ROLLBACK", rc == 0 ? err : NULL) != 0 && rc == 0)
        rc = err ? err->code : MS_ERR_INTERNAL;
    return rc;
}

/* ---- fast counts ---------------------------------------------------------------------- */

void store_counts_delta(store_txn_t *t, store_coll_t *c, int64_t dn, int64_t dbytes) {
    store_t *st = t->st;
    if (!c->dirty) {
        if (st->ndirty == st->capdirty) {
            int cap = st->capdirty ? st->capdirty * 2 : 8;
            store_coll_t **n = realloc(st->dirty, (size_t)cap * sizeof *n);
            ASSERT(n != NULL);
            st->dirty = n;
            st->capdirty = cap;
        }
        st->dirty[st->ndirty++] = c;
        c->dirty = true;
    }
    c->delta_n += dn;
    c->delta_bytes += dbytes;
    if (dbytes > 0) c->delta_grown += dbytes;
}

int64_t store_coll_grown(const store_coll_t *c) {
    return __atomic_load_n(&c->grown_bytes, __ATOMIC_ACQUIRE);
}

/* Stores the new counts of every collection the transaction wrote (one row each). */
static int counts_flush(store_txn_t *t, ms_error_t *err) {
    store_t *st = t->st;
    for (int i = 0; i < st->ndirty; i++) {
        store_coll_t *c = st->dirty[i];
        if (c->delta_n == 0 && c->delta_bytes == 0) continue;
        sqlite3_stmt *s = store_stmt(t, "INSERT OR REPLACE INTO coll_counts(id, n, bytes)"
                                        " VALUES(?,?,?)", err);
        if (!s) return err->code;
        sqlite3_bind_int64(s, 1, c->id);
        sqlite3_bind_int64(s, 2, __atomic_load_n(&c->fast_n, __ATOMIC_RELAXED) + c->delta_n);
        sqlite3_bind_int64(s, 3, __atomic_load_n(&c->fast_bytes, __ATOMIC_RELAXED) + c->delta_bytes);
        int rc = store_step_done(t, s, "save counts", err);
        if (rc) return rc;
    }
    return 0;
}

/* The transaction ended: its deltas become the counts (committed) or are dropped. */
static void counts_end(store_t *st, bool committed) {
    for (int i = 0; i < st->ndirty; i++) {
        store_coll_t *c = st->dirty[i];
        if (committed) {
            __atomic_add_fetch(&c->fast_n, c->delta_n, __ATOMIC_RELEASE);
            __atomic_add_fetch(&c->fast_bytes, c->delta_bytes, __ATOMIC_RELEASE);
            __atomic_add_fetch(&c->grown_bytes, c->delta_grown, __ATOMIC_RELEASE);
        }
        c->delta_n = c->delta_bytes = c->delta_grown = 0;
        c->dirty = false;
    }
    st->ndirty = 0;
}

static int write_txn(store_t *st, bool ddl, store_txn_fn fn, void *arg, ms_error_t *err) {
    store_txn_t t = {st, st->writer, true, {0, 0}};
    int rc;
    atomic_fetch_add(&st->wwaiting, 1);
    pthread_mutex_lock(&st->wmu);
    atomic_fetch_sub(&st->wwaiting, 1);
    if (ddl)
        pthread_rwlock_wrlock(&st->cat_lock);
    else
        pthread_rwlock_rdlock(&st->cat_lock);
    if ((rc = conn_exec(t.c, "BEGIN IMMEDIATE", err)) == 0) {
        /* The write's cluster time, reserved as MongoDB reserves an oplog slot: pending
         * (a read after it waits) until the COMMIT below ends it, either way. */
        lclock_ts_t wtime = {0, 0};
        bool timed = (rc = lclock_write_begin(&wtime, err)) == 0;
        t.time = wtime;
        if (rc == 0) rc = fn(&t, arg, err);
        if (rc == 0) rc = counts_flush(&t, err);  /* in the transaction it counts */
        if (rc == 0) {
            if ((rc = conn_exec(t.c, "COMMIT", err)) != 0) conn_exec(t.c, "ROLLBACK", NULL);
        } else {
            conn_exec(t.c, "ROLLBACK", NULL);
        }
        if (timed) lclock_write_end(wtime, rc == 0);
        counts_end(st, rc == 0);  /* before a catalog reload frees the collections */
        /* Still under the writer lock: the observer publishes what this transaction
         * wrote exactly when it became visible, or drops it (migration's write capture
         * must never hand out an _id whose write is not committed). */
        if (st->obs_end) st->obs_end(st->obs_arg, rc == 0);
        if (rc != 0 && ddl) {
            /* The callback may have changed the in-memory catalog: reread what committed. */
            ms_error_t e2;
            if (catalog_load(st, t.c, &e2) != 0)
                log_error("catalog reload failed after rollback errmsg=%s", log_str(e2.msg));
        }
    }
    pthread_rwlock_unlock(&st->cat_lock);
    pthread_mutex_unlock(&st->wmu);
    return rc;
}

int store_write(store_t *st, store_txn_fn fn, void *arg, ms_error_t *err) {
    return write_txn(st, false, fn, arg, err);
}

int store_ddl(store_t *st, store_txn_fn fn, void *arg, ms_error_t *err) {
    return write_txn(st, true, fn, arg, err);
}

/* ---- catalog access ----------------------------------------------------------------- */

store_coll_t *store_coll_get(store_txn_t *t, const char *ns) {
    for (int i = 0; i < t->st->ncolls; i++)
        if (strcmp(t->st->colls[i]->ns, ns) == 0) return t->st->colls[i];
    return NULL;
}

int store_coll_count(store_txn_t *t) { return t->st->ncolls; }
store_coll_t *store_coll_at(store_txn_t *t, int i) { return t->st->colls[i]; }

store_index_t *store_index_by_name(store_coll_t *c, const char *name) {
    for (int i = 0; i < c->nindexes; i++)
        if (strcmp(c->ix[i]->name, name) == 0) return c->ix[i];
    return NULL;
}

int store_sql_fmt_exec(store_txn_t *t, ms_error_t *err, const char *fmt, ...) {
    char sql[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return conn_exec(t->c, sql, err);
}

int store_step_done(store_txn_t *t, sqlite3_stmt *s, const char *what, ms_error_t *err) {
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) return err_from_sqlite(err, rc, what, t->c->db);
    return 0;
}

static int coll_persist(store_txn_t *t, store_coll_t *c, ms_error_t *err) {
    sqlite3_stmt *s = store_stmt(t,
                                 "INSERT OR REPLACE INTO collections(ns, id, uuid, key, key_unique,"
                                 " options) VALUES(?,?,?,?,?,?)", err);
    if (!s) return err->code;
    sqlite3_bind_text(s, 1, c->ns, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, c->id);
    sqlite3_bind_blob(s, 3, c->uuid, 16, SQLITE_STATIC);
    if (c->sharded)
        store_bind_blob(s, 4, bson_get_data(&c->sk.spec), c->sk.spec.len);
    else
        sqlite3_bind_null(s, 4);
    sqlite3_bind_int(s, 5, c->sk_unique);
    store_bind_blob(s, 6, bson_get_data(&c->options), c->options.len);
    return store_step_done(t, s, "save collection", err);
}

int store_coll_create(store_txn_t *t, const char *ns, const uint8_t *uuid, store_coll_t **out,
                      bool *created, ms_error_t *err) {
    store_coll_t *c = store_coll_get(t, ns);
    uint8_t u[16];
    int rc;
    if (created) *created = false;
    if (c) {
        if (out) *out = c;
        return 0;
    }
    if (strlen(ns) > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "namespace too long: %s", ns);
    if (uuid) {
        memcpy(u, uuid, 16);
    } else {
        if (getrandom(u, sizeof u, 0) != (ssize_t)sizeof u)
            return err_set(err, MS_ERR_INTERNAL, "getrandom failed");
        u[6] = (uint8_t)((u[6] & 0x0f) | 0x40);  /* RFC 4122 version 4 */
        u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
    }
    if ((rc = coll_new(ns, t->st->next_id, u, &c, err)) != 0) return rc;
    if ((rc = store_sql_fmt_exec(t, err,
                                 "CREATE TABLE c%lld(rid INTEGER PRIMARY KEY,"
                                 " id BLOB NOT NULL UNIQUE, sk BLOB, doc BLOB NOT NULL);"
                                 " CREATE INDEX c%lld_sk ON c%lld(sk) WHERE sk IS NOT NULL;",
                                 (long long)c->id, (long long)c->id, (long long)c->id)) != 0 ||
        (rc = coll_persist(t, c, err)) != 0) {
        coll_free(c);
        return rc;
    }
    t->st->next_id++;
    catalog_add(t->st, c);
    log_info("collection created ns=%s table=c%lld", log_str(ns), (long long)c->id);
    if (created) *created = true;
    if (out) *out = c;
    return 0;
}

int store_coll_drop(store_txn_t *t, const char *ns_in, ms_error_t *err) {
    store_coll_t *c = store_coll_get(t, ns_in);
    char ns[MS_NS_BYTES_MAX + 1];   /* ns_in may be c->ns, freed below */
    sqlite3_stmt *s;
    int rc;
    snprintf(ns, sizeof ns, "%s", ns_in);
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "ns not found: %s", ns);
    store_cache_clear(t->c);  /* statements naming a table about to go */
    for (int i = 1; i < c->nindexes; i++)
        if ((rc = store_sql_fmt_exec(t, err, "DROP TABLE i%lld", (long long)c->ix[i]->id)) != 0)
            return rc;
    /* Builds in progress go too; their builders find them gone (IndexBuildAborted). */
    for (int i = 0; i < c->nbuilding; i++)
        if ((rc = store_sql_fmt_exec(t, err, "DROP TABLE i%lld", (long long)c->bix[i]->id)) != 0)
            return rc;
    if ((rc = store_sql_fmt_exec(t, err, "DROP TABLE c%lld", (long long)c->id)) != 0) return rc;
    if ((rc = store_sql_fmt_exec(t, err, "DELETE FROM coll_counts WHERE id = %lld",
                                 (long long)c->id)) != 0)
        return rc;
    for (int i = 0; i < t->st->ndirty; i++)  /* c is freed below: out of the dirty list */
        if (t->st->dirty[i] == c) t->st->dirty[i--] = t->st->dirty[--t->st->ndirty];
    if (!(s = store_stmt(t, "DELETE FROM indexes WHERE ns = ?", err))) return err->code;
    sqlite3_bind_text(s, 1, ns, -1, SQLITE_STATIC);
    if ((rc = store_step_done(t, s, "drop indexes", err)) != 0) return rc;
    if (!(s = store_stmt(t, "DELETE FROM collections WHERE ns = ?", err))) return err->code;
    sqlite3_bind_text(s, 1, ns, -1, SQLITE_STATIC);
    if ((rc = store_step_done(t, s, "drop collection", err)) != 0) return rc;
    for (int i = 0; i < t->st->ncolls; i++)
        if (t->st->colls[i] == c) {
            t->st->colls[i] = t->st->colls[--t->st->ncolls];
            break;
        }
    coll_free(c);
    log_info("collection dropped ns=%s", log_str(ns));
    return 0;
}

int store_coll_rename(store_txn_t *t, const char *from_in, const char *to_in, ms_error_t *err) {
    char from[MS_NS_BYTES_MAX + 1], to[MS_NS_BYTES_MAX + 1];   /* from_in may be c->ns */
    store_coll_t *c = store_coll_get(t, from_in);
    sqlite3_stmt *s;
    int rc;
    if (strlen(to_in) >= sizeof to)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid target namespace: %s", to_in);
    snprintf(from, sizeof from, "%s", from_in);
    snprintf(to, sizeof to, "%s", to_in);
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "Source collection %s does not exist", from);
    if (store_coll_get(t, to)) return err_set(err, MS_ERR_NAMESPACE_EXISTS, "target namespace exists");
    /* Tables are named by id (c<id>, i<id>): only the catalog rows name the namespace. */
    if (!(s = store_stmt(t, "UPDATE indexes SET ns = ? WHERE ns = ?", err))) return err->code;
    sqlite3_bind_text(s, 1, to, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, from, -1, SQLITE_STATIC);
    if ((rc = store_step_done(t, s, "rename indexes", err)) != 0) return rc;
    if (!(s = store_stmt(t, "UPDATE collections SET ns = ? WHERE ns = ?", err))) return err->code;
    sqlite3_bind_text(s, 1, to, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, from, -1, SQLITE_STATIC);
    if ((rc = store_step_done(t, s, "rename collection", err)) != 0) return rc;
    /* In memory too (a rollback rereads the catalog). A cursor finds its collection by
     * name at each getMore: under the old name it is gone, as after a drop. */
    snprintf(c->ns, sizeof c->ns, "%s", to);
    c->gen++;
    log_info("collection renamed from=%s to=%s", log_str(from), log_str(to));
    return 0;
}

/* ---- index keys --------------------------------------------------------------------- */

/* A value found at a path: a position in the document, or a synthesized null/undefined. */
enum { PV_ITER = 0, PV_NULL = 1, PV_UNDEFINED = 2 };
/* Positions, not bson_iter_t copies: libbson declares bson_iter_t 128-byte aligned, so
 * arrays of it on the heap would be misaligned. */
typedef struct pval {
    const uint8_t *raw;
    uint32_t len, off, keylen;
    int kind;
} pval_t;
#define PVALS_INLINE 4
/* The values found for one field: the first few live inline, so the common case (a
 * scalar per field) allocates nothing. */
typedef struct pvals {
    pval_t *v;               /* inl, or the heap once more than PVALS_INLINE */
    pval_t inl[PVALS_INLINE];
    int n, cap;
    bool overflow;
} pvals_t;

static void pvals_init(pvals_t *pv) {
    pv->v = pv->inl;
    pv->n = 0;
    pv->cap = PVALS_INLINE;
    pv->overflow = false;
}

static void pvals_free(pvals_t *pv) {
    if (pv->v != pv->inl) free(pv->v);
}

static bool pval_iter(const pval_t *v, bson_iter_t *out) {
    return bson_iter_init_from_data_at_offset(out, v->raw, v->len, v->off, v->keylen);
}

static void pv_push(pvals_t *pv, const bson_iter_t *it, int kind) {
    if (pv->n >= SHARDD_INDEX_KEYS_PER_DOC_MAX) {
        pv->overflow = true;
        return;
    }
    if (pv->n == pv->cap) {
        int cap = pv->cap * 2;
        if (pv->v == pv->inl) {
            pv->v = xrealloc(NULL, (size_t)cap * sizeof *pv->v);
            memcpy(pv->v, pv->inl, sizeof pv->inl);
        } else {
            pv->v = xrealloc(pv->v, (size_t)cap * sizeof *pv->v);
        }
        pv->cap = cap;
    }
    if (it) {
        bson_iter_t c = *it;
        pv->v[pv->n].raw = c.raw;
        pv->v[pv->n].len = c.len;
        pv->v[pv->n].off = bson_iter_offset(&c);
        pv->v[pv->n].keylen = bson_iter_key_len(&c);
    }
    pv->v[pv->n].kind = kind;
    pv->n++;
}

/* Collects the values at path inside the document whose elements iter_in iterates
 * (MongoDB's multikey key generation, simplified): arrays are unwound (one level at the
 * leaf, each element at an inner level), missing values are null, an empty array at the
 * leaf is undefined. Emitting a superset of MongoDB's keys is harmless for queries: the
 * executor re-checks the whole filter on every fetched document. */
static void path_collect(bson_iter_t *doc_it, const char *path, pvals_t *out, bool *expanded,
                         bool emit_missing, int depth) {
    const char *dot = strchr(path, '.');
    size_t clen = dot ? (size_t)(dot - path) : strlen(path);
    bson_iter_t it = *doc_it;
    bool found = false;
    if (depth > MS_DOC_DEPTH_MAX) return;
    while (bson_iter_next(&it)) {
        if (bson_iter_key_len(&it) == clen && memcmp(bson_iter_key(&it), path, clen) == 0) {
            found = true;
            break;
        }
    }
    if (!found) {
        if (emit_missing) pv_push(out, NULL, PV_NULL);
        return;
    }
    if (!dot) {
        if (BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t ch;
            bool any = false;
            *expanded = true;
            if (bson_iter_recurse(&it, &ch))
                while (bson_iter_next(&ch)) {
                    pv_push(out, &ch, PV_ITER);
                    any = true;
                }
            if (!any && emit_missing) pv_push(out, NULL, PV_UNDEFINED);
        } else {
            pv_push(out, &it, PV_ITER);
        }
        return;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_t ch;
        if (bson_iter_recurse(&it, &ch)) path_collect(&ch, dot + 1, out, expanded, emit_missing,
                                                      depth + 1);
    } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_iter_t ch;
        bool any = false;
        *expanded = true;
        if (bson_iter_recurse(&it, &ch))
            while (bson_iter_next(&ch)) {
                any = true;
                if (BSON_ITER_HOLDS_DOCUMENT(&ch)) {
                    bson_iter_t sub;
                    if (bson_iter_recurse(&ch, &sub))
                        path_collect(&sub, dot + 1, out, expanded, emit_missing, depth + 1);
                } else if (emit_missing) {
                    pv_push(out, NULL, PV_NULL);
                }
            }
        if (!any && emit_missing) pv_push(out, NULL, PV_NULL);
    } else if (emit_missing) {
        pv_push(out, NULL, PV_NULL);
    }
}

void store_path_values(const bson_t *doc, const char *path, store_path_fn fn, void *arg) {
    pvals_t pv;
    bson_iter_t it;
    bool expanded = false;
    if (!bson_iter_init(&it, doc)) return;
    pvals_init(&pv);
    path_collect(&it, path, &pv, &expanded, false, 0);
    for (int i = 0; i < pv.n; i++) {
        bson_iter_t vi;
        if (pval_iter(&pv.v[i], &vi)) fn(arg, &vi);
    }
    pvals_free(&pv);
}

static bson_t null_doc, undef_doc;
static pthread_once_t null_docs_once = PTHREAD_ONCE_INIT;

static void null_docs_init(void) {
    bson_init(&null_doc);
    BSON_APPEND_NULL(&null_doc, "");
    bson_init(&undef_doc);
    BSON_APPEND_UNDEFINED(&undef_doc, "");
}

static const bson_t *static_null_doc(int kind) {
    pthread_once(&null_docs_once, null_docs_init);
    return kind == PV_NULL ? &null_doc : &undef_doc;
}

static int encode_pval(const keys_pattern_t *p, int f, const pval_t *v, buf_t *out,
                       ms_error_t *err) {
    size_t from = out->len;
    bson_iter_t it;
    if (v->kind == PV_ITER) {
        if (!pval_iter(v, &it)) return err_set(err, MS_ERR_INVALID_BSON, "bad value position");
    } else {
        if (!bson_iter_init(&it, static_null_doc(v->kind)) || !bson_iter_next(&it))
            return err_set(err, MS_ERR_INTERNAL, "null key");
    }
    if (p->hashed[f]) {
        if (BSON_ITER_HOLDS_ARRAY(&it))
            return err_set(err, MS_ERR_BAD_VALUE,
                           "hashed indexes do not currently support array values");
        /* The hash would go through double (approximate): refused like every key. */
        if (keys_holds_decimal(&it)) return keys_decimal_refused(err, p->fields[f]);
        keys_encode_int64(out, keys_hash64(&it));
    } else {
        int rc = keys_encode_field(out, &it, p->fields[f], err);
        if (rc != 0) return rc;
    }
    if (p->dir[f] < 0) keys_invert(out, from);
    return 0;
}

int store_buf_cmp(const void *a, const void *b) {
    const buf_t *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->data, y->data, n);
    if (c) return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

void store_keys_free(buf_t *keys, int nkeys) {
    if (!keys) return;
    for (int i = 0; i < nkeys; i++) buf_free(&keys[i]);
    free(keys);
}

int store_index_keys(const keys_pattern_t *p, const bson_t *doc, buf_t **keys_out, int *nkeys,
                     bool *multikey, ms_error_t *err) {
    pvals_t pv[MS_KEY_FIELDS_MAX];
    int arrays = 0, array_field = -1, rc = 0, n = 1, nk = 0;
    buf_t *keys = NULL;
    for (int f = 0; f < p->nfields; f++) pvals_init(&pv[f]);
    *multikey = false;
    for (int f = 0; f < p->nfields; f++) {
        bson_iter_t it;
        bool expanded = false;
        if (!bson_iter_init(&it, doc)) {
            rc = err_set(err, MS_ERR_INVALID_BSON, "invalid document");
            goto out;
        }
        path_collect(&it, p->fields[f], &pv[f], &expanded, true, 0);
        if (pv[f].overflow || pv[f].n == 0) {
            if (pv[f].overflow) {
                rc = err_set(err, MS_ERR_CANNOT_BUILD_INDEX_KEYS,
                             "too many index keys for field %s", p->fields[f]);
                goto out;
            }
            pv_push(&pv[f], NULL, PV_NULL);
        }
        if (expanded) {
            *multikey = true;
            if (arrays++ && array_field >= 0) {
                rc = err_set(err, MS_ERR_CANNOT_INDEX_PARALLEL_ARRAYS,
                             "cannot index parallel arrays [%s] [%s]", p->fields[f],
                             p->fields[array_field]);
                goto out;
            }
            array_field = f;
        }
        n *= pv[f].n;  /* only one field has more than one value (no parallel arrays)... */
        if (n > SHARDD_INDEX_KEYS_PER_DOC_MAX) {
            rc = err_set(err, MS_ERR_CANNOT_BUILD_INDEX_KEYS, "too many index keys");
            goto out;
        }
    }
    keys = calloc((size_t)n, sizeof *keys);
    ASSERT(keys != NULL);
    for (int k = 0; k < n; k++) {
        int rem = k;
        for (int f = 0; f < p->nfields; f++) {
            /* ...but a nested array path can still give several values in two fields
             * (e.g. {a: {b: [1]}, c: [2, 3]}); the product covers every combination. */
            int pick = rem % pv[f].n;
            rem /= pv[f].n;
            if ((rc = encode_pval(p, f, &pv[f].v[pick], &keys[nk], err)) != 0) {
                buf_free(&keys[nk]);
                goto out;
            }
        }
        if (keys[nk].len > MS_KEY_BYTES_MAX) {
            rc = err_set(err, MS_ERR_CANNOT_BUILD_INDEX_KEYS, "index key too large (%zu bytes)",
                         keys[nk].len);
            buf_free(&keys[nk]);
            goto out;
        }
        nk++;
    }
    if (nk > 1) {
        int u = 1;
        qsort(keys, (size_t)nk, sizeof *keys, store_buf_cmp);
        for (int i = 1; i < nk; i++) {
            if (store_buf_cmp(&keys[i], &keys[u - 1]) == 0)
                buf_free(&keys[i]);
            else
                keys[u++] = keys[i];
        }
        nk = u;
    }
out:
    for (int f = 0; f < p->nfields; f++) pvals_free(&pv[f]);
    if (rc != 0) {
        store_keys_free(keys, nk);
        return rc;
    }
    *keys_out = keys;
    *nkeys = nk;
    return 0;
}

/* ---- E11000 messages ---------------------------------------------------------------- */

char *store_value_json(const bson_iter_t *it) {
    bson_t one;
    char *js, *colon, *out = NULL;
    size_t l;
    bson_init(&one);
    bsonx_append_iter(&one, "v", it);
    js = bson_as_relaxed_extended_json(&one, NULL);
    bson_destroy(&one);
    if (!js) return bson_strdup("?");
    colon = strstr(js, "\" : ");
    l = strlen(js);
    if (colon && l > 2) {
        js[l - 2] = '\0';  /* strip " }" */
        out = bson_strdup(colon + 4);
    }
    bson_free(js);
    return out ? out : bson_strdup("?");
}

void store_key_decode(const keys_pattern_t *p, const uint8_t *data, size_t len, bson_t *out) {
    size_t pos = 0;
    bson_init(out);
    for (int f = 0; f < p->nfields && pos < len; f++) {
        ms_error_t e = {0};
        if (p->dir[f] < 0) {
            buf_t tmp = {0};
            size_t sub = 0;
            buf_put(&tmp, data + pos, len - pos);
            keys_invert(&tmp, 0);
            if (keys_decode_value(tmp.data, tmp.len, &sub, out, p->fields[f], &e) != 0) {
                buf_free(&tmp);
                return;
            }
            pos += sub;
            buf_free(&tmp);
        } else if (keys_decode_value(data, len, &pos, out, p->fields[f], &e) != 0) {
            return;
        }
    }
}

/* ---- point reads -------------------------------------------------------------------- */

int store_get_by_rowid(store_txn_t *t, store_coll_t *c, int64_t rowid, bson_t *doc,
                       ms_error_t *err) {
    sqlite3_stmt *s;
    int rc;
    if (!(s = store_table_stmt(t, TS_DOC_BY_ROWID, c->id, err))) return err->code;
    sqlite3_bind_int64(s, 1, rowid);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        bson_t view;
        if (!bson_init_static(&view, sqlite3_column_blob(s, 0), (size_t)sqlite3_column_bytes(s, 0))) {
            sqlite3_reset(s);
            return err_set(err, MS_ERR_INVALID_BSON, "corrupt document rid=%lld", (long long)rowid);
        }
        bson_copy_to(&view, doc);
        sqlite3_reset(s);
        return 0;
    }
    sqlite3_reset(s);
    if (rc == SQLITE_DONE) return err_set(err, MS_ERR_NO_MATCHING_DOCUMENT, "no document");
    return err_from_sqlite(err, rc, "get", t->c->db);
}

int store_coll_set_shard_key(store_txn_t *t, store_coll_t *c, const keys_pattern_t *p,
                             bool unique, ms_error_t *err) {
    char sql[128];
    sqlite3_stmt *s = NULL, *u;
    int rc = 0, src;
    bson_t spec;
    /* Fill sk of every document; an array in a key field fails the whole transaction. */
    snprintf(sql, sizeof sql, "SELECT rid, doc FROM c%lld", (long long)c->id);
    if ((src = sqlite3_prepare_v2(t->c->db, sql, -1, &s, NULL)) != SQLITE_OK)
        return err_from_sqlite(err, src, "shard key fill", t->c->db);
    snprintf(sql, sizeof sql, "UPDATE c%lld SET sk = ? WHERE rid = ?", (long long)c->id);
    if (!(u = store_stmt(t, sql, err))) {
        rc = err->code;
        goto out;
    }
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        bson_t doc;
        buf_t sk = {0};
        if (!bson_init_static(&doc, sqlite3_column_blob(s, 1), (size_t)sqlite3_column_bytes(s, 1))) {
            rc = err_set(err, MS_ERR_INVALID_BSON, "corrupt document");
            goto out;
        }
        if ((rc = keys_extract(p, &doc, NULL, &sk, err)) != 0) {
            bson_iter_t idit;
            char *js = NULL;
            if (bson_iter_init_find(&idit, &doc, "_id")) {
                bson_t one;
                bson_init(&one);
                bsonx_append_iter(&one, "_id", &idit);
                js = bsonx_to_json(&one);
                bson_destroy(&one);
            }
            err_prefix(err, "document %s cannot be sharded", js ? js : "?");
            bson_free(js);
            buf_free(&sk);
            goto out;
        }
        sqlite3_reset(u);
        store_bind_blob(u, 1, sk.data, sk.len);
        sqlite3_bind_int64(u, 2, sqlite3_column_int64(s, 0));
        rc = store_step_done(t, u, "shard key fill", err);
        buf_free(&sk);
        if (rc != 0) goto out;
    }
    if (src != SQLITE_DONE) {
        rc = err_from_sqlite(err, src, "shard key fill", t->c->db);
        goto out;
    }
    /* Parse in place: a keys_pattern_t holds a bson_t, which must not be moved. */
    bson_copy_to(&p->spec, &spec);
    if (c->sharded) keys_pattern_free(&c->sk);
    c->sharded = false;
    rc = keys_pattern_parse(&spec, &c->sk, err);
    bson_destroy(&spec);
    if (rc != 0) goto out;
    c->sharded = true;
    c->sk_unique = unique;
    c->gen++;
    rc = coll_persist(t, c, err);
out:
    sqlite3_finalize(s);
    return rc;
}

/* ---- stats and meta ----------------------------------------------------------------- */

static int64_t dbstat_bytes(store_txn_t *t, const char *name) {
    sqlite3_stmt *s = store_stmt(t, "SELECT total(pgsize) FROM dbstat WHERE name = ?", NULL);
    int64_t v = 0;
    if (!s) return 0;  /* dbstat not compiled in: sizes reported as 0 */
    sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return v;
}

int store_coll_stats(store_txn_t *t, store_coll_t *c, int64_t *count, int64_t *bytes,
                     int64_t *storage_bytes, int64_t *index_bytes, ms_error_t *err) {
    char sql[128];
    (void)err;
    /* The fast counts (no scan); a write transaction sees its own changes too. */
    *count = __atomic_load_n(&c->fast_n, __ATOMIC_ACQUIRE) + (t->write ? c->delta_n : 0);
    *bytes = __atomic_load_n(&c->fast_bytes, __ATOMIC_ACQUIRE) + (t->write ? c->delta_bytes : 0);
    if (storage_bytes) {
        snprintf(sql, sizeof sql, "c%lld", (long long)c->id);
        *storage_bytes = dbstat_bytes(t, sql);
    }
    if (index_bytes) {
        int64_t ib = 0;
        snprintf(sql, sizeof sql, "sqlite_autoindex_c%lld_1", (long long)c->id);
        ib += dbstat_bytes(t, sql);
        for (int i = 1; i < c->nindexes; i++) {
            snprintf(sql, sizeof sql, "i%lld", (long long)c->ix[i]->id);
            ib += dbstat_bytes(t, sql);
        }
        *index_bytes = ib;
    }
    return 0;
}

int64_t store_index_bytes(store_txn_t *t, store_coll_t *c, int i) {
    char name[64];
    if (c->ix[i]->is_id)
        snprintf(name, sizeof name, "sqlite_autoindex_c%lld_1", (long long)c->id);
    else
        snprintf(name, sizeof name, "i%lld", (long long)c->ix[i]->id);
    return dbstat_bytes(t, name);
}

int64_t store_file_bytes(store_t *st) {
    struct stat sb;
    char wal[PATH_MAX + 8];
    int64_t n = 0;
    if (stat(st->path, &sb) == 0) n += sb.st_size;
    snprintf(wal, sizeof wal, "%s-wal", st->path);
    if (stat(wal, &sb) == 0) n += sb.st_size;
    return n;
}

typedef struct meta_arg {
    const char *key;
    const bson_t *in;
    bson_t *out;
} meta_arg_t;

static int meta_get_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    meta_arg_t *m = arg;
    sqlite3_stmt *s = store_stmt(t, "SELECT v FROM meta WHERE k = ?", err);
    int rc;
    if (!s) return err->code;
    sqlite3_bind_text(s, 1, m->key, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        bson_t view;
        if (!bson_init_static(&view, sqlite3_column_blob(s, 0), (size_t)sqlite3_column_bytes(s, 0))) {
            sqlite3_reset(s);
            return err_set(err, MS_ERR_INVALID_BSON, "bad meta value %s", m->key);
        }
        bson_copy_to(&view, m->out);
        sqlite3_reset(s);
        return 0;
    }
    sqlite3_reset(s);
    if (rc == SQLITE_DONE) return err_set(err, MS_ERR_NO_SUCH_KEY, "no meta value %s", m->key);
    return err_from_sqlite(err, rc, "meta get", t->c->db);
}

static int meta_put_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    meta_arg_t *m = arg;
    sqlite3_stmt *s = store_stmt(t, "INSERT OR REPLACE INTO meta(k, v) VALUES(?,?)", err);
    if (!s) return err->code;
    sqlite3_bind_text(s, 1, m->key, -1, SQLITE_STATIC);
    store_bind_blob(s, 2, bson_get_data(m->in), m->in->len);
    return store_step_done(t, s, "meta put", err);
}

int store_meta_get(store_t *st, const char *key, bson_t *out, ms_error_t *err) {
    meta_arg_t m = {key, NULL, out};
    return store_read(st, meta_get_fn, &m, err);
}

int store_meta_put(store_t *st, const char *key, const bson_t *value, ms_error_t *err) {
    meta_arg_t m = {key, value, NULL};
    return store_write(st, meta_put_fn, &m, err);
}
