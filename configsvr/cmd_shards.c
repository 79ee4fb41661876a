/*
 * cmd_shards.c — the config server's shard membership commands (bin/configsvr):
 * addShard, listShards, removeShard, with MongoDB's names, fields and reply shapes.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/log.h"
#include "common/rpc.h"
#include "configsvr/configsvr.h"

/* Turns the user's host into a URL: tcp://, ipc:// and inproc:// as given; "host:port"
 * (MongoDB's form) becomes tcp://host:port. Replica-set strings are refused. */
static int host_to_url(const char *host, char *url, size_t cap, ms_error_t *err) {
    size_t n = strlen(host);
    if (n == 0) return err_set(err, MS_ERR_BAD_VALUE, "addShard needs a host");
    if (n >= MS_URL_BYTES_MAX - 8) return err_set(err, MS_ERR_BAD_VALUE, "host is too long");
    for (size_t i = 0; i < n; i++)
        if (isspace((unsigned char)host[i]) || host[i] == ',')
            return err_set(err, MS_ERR_FAILED_TO_PARSE,
                           "invalid host '%s': give one address (replica sets are not supported)",
                           host);
    if (strncmp(host, "tcp://", 6) == 0 || strncmp(host, "ipc://", 6) == 0 ||
        strncmp(host, "inproc://", 9) == 0) {
        snprintf(url, cap, "%s", host);
        return 0;
    }
    if (strchr(host, '/'))
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "invalid host '%s': replica sets are not supported; give tcp://host:port",
                       host);
    const char *colon = strrchr(host, ':');
    if (!colon || colon == host || colon[1] == '\0')
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "invalid host '%s': expected host:port or a URL",
                       host);
    snprintf(url, cap, "tcp://%s", host);
    return 0;
}

static int name_check(const char *name, ms_error_t *err) {
    size_t n = strlen(name);
    if (n == 0 || n >= CAT_SHARD_NAME_BYTES_MAX)
        return err_set(err, MS_ERR_BAD_VALUE, "shard name must be 1..%d bytes",
                       CAT_SHARD_NAME_BYTES_MAX - 1);
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '_' && name[i] != '-')
            return err_set(err, MS_ERR_BAD_VALUE,
                           "shard name '%s' may only hold letters, digits, '_' and '-'", name);
    if (strcmp(name, "config") == 0)
        return err_set(err, MS_ERR_BAD_VALUE, "use of shard name 'config' is not allowed");
    return 0;
}

/* MongoDB's addShard: validate the host by running hello on it within a deadline, refuse
 * routers and config servers, hand the shard its identity (_addShard with shardName,
 * clusterId and our URL), then insert config.shards. */
int cfg_cmd_add_shard(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    bson_iter_t it;
    char url[MS_URL_BYTES_MAX], name[CAT_SHARD_NAME_BYTES_MAX];
    const char *want_name = NULL;
    int64_t max_size_mb = 0;
    bool already = false;
    rpc_client_t *cl = NULL;
    bson_t hello = BSON_INITIALIZER, add = BSON_INITIALIZER, r;
    bool have_r = false;
    int rc;

    rc = host_to_url(cfg_arg_str(ctx), url, sizeof url, err);
    if (rc) goto out_nolock;
    /* maxSize (MB, MongoDB 6.0; 0 = no cap): a whole non-negative number, as 6.0's
     * bsonExtractIntegerField and AddShardRequest::validate took it. */
    if (cmd_field(ctx, "maxSize", &it)) {
        double d = bson_iter_as_double(&it);
        if (d != (double)(int64_t)d) {
            rc = err_set(err, MS_ERR_BAD_VALUE, "maxSize must be a whole number of megabytes");
            goto out_nolock;
        }
        if (d < 0) {
            rc = err_set(err, MS_ERR_BAD_VALUE, "maxSize (%lld) must be greater than or equal to 0",
                         (long long)d);
            goto out_nolock;
        }
        max_size_mb = (int64_t)d;
    }
    if (cmd_field(ctx, "name", &it)) {
        want_name = bson_iter_utf8(&it, NULL);
        rc = name_check(want_name, err);
        if (rc) goto out_nolock;
    }
    cfg_ddl_guard_t g;
    rc = cfg_ddl_lock_shards(cfg, "addShard", &g, err);
    if (rc) goto out_nolock;
    rc = cat_shard_prepare(cfg->cat, want_name, url, name, sizeof name, &already, err);
    if (rc) goto out;
    if (already) {
        BSON_APPEND_UTF8(reply, "shardAdded", name);
        goto out;
    }
    /* Step 1: the host answers hello in time and is a plain shard daemon. */
    rc = rpc_peer(url, &cl, err);
    if (rc) goto out;
    BSON_APPEND_INT32(&hello, "hello", 1);
    BSON_APPEND_UTF8(&hello, "$db", "admin");
    rc = rpc_call(cl, &hello, CFG_HELLO_TIMEOUT_MS, &r, err);
    if (rc) {
        char cause[sizeof err->msg];
        snprintf(cause, sizeof cause, "%s", err ? err->msg : "");
        rc = err_set(err, MS_ERR_OPERATION_FAILED,
                     "failed to run hello on %s within %d ms when attempting to add shard: %s",
                     url, CFG_HELLO_TIMEOUT_MS, cause);
        goto out;
    }
    have_r = true;
    if (bson_iter_init_find(&it, &r, "msg") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), "isdbgrid") == 0) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "can't add a router (%s) as a shard", url);
        goto out;
    }
    if (bson_iter_init_find(&it, &r, "configsvr")) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "can't add a config server (%s) as a shard", url);
        goto out;
    }
    /* Step 2: the shard's identity (MongoDB writes the shardIdentity document on it). */
    {
        bson_t id;
        bson_oid_t cluster;
        cat_cluster_id(cfg->cat, &cluster);
        BSON_APPEND_INT32(&add, "_addShard", 1);
        BSON_APPEND_DOCUMENT_BEGIN(&add, "shardIdentity", &id);
        BSON_APPEND_UTF8(&id, "shardName", name);
        BSON_APPEND_OID(&id, "clusterId", &cluster);
        BSON_APPEND_UTF8(&id, "configsvrConnectionString", cfg->url);
        bson_append_document_end(&add, &id);
        BSON_APPEND_UTF8(&add, "$db", "admin");
    }
    bson_destroy(&r);
    have_r = false;
    rc = rpc_call(cl, &add, CFG_SHARD_CMD_TIMEOUT_MS, &r, err);
    if (rc) goto out;
    have_r = true;
    if (!bson_iter_init_find(&it, &r, "ok") || !bson_iter_as_bool(&it)) {
        int64_t code = MS_ERR_OPERATION_FAILED;
        bson_iter_t ci;
        if (bson_iter_init_find(&ci, &r, "code") && BSON_ITER_HOLDS_NUMBER(&ci))
            code = bson_iter_as_int64(&ci);
        rc = err_set(err, code > 0 && code <= INT32_MAX ? (int)code : MS_ERR_OPERATION_FAILED,
                     "shard %s refused _addShard: %s", url,
                     bson_iter_init_find(&ci, &r, "errmsg") && BSON_ITER_HOLDS_UTF8(&ci)
                         ? bson_iter_utf8(&ci, NULL) : "no reason given");
        goto out;
    }
    /* The shard holds its identity; the catalog does not know it yet. A crash here
     * leaves a shard that a retried addShard (same host, same name) simply re-adds:
     * _addShard accepts the identity it already has. */
    rc = fp_eval(CFG_FP_ADD_SHARD_BEFORE_INSERT, err);
    if (rc) goto out;
    /* Step 3: the catalog row (one transaction, duplicates re-checked). */
    rc = cat_shard_insert(cfg->cat, name, url, max_size_mb, err);
    if (rc) goto out;
    log_info("shard added name=%s host=%s max_size_mb=%lld", log_str(name), log_str(url),
             (long long)max_size_mb);
    BSON_APPEND_UTF8(reply, "shardAdded", name);
out:
    cfg_ddl_unlock(&g);
out_nolock:
    if (have_r) bson_destroy(&r);
    bson_destroy(&hello);
    bson_destroy(&add);
    return rc;
}

int cfg_cmd_list_shards(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    return cat_shards_append(cfg->cat, reply, "shards", err);
}

/* MongoDB's removeShard: started → ongoing (remaining work) → completed. */
int cfg_cmd_remove_shard(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *name = cfg_arg_str(ctx);
    int rc;
    if (!*name) return err_set(err, MS_ERR_BAD_VALUE, "removeShard needs a shard name");
    cfg_ddl_guard_t g;
    if ((rc = cfg_ddl_lock_shards(cfg, "removeShard", &g, err)) != 0) return rc;
    rc = cat_shard_remove_step(cfg->cat, name, reply, err);
    cfg_ddl_unlock(&g);
    return rc;
}
