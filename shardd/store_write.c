/*
 * store_write.c — THE single write path of the shard daemon's storage (bin/shardd):
 * store_write_doc, through which every insert, update and delete of a document on this
 * shard passes, inside a store_write or store_ddl transaction. Per document it checks and
 * encodes the _id key and the shard key (column sk), writes the row, maintains every
 * secondary index (the ready ones, and those being built beside writes: their unique
 * conflicts are recorded for the build's commit), marks indexes multikey, and calls the
 * write observer. A failing document leaves nothing behind: everything that can fail on
 * its content is checked before the first write, and a per-document savepoint covers what
 * can still fail after it. The write observer is where migration's write capture hooks in
 * (DESIGN §6/§7): it sees each write while its transaction is still open, so what it
 * captures must be published only after that transaction COMMITs (a rollback must not
 * leave a captured write behind): store.c's write_txn calls the observer's end hook after
 * COMMIT or ROLLBACK, still under the writer lock (shardd/xfer.c uses both). The rest of the storage layer is store.c and
 * store_index.c.
 */
#include "shardd/store_priv.h"

#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/mem.h"

/* ---- E11000 messages ---------------------------------------------------------------- */

/* {a: 1, b: "x"} → `{ a: 1, b: "x" }` as MongoDB prints dup keys. */
static void dupkey_text(const bson_t *kv, char *out, size_t outsz) {
    bson_iter_t it;
    size_t o = 0;
    bool first = true;
    o += (size_t)snprintf(out + o, outsz - o, "{ ");
    if (bson_iter_init(&it, kv))
        while (bson_iter_next(&it) && o < outsz) {
            bson_t one;
            char *js, *colon;
            size_t l;
            bson_init(&one);
            bsonx_append_iter(&one, "v", &it);
            js = bson_as_relaxed_extended_json(&one, NULL);
            bson_destroy(&one);
            if (!js) continue;
            colon = strstr(js, "\" : ");
            l = strlen(js);
            if (colon && l > 2) {
                js[l - 2] = '\0';  /* strip " }" */
                o += (size_t)snprintf(out + o, outsz - o, "%s%s: %s", first ? "" : ", ",
                                      bson_iter_key(&it), colon + 4);
            }
            bson_free(js);
            first = false;
        }
    if (o < outsz) snprintf(out + o, outsz - o, " }");
}

static int dup_error(store_coll_t *c, store_index_t *ix, const buf_t *key, const bson_t *doc,
                     bson_t *err_info, ms_error_t *err) {
    bson_t kv;
    char text[300];
    if (ix->is_id) {
        bson_iter_t it;
        bson_init(&kv);
        if (doc && bson_iter_init_find(&it, doc, "_id")) bsonx_append_iter(&kv, "_id", &it);
    } else {
        store_key_decode(&ix->pat, key->data, key->len, &kv);
    }
    dupkey_text(&kv, text, sizeof text);
    if (err_info) {
        BSON_APPEND_DOCUMENT(err_info, "keyPattern", &ix->pat.spec);
        BSON_APPEND_DOCUMENT(err_info, "keyValue", &kv);
    }
    bson_destroy(&kv);
    return err_set(err, MS_ERR_DUPLICATE_KEY,
                   "E11000 duplicate key error collection: %s index: %s dup key: %s", c->ns,
                   ix->name, text);
}

/* ---- THE write path ----------------------------------------------------------------- */

typedef struct ixkeys {
    buf_t *keys;
    int n;
} ixkeys_t;

/* Inserts (k, rid) into index ix's side table; *step_rc is SQLite's answer (DONE, or
 * CONSTRAINT when the key row exists). Nonzero only when the statement is not to be had. */
static int key_row_insert(store_txn_t *t, store_index_t *ix, const buf_t *k, int64_t rid,
                          int *step_rc, ms_error_t *err) {
    sqlite3_stmt *s;
    if (!(s = store_table_stmt(t, TS_KEY_INSERT, ix->id, err))) return err->code;
    store_bind_blob(s, 1, k->data, k->len);
    sqlite3_bind_int64(s, 2, rid);
    *step_rc = sqlite3_step(s);
    sqlite3_reset(s);
    return 0;
}

int store_index_put(store_txn_t *t, store_coll_t *c, store_index_t *ix, const buf_t *k,
                    int64_t rid, const bson_t *doc, bson_t *err_info, ms_error_t *err) {
    int rc, e;
    if ((e = key_row_insert(t, ix, k, rid, &rc, err)) != 0) return e;
    if (rc == SQLITE_DONE) return 0;
    if (rc == SQLITE_CONSTRAINT) {
        if (ix->unique) return dup_error(c, ix, k, doc, err_info, err);
        return 0;  /* the same (key, rid) twice: nothing to add */
    }
    return err_from_sqlite(err, rc, "index insert", t->c->db);
}

/* The record id that holds key k in a unique index's side table, or 0 (rare path: only
 * after a constraint conflict on an index being built). */
static int64_t unique_holder(store_txn_t *t, store_index_t *ix, const buf_t *k) {
    char sql[64];
    sqlite3_stmt *s;
    int64_t rid = 0;
    snprintf(sql, sizeof sql, "SELECT rid FROM i%lld WHERE k = ?", (long long)ix->id);
    if (!(s = store_stmt(t, sql, NULL))) return 0;
    store_bind_blob(s, 1, k->data, k->len);
    if (sqlite3_step(s) == SQLITE_ROW) rid = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return rid;
}

/* Adds key k of document rid to an index being built. Both the build's scan and the
 * writes beside it add keys, so the same (k, rid) twice is normal and a no-op. A unique
 * key held by another document: the scan (from_scan) fails the build with E11000 (both
 * documents are there in its snapshot); a write records the conflict for the commit to
 * re-check (the other document may be gone by then), as MongoDB does, and succeeds. */
int store_index_put_building(store_txn_t *t, store_coll_t *c, store_index_t *ix,
                             const buf_t *k, int64_t rid, const bson_t *doc, bool from_scan,
                             ms_error_t *err) {
    ibuild_t *b;
    int rc, e;
    if ((e = key_row_insert(t, ix, k, rid, &rc, err)) != 0) return e;
    if (rc == SQLITE_DONE) return 0;
    if (rc != SQLITE_CONSTRAINT) return err_from_sqlite(err, rc, "index insert", t->c->db);
    if (!ix->unique || unique_holder(t, ix, k) == rid) return 0;
    if (from_scan) return dup_error(c, ix, k, doc, NULL, err);
    if (!(b = store_ib_find(t->st, ix->id))) {
        b = xrealloc(NULL, sizeof *b);
        memset(b, 0, sizeof *b);
        b->ix_id = ix->id;
        b->next = t->st->builds;
        t->st->builds = b;
    }
    if (b->failed) return 0;
    if (b->n >= SHARDD_INDEX_BUILD_CONFLICTS_MAX) {
        b->failed = true;
        dup_error(c, ix, k, doc, NULL, &b->ferr);
        return 0;
    }
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 8;
        b->v = xrealloc(b->v, (size_t)b->cap * sizeof *b->v);
    }
    memset(&b->v[b->n].key, 0, sizeof b->v[b->n].key);
    buf_put(&b->v[b->n].key, k->data, k->len);
    b->v[b->n].rid = rid;
    b->n++;
    return 0;
}

static int index_del(store_txn_t *t, store_index_t *ix, const buf_t *k, int64_t rid,
                     ms_error_t *err) {
    sqlite3_stmt *s;
    if (!(s = store_table_stmt(t, TS_KEY_DELETE, ix->id, err))) return err->code;
    store_bind_blob(s, 1, k->data, k->len);
    sqlite3_bind_int64(s, 2, rid);
    return store_step_done(t, s, "index delete", err);
}

int store_mark_multikey(store_txn_t *t, store_index_t *ix, ms_error_t *err) {
    sqlite3_stmt *s;
    int expected = 0;
    if (atomic_load((_Atomic int *)&ix->multikey)) return 0;
    if (!(s = store_stmt(t, "UPDATE indexes SET multikey = 1 WHERE id = ?", err))) return err->code;
    sqlite3_bind_int64(s, 1, ix->id);
    if (store_step_done(t, s, "mark multikey", err) != 0) return err->code;
    /* Set before commit: a rollback leaves it on, which only costs the sort shortcut. */
    atomic_compare_exchange_strong((_Atomic int *)&ix->multikey, &expected, 1);
    return 0;
}

/* One savepoint statement of the per-document savepoint (prepared once per connection:
 * sqlite3_exec would parse it again for every document). err may be NULL. */
static int savepoint_step(store_txn_t *t, enum tstmt kind, ms_error_t *err) {
    ms_error_t scratch;
    sqlite3_stmt *s = store_table_stmt(t, kind, 0, err ? err : &scratch);
    if (!s) return err ? err->code : MS_ERR_INTERNAL;
    return store_step_done(t, s, store_tstmt_sql[kind], err ? err : &scratch);
}

static int encode_id(const bson_t *doc, buf_t *out, ms_error_t *err) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, "_id"))
        return err_set(err, MS_ERR_INVALID_ID_FIELD, "document has no _id");
    return keys_encode_field(out, &it, "_id", err);
}

int store_write_doc(store_txn_t *t, store_coll_t *c, int64_t rowid, const bson_t *old_doc,
                    const bson_t *new_doc, int64_t *new_rowid, bson_t *err_info,
                    ms_error_t *err) {
    store_t *st = t->st;
    buf_t id_new = {0}, id_old = {0}, sk_new = {0}, sk_old = {0};
    ixkeys_t oldk[MS_INDEXES_MAX], newk[MS_INDEXES_MAX];
    /* A point that may fail the document after its rows are written needs the savepoint
     * too: "on error nothing of this document is written" must hold for it. */
    bool fp_obs = fp_active(FP_BEFORE_WRITE_OBSERVER);
    bool need_sp = st->obs != NULL || fp_obs, in_sp = false, mk_new[MS_INDEXES_MAX];
    /* Every secondary index the write maintains: the ready ones, then those being built
     * (docs/storage.md "Index builds"); _id_ is the row itself. */
    store_index_t *ixs[MS_INDEXES_MAX];
    int nix = 0;
    sqlite3_stmt *s;
    int rc = 0, src;
    ASSERT(t->write);
    ASSERT(old_doc || new_doc);
    memset(oldk, 0, sizeof oldk);
    memset(newk, 0, sizeof newk);
    memset(mk_new, 0, sizeof mk_new);
    for (int i = 1; i < c->nindexes; i++) ixs[nix++] = c->ix[i];
    for (int i = 0; i < c->nbuilding; i++) ixs[nix++] = c->bix[i];
    ASSERT(nix < MS_INDEXES_MAX);

    /* Everything that can fail on the document's content is computed before any write. */
    if (new_doc) {
        if ((rc = bsonx_check_storable(new_doc, err)) != 0) goto out;
        if ((rc = encode_id(new_doc, &id_new, err)) != 0) goto out;
    }
    if (old_doc && (rc = encode_id(old_doc, &id_old, err)) != 0) goto out;
    if (old_doc && new_doc &&
        (id_old.len != id_new.len || memcmp(id_old.data, id_new.data, id_new.len) != 0)) {
        rc = err_set(err, MS_ERR_IMMUTABLE_FIELD,
                     "Performing an update on the path '_id' would modify the immutable field "
                     "'_id'");
        goto out;
    }
    if (c->sharded) {
        if (new_doc && (rc = keys_extract(&c->sk, new_doc, NULL, &sk_new, err)) != 0) goto out;
        if (old_doc && keys_extract(&c->sk, old_doc, NULL, &sk_old, NULL) != 0) buf_reset(&sk_old);
    }
    for (int i = 0; i < nix; i++) {
        bool mk = false;
        if (ixs[i]->unique && !ixs[i]->building) need_sp = true;
        if (new_doc) {
            /* A document an index being built cannot take (parallel arrays, key too
             * large) fails now; MongoDB would take it and fail the build at its commit. */
            if ((rc = store_index_keys(&ixs[i]->pat, new_doc, &newk[i].keys, &newk[i].n, &mk,
                                       err)) != 0)
                goto out;
            mk_new[i] = mk || newk[i].n > 1;
        }
        if (old_doc &&
            store_index_keys(&ixs[i]->pat, old_doc, &oldk[i].keys, &oldk[i].n, &mk, NULL) != 0)
            oldk[i].n = 0;  /* an old document always had valid keys; be lenient anyway */
    }

    if (need_sp) {
        if ((rc = savepoint_step(t, TS_SAVEPOINT, err)) != 0) goto out;
        in_sp = true;
    }
    /* The document row: _id uniqueness is the UNIQUE constraint on `id`. */
    if (!old_doc) {
        if (!(s = store_table_stmt(t, TS_DOC_INSERT, c->id, err))) { rc = err->code; goto out; }
        store_bind_blob(s, 1, id_new.data, id_new.len);
        if (c->sharded) store_bind_blob(s, 2, sk_new.data, sk_new.len); else sqlite3_bind_null(s, 2);
        store_bind_blob(s, 3, bson_get_data(new_doc), new_doc->len);
        src = sqlite3_step(s);
        sqlite3_reset(s);
        if (src == SQLITE_CONSTRAINT) {
            rc = dup_error(c, c->ix[0], &id_new, new_doc, err_info, err);
            goto out;
        }
        if (src != SQLITE_DONE) { rc = err_from_sqlite(err, src, "insert", t->c->db); goto out; }
        rowid = sqlite3_last_insert_rowid(t->c->db);
        if (new_rowid) *new_rowid = rowid;
    } else if (!new_doc) {
        if (!(s = store_table_stmt(t, TS_DOC_DELETE, c->id, err))) { rc = err->code; goto out; }
        sqlite3_bind_int64(s, 1, rowid);
        if ((rc = store_step_done(t, s, "delete", err)) != 0) goto out;
    } else {
        if (!(s = store_table_stmt(t, TS_DOC_UPDATE, c->id, err))) { rc = err->code; goto out; }
        if (c->sharded) store_bind_blob(s, 1, sk_new.data, sk_new.len); else sqlite3_bind_null(s, 1);
        store_bind_blob(s, 2, bson_get_data(new_doc), new_doc->len);
        sqlite3_bind_int64(s, 3, rowid);
        if ((rc = store_step_done(t, s, "update", err)) != 0) goto out;
    }
    /* Secondary indexes: remove keys that went away, add keys that appeared (both sorted). */
    for (int i = 0; i < nix; i++) {
        int a = 0, b = 0;
        while (a < oldk[i].n || b < newk[i].n) {
            int cmp = a >= oldk[i].n ? 1 : b >= newk[i].n ? -1
                                        : store_buf_cmp(&oldk[i].keys[a], &newk[i].keys[b]);
            if (cmp < 0) {
                if ((rc = index_del(t, ixs[i], &oldk[i].keys[a++], rowid, err)) != 0) goto out;
            } else if (cmp > 0) {
                if (ixs[i]->building)
                    rc = store_index_put_building(t, c, ixs[i], &newk[i].keys[b++], rowid,
                                                  new_doc, false, err);
                else
                    rc = store_index_put(t, c, ixs[i], &newk[i].keys[b++], rowid, new_doc,
                                         err_info, err);
                if (rc != 0) goto out;
            } else {
                a++;
                b++;
            }
        }
        if (mk_new[i] && (rc = store_mark_multikey(t, ixs[i], err)) != 0) goto out;
    }
    /* Where migration's write capture hooks in (DESIGN §6, notes §1.3): the document's
     * rows are written, its transaction is still open. */
    if (fp_obs && (rc = fp_eval(FP_BEFORE_WRITE_OBSERVER, err)) != 0) goto out;
    if (st->obs)
        st->obs(st->obs_arg, c->ns, old_doc, new_doc, c->sharded && old_doc ? &sk_old : NULL,
                c->sharded && new_doc ? &sk_new : NULL);
    if (in_sp) {
        in_sp = false;
        if ((rc = savepoint_step(t, TS_RELEASE, err)) != 0) goto out;
    }
out:
    if (rc == 0)
        store_counts_delta(t, c, (new_doc ? 1 : 0) - (old_doc ? 1 : 0),
                           (int64_t)(new_doc ? new_doc->len : 0) - (int64_t)(old_doc ? old_doc->len : 0));
    if (in_sp) {
        savepoint_step(t, TS_ROLLBACK_TO, NULL);
        savepoint_step(t, TS_RELEASE, NULL);
    }
    for (int i = 0; i < nix; i++) {
        store_keys_free(oldk[i].keys, oldk[i].n);
        store_keys_free(newk[i].keys, newk[i].n);
    }
    buf_free(&id_new);
    buf_free(&id_old);
    buf_free(&sk_new);
    buf_free(&sk_old);
    return rc;
}
