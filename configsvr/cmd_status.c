/*
 * cmd_status.c — the config server's status commands (bin/configsvr): the `sharding`
 * section of serverStatus, balancerStatus and _configsvrRouterPing (routers report in;
 * config.mongos keeps the last ping).
 */
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

void cfg_status(void *app, bson_t *reply) {
    cfg_t *cfg = app;
    int64_t shards = 0, dbs = 0, colls = 0, chunks = 0;
    ms_error_t e = {0};
    bson_t s;
    if (cat_counts(cfg->cat, &shards, &dbs, &colls, &chunks, &e) != 0) {
        log_warn("serverStatus sharding counts failed errmsg=%s", log_str(e.msg));
        return;
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "sharding", &s);
    BSON_APPEND_UTF8(&s, "configsvrConnectionString", cfg->url);
    BSON_APPEND_INT64(&s, "shards", shards);
    BSON_APPEND_INT64(&s, "databases", dbs);
    BSON_APPEND_INT64(&s, "collections", colls);
    BSON_APPEND_INT64(&s, "chunks", chunks);
    BSON_APPEND_INT32(&s, "openCursors", cfg->cursors ? curs_count(cfg->cursors) : 0);
    bson_append_document_end(reply, &s);
}

void cfg_metrics(void *app, bson_t *metrics) {
    cfg_t *cfg = app;
    bson_t cur;
    if (!cfg->cursors) return;
    curs_metrics_begin(cfg->cursors, "bytesHeld", metrics, &cur);
    bson_append_document_end(metrics, &cur);
}

/* balancerStatus: the mode as config.settings says it (stopped: true forces "off") and
 * the balancer thread's counters (balancer.c). */
int cfg_cmd_balancer_status(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    bson_t doc;
    bool found = false;
    const char *mode = "full";
    bson_iter_t it;
    int rc = cat_settings_get(cfg->cat, "balancer", &doc, &found, err);
    if (rc) return rc;
    if (found) {
        if (bson_iter_init_find(&it, &doc, "mode") && BSON_ITER_HOLDS_UTF8(&it) &&
            strcmp(bson_iter_utf8(&it, NULL), "off") == 0)
            mode = "off";
        if (bson_iter_init_find(&it, &doc, "stopped") && BSON_ITER_HOLDS_BOOL(&it) && bson_iter_bool(&it))
            mode = "off";
    }
    BSON_APPEND_UTF8(reply, "mode", mode);
    bool in_round;
    int64_t rounds;
    cfg_balancer_counters(cfg, &in_round, &rounds);
    BSON_APPEND_BOOL(reply, "inBalancerRound", in_round);
    BSON_APPEND_INT64(reply, "numBalancerRounds", rounds);
    if (found) bson_destroy(&doc);
    return 0;
}

/* _configsvrRouterPing {host, up, waiting, mongoVersion}: upserts config.mongos. */
int cfg_cmd_router_ping(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    bson_iter_t it;
    const char *host = NULL, *version = "";
    int64_t up = 0;
    bool waiting = cmd_flag(ctx, "waiting", false);
    (void)reply;
    if (cmd_field(ctx, "host", &it)) host = bson_iter_utf8(&it, NULL);
    if (!host || !*host) return err_set(err, MS_ERR_BAD_VALUE, "_configsvrRouterPing needs a host");
    if (strlen(host) >= MS_URL_BYTES_MAX) return err_set(err, MS_ERR_BAD_VALUE, "host is too long");
    if (cmd_field(ctx, "up", &it) && !bsonx_as_int64(&it, &up))
        return err_set(err, MS_ERR_BAD_VALUE, "up must be a number of seconds");
    if (cmd_field(ctx, "mongoVersion", &it)) version = bson_iter_utf8(&it, NULL);
    return cat_router_ping(cfg->cat, host, up, waiting, version, err);
}
