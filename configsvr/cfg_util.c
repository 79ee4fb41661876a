/*
 * cfg_util.c — small helpers of the config server's command handlers (bin/configsvr):
 * namespace parsing, request field access, and calls to shards by name with a deadline.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/rpc.h"
#include "configsvr/configsvr.h"

int cfg_ns_split(const char *ns, char *db, size_t db_cap, const char **coll, ms_error_t *err) {
    const char *dot = strchr(ns, '.');
    size_t n = strlen(ns);
    if (n == 0 || n > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "invalid namespace '%.300s'", ns);
    if (!dot || dot == ns || dot[1] == '\0')
        return err_set(err, MS_ERR_INVALID_NAMESPACE,
                       "invalid namespace '%s': expected \"<database>.<collection>\"", ns);
    if ((size_t)(dot - ns) >= db_cap || (size_t)(dot - ns) >= CAT_DB_NAME_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "database name of '%s' is too long", ns);
    memcpy(db, ns, (size_t)(dot - ns));
    db[dot - ns] = '\0';
    if (coll) *coll = dot + 1;
    return 0;
}

const char *cfg_arg_str(const cmd_ctx_t *ctx) {
    if (BSON_ITER_HOLDS_UTF8(&ctx->arg)) return bson_iter_utf8(&ctx->arg, NULL);
    return "";
}

bool cfg_field_doc(const cmd_ctx_t *ctx, const char *name, bson_t *out) {
    bson_iter_t it;
    uint32_t len;
    const uint8_t *data;
    if (!cmd_field(ctx, name, &it)) return false;
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) bson_iter_document(&it, &len, &data);
    else if (BSON_ITER_HOLDS_ARRAY(&it)) bson_iter_array(&it, &len, &data);
    else return false;
    return bson_init_static(out, data, len);
}

int cfg_shard_command(cfg_t *cfg, const char *shard, const bson_t *cmd, int timeout_ms,
                      bson_t *reply, ms_error_t *err) {
    char host[MS_URL_BYTES_MAX];
    rpc_client_t *cl = NULL;
    bson_iter_t it;
    int rc = cat_shard_host(cfg->cat, shard, host, sizeof host, NULL, err);
    if (rc) return rc;
    rc = rpc_peer(host, &cl, err);
    if (rc) return rc;
    rc = rpc_call_op(cl, cmd, timeout_ms, reply, err);  /* maxTimeMS bounds it when given */
    if (rc) {
        err_prefix(err, "shard %s (%s)", shard, host);
        return rc;
    }
    if (bson_iter_init_find(&it, reply, "ok") && bsonx_truthy(&it)) return 0;
    /* {ok: 0}: the shard's code and text become ours (its errmsg names the cause). */
    {
        int64_t v = 0;
        const char *msg = "reply without ok: 1";
        int code = MS_ERR_UNKNOWN_ERROR;
        if (bson_iter_init_find(&it, reply, "code") && bsonx_as_int64(&it, &v) && v > 0 &&
            v <= INT32_MAX)
            code = (int)v;
        if (bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
            msg = bson_iter_utf8(&it, NULL);
        rc = err_set(err, code, "%s", msg);
        err_prefix(err, "shard %s", shard);
        bson_destroy(reply);
        return rc;
    }
}

void cfg_flush_shard(cfg_t *cfg, const char *shard, const char *ns) {
    bson_t cmd = BSON_INITIALIZER, reply;
    ms_error_t e = {0};
    /* Mirrors the config server's post-commit refresh request: the shard reloads its
     * filtering metadata now rather than on the next stale request. Best effort: a
     * shard that misses it refreshes on its next versioned request anyway. */
    BSON_APPEND_UTF8(&cmd, "_flushRoutingTableCacheUpdates", ns);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    int rc = cfg_shard_command(cfg, shard, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &reply, &e);
    if (rc == 0) bson_destroy(&reply);
    else log_warn("flush routing cache failed shard=%s ns=%s code=%d errmsg=%s", log_str(shard),
                  log_str(ns), rc, log_str(e.msg));
    bson_destroy(&cmd);
}

typedef struct flush_arg {
    cfg_t *cfg;
    const char *shard, *ns;
    long long deadline_ms;   /* the command's maxTimeMS, which lives per thread */
} flush_arg_t;

static void *flush_thread(void *p) {
    flush_arg_t *a = p;
    op_set_deadline_ms(a->deadline_ms);
    cfg_flush_shard(a->cfg, a->shard, a->ns);
    return NULL;
}

void cfg_flush_shards(cfg_t *cfg, const char *const *shards, int n, const char *ns) {
    pthread_t th[MS_SHARDS_MAX];
    flush_arg_t args[MS_SHARDS_MAX];
    bool started[MS_SHARDS_MAX] = {false};
    if (n > MS_SHARDS_MAX) n = MS_SHARDS_MAX;
    /* One thread per shard: each refresh reads the whole table (pages of it) and is
     * bounded by its own call's deadline, so the slowest shard sets the time, not the sum. */
    for (int i = 0; i < n; i++) {
        args[i] = (flush_arg_t){cfg, shards[i], ns, op_deadline_ms()};
        started[i] = pthread_create(&th[i], NULL, flush_thread, &args[i]) == 0;
        if (!started[i]) cfg_flush_shard(cfg, shards[i], ns);   /* no thread: do it here */
    }
    for (int i = 0; i < n; i++)
        if (started[i]) pthread_join(th[i], NULL);
}
