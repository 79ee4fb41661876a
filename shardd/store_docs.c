/*
 * store_docs.c — the shard's own persisted documents, run by bin/shardd: migration
 * coordinator, range-deletion and recipient documents (MongoDB keeps them in
 * config.migrationCoordinators, config.rangeDeletions, config.migrationRecipients of the
 * shard's own mongod; notes §1.7). Here they live in one table of the shard's SQLite file,
 *   shard_docs(coll TEXT, id TEXT, doc BLOB, PRIMARY KEY(coll, id))
 * written inside the caller's write transaction, so a task and the data change it
 * describes commit together (the range deleter's batch and its numOrphanDocs, say).
 * cmd_find serves them read-only under the config.<coll> names (store_sdoc_scan), and
 * config.transactions too: the retryable-write sessions of sessions.c, shaped like
 * MongoDB's documents of that collection.
 */
#include <sqlite3.h>
#include <string.h>

#include "shardd/sessions.h"
#include "shardd/store_priv.h"

static int need_write(store_txn_t *t, const char *what, ms_error_t *err) {
    if (!t->write)
        return err_set(err, MS_ERR_INTERNAL, "%s needs a write transaction", what);
    return 0;
}

int store_sdoc_put(store_txn_t *t, const char *coll, const char *id, const bson_t *doc,
                   ms_error_t *err) {
    int rc;
    if ((rc = need_write(t, "store_sdoc_put", err)) != 0) return rc;
    sqlite3_stmt *s =
        store_stmt(t, "INSERT OR REPLACE INTO shard_docs(coll, id, doc) VALUES(?,?,?)", err);
    if (!s) return err->code;
    sqlite3_bind_text(s, 1, coll, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, id, -1, SQLITE_STATIC);
    store_bind_blob(s, 3, bson_get_data(doc), doc->len);
    return store_step_done(t, s, "shard_docs put", err);
}

/* A stored blob as a document: *out initialised on success. */
static int blob_doc(sqlite3_stmt *s, int col, const char *coll, bson_t *out, ms_error_t *err) {
    const void *p = sqlite3_column_blob(s, col);
    int n = sqlite3_column_bytes(s, col);
    bson_t view;
    if (!p || n < 5 || !bson_init_static(&view, p, (size_t)n))
        return err_set(err, MS_ERR_INVALID_BSON, "bad document in shard_docs %s", coll);
    bson_copy_to(&view, out);
    return 0;
}

int store_sdoc_get(store_txn_t *t, const char *coll, const char *id, bson_t *out,
                   ms_error_t *err) {
    sqlite3_stmt *s = store_stmt(t, "SELECT doc FROM shard_docs WHERE coll = ? AND id = ?", err);
    if (!s) return err->code;
    sqlite3_bind_text(s, 1, coll, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, id, -1, SQLITE_STATIC);
    int src = sqlite3_step(s), rc;
    if (src == SQLITE_ROW) rc = blob_doc(s, 0, coll, out, err);
    else if (src == SQLITE_DONE)
        rc = err_set(err, MS_ERR_NO_SUCH_KEY, "no document %s in %s", id, coll);
    else
        rc = err_from_sqlite(err, src, "shard_docs get", t->c->db);
    sqlite3_reset(s);
    return rc;
}

int store_sdoc_delete(store_txn_t *t, const char *coll, const char *id, ms_error_t *err) {
    int rc;
    if ((rc = need_write(t, "store_sdoc_delete", err)) != 0) return rc;
    sqlite3_stmt *s = store_stmt(t, "DELETE FROM shard_docs WHERE coll = ? AND id = ?", err);
    if (!s) return err->code;
    sqlite3_bind_text(s, 1, coll, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, id, -1, SQLITE_STATIC);
    return store_step_done(t, s, "shard_docs delete", err);
}

int store_sdoc_scan(store_txn_t *t, const char *coll,
                    int (*fn)(void *arg, const char *id, const bson_t *doc), void *arg,
                    ms_error_t *err) {
    /* Not the statement cache: fn may call store_sdoc_get, which would reset a shared
     * statement under this loop. These tables hold a handful of rows. */
    sqlite3_stmt *s = NULL;
    sqlite3 *db = t->c->db;
    int src = sqlite3_prepare_v2(db, "SELECT id, doc FROM shard_docs WHERE coll = ? ORDER BY id",
                                 -1, &s, NULL);
    int rc = 0;
    if (src != SQLITE_OK) return err_from_sqlite(err, src, "shard_docs scan", db);
    sqlite3_bind_text(s, 1, coll, -1, SQLITE_STATIC);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        bson_t doc;
        const char *id = (const char *)sqlite3_column_text(s, 0);
        if ((rc = blob_doc(s, 1, coll, &doc, err)) != 0) break;
        rc = fn(arg, id ? id : "", &doc);
        bson_destroy(&doc);
        if (rc) break;
    }
    if (rc == 0 && src != SQLITE_DONE) rc = err_from_sqlite(err, src, "shard_docs scan", db);
    sqlite3_finalize(s);
    return rc;
}

/* ---- find on config.<coll> ------------------------------------------------------------ */

typedef struct sdoc_find {
    const query_t *q;
    int64_t limit, n;
    size_t bytes;
    bson_t *arr;
} sdoc_find_t;

static int sdoc_find_one(void *arg, const char *id, const bson_t *doc) {
    sdoc_find_t *f = arg;
    char key[24];
    (void)id;
    if (f->q && !query_match(f->q, doc)) return 0;
    /* One batch: stop where it would pass the reply cap (these tables hold a handful). */
    if (f->bytes + doc->len > MS_BATCH_BYTES_MAX) return 1;
    snprintf(key, sizeof key, "%lld", (long long)f->n);
    bson_append_document(f->arr, key, -1, doc);
    f->bytes += doc->len;
    f->n++;
    return f->limit > 0 && f->n >= f->limit ? 1 : 0;
}

const char *store_sdoc_coll_of(const char *ns) {
    static const char *const names[] = {SDOC_COORDINATORS, SDOC_RANGE_DELETIONS,
                                        SDOC_RECIPIENTS, SDOC_TRANSACTIONS};
    if (strncmp(ns, "config.", 7) != 0) return NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(ns + 7, names[i]) == 0) return names[i];
    return NULL;
}

typedef struct sdoc_find_txn {
    const char *coll;
    sdoc_find_t f;
} sdoc_find_txn_t;

static int txn_doc_one(void *arg, const bson_t *doc) {
    return sdoc_find_one(arg, NULL, doc);
}

static int sdoc_find_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sdoc_find_txn_t *a = arg;
    int rc = strcmp(a->coll, SDOC_TRANSACTIONS) == 0
                 ? sess_txn_docs(t, txn_doc_one, &a->f, err)
                 : store_sdoc_scan(t, a->coll, sdoc_find_one, &a->f, err);
    return rc == 1 ? 0 : rc;
}

int store_sdoc_find(store_t *st, const char *ns, const query_t *q, int64_t limit, bson_t *reply,
                    ms_error_t *err) {
    sdoc_find_txn_t a = {.coll = store_sdoc_coll_of(ns), .f = {.q = q, .limit = limit}};
    bson_t cur, arr;
    int rc;
    if (!a.coll) return err_set(err, MS_ERR_INTERNAL, "%s is not a shard document table", ns);
    bson_init(&arr);
    a.f.arr = &arr;
    if ((rc = store_read(st, sdoc_find_fn, &a, err)) != 0) {
        bson_destroy(&arr);
        return rc;
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_ARRAY(&cur, "firstBatch", &arr);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    bson_append_document_end(reply, &cur);
    bson_destroy(&arr);
    return 0;
}
