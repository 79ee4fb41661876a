/*
 * cmd_agg.c — the shard daemon's aggregate command (bin/shardd), MongoDB's
 * {aggregate: coll, pipeline, cursor: {batchSize}, explain, allowDiskUse, let, hint}.
 * The documents come through the same read path as a find: the shard version check and
 * the ownership filter (orphans never reach a pipeline), a plan from plan.c's planner
 * with the leading $match as its filter (so an index serves it), one read transaction.
 * The pipeline (common/agg.c) runs to completion inside the command; its results are held
 * by a cursor that getMore drains in batches (docs/aggregation.md "Limits").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardd/shardd.h"

#include "common/agg.h"
#include "common/bsonx.h"
#include "common/curop.h"
#include "common/expr.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/query.h"

typedef struct agg_args {
    const char *ns;
    agg_pipeline_t *p;
    agg_run_t *run;
    query_t *q;                 /* the leading $match, compiled for the planner */
    const bson_t *filter;       /* borrowed from p */
    bson_t *hint;               /* NULL = planner; {$hint: "name"} for a name */
    shv_filter_t *own;
    bool no_index;
    bool explain;
    bson_t *reply;              /* explain: where the plan goes */
} agg_args_t;

static void agg_args_free(agg_args_t *a) {
    agg_run_free(a->run);
    agg_free(a->p);
    query_free(a->q);
    if (a->hint) bson_destroy(a->hint);
    shv_filter_release(a->own);
}

static void eq_from_args(const agg_args_t *a, plan_query_t *eq) {
    bson_iter_t it;
    memset(eq, 0, sizeof *eq);
    eq->filter = a->filter;
    eq->q = a->q;
    if (a->hint) {
        if (bson_iter_init_find(&it, a->hint, "$hint") && BSON_ITER_HOLDS_UTF8(&it))
            eq->hint_name = bson_iter_utf8(&it, NULL);
        else
            eq->hint = a->hint;
    }
    eq->own = a->own;
    eq->no_index = a->no_index;
}

static int push_cb(void *arg, int64_t rid, const bson_t *doc, ms_error_t *err) {
    agg_args_t *a = arg;
    int rc;
    (void)rid;
    if ((rc = agg_run_push(a->run, doc, err)) != 0) return rc;
    return agg_run_done(a->run) ? 1 : 0;   /* a $limit is reached: the scan may stop */
}

/* The source scan (MongoDB's $cursor stage) feeding the pipeline, or its plan (explain). */
static int agg_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    agg_args_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    plan_query_t eq;
    plan_t p;
    scan_pos_t pos = {0};
    int rc;
    eq_from_args(a, &eq);
    if (a->explain) {
        bson_t cur, qp, empty = BSON_INITIALIZER;
        BSON_APPEND_DOCUMENT_BEGIN(a->reply, "$cursor", &cur);
        BSON_APPEND_DOCUMENT_BEGIN(&cur, "queryPlanner", &qp);
        BSON_APPEND_UTF8(&qp, "namespace", a->ns);
        BSON_APPEND_DOCUMENT(&qp, "parsedQuery", a->filter ? a->filter : &empty);
        if (!c) {
            bson_t wp;
            BSON_APPEND_DOCUMENT_BEGIN(&qp, "winningPlan", &wp);
            BSON_APPEND_UTF8(&wp, "stage", "EOF");
            bson_append_document_end(&qp, &wp);
            rc = 0;
        } else if ((rc = plan_choose(t, c, &eq, &p, err)) == 0) {
            plan_append_explain(&p, c, &eq, &qp, "winningPlan");
            plan_free(&p);
        }
        bson_append_document_end(&cur, &qp);
        bson_append_document_end(a->reply, &cur);
        return rc;
    }
    if (!c) return 0;   /* a missing collection is an empty one */
    if ((rc = plan_choose(t, c, &eq, &p, err)) != 0) return rc;
    rc = plan_scan(t, c, &p, &eq, &pos, push_cb, a, err);
    plan_free(&p);
    scan_pos_free(&pos);
    return rc;
}

/* {$collStats: {storageStats?: {scale?}, count?: {}}} as the first stage (mongosh's
 * db.c.stats() and getShardDistribution()): one document {ns, localTime, storageStats?,
 * count?}, then the rest of the pipeline over it. latencyStats / queryExecStats are not
 * kept here: refused. */
static int coll_stats_stage(cmd_ctx_t *ctx, const bson_t *pipeline, const bson_iter_t *spec_it,
                            int64_t batch_size, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    bson_t spec, doc, rest, sub;
    bson_iter_t it;
    bool storage = false, count = false;
    int64_t scale = 1;
    agg_pipeline_t *p = NULL;
    agg_run_t *run = NULL;
    agg_opts_t o = {0};
    int rc;
    if (!BSON_ITER_HOLDS_DOCUMENT(spec_it) || !bsonx_view_container(spec_it, &spec))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "$collStats must take a nested object but "
                       "found: %s", bsonx_type_name(bson_iter_type(spec_it)));
    bson_iter_init(&it, &spec);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "storageStats") == 0 || strcmp(k, "count") == 0) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bsonx_view_container(&it, &sub))
                return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field '$collStats.%s' is the "
                               "wrong type '%s', expected type 'object'", k,
                               bsonx_type_name(bson_iter_type(&it)));
            if (k[0] == 'c') {
                count = true;
                continue;
            }
            storage = true;
            bson_iter_t si;
            if (bson_iter_init_find(&si, &sub, "scale") &&
                (!bsonx_is_number(&si) || !bsonx_as_int64(&si, &scale) || scale < 1))
                return err_set(err, MS_ERR_IDL_VALUE_TOO_LOW, "BSON field 'scale' value must be "
                               ">= 1");
        } else if (strcmp(k, "latencyStats") == 0 || strcmp(k, "queryExecStats") == 0) {
            return err_set(err, MS_ERR_BAD_VALUE, "$collStats: minishard keeps no %s", k);
        } else {
            return err_set(err, MS_ERR_IDL_UNKNOWN_FIELD, "BSON field '$collStats.%s' is an "
                           "unknown field.", k);
        }
    }
    if ((rc = shardd_ns_versioned(ctx, ns, sizeof ns, NULL, err)) != 0) return rc;
    agg_pipeline_rest(pipeline, &rest);
    bson_init(&doc);
    if ((rc = agg_parse(&rest, &o, &p, err)) != 0) goto out;
    BSON_APPEND_UTF8(&doc, "ns", ns);
    BSON_APPEND_DATE_TIME(&doc, "localTime", time_now_ms());
    if (storage || count) {
        bson_t st = BSON_INITIALIZER;
        bson_iter_t ci;
        rc = shardd_coll_stats(app, ns, scale, &st, err);
        if (rc == 0 && storage) BSON_APPEND_DOCUMENT(&doc, "storageStats", &st);
        if (rc == 0 && count && bson_iter_init_find(&ci, &st, "count"))
            BSON_APPEND_INT64(&doc, "count", bson_iter_as_int64(&ci));
        bson_destroy(&st);
        if (rc) {
            err_prefix(err, "Unable to retrieve %s in $collStats stage", storage ? "storageStats" : "count");
            goto out;
        }
    }
    if ((rc = agg_run_new(p, 0, &run, err)) != 0 || (rc = agg_run_push(run, &doc, err)) != 0 ||
        (rc = agg_run_finish(run, err)) != 0)
        goto out;
    {
        bson_t **docs = NULL;
        size_t n = 0;
        agg_run_take(run, &docs, &n);
        rc = plan_agg_cursor(app->cursors, ns, docs, n, batch_size, reply, err);
    }
out:
    agg_run_free(run);
    agg_free(p);
    bson_destroy(&doc);
    bson_destroy(&rest);
    return rc;
}

/* The aggregate's cursor: {batchSize} (-1 when absent); *have says whether it was given. */
static int cursor_batch_size(cmd_ctx_t *ctx, bool *have, int64_t *batch_size, ms_error_t *err) {
    bson_iter_t it;
    bson_t d;
    *have = false;
    *batch_size = -1;
    if (!cmd_field(ctx, "cursor", &it)) return 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bsonx_view_container(&it, &d))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'aggregate.cursor' must be an "
                       "object");
    *have = true;
    if (bson_iter_init_find(&it, &d, "batchSize")) {
        if (!bsonx_is_number(&it) || !bsonx_as_int64(&it, batch_size))
            return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'batchSize' must be a number");
        if (*batch_size < 0)
            return err_set(err, MS_ERR_IDL_VALUE_TOO_LOW, "BSON field 'batchSize' value must be >= "
                           "0, actual value '%lld'", (long long)*batch_size);
    }
    return 0;
}

/* {aggregate: 1, pipeline: [{$currentOp: {...}}, ...], $db: "admin"}: this shard's
 * operations in progress (common/curop.c), then the rest of the pipeline. From a router
 * (fromMongos / fromRouter) each document is tagged as MongoDB's shard tags it: shard
 * first, opid "<shard>:<n>", client_s for the router's address. */
static int current_op_stage(cmd_ctx_t *ctx, const bson_t *pipeline, ms_error_t *err, bson_t *reply) {
    shardd_t *app = ctx->app;
    curop_spec_t spec;
    bson_t **docs = NULL;
    size_t n = 0;
    int64_t batch_size;
    bool have_cursor, from_router = cmd_flag(ctx, "fromMongos", false) || cmd_flag(ctx, "fromRouter", false);
    char name[128] = "", url[MS_URL_BYTES_MAX];
    const char *host = cmd_server_url(ctx->srv);
    int rc;
    if ((rc = curop_check_ns(ctx->db, &ctx->arg, err)) != 0) return rc;
    if ((rc = cursor_batch_size(ctx, &have_cursor, &batch_size, err)) != 0) return rc;
    if (!have_cursor)
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "The 'cursor' option is required, except "
                       "for aggregate with the explain argument");
    if ((rc = curop_parse_pipeline(pipeline, &spec, err)) != 0) return rc;
    if (from_router) {
        if (app->shv) shv_identity(app->shv, name, sizeof name, url, sizeof url);
        if (!name[0])
            return err_set(err, MS_ERR_LOC_CUROP_NO_SHARD_NAME, "Aggregation request specified "
                           "'fromMongos' but unable to retrieve shard name for $currentOp "
                           "pipeline stage.");
    }
    if (strncmp(host, "tcp://", 6) == 0) host += 6;
    if ((rc = curop_stage_run(pipeline, &spec, host, from_router ? name : NULL, &docs, &n, err)) != 0)
        return rc;
    return plan_agg_cursor(app->cursors, "admin.$cmd.aggregate", docs, n, batch_size, reply, err);
}

int cmd_aggregate(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    agg_args_t a;
    agg_opts_t o = {0};
    expr_vars_t *vars = NULL;
    bson_t pipeline, d;
    bson_iter_t it;
    int64_t batch_size = -1;
    bool have_cursor = false;
    int rc;
    memset(&a, 0, sizeof a);
    if (!cmd_field(ctx, "pipeline", &it) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bsonx_view_container(&it, &pipeline))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'aggregate.pipeline' must be an "
                       "array");
    if (!BSON_ITER_HOLDS_UTF8(&ctx->arg)) {
        /* {aggregate: 1}: $currentOp is the one collection-less stage minishard has
         * ($listLocalSessions, ... are not implemented); every other stage needs a collection. */
        bson_iter_t si;
        const char *first = "$match";
        if (bson_iter_init(&si, &pipeline) && bson_iter_next(&si) && BSON_ITER_HOLDS_DOCUMENT(&si)) {
            bson_iter_t fi;
            bson_iter_recurse(&si, &fi);
            if (bson_iter_next(&fi)) first = bson_iter_key(&fi);
        }
        if (strcmp(first, "$currentOp") == 0) return current_op_stage(ctx, &pipeline, err, reply);
        if (strcmp(first, "$shardedDataDistribution") == 0)  /* the router has it */
            return err_set(err, MS_ERR_LOC_SDD_NOT_MONGOS, "The $shardedDataDistribution stage "
                           "can only be run on mongoS");
        if (bsonx_is_number(&ctx->arg))
            return err_set(err, MS_ERR_INVALID_NAMESPACE, "{aggregate: 1} is not valid for '%s'; "
                           "a collection is required.", first);
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "collection name has invalid type %s",
                       bsonx_type_name(bson_iter_type(&ctx->arg)));
    }
    if (cmd_field(ctx, "explain", &it)) a.explain = bsonx_truthy(&it);
    if ((rc = cursor_batch_size(ctx, &have_cursor, &batch_size, err)) != 0) return rc;
    if (!have_cursor && !a.explain)
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "The 'cursor' option is required, except "
                       "for aggregate with the explain argument");
    {
        bson_iter_t si, fi;
        if (!a.explain && bson_iter_init(&si, &pipeline) && bson_iter_next(&si) &&
            BSON_ITER_HOLDS_DOCUMENT(&si) && bson_iter_recurse(&si, &fi) && bson_iter_next(&fi) &&
            strcmp(bson_iter_key(&fi), "$collStats") == 0)
            return coll_stats_stage(ctx, &pipeline, &fi, batch_size, reply, err);
    }
    if (cmd_field(ctx, "allowDiskUse", &it)) o.allow_disk_use = bsonx_truthy(&it);
    /* `collation` was checked by dispatch (common/cmd_conform.c): only the simple one. */
    if (cmd_field(ctx, "let", &it)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bsonx_view_container(&it, &d))
            return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'aggregate.let' must be an "
                           "object");
        if ((rc = expr_vars_from_let(&d, &vars, err)) != 0) return rc;
    }
    if (cmd_field(ctx, "hint", &it)) {
        if (BSON_ITER_HOLDS_UTF8(&it)) {
            a.hint = bson_new();
            BSON_APPEND_UTF8(a.hint, "$hint", bson_iter_utf8(&it, NULL));
        } else if (BSON_ITER_HOLDS_DOCUMENT(&it) && bsonx_view_container(&it, &d)) {
            if (!bson_empty(&d)) a.hint = bson_copy(&d);
        } else {
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "hint must be a string or an object");
            goto out;
        }
    }
    o.vars = vars;
    o.blocking_bytes_max = (size_t)app->agg_blocking_bytes_max;
    if ((rc = agg_parse(&pipeline, &o, &a.p, err)) != 0) goto out;
    if ((rc = shardd_ns_versioned(ctx, ns, sizeof ns, &a.own, err)) != 0) goto out;
    a.ns = ns;
    a.no_index = app->no_index;
    if ((a.filter = agg_leading_match(a.p)) != NULL &&
        (rc = query_compile_vars(a.filter, vars, &a.q, err)) != 0)   /* $expr: $$let */
        goto out;
    if (a.explain) {
        /* MongoDB's mongod explain of a pipeline: the $cursor stage with the query plan,
         * then the other stages as they run; plus the split a router would make. */
        bson_t stages, first, split, sp, mp;
        int idx = 1;
        bool msort = false;
        BSON_APPEND_UTF8(reply, "explainVersion", "1");
        BSON_APPEND_ARRAY_BEGIN(reply, "stages", &stages);
        BSON_APPEND_DOCUMENT_BEGIN(&stages, "0", &first);
        a.reply = &first;
        rc = store_read(app->st, agg_fn, &a, err);
        bson_append_document_end(&stages, &first);
        agg_append_stages(a.p, a.filter ? 1 : 0, &stages, &idx);
        bson_append_array_end(reply, &stages);
        if (rc != 0) goto out;
        agg_split(a.p, &sp, &mp, &msort);
        BSON_APPEND_DOCUMENT_BEGIN(reply, "splitPipeline", &split);
        BSON_APPEND_ARRAY(&split, "shardsPart", &sp);
        BSON_APPEND_ARRAY(&split, "mergerPart", &mp);
        BSON_APPEND_BOOL(&split, "mergeSorted", msort);
        bson_append_document_end(reply, &split);
        bson_destroy(&sp);
        bson_destroy(&mp);
        goto out;
    }
    if ((rc = agg_run_new(a.p, a.filter ? 1 : 0, &a.run, err)) != 0) goto out;
    if ((rc = store_read(app->st, agg_fn, &a, err)) != 0) goto out;
    if ((rc = agg_run_finish(a.run, err)) != 0) goto out;
    {
        bson_t **docs = NULL;
        size_t n = 0;
        agg_run_take(a.run, &docs, &n);
        rc = plan_agg_cursor(app->cursors, ns, docs, n, batch_size, reply, err);
    }
out:
    agg_args_free(&a);
    expr_vars_free(vars);
    return rc;
}
