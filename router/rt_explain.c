/*
 * rt_explain.c — explain through the router (bin/router), as mongos answers it, so that
 * mongosh's db.c.find().explain() and db.c.explain().count() work against a cluster.
 *
 * {explain: {find | count | distinct: "c", ...}, verbosity?} is targeted like the command
 * it explains (the filter: find's `filter`, count's and distinct's `query`; an unsharded
 * collection → its primary), sent to each target shard as the same explain with the shard
 * version (StaleConfig retried by rt_scatter), and the shards' answers are put together in
 * mongos's shape: queryPlanner.winningPlan {stage: SINGLE_SHARD | SHARD_MERGE, shards:
 * [{shardName, <the shard's queryPlanner fields>}]} and, for executionStats /
 * allPlansExecution, executionStats {nReturned, executionTimeMillis, totalKeysExamined,
 * totalDocsExamined (summed; time: the slowest shard), executionStages {stage, shards:
 * [{shardName, <the shard's executionStats>}]}}. Aggregate's explain is `aggregate` with
 * `explain: true` (rt_agg.c); other commands get the shard's CommandNotSupported message.
 */
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "router/router.h"

typedef struct explain_args {
    const bson_t *req;   /* the client's explain command (borrowed) */
} explain_args_t;

/* The shard gets the client's explain as it is (rt_scatter adds the shard version). */
static void build_explain(void *arg, const rt_table_t *t, int shard, int ntargets, bson_t *cmd) {
    explain_args_t *a = arg;
    static const char *const skip[] = {NULL};
    (void)t, (void)shard, (void)ntargets;
    rt_copy_cmd(cmd, a->req, skip);
}

int rt_cmd_explain(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    bson_t inner, filter, qp, wp, shards, es, stages, eshards;
    bson_iter_t it;
    const char *verb, *coll;
    bool has_filter = false, exec = false;
    rt_req_t reqs[MS_SHARDS_MAX];
    int n = 0, rc;
    if (!BSON_ITER_HOLDS_DOCUMENT(&ctx->arg) || !bsonx_view_container(&ctx->arg, &inner) ||
        !bson_iter_init(&it, &inner) || !bson_iter_next(&it))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "explain needs a command document");
    verb = bson_iter_key(&it);
    if (strcmp(verb, "find") != 0 && strcmp(verb, "count") != 0 && strcmp(verb, "distinct") != 0)
        return err_set(err, MS_ERR_COMMAND_NOT_SUPPORTED, "explain of '%s' is not supported: "
                       "explain supports find, count and distinct (aggregate: explain: true)",
                       verb);
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "collection name has invalid type %s",
                       bsonx_type_name(bson_iter_type(&it)));
    coll = bson_iter_utf8(&it, NULL);
    if (bson_iter_init_find(&it, &inner, verb[0] == 'f' ? "filter" : "query") &&
        BSON_ITER_HOLDS_DOCUMENT(&it) && bsonx_view_container(&it, &filter))
        has_filter = true;
    if (cmd_field(ctx, "verbosity", &it) && BSON_ITER_HOLDS_UTF8(&it))
        exec = strcmp(bson_iter_utf8(&it, NULL), "queryPlanner") != 0;
    explain_args_t a = {ctx->req};
    rc = rt_scatter(r, ctx->db, coll, has_filter ? &filter : NULL, build_explain, &a, reqs, &n, err);
    if (rc) return rc;   /* a database that does not exist: the shard's NamespaceNotFound */
    const char *stage = n == 1 ? "SINGLE_SHARD" : "SHARD_MERGE";
    int64_t nret = 0, keys = 0, docs = 0, ms = 0;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "queryPlanner", &qp);
    BSON_APPEND_INT32(&qp, "mongosPlannerVersion", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&qp, "winningPlan", &wp);
    BSON_APPEND_UTF8(&wp, "stage", stage);
    BSON_APPEND_ARRAY_BEGIN(&wp, "shards", &shards);
    for (int i = 0; i < n; i++) {
        char key[16];
        bson_t one, sq;
        bson_iter_t si;
        snprintf(key, sizeof key, "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(&shards, key, &one);
        BSON_APPEND_UTF8(&one, "shardName", reqs[i].shard);
        if (bson_iter_init_find(&si, &reqs[i].reply, "queryPlanner") &&
            bsonx_view_container(&si, &sq))
            bson_concat(&one, &sq);
        bson_append_document_end(&shards, &one);
    }
    bson_append_array_end(&wp, &shards);
    bson_append_document_end(&qp, &wp);
    bson_append_document_end(reply, &qp);
    if (exec) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "executionStats", &es);
        for (int i = 0; i < n; i++) {
            bson_iter_t si;
            bson_t se;
            if (!bson_iter_init_find(&si, &reqs[i].reply, "executionStats") ||
                !bsonx_view_container(&si, &se))
                continue;
            nret += bsonx_int64_or(&se, "nReturned", 0);
            keys += bsonx_int64_or(&se, "totalKeysExamined", 0);
            docs += bsonx_int64_or(&se, "totalDocsExamined", 0);
            int64_t shard_ms = bsonx_int64_or(&se, "executionTimeMillis", 0);
            if (shard_ms > ms) ms = shard_ms;
        }
        BSON_APPEND_INT64(&es, "nReturned", nret);
        BSON_APPEND_INT64(&es, "executionTimeMillis", ms);
        BSON_APPEND_INT64(&es, "totalKeysExamined", keys);
        BSON_APPEND_INT64(&es, "totalDocsExamined", docs);
        BSON_APPEND_DOCUMENT_BEGIN(&es, "executionStages", &stages);
        BSON_APPEND_UTF8(&stages, "stage", stage);
        BSON_APPEND_ARRAY_BEGIN(&stages, "shards", &eshards);
        for (int i = 0; i < n; i++) {
            char key[16];
            bson_t one, se;
            bson_iter_t si;
            snprintf(key, sizeof key, "%d", i);
            BSON_APPEND_DOCUMENT_BEGIN(&eshards, key, &one);
            BSON_APPEND_UTF8(&one, "shardName", reqs[i].shard);
            if (bson_iter_init_find(&si, &reqs[i].reply, "executionStats") &&
                bsonx_view_container(&si, &se))
                bson_concat(&one, &se);
            bson_append_document_end(&eshards, &one);
        }
        bson_append_array_end(&stages, &eshards);
        bson_append_document_end(&es, &stages);
        bson_append_document_end(reply, &es);
    }
    BSON_APPEND_DOCUMENT(reply, "command", &inner);
    for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
    return 0;
}
