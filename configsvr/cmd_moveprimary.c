/*
 * cmd_moveprimary.c — the config server's movePrimary (bin/configsvr): moves a
 * database's unsharded collections and its primary-shard role to another shard, as
 * MongoDB's MovePrimaryCoordinator does in outline: (1) clone — for each unsharded
 * collection of the old primary (listCollections), create it on the new primary with the
 * same options, build the same indexes (listIndexes → createIndexes) and copy the
 * documents in batches (find/getMore → insert), all through the shards' ordinary
 * commands; (2) commit — config.databases gets the new primary and lastMod + 1 in one
 * transaction, and both shards forget their cached database version, so a router or
 * shard with the old version meets StaleDbVersion and refreshes; (3) clean up — the old
 * copies are dropped on the old primary. Sharded collections are not touched. The
 * database's DDL lock is held throughout (no create/drop/shardCollection in the
 * database meanwhile). As MongoDB's coordinator ("enterCriticalSection"), the old
 * primary holds the database's critical section from before listCollections until after
 * the switch (_shardsvrMovePrimaryEnterCriticalSection / ExitCriticalSection, shardd
 * critsec.c): writes to the unsharded collections wait there and then get
 * StaleDbVersion, so the router retries them on the new primary; the clone sees a
 * frozen database and no acknowledged write is lost. Every error path leaves the section
 * and, before the switch, drops what it copied to the new primary (the collection whose
 * copy failed included): the old primary keeps the database, whole. Before the clone, the
 * new primary's own unsharded collections of the database — copies an earlier movePrimary
 * failed to clean up there — are dropped (drop_leftovers).
 */
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* The cursor's batch array (firstBatch or nextBatch) and id of a find/getMore reply. */
static bool reply_batch(const bson_t *reply, bson_t *batch, int64_t *id) {
    bson_iter_t it, cur;
    uint32_t len;
    const uint8_t *data;
    *id = 0;
    if (!bson_iter_init_find(&it, reply, "cursor") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &cur))
        return false;
    bool found = false;
    while (bson_iter_next(&cur)) {
        const char *k = bson_iter_key(&cur);
        if (!strcmp(k, "id") && BSON_ITER_HOLDS_NUMBER(&cur)) *id = bson_iter_as_int64(&cur);
        if ((!strcmp(k, "firstBatch") || !strcmp(k, "nextBatch")) && BSON_ITER_HOLDS_ARRAY(&cur)) {
            bson_iter_array(&cur, &len, &data);
            found = bson_init_static(batch, data, len);
        }
    }
    return found;
}

/* An insert reply with writeErrors is a failure: its first error becomes ours. */
static int insert_errors(const bson_t *reply, const char *ns, ms_error_t *err) {
    bson_iter_t it;
    if (!bson_iter_init(&it, reply) || !bson_iter_find_descendant(&it, "writeErrors.0", &it))
        return 0;
    bson_iter_t e;
    int64_t code = MS_ERR_OPERATION_FAILED;
    const char *msg = "";
    if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &e))
        while (bson_iter_next(&e)) {
            if (!strcmp(bson_iter_key(&e), "code") && BSON_ITER_HOLDS_NUMBER(&e))
                code = bson_iter_as_int64(&e);
            if (!strcmp(bson_iter_key(&e), "errmsg") && BSON_ITER_HOLDS_UTF8(&e))
                msg = bson_iter_utf8(&e, NULL);
        }
    return err_set(err, code > 0 && code <= INT32_MAX ? (int)code : MS_ERR_OPERATION_FAILED,
                   "movePrimary: copying %s: %s", ns, msg);
}

/* Copies one collection (entry = its listCollections entry) from `from` to `to`. */
static int clone_coll(cfg_t *cfg, const char *db, const char *coll, const bson_t *entry,
                      const char *from, const char *to, int64_t *docs, ms_error_t *err) {
    char ns[MS_NS_BYTES_MAX + 1];
    bson_t cmd, rep, batch;
    bson_iter_t it;
    int64_t id = 0;
    int rc;
    snprintf(ns, sizeof ns, "%s.%s", db, coll);

    /* Leftovers of an earlier failed attempt on the target: an unsharded collection of
     * this database lives on its primary only, so whatever is there is ours to replace. */
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "drop", coll);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = cfg_shard_command(cfg, to, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &rep, err);
    bson_destroy(&cmd);
    if (rc == 0) bson_destroy(&rep);
    else if (rc == MS_ERR_NAMESPACE_NOT_FOUND) rc = 0;
    else return rc;

    /* create with the same options */
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "create", coll);
    if (bson_iter_init_find(&it, entry, "options") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_t o;
        bson_iter_recurse(&it, &o);
        while (bson_iter_next(&o)) bson_append_iter(&cmd, bson_iter_key(&o), -1, &o);
    }
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = cfg_shard_command(cfg, to, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &rep, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    bson_destroy(&rep);

    /* the same indexes (_id_ comes with create) */
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "listIndexes", coll);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = cfg_shard_command(cfg, from, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &rep, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if (reply_batch(&rep, &batch, &id)) {
        bson_t ci = BSON_INITIALIZER, arr;
        bson_iter_t ix;
        int n = 0;
        BSON_APPEND_UTF8(&ci, "createIndexes", coll);
        BSON_APPEND_ARRAY_BEGIN(&ci, "indexes", &arr);
        if (bson_iter_init(&ix, &batch))
            while (bson_iter_next(&ix)) {
                bson_iter_t f;
                bson_t spec;
                char idx[16];
                if (!BSON_ITER_HOLDS_DOCUMENT(&ix) || !bson_iter_recurse(&ix, &f)) continue;
                bson_iter_t nm;
                if (bson_iter_recurse(&ix, &nm) && bson_iter_find(&nm, "name") &&
                    BSON_ITER_HOLDS_UTF8(&nm) && !strcmp(bson_iter_utf8(&nm, NULL), "_id_"))
                    continue;
                snprintf(idx, sizeof idx, "%d", n++);
                BSON_APPEND_DOCUMENT_BEGIN(&arr, idx, &spec);
                while (bson_iter_next(&f))
                    if (strcmp(bson_iter_key(&f), "v") && strcmp(bson_iter_key(&f), "ns"))
                        bson_append_iter(&spec, bson_iter_key(&f), -1, &f);
                bson_append_document_end(&arr, &spec);
            }
        bson_append_array_end(&ci, &arr);
        BSON_APPEND_UTF8(&ci, "$db", db);
        bson_destroy(&rep);
        if (n > 0) {
            rc = cfg_shard_command(cfg, to, &ci, CFG_SHARD_CMD_TIMEOUT_MS, &rep, err);
            if (rc == 0) bson_destroy(&rep);
        }
        bson_destroy(&ci);
        if (rc) return rc;
    } else {
        bson_destroy(&rep);
    }

    /* the documents, batch by batch */
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_INT64(&cmd, "batchSize", MS_MOVE_PRIMARY_BATCH_DOCS);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = cfg_shard_command(cfg, from, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &rep, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    for (;;) {
        uint32_t n = 0;
        if (!reply_batch(&rep, &batch, &id)) {
            bson_destroy(&rep);
            return err_set(err, MS_ERR_FAILED_TO_PARSE, "movePrimary: %s: find reply without cursor", ns);
        }
        n = bson_count_keys(&batch);
        if (n > 0) {
            bson_t ins = BSON_INITIALIZER, irep;
            BSON_APPEND_UTF8(&ins, "insert", coll);
            BSON_APPEND_ARRAY(&ins, "documents", &batch);
            BSON_APPEND_BOOL(&ins, "ordered", true);
            BSON_APPEND_UTF8(&ins, "$db", db);
            rc = cfg_shard_command(cfg, to, &ins, CFG_SHARD_CMD_TIMEOUT_MS, &irep, err);
            bson_destroy(&ins);
            if (rc == 0) {
                rc = insert_errors(&irep, ns, err);
                bson_destroy(&irep);
            }
            *docs += n;
        }
        bson_destroy(&rep);
        if (rc || id == 0) break;
        bson_init(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", id);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        BSON_APPEND_INT64(&cmd, "batchSize", MS_MOVE_PRIMARY_BATCH_DOCS);
        BSON_APPEND_UTF8(&cmd, "$db", db);
        rc = cfg_shard_command(cfg, from, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &rep, err);
        bson_destroy(&cmd);
        if (rc) break;
    }
    if (rc && id != 0) {  /* do not leave the source cursor open until it times out */
        bson_t kc = BSON_INITIALIZER, arr, krep;
        BSON_APPEND_UTF8(&kc, "killCursors", coll);
        BSON_APPEND_ARRAY_BEGIN(&kc, "cursors", &arr);
        BSON_APPEND_INT64(&arr, "0", id);
        bson_append_array_end(&kc, &arr);
        BSON_APPEND_UTF8(&kc, "$db", db);
        ms_error_t e2 = {0};
        if (cfg_shard_command(cfg, from, &kc, CFG_SHARD_CMD_TIMEOUT_MS, &krep, &e2) == 0)
            bson_destroy(&krep);
        bson_destroy(&kc);
    }
    return rc;
}

/* Tells shard to forget its cached version of db (best effort: a shard that misses it
 * still refreshes when a newer version reaches it). */
static void flush_db(cfg_t *cfg, const char *shard, const char *db) {
    bson_t cmd = BSON_INITIALIZER, rep;
    ms_error_t e = {0};
    BSON_APPEND_UTF8(&cmd, "_flushDatabaseCacheUpdates", db);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (cfg_shard_command(cfg, shard, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &rep, &e) == 0)
        bson_destroy(&rep);
    else
        log_warn("flush database cache failed shard=%s db=%s code=%d errmsg=%s", log_str(shard),
                 log_str(db), e.code, log_str(e.msg));
    bson_destroy(&cmd);
}

/* Drops the copy of db.coll a failed movePrimary made on shard `to` (best effort: logged;
 * a copy left behind is dropped by the next movePrimary to that shard before it copies). */
static void drop_copy(cfg_t *cfg, const char *to, const char *db, const char *coll) {
    bson_t cmd = BSON_INITIALIZER, rep;
    ms_error_t e = {0};
    BSON_APPEND_UTF8(&cmd, "drop", coll);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    int rc = cfg_shard_command(cfg, to, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &rep, &e);
    if (rc == 0) bson_destroy(&rep);
    if (rc == 0 || rc == MS_ERR_NAMESPACE_NOT_FOUND)
        log_info("movePrimary copy removed db=%s coll=%s shard=%s", log_str(db), log_str(coll),
                 log_str(to));
    else
        log_warn("movePrimary copy not removed db=%s coll=%s shard=%s code=%d errmsg=%s",
                 log_str(db), log_str(coll), log_str(to), rc, log_str(e.msg));
    bson_destroy(&cmd);
}

/* One entry of a listCollections batch at ci: the name of an unsharded collection of db
 * (its entry viewed in *entry), or NULL for anything to skip — not a document, no name,
 * one of the sharded collections (sharded[]), or with skip_system a system.* one. */
static const char *unsharded_entry(bson_iter_t *ci, const char *db, char **sharded,
                                   int nsharded, bool skip_system, bson_t *entry) {
    bson_iter_t f;
    uint32_t len;
    const uint8_t *data;
    const char *name = NULL;
    char ns[MS_NS_BYTES_MAX + 1];
    if (!BSON_ITER_HOLDS_DOCUMENT(ci)) return NULL;
    bson_iter_document(ci, &len, &data);
    if (!bson_init_static(entry, data, len)) return NULL;
    if (bson_iter_init_find(&f, entry, "name") && BSON_ITER_HOLDS_UTF8(&f))
        name = bson_iter_utf8(&f, NULL);
    if (!name || (skip_system && !strncmp(name, "system.", 7))) return NULL;
    snprintf(ns, sizeof ns, "%s.%s", db, name);
    for (int i = 0; i < nsharded; i++)
        if (!strcmp(sharded[i], ns)) return NULL;
    return name;
}

/* Drops every unsharded collection of db that shard `to` (about to become the primary)
 * holds before anything is copied to it. Unsharded collections live on the primary only, so
 * whatever `to` holds is a leftover copy of an earlier movePrimary whose step (3) cleanup
 * failed on it (the shard was down then) — invisible while `to` is not the primary, but
 * once it is, a leftover the current primary no longer has (renamed or dropped since)
 * would come back to life beside the copies. clone_coll replaces the collections it
 * copies; this removes the others. Sharded collections (sharded[]) are not touched. */
static int drop_leftovers(cfg_t *cfg, const char *to, const char *db, char **sharded,
                          int nsharded, ms_error_t *err) {
    bson_t cmd = BSON_INITIALIZER, rep, batch;
    bson_iter_t ci;
    int64_t cid = 0;
    int rc;
    BSON_APPEND_INT32(&cmd, "listCollections", 1);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = cfg_shard_command(cfg, to, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &rep, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if (!reply_batch(&rep, &batch, &cid) || cid != 0) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "movePrimary: listCollections of %s on %s: "
                     "expected one batch", db, to);
        goto out;
    }
    if (!bson_iter_init(&ci, &batch)) goto out;
    while (rc == 0 && bson_iter_next(&ci)) {
        bson_t entry, d, drep;
        const char *name = unsharded_entry(&ci, db, sharded, nsharded, true, &entry);
        if (!name) continue;
        bson_init(&d);
        BSON_APPEND_UTF8(&d, "drop", name);
        BSON_APPEND_UTF8(&d, "$db", db);
        rc = cfg_shard_command(cfg, to, &d, CFG_SHARD_CMD_TIMEOUT_MS, &drep, err);
        bson_destroy(&d);
        if (rc == 0) bson_destroy(&drep);
        else if (rc == MS_ERR_NAMESPACE_NOT_FOUND) rc = 0;
        if (rc == 0)
            log_info("movePrimary leftover dropped db=%s coll=%s shard=%s", log_str(db),
                     log_str(name), log_str(to));
    }
out:
    bson_destroy(&rep);
    return rc;
}

/* Enters or leaves the database critical section on shard. */
static int db_crit(cfg_t *cfg, const char *shard, const char *db, bool enter, ms_error_t *err) {
    bson_t cmd = BSON_INITIALIZER, rep;
    BSON_APPEND_UTF8(&cmd, enter ? "_shardsvrMovePrimaryEnterCriticalSection"
                                 : "_shardsvrMovePrimaryExitCriticalSection", db);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    int rc = cfg_shard_command(cfg, shard, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &rep, err);
    if (rc == 0) bson_destroy(&rep);
    bson_destroy(&cmd);
    return rc;
}

/* Leaving on an error path or for a leftover: logged, never the command's error. A shard
 * that misses it keeps refusing the database's writes (StaleDbVersion, which the router
 * retries) until the next movePrimary of the database leaves it. */
static void db_crit_leave(cfg_t *cfg, const char *shard, const char *db) {
    ms_error_t e = {0};
    if (db_crit(cfg, shard, db, false, &e) != 0)
        log_warn("movePrimary critical section exit failed db=%s shard=%s code=%d errmsg=%s",
                 log_str(db), log_str(shard), e.code, log_str(e.msg));
}

int cfg_cmd_move_primary(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *db = cfg_arg_str(ctx), *to = NULL;
    char from[CAT_SHARD_NAME_BYTES_MAX];
    char **sharded = NULL, **moved = NULL;
    int nsharded = 0, nmoved = 0, rc;
    int64_t docs = 0;
    bool draining = false, in_crit = false, committed = false;
    bson_t cmd = BSON_INITIALIZER, rep, batch;
    bool have_rep = false;
    bson_iter_t it;
    cfg_ddl_guard_t g = {0};

    if (cmd_field(ctx, "to", &it) && BSON_ITER_HOLDS_UTF8(&it)) to = bson_iter_utf8(&it, NULL);
    if (!to || !*to) return err_set(err, MS_ERR_BAD_VALUE, "movePrimary needs to: <shard>");
    if (!*db || strchr(db, '.'))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "invalid database name '%s'", db);
    if (!strcmp(db, "admin") || !strcmp(db, "config") || !strcmp(db, "local"))
        return err_set(err, MS_ERR_INVALID_OPTIONS, "Can't move primary for %s database", db);
    if ((rc = cfg_ddl_lock_db(cfg, db, "movePrimary", &g, err)) != 0) return rc;
    rc = cat_db_primary(cfg->cat, db, from, sizeof from, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND) err_set(err, rc, "Database %s not found", db);
    if (rc) goto out;
    rc = cat_shard_host(cfg->cat, to, NULL, 0, &draining, err);
    if (rc) goto out;
    if (strcmp(from, to) == 0) {  /* MongoDB: already the primary → ok, nothing done */
        /* ...but a section left held by a movePrimary cut short (config server crash) on
         * the primary would refuse its writes for good: leave it. */
        db_crit_leave(cfg, from, db);
        BSON_APPEND_UTF8(reply, "primary", to);
        goto out;
    }
    if (draining) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "cannot move primary to draining shard %s", to);
        goto out;
    }
    rc = cat_db_collections(cfg->cat, db, &sharded, &nsharded, err);
    if (rc) goto out;

    /* (0) the target may hold a section left by an earlier movePrimary cut short (it was
     * the old primary then): it must not refuse the writes it is about to take. Then
     * freeze the database on the old primary, before listing its collections (entered
     * after the listing, a collection an insert creates meanwhile would not be copied). */
    if ((rc = db_crit(cfg, to, db, false, err)) != 0) goto out;
    if ((rc = drop_leftovers(cfg, to, db, sharded, nsharded, err)) != 0) goto out;
    if ((rc = db_crit(cfg, from, db, true, err)) != 0) goto out;
    in_crit = true;

    /* (1) clone every unsharded collection of the old primary */
    BSON_APPEND_INT32(&cmd, "listCollections", 1);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = cfg_shard_command(cfg, from, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &rep, err);
    if (rc) goto out;
    have_rep = true;
    int64_t cid = 0;
    if (!reply_batch(&rep, &batch, &cid) || cid != 0) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "movePrimary: listCollections of %s on %s: "
                     "expected one batch", db, from);
        goto out;
    }
    moved = calloc(MS_MOVE_PRIMARY_COLLS_MAX, sizeof *moved);
    if (!moved) {
        rc = err_set(err, MS_ERR_INTERNAL, "out of memory");
        goto out;
    }
    bson_iter_t ci;
    if (bson_iter_init(&ci, &batch))
        while (rc == 0 && bson_iter_next(&ci)) {
            bson_t entry;
            const char *name = unsharded_entry(&ci, db, sharded, nsharded, false, &entry);
            if (!name) continue;
            if (nmoved == MS_MOVE_PRIMARY_COLLS_MAX) {
                rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                             "movePrimary: %s has more than %d unsharded collections", db,
                             MS_MOVE_PRIMARY_COLLS_MAX);
                break;
            }
            /* Listed before the copy: a copy cut short is removed with the others. */
            moved[nmoved] = strdup(name);
            ASSERT(moved[nmoved]);
            nmoved++;
            rc = clone_coll(cfg, db, name, &entry, from, to, &docs, err);
        }
    if (rc) goto out;
    if ((rc = fp_eval(CFG_FP_HANG_BEFORE_MOVE_PRIMARY_SWITCH, err)) != 0) goto out;

    /* (2) commit: new primary, lastMod + 1; both shards forget the old version. The old
     * primary then leaves the section (refreshing its database entry first): the writes
     * waiting there get StaleDbVersion and the router sends them to the new primary. */
    rc = cat_db_set_primary(cfg->cat, db, from, to, err);
    if (rc) goto out;
    committed = true;
    flush_db(cfg, from, db);
    flush_db(cfg, to, db);
    in_crit = false;
    db_crit_leave(cfg, from, db);

    /* (3) the old copies go (a failure here leaves orphaned copies on the old primary,
     * invisible to routers, which now read the new primary; logged, not an error). */
    for (int i = 0; i < nmoved; i++) {
        bson_t d = BSON_INITIALIZER, drep;
        ms_error_t e = {0};
        BSON_APPEND_UTF8(&d, "drop", moved[i]);
        BSON_APPEND_UTF8(&d, "$db", db);
        int drc = cfg_shard_command(cfg, from, &d, CFG_SHARD_CMD_TIMEOUT_MS, &drep, &e);
        if (drc == 0) bson_destroy(&drep);
        else if (drc != MS_ERR_NAMESPACE_NOT_FOUND)
            log_warn("movePrimary cleanup failed db=%s coll=%s shard=%s code=%d errmsg=%s",
                     log_str(db), log_str(moved[i]), log_str(from), drc, log_str(e.msg));
        bson_destroy(&d);
    }
    log_info("primary moved db=%s from=%s to=%s collections=%d docs=%lld", log_str(db),
             log_str(from), log_str(to), nmoved, (long long)docs);
    BSON_APPEND_UTF8(reply, "primary", to);
out:
    /* Failed before the switch: the old primary keeps the database, so what we copied to
     * the target goes (MongoDB's coordinator drops the cloned collections on abort), or
     * the target would list the database and hold documents nobody routes to. */
    if (!committed)
        for (int i = 0; i < nmoved; i++) drop_copy(cfg, to, db, moved[i]);
    if (in_crit) db_crit_leave(cfg, from, db);
    cfg_ddl_unlock(&g);
    if (have_rep) bson_destroy(&rep);
    bson_destroy(&cmd);
    cat_strv_free(sharded, nsharded);
    if (moved) cat_strv_free(moved, nmoved);
    return rc;
}
