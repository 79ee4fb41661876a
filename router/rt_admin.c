/*
 * rt_admin.c — the router's non-CRUD commands, run by bin/router: admin and metadata
 * commands forwarded to the config server (addShard, shardCollection, split, ... as
 * mongos forwards them to the config primary), drop (sharded → _configsvrDropCollection,
 * unsharded → the primary shard), commands for a collection's primary shard
 * (createIndexes and dropIndexes: rt_indexes.c), the internal-command guard (MongoDB
 * refuses internal commands from clients: Unauthorized), the config.mongos pinger
 * (MongoDB's sharding uptime reporter, every 10 s), serverStatus.router, and the
 * scatter-gather listDatabases and dbStats.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/query.h"
#include "common/validate.h"
#include "router/router.h"

/* Copies a peer's reply into ours: ok:0 becomes our error (extra fields kept). */
static int relay(cmd_ctx_t *ctx, bson_t *rep, bson_t *reply, ms_error_t *err) {
    bson_iter_t it;
    int code = rt_reply_status(rep, err);
    bson_t *dst = code ? &ctx->err_info : reply;
    if (bson_iter_init(&it, rep))
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (!strcmp(k, "ok") || (code && (!strcmp(k, "code") || !strcmp(k, "codeName") ||
                                               !strcmp(k, "errmsg"))))
                continue;
            bson_append_iter(dst, k, -1, &it);
        }
    return code;
}

/* Invalidates what a metadata command changes. */
static void invalidate_after(router_t *r, cmd_ctx_t *ctx) {
    const char *n = ctx->name;
    if (BSON_ITER_HOLDS_UTF8(&ctx->arg) &&
        (!strcmp(n, "shardCollection") || !strcmp(n, "split") || !strcmp(n, "mergeChunks") ||
         !strcmp(n, "moveChunk") || !strcmp(n, "moveRange") || !strcmp(n, "clearJumboFlag") ||
         !strcmp(n, "mergeAllChunksOnShard") ||
         !strcmp(n, "refineCollectionShardKey")))
        rt_table_invalidate(r, bson_iter_utf8(&ctx->arg, NULL));
    if (BSON_ITER_HOLDS_UTF8(&ctx->arg) && (!strcmp(n, "enableSharding") || !strcmp(n, "movePrimary")))
        rt_db_invalidate(r, bson_iter_utf8(&ctx->arg, NULL));
}

int rt_cmd_to_config(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    bson_t cmd, rep;
    bson_init(&cmd);
    rt_copy_cmd(&cmd, ctx->req, NULL);
    /* With a maxTimeMS the operation's own deadline is the call's, also when longer than
     * the router's default (a pre-split of a million chunks takes about a minute). */
    int rc = rt_config_call_ms(r, &cmd, op_deadline_ms() > 0 ? 0 : r->peer_timeout_ms, &rep, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    rc = relay(ctx, &rep, reply, err);
    bson_destroy(&rep);
    if (rc == 0) invalidate_after(r, ctx);
    return rc;
}

/* Copies field `from` of the request into cmd as `to` when present. */
static void copy_field(const cmd_ctx_t *ctx, bson_t *cmd, const char *from, const char *to) {
    bson_iter_t it;
    if (cmd_field(ctx, from, &it)) bson_append_iter(cmd, to, -1, &it);
}

/* True when the request has field `name` holding a document. mongosh's sh.moveRange(ns,
 * toShard, min) leaves max undefined, which the driver sends as null: null is "absent". */
static bool doc_field(const cmd_ctx_t *ctx, const char *name) {
    bson_iter_t it;
    return cmd_field(ctx, name, &it) && BSON_ITER_HOLDS_DOCUMENT(&it);
}

/* moveChunk {moveChunk: ns, find | bounds, to, _waitForDelete, forceJumbo: bool,
 * _secondaryThrottle, writeConcern} and moveRange {moveRange: ns, toShard, min?, max?
 * (null = absent), forceJumbo: bool, waitForDelete, secondaryThrottle, writeConcern} both become
 * _configsvrMoveRange (find and bounds go over as they are: the config server resolves
 * find to its chunk and requires bounds to be exactly one chunk). The call
 * lasts as long as the migration: the op's maxTimeMS, else the migration deadline plus
 * one hop of margin, so the config server's own timeout is the one reported. */
int rt_cmd_move(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    bool chunk = strcmp(ctx->name, "moveChunk") == 0;
    bson_t cmd = BSON_INITIALIZER, rep;
    bson_iter_t it;
    int rc = 0;
    BSON_APPEND_UTF8(&cmd, "_configsvrMoveRange", bson_iter_utf8(&ctx->arg, NULL));
    if (chunk) {
        bool has_find = cmd_field(ctx, "find", &it), has_bounds = cmd_field(ctx, "bounds", &it);
        if (has_find == has_bounds) {
            rc = err_set(err, MS_ERR_BAD_VALUE,
                         "need to specify either a find query, or both lower and upper bounds.");
            goto out;
        }
        copy_field(ctx, &cmd, "to", "toShard");
        if (has_find) copy_field(ctx, &cmd, "find", "find");
        else copy_field(ctx, &cmd, "bounds", "bounds");   /* exact chunk: checked there */
        BSON_APPEND_BOOL(&cmd, "waitForDelete", cmd_flag(ctx, "_waitForDelete", false));
        BSON_APPEND_BOOL(&cmd, "secondaryThrottle", cmd_flag(ctx, "_secondaryThrottle", false));
    } else {
        bool has_min = doc_field(ctx, "min"), has_max = doc_field(ctx, "max");
        if (!has_min && !has_max) {
            rc = err_set(err, MS_ERR_BAD_VALUE, "at least one of min or max must be given");
            goto out;
        }
        copy_field(ctx, &cmd, "toShard", "toShard");
        if (has_min) copy_field(ctx, &cmd, "min", "min");
        if (has_max) copy_field(ctx, &cmd, "max", "max");
        BSON_APPEND_BOOL(&cmd, "waitForDelete", cmd_flag(ctx, "waitForDelete", false) ||
                                                    cmd_flag(ctx, "_waitForDelete", false));
        BSON_APPEND_BOOL(&cmd, "secondaryThrottle", cmd_flag(ctx, "secondaryThrottle", false));
    }
    /* forceJumbo: true is a user's forceManual (1); doNotForce (0) otherwise. */
    BSON_APPEND_INT32(&cmd, "forceJumbo", cmd_flag(ctx, "forceJumbo", false) ? 1 : 0);
    copy_field(ctx, &cmd, "writeConcern", "writeConcern");
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (op_deadline_ms() > 0) {
        long long left = op_time_left_ms(0);
        BSON_APPEND_INT32(&cmd, "maxTimeMS", (int32_t)(left > 0 ? left : 1));
    }
    rc = rt_config_call_ms(r, &cmd, MS_MOVE_CHUNK_TIMEOUT_MS + MS_MOVE_CHUNK_HOP_MARGIN_MS, &rep, err);
    if (rc) goto out;
    rc = relay(ctx, &rep, reply, err);
    bson_destroy(&rep);
    /* Moved or not, our cached routing of ns may be behind now: refetch on next use. */
    invalidate_after(r, ctx);
out:
    bson_destroy(&cmd);
    return rc;
}

static void ns_of(cmd_ctx_t *ctx, char *ns, size_t cap) {
    snprintf(ns, cap, "%s.%s", ctx->db,
             BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "");
}

typedef struct primary_arg {
    cmd_ctx_t *ctx;
    bool create;
    bool drop;   /* unsharded drop: NamespaceNotFound "ns not found", shardVersion UNSHARDED */
} primary_arg_t;

/* rt_dispatch's build: the client's command to the database's primary, versioned. */
static int primary_build(void *p, router_t *r, const rt_table_t *t, rt_req_t *reqs, int *n,
                         ms_error_t *err) {
    primary_arg_t *a = p;
    char primary[RT_NAME_BYTES_MAX];
    rt_db_version_t dbv;
    (void)t;
    int rc = rt_db_get(r, a->ctx->db, a->create, primary, sizeof primary, &dbv, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND && a->drop)
        return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "ns not found");
    if (rc) return rc;
    memset(&reqs[0], 0, sizeof reqs[0]);
    snprintf(reqs[0].shard, sizeof reqs[0].shard, "%s", primary);
    bson_init(&reqs[0].cmd);
    rt_copy_cmd(&reqs[0].cmd, a->ctx->req, NULL);
    if (a->drop) rt_append_version(&reqs[0].cmd, NULL, -1);
    rt_append_db_version(&reqs[0].cmd, &dbv);
    *n = 1;
    return 0;
}

/* The client's command to the database's primary through rt_dispatch (no table: a
 * StaleConfig reply is relayed; StaleDbVersion → forget the entry, retry). On 0 *rep is
 * the primary's reply, whatever its ok; `what` is named when retries run out. */
static int primary_call(cmd_ctx_t *ctx, bool create, bool drop, const char *what, bson_t *rep,
                        ms_error_t *err) {
    primary_arg_t a = {ctx, create, drop};
    rt_dispatch_t d = {.db = ctx->db, .what = what, .build = primary_build, .arg = &a};
    rt_req_t q;
    int n = 0, fail = -1;
    int rc = rt_dispatch(ctx->app, &d, &q, &n, &fail, err);
    if (rc) return rc;
    if (q.rc) {
        *err = q.err;
        rc = q.rc;
    } else {
        bson_copy_to(&q.reply, rep);
    }
    rt_req_clear(&q);
    return rc;
}

int rt_cmd_drop(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    char ns[RT_NAME_BYTES_MAX + MS_NS_BYTES_MAX + 2];
    rt_table_t *t = NULL;
    bson_t cmd, rep;
    int rc;
    ns_of(ctx, ns, sizeof ns);
    /* Always ask afresh: dropping by a stale notion of sharded-ness drops the wrong thing. */
    rt_table_invalidate(r, ns);
    if ((rc = rt_table_get(r, ns, &t, err)) != 0) return rc;
    bson_init(&cmd);
    if (t->sharded) {
        BSON_APPEND_UTF8(&cmd, "_configsvrDropCollection", ns);
        BSON_APPEND_UTF8(&cmd, "$db", "admin");
        rc = rt_config_call(r, &cmd, &rep, err);
    } else {
        /* The primary with the database's version; StaleDbVersion → forget it, retry. */
        rc = primary_call(ctx, false, true, ns, &rep, err);
    }
    bson_destroy(&cmd);
    rt_table_release(t);
    rt_table_invalidate(r, ns);
    /* MongoDB 7.0: dropping a collection that does not exist succeeds, also when its
     * database does not exist (primary_build's "ns not found"). */
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND) {
        BSON_APPEND_UTF8(reply, "ns", ns);
        return 0;
    }
    if (rc) return rc;
    rc = relay(ctx, &rep, reply, err);
    bson_destroy(&rep);
    if (rc == 0 && !bson_has_field(reply, "ns")) BSON_APPEND_UTF8(reply, "ns", ns);
    return rc;
}

/* True when ns is a sharded collection (asked afresh: renaming by a stale notion of
 * sharded-ness renames the wrong thing). */
static int is_sharded(router_t *r, const char *ns, bool *out, ms_error_t *err) {
    rt_table_t *t = NULL;
    rt_table_invalidate(r, ns);
    int rc = rt_table_get(r, ns, &t, err);
    if (rc) return rc;
    *out = t->sharded;
    rt_table_release(t);
    return 0;
}

/* renameCollection of an unsharded collection: to the database's primary shard, which
 * renames it in one transaction (the same database only). A sharded source or target is
 * refused here (IllegalOperation 20: minishard does not rename sharded collections). */
int rt_cmd_rename_collection(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    char db[MS_NS_BYTES_MAX + 1];
    const char *from, *to, *dot;
    bool sharded = false;
    cmd_ctx_t on_db;
    bson_iter_t it;
    uint32_t tlen = 0;
    bson_t rep;
    int rc;
    if (strcmp(ctx->db, "admin") != 0)
        return err_set(err, MS_ERR_UNAUTHORIZED,
                       "renameCollection may only be run against the admin database.");
    from = bson_iter_utf8(&ctx->arg, NULL);   /* a valid "db.c": dispatch checked it */
    if (!cmd_field(ctx, "to", &it)) return err_set(err, MS_ERR_FAILED_TO_PARSE, "missing 'to'");
    to = bson_iter_utf8(&it, &tlen);
    if ((rc = val_full_ns(to, tlen, true, err)) != 0) return rc;
    if ((rc = val_rename(from, to, err)) != 0) return rc;
    if ((rc = is_sharded(r, from, &sharded, err)) != 0) goto missing;
    if (sharded)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "cannot rename sharded collection %s: minishard renames unsharded "
                       "collections only", from);
    if ((rc = is_sharded(r, to, &sharded, err)) != 0) goto missing;
    if (sharded)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "cannot rename to %s: it is a sharded collection", to);
    dot = strchr(from, '.');
    snprintf(db, sizeof db, "%.*s", (int)(dot - from), from);
    /* The primary of the collection's database (not of $db, admin), with its version. */
    on_db = *ctx;
    on_db.db = db;
    rc = primary_call(&on_db, false, false, from, &rep, err);
    rt_table_invalidate(r, from);
    rt_table_invalidate(r, to);
missing:
    /* The database itself is missing (the primary's own refusals come back in rep). */
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND)
        err_set(err, rc, "Source collection %s does not exist", from);
    if (rc) return rc;
    rc = relay(ctx, &rep, reply, err);
    bson_destroy(&rep);
    return rc;
}

/* dropDatabase: the config server drops every collection on every shard, then the
 * database entry (MongoDB's DropDatabaseCoordinator); we forget what we cached of it. */
int rt_cmd_drop_database(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    bson_t cmd, rep;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "_configsvrDropDatabase", ctx->db);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    int rc = rt_config_call(r, &cmd, &rep, err);
    bson_destroy(&cmd);
    rt_cache_flush_db(r, ctx->db);
    if (rc) return rc;
    rc = relay(ctx, &rep, reply, err);
    bson_destroy(&rep);
    return rc;
}

/* The database's primary shard, with databaseVersion (a shard that checks it and is no
 * longer the primary answers StaleDbVersion: forget the entry and retry, bounded). */
/* A read of a database that does not exist (no primary to ask), as a mongod answers it:
 * listCollections an empty cursor, listIndexes and collStats NamespaceNotFound. */
static int missing_db_reply(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    char ns[RT_NAME_BYTES_MAX + MS_NS_BYTES_MAX + 2];
    bson_t cur, arr;
    if (strcmp(ctx->name, "listCollections") != 0) {
        ns_of(ctx, ns, sizeof ns);   /* the texts of the shard's own replies */
        if (strcmp(ctx->name, "collStats") == 0)
            return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "Collection [%s] not found.", ns);
        return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "ns does not exist: %s", ns);
    }
    snprintf(ns, sizeof ns, "%s.$cmd.listCollections", ctx->db);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &arr);
    bson_append_array_end(&cur, &arr);
    bson_append_document_end(reply, &cur);
    return 0;
}

int rt_cmd_to_primary(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bson_t rep;
    bool write = ctx->spec->flags & CMD_WRITE;
    /* The config database lives on the config server, which lists it (mongos asks it too). */
    if (strcmp(ctx->name, "listCollections") == 0 && strcmp(ctx->db, "config") == 0)
        return rt_cmd_to_config(ctx, reply, err);
    int rc = primary_call(ctx, write, false, ctx->db, &rep, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND && !write) return missing_db_reply(ctx, reply, err);
    if (rc) return rc;
    rc = relay(ctx, &rep, reply, err);
    bson_destroy(&rep);
    return rc;
}

/* currentOp as mongos answers it: every shard's operations in progress (for minishard,
 * the migrations each takes part in), each tagged `shard: <name>`. A shard that does not
 * answer is named in shardErrors rather than failing the command: this is what people
 * look at while something is wrong. Without the client's maxTimeMS the scatter is bounded
 * by MS_CURRENT_OP_SHARD_WAIT_MS so a dead shard cannot hold a status view for the whole
 * peer timeout. */
int rt_cmd_current_op(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    char names[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
    rt_req_t reqs[MS_SHARDS_MAX];
    bson_t arr, errs;
    int n = rt_all_shards(r, names, MS_SHARDS_MAX, err), nops = 0, nerrs = 0;
    if (n < 0) return -n;
    long long own = op_deadline_ms(), bound = time_mono_ms() + MS_CURRENT_OP_SHARD_WAIT_MS;
    if (own == 0) op_set_deadline_ms(bound);
    for (int i = 0; i < n; i++) {
        memset(&reqs[i], 0, sizeof reqs[i]);
        memcpy(reqs[i].shard, names[i], sizeof reqs[i].shard);
        bson_init(&reqs[i].cmd);
        rt_copy_cmd(&reqs[i].cmd, ctx->req, NULL);
    }
    rt_send_all(r, reqs, n);
    op_set_deadline_ms(own);   /* our bound was for the shards, not for this reply */
    BSON_APPEND_ARRAY_BEGIN(reply, "inprog", &arr);
    bson_init(&errs);
    for (int i = 0; i < n; i++) {
        ms_error_t e = reqs[i].err;
        bson_iter_t it, ops;
        if (reqs[i].rc == 0 && rt_reply_status(&reqs[i].reply, &e) == 0) {
            if (!bson_iter_init_find(&it, &reqs[i].reply, "inprog") || !BSON_ITER_HOLDS_ARRAY(&it) ||
                !bson_iter_recurse(&it, &ops))
                continue;
            while (bson_iter_next(&ops)) {
                bson_t op, out;
                bson_iter_t f;
                char k[16];
                if (!BSON_ITER_HOLDS_DOCUMENT(&ops) || !bsonx_view_container(&ops, &op)) continue;
                snprintf(k, sizeof k, "%d", nops++);
                BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &out);
                BSON_APPEND_UTF8(&out, "shard", reqs[i].shard);
                if (bson_iter_init(&f, &op))
                    while (bson_iter_next(&f))
                        if (strcmp(bson_iter_key(&f), "shard") != 0) bson_append_iter(&out, NULL, 0, &f);
                bson_append_document_end(&arr, &out);
            }
        } else {
            bson_t d;
            char k[16];
            snprintf(k, sizeof k, "%d", nerrs++);
            BSON_APPEND_DOCUMENT_BEGIN(&errs, k, &d);
            BSON_APPEND_UTF8(&d, "shard", reqs[i].shard);
            BSON_APPEND_INT32(&d, "code", e.code);
            BSON_APPEND_UTF8(&d, "codeName", err_code_name(e.code));
            BSON_APPEND_UTF8(&d, "errmsg", e.msg);
            bson_append_document_end(&errs, &d);
            log_warn("currentOp shard did not answer shard=%s code=%d errmsg=%s",
                     log_str(reqs[i].shard), e.code, log_str(e.msg));
        }
    }
    bson_append_array_end(reply, &arr);
    if (nerrs > 0) BSON_APPEND_ARRAY(reply, "shardErrors", &errs);
    bson_destroy(&errs);
    for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
    return 0;
}

int rt_cmd_internal(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)reply;
    return err_set(err, MS_ERR_UNAUTHORIZED, "%s is an internal command", ctx->name);
}

int rt_cmd_flush_router_config(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    (void)err;
    if (BSON_ITER_HOLDS_UTF8(&ctx->arg)) {
        const char *ns = bson_iter_utf8(&ctx->arg, NULL);
        if (strchr(ns, '.')) rt_table_invalidate(r, ns);
        else rt_db_invalidate(r, ns);
    } else {
        rt_cache_flush_all(r);
    }
    BSON_APPEND_BOOL(reply, "flushed", true);
    return 0;
}

bool rt_refuse_internal(const uint8_t *data, size_t len, bson_t *reply) {
    bson_t req;
    bson_iter_t it;
    if (!bson_init_static(&req, data, len) || !bson_iter_init(&it, &req) || !bson_iter_next(&it))
        return false;
    const char *name = bson_iter_key(&it);
    if (name[0] != '_') return false;
    ms_error_t e;
    err_set(&e, MS_ERR_UNAUTHORIZED, "%.200s is an internal command", name);
    cmd_error_reply(reply, &e);
    return true;
}

void rt_status(void *app, bson_t *reply) {
    router_t *r = app;
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "router", &d);
    BSON_APPEND_UTF8(&d, "configdb", r->configdb);
    BSON_APPEND_INT64(&d, "staleConfigRetries", (int64_t)atomic_load(&r->stale_retries));
    BSON_APPEND_INT64(&d, "staleDbVersionRetries", (int64_t)atomic_load(&r->stale_db_retries));
    BSON_APPEND_INT64(&d, "databaseRefreshes", (int64_t)atomic_load(&r->db_refreshes));
    BSON_APPEND_INT64(&d, "routingTableRefreshes", (int64_t)atomic_load(&r->refreshes));
    BSON_APPEND_INT64(&d, "routingTableRefreshesDiscarded",
                      (int64_t)atomic_load(&r->refreshes_discarded));
    BSON_APPEND_INT64(&d, "targetedOps", (int64_t)atomic_load(&r->targeted_ops));
    BSON_APPEND_INT64(&d, "scatterGatherOps", (int64_t)atomic_load(&r->scatter_ops));
    BSON_APPEND_INT32(&d, "openCursors", rt_cursors_count(r));
    bson_append_document_end(reply, &d);
    rt_status_sharding(r, reply);
}

void rt_metrics(void *app, bson_t *metrics) {
    rt_cursors_metrics(app, metrics);
}

static void *pinger(void *p) {
    router_t *r = p;
    while (!atomic_load(&r->stopping)) {
        bson_t cmd, rep;
        ms_error_t e;
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "_configsvrRouterPing", r->url);
        BSON_APPEND_UTF8(&cmd, "host", r->url);
        BSON_APPEND_INT64(&cmd, "up", (time_now_ms() - r->start_ms) / 1000);
        BSON_APPEND_BOOL(&cmd, "waiting", true);
        BSON_APPEND_UTF8(&cmd, "mongoVersion", MS_MONGODB_VERSION);
        BSON_APPEND_UTF8(&cmd, "$db", "admin");
        if (rt_config_call(r, &cmd, &rep, &e) == 0) {
            if (rt_reply_status(&rep, &e) != 0)
                log_debug("router ping refused code=%d errmsg=%s", e.code, log_str(e.msg));
            bson_destroy(&rep);
        }
        bson_destroy(&cmd);
        rt_refresh_chunk_size(r);
        rt_cursors_reap(r);
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += RT_PING_INTERVAL_MS / 1000;
        pthread_mutex_lock(&r->ping_mu);
        if (!atomic_load(&r->stopping)) pthread_cond_timedwait(&r->ping_cv, &r->ping_mu, &dl);
        pthread_mutex_unlock(&r->ping_mu);
    }
    return NULL;
}

int rt_pinger_start(router_t *r, ms_error_t *err) {
    if (pthread_create(&r->pinger, NULL, pinger, r) != 0)
        return err_set(err, MS_ERR_INTERNAL, "cannot start the config.mongos pinger");
    r->pinger_running = true;
    return 0;
}

/* listDatabases as mongos answers it: every shard's databases merged by name, sizeOnDisk
 * summed, `empty` only when empty on every shard, and `shards: {name: bytes}` saying
 * where each lives. The filter applies to the merged entries (a size filter sees the
 * cluster's size), so it is not sent to the shards. A shard that fails fails the command:
 * a partial list would look like lost databases. */
typedef struct ldb_ent {
    char name[MS_NS_BYTES_MAX + 1];
    int64_t size;
    bool empty;
    bson_t shards;
} ldb_ent_t;

int rt_cmd_list_databases(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    char names[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
    rt_req_t reqs[MS_SHARDS_MAX];
    bool name_only = cmd_flag(ctx, "nameOnly", false);
    ldb_ent_t *ents = NULL;
    int nents = 0, cap = 0, rc = 0, n;
    int64_t total = 0;
    query_t *filter = NULL;
    bson_iter_t it;
    bson_t f, arr;

    if (cmd_field(ctx, "filter", &it) && bsonx_view_container(&it, &f) &&
        (rc = query_compile(&f, &filter, err)) != 0)
        return rc;
    n = rt_all_shards(r, names, MS_SHARDS_MAX, err);
    if (n < 0) {
        query_free(filter);
        return -n;
    }
    for (int i = 0; i < n; i++) {
        memset(&reqs[i], 0, sizeof reqs[i]);
        memcpy(reqs[i].shard, names[i], sizeof reqs[i].shard);
        bson_init(&reqs[i].cmd);
        BSON_APPEND_INT32(&reqs[i].cmd, "listDatabases", 1);
        if (name_only) BSON_APPEND_BOOL(&reqs[i].cmd, "nameOnly", true);
        BSON_APPEND_UTF8(&reqs[i].cmd, "$db", "admin");
    }
    rt_send_all(r, reqs, n);
    for (int i = 0; i < n && !rc; i++) {
        bson_iter_t dbs, one, x;
        if (reqs[i].rc) {
            *err = reqs[i].err;
            rc = reqs[i].rc;
            err_prefix(err, "shard %s", reqs[i].shard);
            break;
        }
        if ((rc = rt_reply_status(&reqs[i].reply, err)) != 0) {
            err_prefix(err, "shard %s", reqs[i].shard);
            break;
        }
        if (!bson_iter_init_find(&dbs, &reqs[i].reply, "databases") ||
            !BSON_ITER_HOLDS_ARRAY(&dbs) || !bson_iter_recurse(&dbs, &one))
            continue;
        while (bson_iter_next(&one)) {
            const char *nm;
            int64_t sz = 0;
            int k;
            if (!BSON_ITER_HOLDS_DOCUMENT(&one) || !bson_iter_recurse(&one, &x) ||
                !bson_iter_find(&x, "name") || !BSON_ITER_HOLDS_UTF8(&x))
                continue;
            nm = bson_iter_utf8(&x, NULL);
            for (k = 0; k < nents && strcmp(ents[k].name, nm) != 0; k++) {}
            if (k == nents) {
                if (nents == cap) {
                    int ncap = cap ? cap * 2 : 16;
                    ldb_ent_t *g = realloc(ents, (size_t)ncap * sizeof *g);
                    if (!g) {
                        rc = err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT,
                                     "listDatabases: out of memory");
                        break;
                    }
                    ents = g;
                    cap = ncap;
                }
                snprintf(ents[k].name, sizeof ents[k].name, "%s", nm);
                ents[k].size = 0;
                ents[k].empty = true;
                bson_init(&ents[k].shards);
                nents++;
            }
            if (bson_iter_recurse(&one, &x) && bson_iter_find(&x, "sizeOnDisk"))
                sz = bson_iter_as_int64(&x);
            if (bson_iter_recurse(&one, &x) && bson_iter_find(&x, "empty") && !bsonx_truthy(&x))
                ents[k].empty = false;
            ents[k].size += sz;
            BSON_APPEND_INT64(&ents[k].shards, reqs[i].shard, sz);
        }
    }
    if (!rc) {
        char key[16];
        int out = 0;
        BSON_APPEND_ARRAY_BEGIN(reply, "databases", &arr);
        for (int k = 0; k < nents; k++) {
            bson_t e;
            bson_init(&e);
            BSON_APPEND_UTF8(&e, "name", ents[k].name);
            if (!name_only) {
                BSON_APPEND_INT64(&e, "sizeOnDisk", ents[k].size);
                BSON_APPEND_BOOL(&e, "empty", ents[k].empty);
                BSON_APPEND_DOCUMENT(&e, "shards", &ents[k].shards);
            }
            if (!filter || query_match(filter, &e)) {
                snprintf(key, sizeof key, "%d", out++);
                BSON_APPEND_DOCUMENT(&arr, key, &e);
                total += ents[k].size;
            }
            bson_destroy(&e);
        }
        bson_append_array_end(reply, &arr);
        if (!name_only) {
            BSON_APPEND_INT64(reply, "totalSize", total);
            BSON_APPEND_INT64(reply, "totalSizeMb", total / (1024 * 1024));
        }
    }
    for (int k = 0; k < nents; k++) bson_destroy(&ents[k].shards);
    free(ents);
    for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
    query_free(filter);
    return rc;
}

/* dbStats as mongos answers it: sent to every shard (one without the database answers
 * zeros), each shard's reply under raw.<shard name>, and the sums of objects, byte sizes,
 * indexes, collections and views (a collection on two shards counts on each: mongos sums
 * the shards' figures too), avgObjSize weighted by the shards' documents and not scaled
 * (SERVER-7347). fsUsedSize / fsTotalSize are summed as mongos sums them, so shards that
 * share a file system count it once each. A shard that fails fails the command. */
int rt_cmd_db_stats(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    static const char *const summed[] = {"collections", "views",     "objects",
                                         "dataSize",    "storageSize", "totalSize",
                                         "indexes",     "indexSize", "fsUsedSize",
                                         "fsTotalSize"};
    enum { NSUM = sizeof summed / sizeof summed[0] };
    char names[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
    rt_req_t reqs[MS_SHARDS_MAX];
    int64_t scale = 1, sums[NSUM] = {0};
    double obj_bytes = 0;
    bson_iter_t it;
    bson_t raw;
    int rc = 0, n;

    if (cmd_field(ctx, "scale", &it) && (rc = val_scale(&it, "scale", &scale, err)) != 0)
        return rc;
    n = rt_all_shards(r, names, MS_SHARDS_MAX, err);
    if (n < 0) return -n;
    for (int i = 0; i < n; i++) {
        memset(&reqs[i], 0, sizeof reqs[i]);
        memcpy(reqs[i].shard, names[i], sizeof reqs[i].shard);
        bson_init(&reqs[i].cmd);
        BSON_APPEND_INT32(&reqs[i].cmd, "dbStats", 1);
        BSON_APPEND_INT64(&reqs[i].cmd, "scale", scale);
        BSON_APPEND_UTF8(&reqs[i].cmd, "$db", ctx->db);
    }
    rt_send_all(r, reqs, n);
    for (int i = 0; i < n && !rc; i++) {
        if (reqs[i].rc) {
            *err = reqs[i].err;
            rc = reqs[i].rc;
        } else {
            rc = rt_reply_status(&reqs[i].reply, err);
        }
        if (rc) err_prefix(err, "shard %s", reqs[i].shard);
    }
    if (!rc) {
        int64_t objects;
        BSON_APPEND_DOCUMENT_BEGIN(reply, "raw", &raw);
        for (int i = 0; i < n; i++) {
            BSON_APPEND_DOCUMENT(&raw, reqs[i].shard, &reqs[i].reply);
            for (int k = 0; k < NSUM; k++)
                if (bson_iter_init_find(&it, &reqs[i].reply, summed[k]) && bsonx_is_number(&it))
                    sums[k] += bson_iter_as_int64(&it);
            /* avgObjSize x objects: the shard's unscaled bytes behind its average. */
            bson_iter_t a, o;
            if (bson_iter_init_find(&a, &reqs[i].reply, "avgObjSize") && bsonx_is_number(&a) &&
                bson_iter_init_find(&o, &reqs[i].reply, "objects") && bsonx_is_number(&o))
                obj_bytes += bson_iter_as_double(&a) * (double)bson_iter_as_int64(&o);
        }
        bson_append_document_end(reply, &raw);
        objects = sums[2];
        BSON_APPEND_UTF8(reply, "db", ctx->db);
        for (int k = 0; k < NSUM; k++) {
            if (strcmp(summed[k], "dataSize") == 0)
                BSON_APPEND_DOUBLE(reply, "avgObjSize", objects ? obj_bytes / (double)objects : 0);
            if (strcmp(summed[k], "fsUsedSize") == 0)
                BSON_APPEND_INT64(reply, "scaleFactor", scale);
            BSON_APPEND_INT64(reply, summed[k], sums[k]);
        }
    }
    for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
    return rc;
}
