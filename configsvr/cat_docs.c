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

/* Index entries a per-shard chunk count reads under one hold of the catalog lock. */
#define CAT_COUNT_SLICE_ROWS 65536

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

static void database_doc(sqlite3_stmt *st, bson_t *doc) {
    BSON_APPEND_UTF8(doc, "_id", cat_col_text(st, 5));   /* {_id, primary, version} */
    cat_db_version_append(st, doc);
}

/* How each config collection is read: its columns, then its order key (the columns of a
 * unique index, so a page can resume strictly after the last row it served); by_ns when
 * rows carry their collection's ns (first key column), so a filter that names one
 * collection reads only that collection's rows. */
typedef struct cfg_table {
    const char *coll;
    const char *table;
    const char *cols;        /* the document's columns, as build reads them */
    const char *key;         /* the order key's columns (selected after cols) */
    int nkey;                /* 1 or 2 */
    bool by_ns;
    void (*build)(sqlite3_stmt *, bson_t *);
} cfg_table_t;

static const cfg_table_t CFG_TABLES[] = {
    {"shards", "shards", SHARD_COLS, "id", 1, false, cat_shard_doc},
    {"databases", "databases", "primary_shard, uuid, ts_t, ts_i, last_mod, name", "name", 1, false,
     database_doc},
    {"collections", "collections", COLL_COLS, "ns", 1, false, cat_coll_doc},
    {"chunks", "chunks", CHUNK_COLS, "ns, min_enc", 2, true, cat_chunk_doc},
    {"tags", "tags", "id, ns, min, max, tag", "ns, min_enc", 2, true, tag_doc},
    {"settings", "settings", "doc", "id_enc", 1, false, stored_doc},
    {"locks", "locks", "doc", "id", 1, false, stored_doc},
    {"changelog", "changelog", "doc", "seq", 1, false, stored_doc},
    {"actionlog", "actionlog", "doc", "seq", 1, false, stored_doc},
    {"migrations", "migrations", "doc", "id", 1, false, stored_doc},
    {"mongos", "mongos", "id, ping_ms, up, waiting, mongo_version", "id", 1, false, mongos_doc},
    {"version", "version", "cluster_id", "id", 1, false, version_doc},
};

static const cfg_table_t *cfg_table(const char *coll) {
    for (size_t i = 0; i < sizeof CFG_TABLES / sizeof CFG_TABLES[0]; i++)
        if (strcmp(coll, CFG_TABLES[i].coll) == 0) return &CFG_TABLES[i];
    return NULL;
}

const char *cat_config_coll(int i) {
    return i >= 0 && i < (int)(sizeof CFG_TABLES / sizeof CFG_TABLES[0]) ? CFG_TABLES[i].coll
                                                                         : NULL;
}

bool cat_config_known(const char *coll) {
    return cfg_table(coll) != NULL;
}

int cat_config_scan(cat_t *c, const char *coll, cat_doc_fn fn, void *arg, ms_error_t *err) {
    const cfg_table_t *t = cfg_table(coll);
    char sql[512];
    sqlite3_stmt *st = NULL;
    int rc, s;
    if (!t) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "config.%s is not a config collection", coll);
    snprintf(sql, sizeof sql, "SELECT %s, %s FROM %s ORDER BY %s", t->cols, t->key, t->table, t->key);
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, sql, &st, err);
    if (rc) goto out;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        bson_t doc = BSON_INITIALIZER;
        t->build(st, &doc);
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

/* ---- keyset paging ------------------------------------------------------------------- */

struct cat_page_pos {
    sqlite3_value *key[2];   /* the order key of the last row served (NULL before the first) */
    bool done;               /* the last page came back short: nothing is left */
};

cat_page_pos_t *cat_page_pos_new(void) {
    cat_page_pos_t *p = calloc(1, sizeof *p);
    ASSERT(p);
    return p;
}

void cat_page_pos_free(cat_page_pos_t *p) {
    if (!p) return;
    for (int i = 0; i < 2; i++) sqlite3_value_free(p->key[i]);
    free(p);
}

bool cat_page_pos_done(const cat_page_pos_t *p) { return p->done; }

/* The WHERE clause of a page: the collection named by pin (?1: ns, or ?1: a collection's
 * uuid looked up in collections), and past the last key served (?2, ?3). */
static void page_where(const cfg_table_t *t, const cat_pin_t *pin, const cat_page_pos_t *pos,
                       char *out, size_t cap) {
    const char *pin_sql = "", *after = "";
    bool pinned = t->by_ns && pin && (pin->ns || pin->uuid);
    if (t->by_ns && pin && pin->ns) pin_sql = " AND ns = ?1";
    else if (t->by_ns && pin && pin->uuid) pin_sql = " AND ns = (SELECT ns FROM collections WHERE uuid = ?1)";
    /* Within one collection the seek is on min_enc alone: SQLite would not seek on the
     * row value (ns, min_enc) once ns is fixed, and would walk from the collection's first
     * chunk on every page. */
    if (pos->key[0]) after = t->nkey == 1 ? " > ?2" : pinned ? " AND min_enc > ?3"
                                                             : " AND (ns, min_enc) > (?2, ?3)";
    snprintf(out, cap, " WHERE 1%s%s%s%s", pin_sql, pos->key[0] && t->nkey == 1 ? " AND " : "",
             pos->key[0] && t->nkey == 1 ? t->key : "", after);
}

static void page_bind(sqlite3_stmt *st, const cat_pin_t *pin, const cat_page_pos_t *pos, int rows) {
    if (pin && pin->ns) sqlite3_bind_text(st, 1, pin->ns, -1, SQLITE_TRANSIENT);
    else if (pin && pin->uuid) sqlite3_bind_blob(st, 1, pin->uuid, 16, SQLITE_TRANSIENT);
    for (int i = 0; i < 2 && pos->key[i]; i++) sqlite3_bind_value(st, 2 + i, pos->key[i]);
    sqlite3_bind_int(st, 4, rows);
}

static void page_advance(const cfg_table_t *t, sqlite3_stmt *st, cat_page_pos_t *pos) {
    int first = sqlite3_column_count(st) - t->nkey;
    for (int i = 0; i < t->nkey; i++) {
        sqlite3_value_free(pos->key[i]);
        pos->key[i] = sqlite3_value_dup(sqlite3_column_value(st, first + i));
        ASSERT(pos->key[i]);
    }
}

/* One statement per page, the catalog lock held for that page only: a cursor over a
 * million chunks never holds the lock, nor memory, for more than rows_max rows. The rows
 * come in the order key's order through its unique index (no OFFSET: each page starts at
 * an index seek past the last key). */
int cat_config_page(cat_t *c, const char *coll, const cat_pin_t *pin, cat_page_pos_t *pos,
                    int rows_max, cat_doc_fn fn, void *arg, ms_error_t *err) {
    const cfg_table_t *t = cfg_table(coll);
    char where[160], sql[768];
    sqlite3_stmt *st = NULL;
    int rc, s = SQLITE_DONE, rows = 0;
    if (!t) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "config.%s is not a config collection", coll);
    if (pos->done) return 0;
    page_where(t, pin, pos, where, sizeof where);
    snprintf(sql, sizeof sql, "SELECT %s, %s FROM %s%s ORDER BY %s LIMIT ?4", t->cols, t->key, t->table,
             where, t->key);
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, sql, &st, err);
    if (rc) goto out;
    page_bind(st, pin, pos, rows_max);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        bson_t doc = BSON_INITIALIZER;
        t->build(st, &doc);
        rc = fn(arg, &doc);
        bson_destroy(&doc);
        if (rc == CAT_PAGE_STOP) {   /* not taken: the next page starts with this row */
            rc = 0;
            goto out;
        }
        if (rc) goto out;
        page_advance(t, st, pos);
        rows++;
    }
    if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "page of config collection", c->db);
    else if (rows < rows_max) pos->done = true;
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* count(*) of the rows of config.chunks or config.tags (pinned to one collection or not)
 * meeting cond, a SQL expression of the row (?5: the shard): the rows are walked in
 * slices of CAT_COUNT_SLICE_ROWS in key order, each slice one statement seeking past the
 * last, so the catalog lock is held for a slice at a time, however many rows there are. */
static int count_sliced(cat_t *c, const cfg_table_t *t, const cat_pin_t *pin, const char *cond,
                        const char *shard, int64_t *n, ms_error_t *err) {
    cat_page_pos_t *pos = cat_page_pos_new();
    char where[160], sql[1024];
    int64_t total = 0;
    int rc = 0;
    while (rc == 0 && !pos->done) {
        sqlite3_stmt *st = NULL;
        int s = SQLITE_DONE, rows = 0;
        page_where(t, pin, pos, where, sizeof where);
        snprintf(sql, sizeof sql, "SELECT %s, %s FROM %s%s ORDER BY %s LIMIT ?4", cond, t->key, t->table,
                 where, t->key);
        pthread_mutex_lock(&c->mu);
        if ((rc = cat_sql_prep(c, sql, &st, err)) == 0) {
            page_bind(st, pin, pos, CAT_COUNT_SLICE_ROWS);
            if (shard) sqlite3_bind_text(st, 5, shard, -1, SQLITE_TRANSIENT);
            while ((s = sqlite3_step(st)) == SQLITE_ROW) {
                total += sqlite3_column_int(st, 0);
                page_advance(t, st, pos);
                rows++;
            }
            if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "count config collection", c->db);
        }
        sqlite3_finalize(st);
        pthread_mutex_unlock(&c->mu);
        if (rows < CAT_COUNT_SLICE_ROWS) pos->done = true;
    }
    cat_page_pos_free(pos);
    if (rc == 0) *n = total;
    return rc;
}

/* The chunks of the pinned collection (or of all), on one shard or all, jumbo ones or all:
 * a sum over chunk_counts, the per-(collection, shard) counts the catalog's triggers keep
 * with every chunk change — a row per shard read, whatever the chunk count. */
static int chunks_count(cat_t *c, const cat_pin_t *pin, const char *shard, bool jumbo, int64_t *n,
                        ms_error_t *err) {
    char sql[384];
    sqlite3_stmt *st = NULL;
    int rc, s;
    snprintf(sql, sizeof sql, "SELECT coalesce(sum(%s), 0) FROM chunk_counts WHERE 1%s%s", jumbo ? "jumbo" : "n",
             pin && pin->ns ? " AND ns = ?1" : pin && pin->uuid ? " AND ns = (SELECT ns FROM collections WHERE uuid = ?1)" : "",
             shard ? " AND shard = ?2" : "");
    pthread_mutex_lock(&c->mu);
    if ((rc = cat_sql_prep(c, sql, &st, err)) == 0) {
        if (pin && pin->ns) sqlite3_bind_text(st, 1, pin->ns, -1, SQLITE_TRANSIENT);
        else if (pin && pin->uuid) sqlite3_bind_blob(st, 1, pin->uuid, 16, SQLITE_TRANSIENT);
        if (shard) sqlite3_bind_text(st, 2, shard, -1, SQLITE_TRANSIENT);
        if ((s = sqlite3_step(st)) == SQLITE_ROW) *n = sqlite3_column_int64(st, 0);
        else rc = err_from_sqlite(err, s, "count chunks", c->db);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* count(*) of config.<coll>, of the pinned collection's rows, of those on one shard when
 * shard is not NULL and of the jumbo ones when jumbo (chunks only): no document is built;
 * the chunks from chunk_counts (chunks_count), the tags a slice at a time (count_sliced),
 * the small collections at once. */
int cat_config_count(cat_t *c, const char *coll, const cat_pin_t *pin, const char *shard,
                     bool jumbo, int64_t *n, ms_error_t *err) {
    const cfg_table_t *t = cfg_table(coll);
    char sql[384];
    sqlite3_stmt *st = NULL;
    int rc, s;
    if (!t) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "config.%s is not a config collection", coll);
    if (strcmp(coll, "chunks") == 0) return chunks_count(c, pin, shard, jumbo, n, err);
    if (jumbo) return err_set(err, MS_ERR_BAD_VALUE, "config.%s has no jumbo flag", coll);
    if (t->by_ns) {
        snprintf(sql, sizeof sql, "(1%s)", shard ? " AND shard = ?5" : "");
        return count_sliced(c, t, pin, sql, shard, n, err);
    }
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", t->table);
    pthread_mutex_lock(&c->mu);
    if ((rc = cat_sql_prep(c, sql, &st, err)) == 0) {
        if ((s = sqlite3_step(st)) == SQLITE_ROW) *n = sqlite3_column_int64(st, 0);
        else rc = err_from_sqlite(err, s, "count config collection", c->db);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Chunks per (collection, shard), of the pinned collection or of all (sh.status()'s
 * per-shard counts, the web view's cards): read from chunk_counts, which the catalog's
 * triggers keep in the same transaction as every chunk change (catalog.c), so the answer
 * costs a row per (collection, shard), not a walk of a million index entries. */
int cat_chunk_counts(cat_t *c, const cat_pin_t *pin, cat_count_fn fn, void *arg, ms_error_t *err) {
    const char *sql =
        pin && pin->ns     ? "SELECT ns, shard, n FROM chunk_counts WHERE ns = ?1 ORDER BY ns, shard"
        : pin && pin->uuid ? "SELECT ns, shard, n FROM chunk_counts"
                             " WHERE ns = (SELECT ns FROM collections WHERE uuid = ?1) ORDER BY ns, shard"
                           : "SELECT ns, shard, n FROM chunk_counts ORDER BY ns, shard";
    sqlite3_stmt *st = NULL;
    int rc, s = SQLITE_DONE;
    pthread_mutex_lock(&c->mu);
    if ((rc = cat_sql_prep(c, sql, &st, err)) == 0) {
        if (pin && pin->ns) sqlite3_bind_text(st, 1, pin->ns, -1, SQLITE_TRANSIENT);
        else if (pin && pin->uuid) sqlite3_bind_blob(st, 1, pin->uuid, 16, SQLITE_TRANSIENT);
        while (rc == 0 && (s = sqlite3_step(st)) == SQLITE_ROW)
            if (sqlite3_column_int64(st, 2) > 0)
                rc = fn(arg, cat_col_text(st, 0), cat_col_text(st, 1), sqlite3_column_int64(st, 2));
        if (rc == 0 && s != SQLITE_DONE) rc = err_from_sqlite(err, s, "count chunks per shard", c->db);
    }
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
