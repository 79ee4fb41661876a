/*
 * cmd_db.c — the config server's database commands (bin/configsvr): enableSharding,
 * _configsvrCreateDatabase (a router's first write to a new database) and
 * _configsvrDropDatabase.
 */
#include <stdio.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* enableSharding {enableSharding: db, primaryShard?}: creates the database entry with a
 * primary shard when absent (MongoDB 6.0+: databases are always "sharding enabled"). */
int cfg_cmd_enable_sharding(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    bson_iter_t it;
    const char *primary = NULL;
    bool created = false;
    int rc;
    (void)reply;
    cfg_ddl_guard_t g;
    if (cmd_field(ctx, "primaryShard", &it)) primary = bson_iter_utf8(&it, NULL);
    if ((rc = cfg_ddl_lock_db(cfg, cfg_arg_str(ctx), "enableSharding", &g, err)) != 0) return rc;
    rc = cat_db_ensure(cfg->cat, cfg_arg_str(ctx), primary, &created, NULL, err);
    cfg_ddl_unlock(&g);
    return rc;
}

/* _configsvrCreateDatabase {name | value: db, primaryShard?} → {primary, version}. */
int cfg_cmd_create_database(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    bson_iter_t it;
    const char *db = cfg_arg_str(ctx), *primary = NULL;
    bool created = false;
    int rc;
    if (cmd_field(ctx, "name", &it)) db = bson_iter_utf8(&it, NULL);
    cfg_ddl_guard_t g;
    if (cmd_field(ctx, "primaryShard", &it)) primary = bson_iter_utf8(&it, NULL);
    if ((rc = cfg_ddl_lock_db(cfg, db, "createDatabase", &g, err)) != 0) return rc;
    rc = cat_db_ensure(cfg->cat, db, primary, &created, reply, err);
    cfg_ddl_unlock(&g);
    return rc;
}

/* Sends one command to every shard; NamespaceNotFound counts as done. */
static int to_all_shards(cfg_t *cfg, const bson_t *cmd, ms_error_t *err) {
    char **names = NULL;
    int n = 0, rc;
    rc = cat_shard_names(cfg->cat, true, &names, &n, err);
    if (rc) return rc;
    for (int i = 0; i < n && rc == 0; i++) {
        bson_t r;
        rc = cfg_shard_command(cfg, names[i], cmd, CFG_SHARD_CMD_TIMEOUT_MS, &r, err);
        if (rc == 0) bson_destroy(&r);
        else if (rc == MS_ERR_NAMESPACE_NOT_FOUND) rc = 0;
    }
    cat_strv_free(names, n);
    return rc;
}

/* Drops ns on every shard, then its metadata (MongoDB's DropCollectionCoordinator in
 * miniature: data first, so a failure leaves the catalog entry and a retry finishes). */
static int drop_collection(cfg_t *cfg, const char *ns, bool *existed, ms_error_t *err) {
    char db[CAT_DB_NAME_BYTES_MAX];
    const char *coll = NULL;
    bson_t cmd = BSON_INITIALIZER;
    int rc = cfg_ns_split(ns, db, sizeof db, &coll, err);
    if (rc) return rc;
    rc = cat_changelog(cfg->cat, "dropCollection.start", ns, NULL, err);
    if (rc) goto out;
    BSON_APPEND_UTF8(&cmd, "drop", coll);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = to_all_shards(cfg, &cmd, err);
    if (rc) goto out;
    /* Dropped on every shard, still in the catalog: a retry drops again (the shards
     * answer NamespaceNotFound, counted as done) and deletes the metadata. */
    rc = fp_eval(CFG_FP_DROP_COLL_BEFORE_DELETE, err);
    if (rc) goto out;
    rc = cat_coll_drop(cfg->cat, ns, existed, err);
out:
    bson_destroy(&cmd);
    return rc;
}

int cfg_cmd_drop_database(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *db = cfg_arg_str(ctx);
    char **colls = NULL, prim[CAT_SHARD_NAME_BYTES_MAX];
    int n = 0, rc;
    bool existed = false;
    bson_t cmd = BSON_INITIALIZER;
    if (!*db || strchr(db, '.'))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "invalid database name '%s'", db);
    if (strcmp(db, "admin") == 0 || strcmp(db, "config") == 0 || strcmp(db, "local") == 0)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION, "cannot drop the %s database", db);
    cfg_ddl_guard_t g = {0};
    /* Exclusive: no operation on one of its collections runs while it goes. */
    if ((rc = cfg_ddl_lock_db(cfg, db, "dropDatabase", &g, err)) != 0) goto out;
    rc = cat_db_primary(cfg->cat, db, prim, sizeof prim, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND) {  /* MongoDB: dropping a missing db is ok */
        rc = 0;
        goto out;
    }
    if (rc) goto out;
    rc = cat_db_collections(cfg->cat, db, &colls, &n, err);
    for (int i = 0; i < n && rc == 0; i++) rc = drop_collection(cfg, colls[i], &existed, err);
    if (rc) goto out;
    BSON_APPEND_INT32(&cmd, "dropDatabase", 1);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = to_all_shards(cfg, &cmd, err);
    /* Dropped on every shard, the database entry still in the catalog (its sharded
     * collections are gone already, each in its own transaction above). */
    if (rc == 0) rc = fp_eval(CFG_FP_DROP_DB_BEFORE_DELETE, err);
    if (rc == 0) rc = cat_db_drop(cfg->cat, db, &existed, err);
    if (rc == 0) BSON_APPEND_UTF8(reply, "dropped", db);
out:
    cfg_ddl_unlock(&g);
    cat_strv_free(colls, n);
    bson_destroy(&cmd);
    return rc;
}

/* _configsvrDropCollection: ns — on every shard, then collection + chunks + zones in one
 * transaction. Not sharded: dropped on the shards all the same (leftovers included). */
int cfg_cmd_drop_collection(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = cfg_arg_str(ctx);
    bool existed = false;
    int rc;
    cfg_ddl_guard_t g;
    /* The config database's collections are the catalog itself (and were never on the
     * shards): dropping one would send `drop` to every shard's config database and
     * delete a collection entry that does not exist. MongoDB refuses DDL there too. */
    if (strncmp(ns, "config.", 7) == 0) {
        log_warn("dropCollection refused ns=%s reason=config", log_str(ns));
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "cannot drop %s: the config database's collections hold the cluster's "
                       "metadata", ns);
    }
    if ((rc = cfg_ddl_lock_coll(cfg, ns, "dropCollection", &g, err)) != 0) return rc;
    rc = drop_collection(cfg, ns, &existed, err);
    cfg_ddl_unlock(&g);
    if (rc == 0) {
        BSON_APPEND_UTF8(reply, "ns", ns);
        BSON_APPEND_BOOL(reply, "sharded", existed);
        log_info("collection dropped ns=%s sharded=%d", log_str(ns), existed);
    }
    return rc;
}
