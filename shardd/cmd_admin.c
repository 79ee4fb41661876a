/*
 * cmd_admin.c — the shard daemon's catalog and admin commands (bin/shardd): create,
 * createIndexes, listIndexes, dropIndexes, drop, dropDatabase, listCollections,
 * listDatabases, collStats, dbStats, renameCollection, and the cluster hooks the config server calls: _addShard
 * (MongoDB's shardIdentity document), _shardsvrShardCollection (the shard's half of
 * shardCollection: shard-key index, pattern, `sk` column) and
 * _flushRoutingTableCacheUpdates. Each catalog change is one SQLite transaction, with a
 * failpoint as its last step before COMMIT (and after it where a reply follows), so a
 * test can kill the daemon there (docs/protocol.md "Shard daemon: failpoints").
 */
#include "shardd/shardd.h"
#include "shardd/mig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/validate.h"

static void append_uuid(bson_t *d, const char *key, const uint8_t *uuid) {
    bson_append_binary(d, key, -1, BSON_SUBTYPE_UUID, uuid, 16);
}

/* The reply of a listing that fits one batch: {cursor: {id: 0, ns, firstBatch}}. */
static void append_first_batch(bson_t *reply, const char *cursor_ns, const bson_t *arr) {
    bson_t cur;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", cursor_ns);
    BSON_APPEND_ARRAY(&cur, "firstBatch", arr);
    bson_append_document_end(reply, &cur);
}

/* ---- create / createIndexes --------------------------------------------------------- */

typedef struct cc_arg {
    const char *ns;
    bool created;
} cc_arg_t;

static int create_coll_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    cc_arg_t *a = arg;
    if (store_coll_get(t, a->ns))
        return err_set(err, MS_ERR_NAMESPACE_EXISTS, "Collection %s already exists.", a->ns);
    return store_coll_create(t, a->ns, NULL, NULL, &a->created, err);
}

int cmd_create(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    char ns[MS_NS_BYTES_MAX + 8];
    cc_arg_t a;
    int rc;
    (void)reply;
    memset(&a, 0, sizeof a);
    if ((rc = shardd_ns_versioned(ctx, ns, sizeof ns, NULL, err)) != 0) return rc;
    a.ns = ns;
    return shardd_ddl_guarded(ctx, ns, create_coll_fn, &a, err);
}

static void pattern_text(const bson_t *p, char *dst, size_t cap) {
    char *js = bsonx_to_json(p);
    snprintf(dst, cap, "%s", js ? js : "?");
    bson_free(js);
}


int cmd_create_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    shardd_index_result_t res;
    shv_filter_t *own = NULL;
    bson_iter_t it, specs;
    int rc;
    /* A snapshot comes back only for a sharded collection's versioned request. */
    if ((rc = shardd_ns_versioned(ctx, ns, sizeof ns, &own, err)) != 0) return rc;
    bool sharded = own != NULL;
    shv_filter_release(own);
    if (!cmd_field(ctx, "indexes", &it) || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &specs))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'createIndexes.indexes' is missing");
    /* Serialized with a migration of ns on this shard (mig.h, mig_index_ddl_begin). */
    bool waited = false;
    if (app->mig && (rc = mig_index_ddl_begin(app->mig, ns, &waited, err)) != 0) return rc;
    rc = shardd_build_indexes(app, ctx, ns, NULL, sharded, &specs, &res, err);
    if (app->mig) mig_index_ddl_end(app->mig, ns);
    if (rc != 0) return rc;
    if ((rc = fp_eval(FP_AFTER_INDEX_BUILD_COMMIT, err)) != 0) return rc;
    BSON_APPEND_INT32(reply, "numIndexesBefore", res.before);
    BSON_APPEND_INT32(reply, "numIndexesAfter", res.after);
    BSON_APPEND_BOOL(reply, "createdCollectionAutomatically", res.created);
    if (res.existed == res.n) BSON_APPEND_UTF8(reply, "note", "all indexes already exist");
    return 0;
}

/* ---- listIndexes / dropIndexes ------------------------------------------------------ */

typedef struct li_arg {
    const char *ns;
    bson_t *arr;
} li_arg_t;

static int list_indexes_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    li_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "ns does not exist: %s", a->ns);
    for (int i = 0; i < c->nindexes; i++) {
        char key[16];
        snprintf(key, sizeof key, "%d", i);
        BSON_APPEND_DOCUMENT(a->arr, key, &c->ix[i]->spec);
    }
    return 0;
}

int cmd_list_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8], cns[MS_NS_BYTES_MAX + 64];
    bson_t arr = BSON_INITIALIZER;
    li_arg_t a = {ns, &arr};
    int rc;
    if ((rc = shardd_ns_versioned(ctx, ns, sizeof ns, NULL, err)) != 0) goto out;
    if ((rc = store_read(app->st, list_indexes_fn, &a, err)) != 0) goto out;
    snprintf(cns, sizeof cns, "%s.$cmd.listIndexes.%s", ctx->db, bson_iter_utf8(&ctx->arg, NULL));
    append_first_batch(reply, cns, &arr);
out:
    bson_destroy(&arr);
    return rc;
}

typedef struct di_arg {
    const char *ns;
    bson_iter_t index;
    int was;
    fp_early_t fpe;                /* its before-commit point, evaluated before the lock */
} di_arg_t;

static int drop_one_index(store_txn_t *t, store_coll_t *c, const bson_iter_t *v, ms_error_t *err) {
    if (BSON_ITER_HOLDS_UTF8(v)) {
        const char *name = bson_iter_utf8(v, NULL);
        if (strcmp(name, "*") == 0) {
            int rc;
            while (c->nindexes > 1)
                if ((rc = store_index_drop(t, c, c->ix[c->nindexes - 1]->name, err)) != 0) return rc;
            /* and aborts every build in progress, as MongoDB 7.0 */
            while (c->nbuilding > 0)
                if ((rc = store_index_drop(t, c, c->bix[c->nbuilding - 1]->name, err)) != 0) return rc;
            return 0;
        }
        if (strcmp(name, "_id_") == 0)
            return err_set(err, MS_ERR_INVALID_OPTIONS, "cannot drop _id index");
        return store_index_drop(t, c, name, err);
    }
    if (BSON_ITER_HOLDS_DOCUMENT(v)) {
        bson_t key;
        if (!bsonx_view_container(v, &key)) return err_set(err, MS_ERR_INVALID_BSON, "bad index key");
        for (int i = 0; i < c->nindexes; i++)
            if (bson_equal(&c->ix[i]->pat.spec, &key)) {
                if (c->ix[i]->is_id) return err_set(err, MS_ERR_INVALID_OPTIONS, "cannot drop _id index");
                return store_index_drop(t, c, c->ix[i]->name, err);
            }
        for (int i = 0; i < c->nbuilding; i++)  /* a build in progress is aborted */
            if (bson_equal(&c->bix[i]->pat.spec, &key)) return store_index_drop(t, c, c->bix[i]->name, err);
        {
            char *js = bsonx_to_json(&key);
            int rc = err_set(err, MS_ERR_INDEX_NOT_FOUND, "can't find index with key: %s", js ? js : "?");
            bson_free(js);
            return rc;
        }
    }
    return err_set(err, MS_ERR_TYPE_MISMATCH, "index must be a string, an object or an array of names");
}

static int drop_indexes_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    di_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    int rc;
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "ns not found %s", a->ns);
    a->was = c->nindexes;
    if (BSON_ITER_HOLDS_ARRAY(&a->index)) {
        bson_iter_t ch;
        if (!bson_iter_recurse(&a->index, &ch)) return err_set(err, MS_ERR_INVALID_BSON, "bad array");
        while (bson_iter_next(&ch)) {
            if (!BSON_ITER_HOLDS_UTF8(&ch) || strcmp(bson_iter_utf8(&ch, NULL), "*") == 0)
                return err_set(err, MS_ERR_BAD_VALUE, "an array of index names may hold names only");
            if ((rc = drop_one_index(t, c, &ch, err)) != 0) return rc;
        }
    } else if ((rc = drop_one_index(t, c, &a->index, err)) != 0) {
        return rc;
    }
    return fp_late(&a->fpe, err);
}

int cmd_drop_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    char ns[MS_NS_BYTES_MAX + 8];
    di_arg_t a;
    int rc;
    memset(&a, 0, sizeof a);
    if ((rc = shardd_ns_versioned(ctx, ns, sizeof ns, NULL, err)) != 0) return rc;
    if (!cmd_field(ctx, "index", &a.index))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'dropIndexes.index' is missing");
    a.ns = ns;
    /* Serialized with a migration of ns on this shard (mig.h, mig_index_ddl_begin). */
    shardd_t *app = ctx->app;
    bool waited = false;
    if (app->mig && (rc = mig_index_ddl_begin(app->mig, ns, &waited, err)) != 0) return rc;
    fp_eval_early(FP_BEFORE_DROP_INDEXES_COMMIT, &a.fpe);
    rc = shardd_ddl_guarded(ctx, ns, drop_indexes_fn, &a, err);
    if (app->mig) mig_index_ddl_end(app->mig, ns);
    if (rc == MS_ERR_INDEX_NOT_FOUND && waited) {
        /* The migration we waited for made this shard's indexes equal to its donor's,
         * where this drop had already run: the index is gone, as asked. */
        log_info("dropIndexes found its index already dropped by a migration's index sync ns=%s",
                 log_str(ns));
        memset(err, 0, sizeof *err);
        rc = 0;
    }
    if (rc != 0) return rc;
    BSON_APPEND_INT32(reply, "nIndexesWas", a.was);
    return 0;
}

/* ---- drop / dropDatabase ------------------------------------------------------------ */

typedef struct drop_arg {
    const char *ns;
    const char *db;
    int was;
    bool existed;
    char dropped[64][MS_NS_BYTES_MAX + 1];
    int ndropped;
    fp_early_t fpe;                /* its before-commit point, evaluated before the lock */
} drop_arg_t;

static int drop_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    drop_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    int rc;
    if (!c) return 0;
    a->existed = true;
    a->was = c->nindexes;
    if ((rc = store_coll_drop(t, a->ns, err)) != 0) return rc;
    return fp_late(&a->fpe, err);
}

int cmd_drop(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    drop_arg_t *a = calloc(1, sizeof *a);
    int rc;
    if (!a) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    if ((rc = shardd_ns(ctx, ns, sizeof ns, err)) != 0) goto out;
    a->ns = ns;
    fp_eval_early(FP_BEFORE_DROP_COMMIT, &a->fpe);
    if ((rc = shardd_ddl_guarded(ctx, ns, drop_fn, a, err)) != 0) goto out;
    if (app->shv) shv_invalidate(app->shv, ns);
    /* MongoDB 7.0: dropping a missing collection succeeds. */
    BSON_APPEND_UTF8(reply, "ns", ns);
    BSON_APPEND_INT32(reply, "nIndexesWas", a->was);
out:
    free(a);
    return rc;
}

static int drop_db_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    drop_arg_t *a = arg;
    size_t dl = strlen(a->db);
    for (int i = store_coll_count(t) - 1; i >= 0; i--) {
        store_coll_t *c = store_coll_at(t, i);
        int rc;
        if (strncmp(c->ns, a->db, dl) != 0 || c->ns[dl] != '.') continue;
        if (a->ndropped < 64) snprintf(a->dropped[a->ndropped++], sizeof a->dropped[0], "%s", c->ns);
        if ((rc = store_coll_drop(t, c->ns, err)) != 0) return rc;
        i = store_coll_count(t);  /* the catalog array moved: start over */
        a->existed = true;
    }
    return a->existed ? fp_late(&a->fpe, err) : 0;
}

int cmd_drop_database(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    drop_arg_t *a = calloc(1, sizeof *a);
    int rc;
    if (!a) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    a->db = ctx->db;
    if (!strcmp(ctx->db, "admin") || !strcmp(ctx->db, "local") || !strcmp(ctx->db, "config")) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "Cannot drop '%s' database", ctx->db);
        goto out;
    }
    fp_eval_early(FP_BEFORE_DROP_COMMIT, &a->fpe);
    if ((rc = store_ddl(app->st, drop_db_fn, a, err)) != 0) goto out;
    for (int i = 0; i < a->ndropped && app->shv; i++) shv_invalidate(app->shv, a->dropped[i]);
    /* The database's own entry too (its databaseVersion), even when this shard held none
     * of its collections: a re-created database may have another primary. */
    if (app->shv) shv_invalidate(app->shv, ctx->db);
    BSON_APPEND_UTF8(reply, "dropped", ctx->db);
out:
    free(a);
    return rc;
}

/* ---- listCollections / listDatabases / collStats ------------------------------------ */

typedef struct lc_arg {
    const char *db;
    query_t *filter;
    bool name_only;
    bson_t *arr;
    int n;
} lc_arg_t;

static int list_colls_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    lc_arg_t *a = arg;
    size_t dl = strlen(a->db);
    (void)err;
    for (int i = 0; i < store_coll_count(t); i++) {
        store_coll_t *c = store_coll_at(t, i);
        bson_t e, info;
        char key[16];
        if (strncmp(c->ns, a->db, dl) != 0 || c->ns[dl] != '.') continue;
        bson_init(&e);
        BSON_APPEND_UTF8(&e, "name", c->ns + dl + 1);
        BSON_APPEND_UTF8(&e, "type", "collection");
        if (!a->name_only) {
            BSON_APPEND_DOCUMENT(&e, "options", &c->options);
            BSON_APPEND_DOCUMENT_BEGIN(&e, "info", &info);
            BSON_APPEND_BOOL(&info, "readOnly", false);
            append_uuid(&info, "uuid", c->uuid);
            bson_append_document_end(&e, &info);
            BSON_APPEND_DOCUMENT(&e, "idIndex", &c->ix[0]->spec);
        }
        if (!a->filter || query_match(a->filter, &e)) {
            snprintf(key, sizeof key, "%d", a->n++);
            BSON_APPEND_DOCUMENT(a->arr, key, &e);
        }
        bson_destroy(&e);
    }
    return 0;
}

int cmd_list_collections(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    bson_t arr = BSON_INITIALIZER, f;
    bson_iter_t it;
    char cns[MS_NS_BYTES_MAX + 32];
    lc_arg_t a = {ctx->db, NULL, cmd_flag(ctx, "nameOnly", false), &arr, 0};
    int rc = 0;
    if (cmd_field(ctx, "filter", &it) && bsonx_view_container(&it, &f) && (rc = query_compile(&f, &a.filter, err)) != 0)
        goto out;
    if ((rc = store_read(app->st, list_colls_fn, &a, err)) != 0) goto out;
    snprintf(cns, sizeof cns, "%s.$cmd.listCollections", ctx->db);
    append_first_batch(reply, cns, &arr);
out:
    query_free(a.filter);
    bson_destroy(&arr);
    return rc;
}

/* One database of listDatabases: the namespaces' prefix, with its sizes summed. */
typedef struct db_entry {
    char name[MS_NS_BYTES_MAX + 1];
    int64_t size_on_disk;
    bool empty;
} db_entry_t;

typedef struct ldb_arg {
    bool name_only;
    query_t *filter;          /* on the entries as listed; NULL = all */
    bson_t *arr;
    int n;
    int64_t total;
} ldb_arg_t;

/* The entry of ns's database in dbs (added, empty, when first seen). */
static db_entry_t *db_entry_of(db_entry_t *dbs, int *ndb, const char *ns) {
    const char *dot = strchr(ns, '.');
    int len = (int)(dot ? dot - ns : (long)strlen(ns));
    for (int j = 0; j < *ndb; j++)
        if ((int)strlen(dbs[j].name) == len && strncmp(dbs[j].name, ns, (size_t)len) == 0)
            return &dbs[j];
    snprintf(dbs[*ndb].name, sizeof dbs[0].name, "%.*s", len, ns);
    dbs[*ndb].empty = true;
    return &dbs[(*ndb)++];
}

/* Appends {name, sizeOnDisk, empty} ({name} with nameOnly) when it passes the filter
 * (MongoDB's listDatabases: the filter sees the entry as it would be returned, and
 * totalSize sums the databases returned). */
static void list_db_entry(ldb_arg_t *a, const db_entry_t *d) {
    bson_t e = BSON_INITIALIZER;
    char key[16];
    BSON_APPEND_UTF8(&e, "name", d->name);
    if (!a->name_only) {
        BSON_APPEND_INT64(&e, "sizeOnDisk", d->size_on_disk);
        BSON_APPEND_BOOL(&e, "empty", d->empty);
    }
    if (!a->filter || query_match(a->filter, &e)) {
        snprintf(key, sizeof key, "%d", a->n++);
        BSON_APPEND_DOCUMENT(a->arr, key, &e);
        a->total += d->size_on_disk;
    }
    bson_destroy(&e);
}

static int list_dbs_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    ldb_arg_t *a = arg;
    int n = store_coll_count(t), ndb = 0, rc = 0;
    db_entry_t *dbs = calloc((size_t)n + 1, sizeof *dbs);
    if (!dbs) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    for (int i = 0; i < n; i++) {
        store_coll_t *c = store_coll_at(t, i);
        db_entry_t *d = db_entry_of(dbs, &ndb, c->ns);
        int64_t cnt, bytes, sb = 0, ib = 0;
        if (a->name_only) continue;   /* nameOnly skips the size statistics */
        if ((rc = store_coll_stats(t, c, &cnt, &bytes, &sb, &ib, err)) != 0) goto out;
        d->size_on_disk += sb + ib;
        if (cnt) d->empty = false;
    }
    for (int j = 0; j < ndb; j++) list_db_entry(a, &dbs[j]);
out:
    free(dbs);
    return rc;
}

int cmd_list_databases(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    bson_t arr = BSON_INITIALIZER, f;
    bson_iter_t it;
    ldb_arg_t a = {cmd_flag(ctx, "nameOnly", false), NULL, &arr, 0, 0};
    int rc = 0;
    if (cmd_field(ctx, "filter", &it) && bsonx_view_container(&it, &f) && (rc = query_compile(&f, &a.filter, err)) != 0)
        goto out;
    if ((rc = store_read(app->st, list_dbs_fn, &a, err)) != 0) goto out;
    BSON_APPEND_ARRAY(reply, "databases", &arr);
    if (!a.name_only) {
        BSON_APPEND_INT64(reply, "totalSize", a.total);
        BSON_APPEND_INT64(reply, "totalSizeMb", a.total / (1024 * 1024));
    }
out:
    query_free(a.filter);
    bson_destroy(&arr);
    return rc;
}

typedef struct cs_arg {
    const char *ns;
    bson_t *reply;
    int64_t scale;
} cs_arg_t;

typedef struct orphan_sum {
    const char *ns;
    int64_t n;
} orphan_sum_t;

static int orphan_task(void *arg, const char *id, const bson_t *doc) {
    orphan_sum_t *o = arg;
    bson_iter_t it;
    (void)id;
    if (bson_iter_init_find(&it, doc, "nss") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), o->ns) == 0 &&
        bson_iter_init_find(&it, doc, "numOrphanDocs") && BSON_ITER_HOLDS_NUMBER(&it))
        o->n += bson_iter_as_int64(&it);
    return 0;
}

static int coll_stats_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    cs_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    int64_t cnt, bytes, sb, ib;
    bson_t sizes;
    int rc;
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "Collection [%s] not found.", a->ns);
    if ((rc = store_coll_stats(t, c, &cnt, &bytes, &sb, &ib, err)) != 0) return rc;
    BSON_APPEND_UTF8(a->reply, "ns", a->ns);
    BSON_APPEND_BOOL(a->reply, "sharded", c->sharded);
    if (c->sharded) BSON_APPEND_DOCUMENT(a->reply, "shardKey", &c->sk.spec);
    BSON_APPEND_INT64(a->reply, "count", cnt);
    BSON_APPEND_INT64(a->reply, "size", bytes / a->scale);
    BSON_APPEND_INT64(a->reply, "avgObjSize", cnt ? bytes / cnt : 0);
    if (c->sharded) {
        /* MongoDB 6.0+: the documents this shard holds but no longer owns, as its range
         * deletion tasks count them ($shardedDataDistribution, sh.status()). */
        orphan_sum_t o = {a->ns, 0};
        if ((rc = store_sdoc_scan(t, SDOC_RANGE_DELETIONS, orphan_task, &o, err)) != 0) return rc;
        BSON_APPEND_INT64(a->reply, "numOrphanDocs", o.n);
    }
    BSON_APPEND_INT64(a->reply, "storageSize", sb / a->scale);
    BSON_APPEND_INT32(a->reply, "nindexes", c->nindexes);
    BSON_APPEND_INT64(a->reply, "totalIndexSize", ib / a->scale);
    BSON_APPEND_DOCUMENT_BEGIN(a->reply, "indexSizes", &sizes);
    for (int i = 0; i < c->nindexes; i++)
        BSON_APPEND_INT64(&sizes, c->ix[i]->name, store_index_bytes(t, c, i) / a->scale);
    bson_append_document_end(a->reply, &sizes);
    BSON_APPEND_INT64(a->reply, "scaleFactor", a->scale);
    return 0;
}

int cmd_coll_stats(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    cs_arg_t a = {ns, reply, 1};
    bson_iter_t it;
    int rc;
    if ((rc = shardd_ns_versioned(ctx, ns, sizeof ns, NULL, err)) != 0) return rc;
    if (cmd_field(ctx, "scale", &it) && (!bsonx_as_int64(&it, &a.scale) || a.scale < 1))
        return err_set(err, MS_ERR_BAD_VALUE, "scale has to be >= 1");
    return store_read(app->st, coll_stats_fn, &a, err);
}

int shardd_coll_stats(shardd_t *app, const char *ns, int64_t scale, bson_t *out, ms_error_t *err) {
    cs_arg_t a = {ns, out, scale};
    return store_read(app->st, coll_stats_fn, &a, err);
}

/* ---- renameCollection ---------------------------------------------------------------- */

typedef struct rename_arg {
    const char *from, *to;
    bool drop_target;
} rename_arg_t;

static int rename_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    rename_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->from), *target;
    int rc;
    if (!c)
        return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "Source collection %s does not exist",
                       a->from);
    if (c->sharded)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "cannot rename sharded collection %s: minishard renames unsharded "
                       "collections only", a->from);
    if ((target = store_coll_get(t, a->to)) != NULL) {
        if (!a->drop_target) return err_set(err, MS_ERR_NAMESPACE_EXISTS, "target namespace exists");
        if (target->sharded)
            return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                           "cannot drop sharded collection %s as the target of a rename", a->to);
        if ((rc = store_coll_drop(t, a->to, err)) != 0) return rc;
    }
    return store_coll_rename(t, a->from, a->to, err);
}

/* {renameCollection: "db.a", to: "db.b", dropTarget?} on the admin database, as a mongod
 * answers it for an unsharded collection: same data, indexes and uuid under the new name,
 * in one transaction (with dropTarget, the existing target is dropped in it too). Only
 * within one database: minishard does not copy collections across databases. Versioned
 * like a write (the router sends the database's version): a shard that is no longer the
 * primary answers StaleDbVersion. */
int cmd_rename_collection(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    rename_arg_t a = {0};
    shv_filter_t *f = NULL;
    bson_iter_t it;
    uint32_t tlen = 0;
    int rc;
    (void)reply;
    if (strcmp(ctx->db, "admin") != 0)
        return err_set(err, MS_ERR_UNAUTHORIZED,
                       "renameCollection may only be run against the admin database.");
    a.from = bson_iter_utf8(&ctx->arg, NULL);   /* a valid "db.c": dispatch checked it */
    if (!cmd_field(ctx, "to", &it)) return err_set(err, MS_ERR_FAILED_TO_PARSE, "missing 'to'");
    a.to = bson_iter_utf8(&it, &tlen);
    if ((rc = val_full_ns(a.to, tlen, true, err)) != 0) return rc;
    a.drop_target = cmd_flag(ctx, "dropTarget", false);
    if ((rc = val_rename(a.from, a.to, err)) != 0) return rc;
    if (app->shv) {
        if ((rc = shv_crit_check_read(app->shv, a.from, ctx->req, &ctx->err_info, err)) != 0)
            return rc;
        rc = shv_check(app->shv, a.from, ctx->req, &f, &ctx->err_info, err);
        shv_filter_release(f);
        if (rc) return rc;
    }
    if ((rc = shardd_ddl_guarded(ctx, a.from, rename_fn, &a, err)) != 0) return rc;
    if (app->shv) {
        shv_invalidate(app->shv, a.from);
        shv_invalidate(app->shv, a.to);
    }
    return 0;
}

/* ---- dbStats ------------------------------------------------------------------------ */

/* One database's sums over its collections on this shard (all of its namespaces that start
 * with "<db>."; sizes in bytes, unscaled). */
typedef struct dbs_arg {
    const char *db;
    int64_t colls, objects, data, storage, indexes, index_bytes;
} dbs_arg_t;

static int db_stats_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    dbs_arg_t *a = arg;
    size_t dl = strlen(a->db);
    for (int i = 0; i < store_coll_count(t); i++) {
        store_coll_t *c = store_coll_at(t, i);
        int64_t cnt, bytes, sb, ib;
        int rc;
        if (strncmp(c->ns, a->db, dl) != 0 || c->ns[dl] != '.') continue;
        if ((rc = store_coll_stats(t, c, &cnt, &bytes, &sb, &ib, err)) != 0) return rc;
        a->colls++;
        a->objects += cnt;
        a->data += bytes;
        a->storage += sb;
        a->indexes += c->nindexes;
        a->index_bytes += ib;
    }
    return 0;
}

/* {dbStats: 1, scale?, freeStorage?} as a mongod answers it: the database's collections,
 * documents, data, storage and index bytes on this shard (storage = the SQLite pages of
 * its collections' tables and indexes, as collStats counts them), and the file system
 * that holds the data directory. There are no views (views: 0). freeStorage is accepted
 * and answered with nothing more: SQLite's free pages belong to the whole file, not to
 * one database. A database that does not exist answers zeros, as MongoDB does. */
int cmd_db_stats(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    dbs_arg_t a = {.db = ctx->db};
    int64_t scale = 1, fs_used = 0, fs_total = 0;
    struct statvfs vfs;
    bson_iter_t it;
    int rc;
    if (cmd_field(ctx, "scale", &it) && (rc = val_scale(&it, "scale", &scale, err)) != 0)
        return rc;
    if ((rc = store_read(app->st, db_stats_fn, &a, err)) != 0) return rc;
    if (statvfs(store_path(app->st), &vfs) == 0) {
        fs_total = (int64_t)vfs.f_blocks * (int64_t)vfs.f_frsize;
        fs_used = ((int64_t)vfs.f_blocks - (int64_t)vfs.f_bfree) * (int64_t)vfs.f_frsize;
    }
    BSON_APPEND_UTF8(reply, "db", ctx->db);
    BSON_APPEND_INT64(reply, "collections", a.colls);
    BSON_APPEND_INT64(reply, "views", 0);
    BSON_APPEND_INT64(reply, "objects", a.objects);
    /* Not scaled, as MongoDB's (SERVER-7347). */
    BSON_APPEND_DOUBLE(reply, "avgObjSize", a.objects ? (double)a.data / (double)a.objects : 0);
    BSON_APPEND_INT64(reply, "dataSize", a.data / scale);
    BSON_APPEND_INT64(reply, "storageSize", a.storage / scale);
    BSON_APPEND_INT64(reply, "indexes", a.indexes);
    BSON_APPEND_INT64(reply, "indexSize", a.index_bytes / scale);
    BSON_APPEND_INT64(reply, "totalSize", (a.storage + a.index_bytes) / scale);
    BSON_APPEND_INT64(reply, "scaleFactor", scale);
    BSON_APPEND_INT64(reply, "fsUsedSize", fs_used / scale);
    BSON_APPEND_INT64(reply, "fsTotalSize", fs_total / scale);
    return 0;
}

/* ---- cluster hooks ------------------------------------------------------------------ */

#define META_IDENTITY "shardIdentity"

static bool str_field(const bson_t *d, const char *name, const char **out) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, d, name) || !BSON_ITER_HOLDS_UTF8(&it)) return false;
    *out = bson_iter_utf8(&it, NULL);
    return **out != '\0';
}

int cmd_add_shard(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    bson_iter_t it;
    bson_t ident, old;
    const char *name, *cfg, *oldname = NULL;
    int rc;
    (void)reply;
    if (!cmd_field(ctx, "shardIdentity", &it) || !bsonx_view_container(&it, &ident))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field '_addShard.shardIdentity' is missing");
    if (!str_field(&ident, "shardName", &name) || !str_field(&ident, "configsvrConnectionString", &cfg))
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "shardIdentity needs shardName and configsvrConnectionString");
    /* MongoDB refuses a second identity: a shard belongs to one cluster under one name. */
    if (store_meta_get(app->st, META_IDENTITY, &old, NULL) == 0) {
        bool same = str_field(&old, "shardName", &oldname) && strcmp(oldname, name) == 0;
        if (!same) {
            rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                         "this shard already has the identity '%s'; cannot become '%s'",
                         oldname ? oldname : "?", name);
            bson_destroy(&old);
            return rc;
        }
        bson_destroy(&old);
    }
    if ((rc = store_meta_put(app->st, META_IDENTITY, &ident, err)) != 0) return rc;
    shv_set_identity(app->shv, name, cfg);
    log_info("shard identity set shard=%s config=%s", log_str(name), log_str(cfg));
    return 0;
}

int shardd_load_identity(shardd_t *app, ms_error_t *err) {
    bson_t ident;
    const char *name, *cfg;
    int rc = store_meta_get(app->st, META_IDENTITY, &ident, err);
    if (rc == MS_ERR_NO_SUCH_KEY) return 0;
    if (rc != 0) return rc;
    if (str_field(&ident, "shardName", &name) && str_field(&ident, "configsvrConnectionString", &cfg)) {
        shv_set_identity(app->shv, name, cfg);
        log_info("shard identity loaded shard=%s config=%s", log_str(name), log_str(cfg));
    }
    bson_destroy(&ident);
    return 0;
}

typedef struct sc_arg {
    const char *ns;
    keys_pattern_t pat;
    bool unique;
    const uint8_t *uuid;
    uint8_t uuid_out[16];
    fp_early_t fpe;                /* its before-commit point, evaluated before the lock */
} sc_arg_t;

static int shard_coll_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sc_arg_t *a = arg;
    store_coll_t *c;
    int64_t cnt, bytes;
    bool created, has_index = false;
    int rc;
    if ((rc = store_coll_create(t, a->ns, a->uuid, &c, &created, err)) != 0) return rc;
    memcpy(a->uuid_out, c->uuid, 16);
    if (c->sharded) {
        if (keys_pattern_equal(&c->sk, &a->pat)) return 0;
        return err_set(err, MS_ERR_ILLEGAL_OPERATION, "%s is already sharded with another key", a->ns);
    }
    for (int i = 0; i < c->nindexes; i++) {
        /* MongoDB's shardCollection step 1: an existing unique index must stay enforceable. */
        if (c->ix[i]->unique && !keys_unique_index_compatible(&a->pat, &c->ix[i]->pat.spec)) {
            char k[256], skt[256];
            pattern_text(&c->ix[i]->pat.spec, k, sizeof k);
            pattern_text(&a->pat.spec, skt, sizeof skt);
            return err_set(err, MS_ERR_INVALID_OPTIONS,
                           "can't shard collection '%s' with unique index on %s and proposed shard "
                           "key %s. Uniqueness can't be maintained unless shard key is a prefix",
                           a->ns, k, skt);
        }
        if (keys_pattern_is_prefix_of(&a->pat, &c->ix[i]->pat) && !c->ix[i]->multikey)
            has_index = true;
    }
    if ((rc = store_coll_stats(t, c, &cnt, &bytes, NULL, NULL, err)) != 0) return rc;
    if (!has_index) {
        bson_t spec;
        bool existed;
        if (cnt > 0)
            return err_set(err, MS_ERR_INVALID_OPTIONS, "Please create an index that starts with "
                           "the proposed shard key before sharding the collection");
        /* An empty collection gets the shard-key index (MongoDB's name: "a_1", "a_hashed"). */
        bson_init(&spec);
        BSON_APPEND_DOCUMENT(&spec, "key", &a->pat.spec);
        if (a->unique && a->pat.hashed_field < 0) BSON_APPEND_BOOL(&spec, "unique", true);
        rc = store_index_create(t, c, &spec, &existed, err);
        bson_destroy(&spec);
        if (rc != 0) return rc;
    }
    if ((rc = store_coll_set_shard_key(t, c, &a->pat, a->unique, err)) != 0) return rc;
    /* Pattern persisted and `sk` filled for every document, not yet committed. */
    return fp_late(&a->fpe, err);
}

int cmd_shardsvr_shard_collection(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    sc_arg_t a;
    bson_iter_t it;
    bson_t key;
    int rc;
    memset(&a, 0, sizeof a);
    if (!BSON_ITER_HOLDS_UTF8(&ctx->arg) || !strchr(bson_iter_utf8(&ctx->arg, NULL), '.'))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "_shardsvrShardCollection needs \"db.coll\"");
    a.ns = bson_iter_utf8(&ctx->arg, NULL);
    if (strlen(a.ns) > MS_NS_BYTES_MAX) return err_set(err, MS_ERR_INVALID_NAMESPACE, "ns too long");
    if (!cmd_field(ctx, "key", &it) || !bsonx_view_container(&it, &key))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'key' is missing");
    {
        /* A shard key's values are 1 or "hashed" (MongoDB's shardCollection rule). */
        bson_iter_t kv;
        if (bson_iter_init(&kv, &key))
            while (bson_iter_next(&kv)) {
                int64_t v = 0;
                bool hashed = BSON_ITER_HOLDS_UTF8(&kv) && strcmp(bson_iter_utf8(&kv, NULL), "hashed") == 0;
                if (!hashed && !(bsonx_as_int64_exact(&kv, &v) && v == 1))
                    return err_set(err, MS_ERR_BAD_VALUE, "Shard key field values must be 1 or "
                                   "\"hashed\"; field %s is not", bson_iter_key(&kv));
            }
    }
    if ((rc = keys_pattern_parse(&key, &a.pat, err)) != 0) return rc;
    a.unique = cmd_flag(ctx, "unique", false);
    if (cmd_field(ctx, "uuid", &it)) {
        bson_subtype_t st;
        uint32_t len;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_BINARY(&it)) {
            keys_pattern_free(&a.pat);
            return err_set(err, MS_ERR_INVALID_UUID, "uuid must be a UUID (binData subtype 4)");
        }
        bson_iter_binary(&it, &st, &len, &data);
        if (len != 16) {
            keys_pattern_free(&a.pat);
            return err_set(err, MS_ERR_INVALID_UUID, "uuid must be 16 bytes");
        }
        a.uuid = data;
    }
    fp_eval_early(FP_BEFORE_SHARD_COLLECTION_COMMIT, &a.fpe);
    rc = store_ddl(app->st, shard_coll_fn, &a, err);
    keys_pattern_free(&a.pat);
    if (rc != 0) return rc;
    if (app->shv) shv_invalidate(app->shv, a.ns);
    if ((rc = fp_eval(FP_AFTER_SHARD_COLLECTION_COMMIT, err)) != 0) return rc;
    BSON_APPEND_UTF8(reply, "collectionsharded", a.ns);
    append_uuid(reply, "collectionUUID", a.uuid_out);
    log_info("collection sharded ns=%s", log_str(a.ns));
    return 0;
}

int cmd_flush_routing(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    const char *ns;
    (void)reply;
    if (!BSON_ITER_HOLDS_UTF8(&ctx->arg) || !strchr(bson_iter_utf8(&ctx->arg, NULL), '.'))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "_flushRoutingTableCacheUpdates needs \"db.coll\"");
    ns = bson_iter_utf8(&ctx->arg, NULL);
    return shv_refresh(app->shv, ns, err);
}

int cmd_flush_db_cache(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    (void)reply;
    if (!BSON_ITER_HOLDS_UTF8(&ctx->arg) || !*bson_iter_utf8(&ctx->arg, NULL) ||
        strchr(bson_iter_utf8(&ctx->arg, NULL), '.'))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "_flushDatabaseCacheUpdates needs a database name");
    if (app->shv) shv_invalidate(app->shv, bson_iter_utf8(&ctx->arg, NULL));
    return 0;
}

/* ---- serverStatus ------------------------------------------------------------------- */

void shardd_metrics(void *arg, bson_t *metrics) {
    shardd_t *app = arg;
    bson_t cur;
    curs_metrics_begin(app->cursors, "bytesHeld", metrics, &cur);
    bson_append_document_end(metrics, &cur);
}

void shardd_status(void *arg, bson_t *reply) {
    shardd_t *app = arg;
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "shardd", &d);
    BSON_APPEND_UTF8(&d, "dbpath", store_path(app->st));
    BSON_APPEND_INT64(&d, "fileBytes", store_file_bytes(app->st));
    BSON_APPEND_INT32(&d, "cursorsOpen", curs_count(app->cursors));
    bson_append_document_end(reply, &d);
    if (app->shv) {
        char name[128], url[MS_URL_BYTES_MAX];
        shv_identity(app->shv, name, sizeof name, url, sizeof url);
        BSON_APPEND_DOCUMENT_BEGIN(reply, "sharding", &d);
        BSON_APPEND_UTF8(&d, "shardName", name);
        BSON_APPEND_UTF8(&d, "configsvr", url);
        shv_append_status(app->shv, &d);
        shv_crit_append_status(app->shv, &d);
        bson_append_document_end(reply, &d);
    }
    rdel_append_status(app->rdel, reply);
    if (app->mig) mig_append_status(app->mig, reply);
}

/* currentOp, as far as minishard has long operations: the migration in flight (donor or
 * recipient side) with its phase and progress. */
int cmd_current_op(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    bson_t arr;
    (void)err;
    BSON_APPEND_ARRAY_BEGIN(reply, "inprog", &arr);
    if (app->mig) mig_append_inprog(app->mig, &arr);
    bson_append_array_end(reply, &arr);
    return 0;
}
