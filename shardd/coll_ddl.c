/*
 * coll_ddl.c — collection DDL that a command and a migration both need, in bin/shardd:
 * building indexes (createIndexes' work: MongoDB's hybrid index build in miniature) and
 * setting a collection's shard key on a shard that receives its first chunk. The command
 * handlers (cmd_admin.c) and the migration recipient (mig_recipient.c) call these; no
 * migration file calls into a command file (DESIGN §7).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/opctx.h"
#include "shardd/shardd.h"

typedef struct ci_arg {
    const char *ns;
    bson_iter_t specs;
    bool created;
    int before, after, existed, n;
    const uint8_t *uuid;           /* create the collection with this uuid (migration) */
    bool no_create;                /* a sharded collection's: never created implicitly */
    int64_t ids[MS_INDEXES_MAX];   /* indexes this command builds */
    int nids;
    fp_early_t fpe;                /* its before-commit point, evaluated before the lock */
} ci_arg_t;

/* createIndexes, step 1 (short, catalog exclusive): the collection when absent, every new
 * index registered as building. Nothing is scanned here. */
static int create_indexes_begin_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    ci_arg_t *a = arg;
    store_coll_t *c;
    bson_iter_t it = a->specs;
    int rc;
    a->n = a->existed = a->nids = 0;
    /* A router's versioned createIndexes of a sharded collection reaches the primary shard
     * even when it owns no chunk: without the collection here there is nothing to index,
     * and creating it would give it a uuid of its own (MongoDB answers the same code; the
     * router ignores it from a shard that owns no chunk). */
    if (a->no_create && !store_coll_get(t, a->ns))
        return err_set(err, MS_ERR_CANNOT_IMPLICITLY_CREATE_COLLECTION,
                       "cannot implicitly create sharded collection %s on this shard", a->ns);
    if ((rc = store_coll_create(t, a->ns, a->uuid, &c, &a->created, err)) != 0) return rc;
    if (a->uuid && memcmp(c->uuid, a->uuid, 16) != 0) {
        /* An empty local collection made before this shard owned a chunk (createIndexes
         * sent to every shard) takes the cluster's identity; one holding documents is a
         * different collection (MongoDB's InvalidUUID). */
        int64_t cnt = 0, bytes = 0;
        if ((rc = store_coll_stats(t, c, &cnt, &bytes, NULL, NULL, err)) != 0) return rc;
        if (cnt == 0) {
            if ((rc = store_coll_drop(t, a->ns, err)) != 0 ||
                (rc = store_coll_create(t, a->ns, a->uuid, &c, &a->created, err)) != 0)
                return rc;
        }
    }
    if (a->uuid && memcmp(c->uuid, a->uuid, 16) != 0)
        return err_set(err, MS_ERR_INVALID_UUID,
                       "Cannot create collection %s because we already have an identically named "
                       "collection with UUID different from the donor's; drop it manually", a->ns);
    a->before = c->nindexes;
    while (bson_iter_next(&it)) {
        bson_t spec;
        bool existed = false;
        int64_t id = 0;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bsonx_view_container(&it, &spec))
            return err_set(err, MS_ERR_TYPE_MISMATCH, "each index specification must be an object");
        if (c->sharded && (rc = keys_unique_index_spec_check(&c->sk, &spec, err)) != 0) return rc;
        if ((rc = store_index_build_register(t, c, &spec, a->ids, a->nids, &existed, &id, err)) != 0)
            return rc;
        a->n++;
        if (existed) a->existed++;
        if (id) a->ids[a->nids++] = id;
    }
    if (a->n == 0) return err_set(err, MS_ERR_BAD_VALUE, "Must specify at least one index to create");
    a->after = c->nindexes + a->nids;
    return 0;
}

/* createIndexes, step 3 (short, catalog exclusive): the built indexes become ready. */
static int create_indexes_commit_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    ci_arg_t *a = arg;
    int rc;
    if ((rc = store_index_build_commit(t, a->ns, a->ids, a->nids, err)) != 0) return rc;
    /* Every index built over every document, not yet committed. */
    return fp_late(&a->fpe, err);
}

/* MongoDB's hybrid index build in miniature (docs/storage.md "Index builds"): register the
 * indexes (catalog exclusive, a moment), fill them in batches of short write transactions
 * while reads and writes of every collection go on (writes to this one maintain the new
 * indexes too), then mark them ready (catalog exclusive, a moment). A command asking for
 * an index another command is building joins it: waits, then answers as for an existing
 * index. Any failure drops what this command registered: all its indexes or none. */
/* Runs a catalog step of the build: under the command's critical-section checks when
 * there is a command (guard), as is for the migration recipient's own build. */
static int build_step(shardd_t *app, cmd_ctx_t *guard, const char *ns, store_txn_fn fn,
                      void *arg, ms_error_t *err) {
    return guard ? shardd_ddl_guarded(guard, ns, fn, arg, err) : store_ddl(app->st, fn, arg, err);
}

int shardd_build_indexes(shardd_t *app, cmd_ctx_t *guard, const char *ns, const uint8_t *uuid,
                         bool no_create, const bson_iter_t *specs, shardd_index_result_t *res,
                         ms_error_t *err) {
    ci_arg_t a;
    int rc;
    memset(&a, 0, sizeof a);
    a.ns = ns;
    a.uuid = uuid;
    a.no_create = no_create;
    a.specs = *specs;
    while ((rc = build_step(app, guard, ns, create_indexes_begin_fn, &a, err)) ==
           MS_ERR_INDEX_BUILD_ALREADY_IN_PROGRESS) {
        /* Bounded by the command's maxTimeMS (MaxTimeMSExpired), as MongoDB's join. */
        if ((rc = op_check(err)) != 0) return rc;
        nanosleep(&(struct timespec){0, SHARDD_INDEX_BUILD_JOIN_POLL_MS * 1000000L}, NULL);
    }
    if (rc != 0) return rc;
    if (a.nids > 0) {
        if ((rc = store_index_build_scan(app->st, ns, a.ids, a.nids, err)) == 0) {
            fp_eval_early(FP_BEFORE_INDEX_BUILD_COMMIT, &a.fpe);
            rc = build_step(app, guard, ns, create_indexes_commit_fn, &a, err);
        }
        if (rc != 0) {
            store_index_build_abort(app->st, ns, a.ids, a.nids);
            return rc;
        }
    }
    if (res) {
        res->before = a.before;
        res->after = a.after;
        res->existed = a.existed;
        res->n = a.n;
        res->created = a.created;
    }
    return 0;
}

typedef struct ssk_arg {
    const char *ns;
    const keys_pattern_t *pat;
} ssk_arg_t;

static int set_shard_key_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    ssk_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "%s does not exist", a->ns);
    if (c->sharded)
        return keys_pattern_equal(&c->sk, a->pat)
                   ? 0 : err_set(err, MS_ERR_ILLEGAL_OPERATION, "%s is sharded with another key", a->ns);
    return store_coll_set_shard_key(t, c, a->pat, false, err);
}

int shardd_set_shard_key(shardd_t *app, const char *ns, const keys_pattern_t *pat, ms_error_t *err) {
    ssk_arg_t a = {ns, pat};
    return store_ddl(app->st, set_shard_key_fn, &a, err);
}
