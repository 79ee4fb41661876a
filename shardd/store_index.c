/*
 * store_index.c — index DDL of the shard daemon's storage (bin/shardd): createIndexes
 * in one transaction (store_index_create), MongoDB's hybrid build beside reads and writes
 * (store_index_build_register / _scan / _commit / _abort: register, scan in batches that
 * yield to writers, commit with the re-check of the unique conflicts writes recorded), and
 * dropIndexes. The keys each document gives an index are computed in store.c, and the
 * writes beside a build add theirs in store_write.c. See docs/storage.md "Index builds".
 */
#include "shardd/store_priv.h"

#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/mem.h"

/* ---- unique conflicts of builds in progress (store_priv.h) -------------------------- */

ibuild_t *store_ib_find(store_t *st, int64_t ix_id) {
    for (ibuild_t *b = st->builds; b; b = b->next)
        if (b->ix_id == ix_id) return b;
    return NULL;
}

static void ib_destroy(ibuild_t *b) {
    for (int i = 0; i < b->n; i++) buf_free(&b->v[i].key);
    free(b->v);
    free(b);
}

static void ib_forget(store_t *st, int64_t ix_id) {
    for (ibuild_t **p = &st->builds; *p; p = &(*p)->next)
        if ((*p)->ix_id == ix_id) {
            ibuild_t *b = *p;
            *p = b->next;
            ib_destroy(b);
            return;
        }
}

void store_ib_free_all(store_t *st) {
    while (st->builds) {
        ibuild_t *b = st->builds;
        st->builds = b->next;
        ib_destroy(b);
    }
}

/* ---- index DDL ---------------------------------------------------------------------- */

void store_index_name(const bson_t *key, char *out, size_t outsz) {
    bson_iter_t it;
    size_t o = 0;
    out[0] = '\0';
    if (!bson_iter_init(&it, key)) return;
    while (bson_iter_next(&it) && o < outsz) {
        char val[64];
        if (BSON_ITER_HOLDS_UTF8(&it))
            snprintf(val, sizeof val, "%s", bson_iter_utf8(&it, NULL));
        else if (BSON_ITER_HOLDS_DOUBLE(&it))
            snprintf(val, sizeof val, "%g", bson_iter_double(&it));
        else if (BSON_ITER_HOLDS_INT32(&it))
            snprintf(val, sizeof val, "%d", bson_iter_int32(&it));
        else if (BSON_ITER_HOLDS_INT64(&it))
            snprintf(val, sizeof val, "%lld", (long long)bson_iter_int64(&it));
        else
            snprintf(val, sizeof val, "1");
        o += (size_t)snprintf(out + o, outsz - o, "%s%s_%s", o ? "_" : "", bson_iter_key(&it), val);
    }
}

static bool spec_bool(const bson_t *spec, const char *name) {
    bson_iter_t it;
    return bson_iter_init_find(&it, spec, name) && bsonx_truthy(&it);
}

/* Builds every document's keys into a new index's side table. */
static int index_build(store_txn_t *t, store_coll_t *c, store_index_t *ix, ms_error_t *err) {
    char sql[96];
    sqlite3_stmt *s = NULL;
    int rc = 0, src;
    bool any_mk = false;
    snprintf(sql, sizeof sql, "SELECT rid, doc FROM c%lld", (long long)c->id);
    if ((src = sqlite3_prepare_v2(t->c->db, sql, -1, &s, NULL)) != SQLITE_OK)
        return err_from_sqlite(err, src, "index build", t->c->db);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        bson_t doc;
        buf_t *keys = NULL;
        int nk = 0;
        bool mk = false;
        if (!bson_init_static(&doc, sqlite3_column_blob(s, 1), (size_t)sqlite3_column_bytes(s, 1))) {
            rc = err_set(err, MS_ERR_INVALID_BSON, "corrupt document");
            goto out;
        }
        if ((rc = store_index_keys(&ix->pat, &doc, &keys, &nk, &mk, err)) != 0) goto out;
        if (mk || nk > 1) any_mk = true;
        for (int k = 0; k < nk && rc == 0; k++)
            rc = store_index_put(t, c, ix, &keys[k], sqlite3_column_int64(s, 0), &doc, NULL,
                                 err);
        store_keys_free(keys, nk);
        if (rc != 0) goto out;
    }
    if (src != SQLITE_DONE) rc = err_from_sqlite(err, src, "index build", t->c->db);
    if (rc == 0 && any_mk) ix->multikey = 1;
out:
    sqlite3_finalize(s);
    return rc;
}

/* Checks a user's index spec against the collection's indexes (ready and being built)
 * and makes the new index with its empty side table (next table number). *existed when an
 * identical one is ready, or is being built by this command (mine); *out = NULL then.
 * Identical and being built by another command → IndexBuildAlreadyInProgress. */
static int index_prepare(store_txn_t *t, store_coll_t *c, const bson_t *user_spec,
                         const int64_t *mine, int nmine, bool *existed, store_index_t **out,
                         ms_error_t *err) {
    bson_iter_t it;
    bson_t key, spec;
    const uint8_t *data;
    uint32_t len;
    char name[128];
    keys_pattern_t pat;
    store_index_t *ix = NULL;
    bool unique = spec_bool(user_spec, "unique");
    int rc;
    *existed = false;
    *out = NULL;
    if (!bson_iter_init_find(&it, user_spec, "key") || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "index specification must have a 'key' document");
    bson_iter_document(&it, &len, &data);
    if (!bson_init_static(&key, data, len)) return err_set(err, MS_ERR_INVALID_BSON, "bad key");
    if ((rc = keys_pattern_parse(&key, &pat, err)) != 0) {
        if (rc == MS_ERR_BAD_VALUE) err->code = rc = MS_ERR_CANNOT_CREATE_INDEX;
        return rc;
    }
    if (bson_iter_init_find(&it, user_spec, "name")) {
        if (!BSON_ITER_HOLDS_UTF8(&it) || !*bson_iter_utf8(&it, NULL)) {
            keys_pattern_free(&pat);
            return err_set(err, MS_ERR_CANNOT_CREATE_INDEX, "index name must be a non-empty string");
        }
        snprintf(name, sizeof name, "%s", bson_iter_utf8(&it, NULL));
    } else {
        store_index_name(&key, name, sizeof name);
    }
    if (unique && pat.hashed_field >= 0) {
        keys_pattern_free(&pat);
        return err_set(err, MS_ERR_CANNOT_CREATE_INDEX, "Currently hashed indexes cannot guarantee "
                       "uniqueness. Use a regular index.");
    }
    /* MongoDB's rules: same name + same key + same options → no-op; same name with another
     * key → IndexKeySpecsConflict; same key under another name or options →
     * IndexOptionsConflict. Indexes being built count as MongoDB's in-progress ones. */
    for (int i = 0; i < c->nindexes + c->nbuilding; i++) {
        store_index_t *o = i < c->nindexes ? c->ix[i] : c->bix[i - c->nindexes];
        bool same_key = keys_pattern_equal(&o->pat, &pat) && bson_equal(&o->pat.spec, &key);
        bool same_name = strcmp(o->name, name) == 0;
        bool same_opts = o->unique == unique || (o->is_id && unique);
        if (same_name && same_key && same_opts) {
            bool own = false;
            for (int m = 0; m < nmine; m++) own = own || mine[m] == o->id;
            keys_pattern_free(&pat);
            if (o->building && !own)
                return err_set(err, MS_ERR_INDEX_BUILD_ALREADY_IN_PROGRESS,
                               "Index build already in progress: %s on %s", name, c->ns);
            *existed = true;
            return 0;
        }
        if (same_name && !same_key) {
            keys_pattern_free(&pat);
            return err_set(err, MS_ERR_INDEX_KEY_SPECS_CONFLICT,
                           "An existing index has the same name as the requested index. When "
                           "index names are not specified, they are auto generated and can cause "
                           "conflicts. Please refer to our documentation. Requested index: %s, "
                           "existing index: %s", name, o->name);
        }
        if (same_key) {
            keys_pattern_free(&pat);
            return err_set(err, MS_ERR_INDEX_OPTIONS_CONFLICT,
                           "An equivalent index already exists with a different name and "
                           "options. Requested index: %s, existing index: %s", name, o->name);
        }
    }
    keys_pattern_free(&pat);
    if (c->nindexes + c->nbuilding >= MS_INDEXES_MAX)
        return err_set(err, MS_ERR_CANNOT_CREATE_INDEX, "add index fails, too many indexes for %s",
                       c->ns);
    bson_init(&spec);
    BSON_APPEND_INT32(&spec, "v", 2);
    BSON_APPEND_DOCUMENT(&spec, "key", &key);
    BSON_APPEND_UTF8(&spec, "name", name);
    if (unique) BSON_APPEND_BOOL(&spec, "unique", true);
    rc = store_index_new(&spec, t->st->next_id, false, &ix, err);
    bson_destroy(&spec);
    if (rc != 0) return rc;
    if (ix->unique)
        rc = store_sql_fmt_exec(t, err,
                                "CREATE TABLE i%lld(k BLOB PRIMARY KEY, rid INTEGER NOT NULL)"
                                " WITHOUT ROWID", (long long)ix->id);
    else
        rc = store_sql_fmt_exec(t, err,
                                "CREATE TABLE i%lld(k BLOB NOT NULL, rid INTEGER NOT NULL,"
                                " PRIMARY KEY(k, rid)) WITHOUT ROWID", (long long)ix->id);
    if (rc != 0) {
        store_index_free(ix);
        return rc;
    }
    t->st->next_id++;
    *out = ix;
    return 0;
}

static int index_persist(store_txn_t *t, store_coll_t *c, store_index_t *ix, bool ready,
                         ms_error_t *err) {
    sqlite3_stmt *s = store_stmt(t, "INSERT INTO indexes(ns, name, id, spec, multikey, ready)"
                                 " VALUES(?,?,?,?,?,?)", err);
    if (!s) return err->code;
    sqlite3_bind_text(s, 1, c->ns, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, ix->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, ix->id);
    store_bind_blob(s, 4, bson_get_data(&ix->spec), ix->spec.len);
    sqlite3_bind_int(s, 5, ix->multikey);
    sqlite3_bind_int(s, 6, ready);
    return store_step_done(t, s, "save index", err);
}

int store_index_create(store_txn_t *t, store_coll_t *c, const bson_t *user_spec, bool *existed,
                       ms_error_t *err) {
    store_index_t *ix = NULL;
    int rc;
    if ((rc = index_prepare(t, c, user_spec, NULL, 0, existed, &ix, err)) != 0 || !ix) return rc;
    if ((rc = index_build(t, c, ix, err)) != 0) goto fail;
    if ((rc = index_persist(t, c, ix, true, err)) != 0) goto fail;
    c->ix[c->nindexes++] = ix;
    c->gen++;
    log_info("index created ns=%s name=%s table=i%lld", log_str(c->ns), log_str(ix->name),
             (long long)ix->id);
    return 0;
fail:
    store_index_free(ix);
    return rc;
}

/* ---- index builds beside reads and writes ------------------------------------------ */

int store_index_build_register(store_txn_t *t, store_coll_t *c, const bson_t *spec,
                               const int64_t *mine, int nmine, bool *existed, int64_t *id_out,
                               ms_error_t *err) {
    store_index_t *ix = NULL;
    int rc;
    *id_out = 0;
    if ((rc = index_prepare(t, c, spec, mine, nmine, existed, &ix, err)) != 0 || !ix) return rc;
    if ((rc = index_persist(t, c, ix, false, err)) != 0) {
        store_index_free(ix);
        return rc;
    }
    ix->building = true;
    c->bix[c->nbuilding++] = ix;
    *id_out = ix->id;
    log_info("index build registered ns=%s name=%s table=i%lld", c->ns, ix->name,
             (long long)ix->id);
    return 0;
}

static int building_at(const store_coll_t *c, int64_t id) {
    for (int i = 0; i < c->nbuilding; i++)
        if (c->bix[i]->id == id) return i;
    return -1;
}

typedef struct ib_batch {
    const char *ns;
    const int64_t *ids;
    int n;
    int64_t after_rid;          /* resume after this record id */
    int64_t rows;               /* documents scanned so far */
    bool done;
} ib_batch_t;

static int aborted_error(const char *ns, ms_error_t *err) {
    return err_set(err, MS_ERR_INDEX_BUILD_ABORTED,
                   "Index build aborted: the collection %s or an index being built was dropped",
                   ns);
}

/* One batch of a build, inside a write transaction (writer mutex, catalog shared): the
 * next SHARDD_INDEX_BUILD_BATCH_ROWS documents after the last record id, their keys into
 * every index of the build. The catalog is looked up afresh: between batches anything may
 * have changed, and a build whose index or collection went is aborted. */
static int ib_batch_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    ib_batch_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    store_index_t *ixs[MS_INDEXES_MAX];
    char sql[96];
    sqlite3_stmt *s;
    int rc = 0, src, got = 0;
    if (!c) return aborted_error(a->ns, err);
    for (int i = 0; i < a->n; i++) {
        int at = building_at(c, a->ids[i]);
        ibuild_t *b = store_ib_find(t->st, a->ids[i]);
        if (at < 0) return aborted_error(a->ns, err);
        if (b && b->failed) {
            *err = b->ferr;
            return err->code;
        }
        ixs[i] = c->bix[at];
    }
    snprintf(sql, sizeof sql, "SELECT rid, doc FROM c%lld WHERE rid > ? ORDER BY rid LIMIT %d",
             (long long)c->id, SHARDD_INDEX_BUILD_BATCH_ROWS);
    if (!(s = store_stmt(t, sql, err))) return err->code;
    sqlite3_bind_int64(s, 1, a->after_rid);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t rid = sqlite3_column_int64(s, 0);
        bson_t doc;
        if (!bson_init_static(&doc, sqlite3_column_blob(s, 1), (size_t)sqlite3_column_bytes(s, 1))) {
            rc = err_set(err, MS_ERR_INVALID_BSON, "corrupt document rid=%lld", (long long)rid);
            goto out;
        }
        for (int i = 0; i < a->n; i++) {
            buf_t *keys = NULL;
            int nk = 0;
            bool mk = false;
            if ((rc = store_index_keys(&ixs[i]->pat, &doc, &keys, &nk, &mk, err)) != 0) goto out;
            for (int k = 0; k < nk && rc == 0; k++)
                rc = store_index_put_building(t, c, ixs[i], &keys[k], rid, &doc, true, err);
            store_keys_free(keys, nk);
            if (rc == 0 && (mk || nk > 1)) rc = store_mark_multikey(t, ixs[i], err);
            if (rc != 0) goto out;
        }
        a->after_rid = rid;
        got++;
    }
    if (src != SQLITE_DONE) rc = err_from_sqlite(err, src, "index build", t->c->db);
out:
    sqlite3_reset(s);
    a->rows += got;
    a->done = got < SHARDD_INDEX_BUILD_BATCH_ROWS;
    return rc;
}

int store_index_build_scan(store_t *st, const char *ns, const int64_t *ids, int n,
                           ms_error_t *err) {
    ib_batch_t a = {ns, ids, n, 0, 0, false};
    long long t0 = time_mono_ms();
    int rc, batches = 0;
    ASSERT(n > 0 && n < MS_INDEXES_MAX);
    while (!a.done) {
        /* Between two batches no lock is held: writes and DDL of any collection run. A
         * mutex is not fair — the build would take it back at once — so it first lets
         * the writers already waiting go (for at most SHARDD_INDEX_BUILD_YIELD_MS, so a
         * stream of writes cannot starve it). */
        long long until = time_mono_ms() + SHARDD_INDEX_BUILD_YIELD_MS;
        while (batches > 0 && atomic_load(&st->wwaiting) > 0 && time_mono_ms() < until)
            nanosleep(&(struct timespec){0, 100000L}, NULL);
        if ((rc = store_write(st, ib_batch_fn, &a, err)) != 0) return rc;
        batches++;
        if ((rc = fp_eval(FP_INDEX_BUILD_AFTER_BATCH, err)) != 0) return rc;
    }
    log_info("index build scanned ns=%s indexes=%d docs=%lld batches=%d ms=%lld", ns, n,
             (long long)a.rows, batches, time_mono_ms() - t0);
    return 0;
}

int store_index_build_commit(store_txn_t *t, const char *ns, const int64_t *ids, int n,
                             ms_error_t *err) {
    store_coll_t *c = store_coll_get(t, ns);
    sqlite3_stmt *s;
    int rc;
    if (!c) return aborted_error(ns, err);
    for (int i = 0; i < n; i++)
        if (building_at(c, ids[i]) < 0) return aborted_error(ns, err);
    for (int i = 0; i < n; i++) {
        store_index_t *ix = c->bix[building_at(c, ids[i])];
        ibuild_t *b = store_ib_find(t->st, ids[i]);
        if (b && b->failed) {
            *err = b->ferr;
            return err->code;
        }
        /* The conflicts writes left: a document that still has the key must get it now;
         * if another still holds it, the build fails (MongoDB's commit-time check). */
        for (int v = 0; b && v < b->n; v++) {
            bson_t doc;
            buf_t *keys = NULL;
            int nk = 0;
            bool mk = false, has = false;
            ms_error_t gone;
            if (store_get_by_rowid(t, c, b->v[v].rid, &doc, &gone) != 0) continue;
            if (store_index_keys(&ix->pat, &doc, &keys, &nk, &mk, NULL) == 0)
                for (int k = 0; k < nk; k++)
                    has = has || store_buf_cmp(&keys[k], &b->v[v].key) == 0;
            store_keys_free(keys, nk);
            rc = has ? store_index_put_building(t, c, ix, &b->v[v].key, b->v[v].rid, &doc,
                                                true, err)
                     : 0;
            bson_destroy(&doc);
            if (rc != 0) return rc;
        }
        if (!(s = store_stmt(t, "UPDATE indexes SET ready = 1 WHERE id = ?", err))) return err->code;
        sqlite3_bind_int64(s, 1, ix->id);
        if ((rc = store_step_done(t, s, "index ready", err)) != 0) return rc;
    }
    /* In memory last: a failure above leaves the catalog as it was (store_ddl reloads it
     * from the file anyway). */
    for (int i = 0; i < n; i++) {
        int at = building_at(c, ids[i]);
        store_index_t *ix = c->bix[at];
        memmove(&c->bix[at], &c->bix[at + 1], (size_t)(c->nbuilding - at - 1) * sizeof c->bix[0]);
        c->nbuilding--;
        ix->building = false;
        c->ix[c->nindexes++] = ix;
        ib_forget(t->st, ids[i]);
        log_info("index created ns=%s name=%s table=i%lld", c->ns, ix->name, (long long)ix->id);
    }
    c->gen++;
    return 0;
}

static int building_drop(store_txn_t *t, store_coll_t *c, int at, ms_error_t *err) {
    store_index_t *ix = c->bix[at];
    sqlite3_stmt *s;
    int rc;
    store_cache_clear(t->c);  /* statements naming a table about to go */
    if ((rc = store_sql_fmt_exec(t, err, "DROP TABLE i%lld", (long long)ix->id)) != 0) return rc;
    if (!(s = store_stmt(t, "DELETE FROM indexes WHERE id = ?", err))) return err->code;
    sqlite3_bind_int64(s, 1, ix->id);
    if ((rc = store_step_done(t, s, "drop index", err)) != 0) return rc;
    memmove(&c->bix[at], &c->bix[at + 1], (size_t)(c->nbuilding - at - 1) * sizeof c->bix[0]);
    c->nbuilding--;
    c->gen++;
    log_info("index build aborted ns=%s name=%s table=i%lld", c->ns, ix->name, (long long)ix->id);
    store_index_free(ix);
    return 0;
}

typedef struct ib_abort {
    const char *ns;
    const int64_t *ids;
    int n;
} ib_abort_t;

static int ib_abort_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    ib_abort_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    int rc;
    for (int i = 0; i < a->n; i++) {
        int at = c ? building_at(c, a->ids[i]) : -1;
        if (at >= 0 && (rc = building_drop(t, c, at, err)) != 0) return rc;
    }
    return 0;
}

void store_index_build_abort(store_t *st, const char *ns, const int64_t *ids, int n) {
    ib_abort_t a = {ns, ids, n};
    ms_error_t e = {0};
    if (store_ddl(st, ib_abort_fn, &a, &e) != 0)
        log_error("index build abort failed ns=%s errmsg=\"%s\"", ns, e.msg);
    pthread_mutex_lock(&st->wmu);
    for (int i = 0; i < n; i++) ib_forget(st, ids[i]);
    pthread_mutex_unlock(&st->wmu);
}

int store_index_drop(store_txn_t *t, store_coll_t *c, const char *name, ms_error_t *err) {
    store_index_t *ix = store_index_by_name(c, name);
    sqlite3_stmt *s;
    int rc, at = -1;
    if (!ix) {
        /* An index being built: the build is aborted (MongoDB 7.0's dropIndexes does so). */
        for (int i = 0; i < c->nbuilding; i++)
            if (strcmp(c->bix[i]->name, name) == 0) return building_drop(t, c, i, err);
        return err_set(err, MS_ERR_INDEX_NOT_FOUND, "index not found with name [%s]", name);
    }
    if (ix->is_id) return err_set(err, MS_ERR_INVALID_OPTIONS, "cannot drop _id index");
    store_cache_clear(t->c);  /* statements naming a table about to go */
    if ((rc = store_sql_fmt_exec(t, err, "DROP TABLE i%lld", (long long)ix->id)) != 0) return rc;
    if (!(s = store_stmt(t, "DELETE FROM indexes WHERE ns = ? AND name = ?", err))) return err->code;
    sqlite3_bind_text(s, 1, c->ns, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
    if ((rc = store_step_done(t, s, "drop index", err)) != 0) return rc;
    for (int i = 0; i < c->nindexes; i++)
        if (c->ix[i] == ix) at = i;
    ASSERT(at > 0);
    memmove(&c->ix[at], &c->ix[at + 1], (size_t)(c->nindexes - at - 1) * sizeof c->ix[0]);
    c->nindexes--;
    c->gen++;
    log_info("index dropped ns=%s name=%s", log_str(c->ns), log_str(ix->name));
    store_index_free(ix);
    return 0;
}
