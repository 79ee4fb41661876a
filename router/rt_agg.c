/*
 * rt_agg.c — aggregate through the router (bin/router), as mongos runs a pipeline on a
 * sharded collection (docs/aggregation.md "How a pipeline is split across shards"):
 *
 *   1. parse the pipeline (the same errors a shard gives, before anything is sent) and
 *      split it with agg_split: the shards part up to the first stage that needs all the
 *      data, the merger part from there on;
 *   2. target with the leading $match exactly as a find targets its filter (rt_scatter:
 *      equality on the shard key → one shard, ranges / $in → the overlapping chunks'
 *      shards, anything else → every owning shard; unsharded → the database's primary);
 *      the requests carry shard versions, so StaleConfig is retried and every shard
 *      filters its orphans;
 *   3. one targeted shard gets the whole pipeline (MongoDB does the same when a pipeline
 *      targets a single shard: nothing to merge); several get the shards part;
 *   4. gather every shard's cursor to the end (getMore), bounded by
 *      MS_ROUTER_AGG_GATHER_BYTES_MAX;
 *   5. merge: when the split says mergeSorted (the shards sorted) the shard streams are
 *      merge-sorted by that $sort and the merger part runs from its second stage; else the
 *      streams are concatenated and the whole merger part runs (common/agg.c);
 *   6. the results go to a router cursor (rt_cursor_from_results) that getMore drains.
 *
 * $db: "config" goes to the config server, which runs the pipeline over its catalog.
 * {aggregate: 1} on admin with $shardedDataDistribution first (mongosh's sh.status()) is
 * answered here from config.collections and each shard's collStats (sharded_data_distribution);
 * a leading $collStats goes to every shard holding the collection (coll_stats_stage);
 * $currentOp lists every shard's operations, or with localOps the router's own
 * (current_op_stage).
 */
#include <stdlib.h>
#include <string.h>

#include "common/agg.h"
#include "common/bsonx.h"
#include "common/buf.h"
#include "common/curop.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/sortspec.h"
#include "router/router.h"

typedef struct agg_send {
    const bson_t *req;
    const bson_t *whole, *shards_part;
    bool explain;
} agg_send_t;

/* The command one shard gets: the client's fields (not its pipeline / cursor / explain),
 * then the whole pipeline (one target) or the shards part (several). */
static void build_agg(void *arg, const rt_table_t *t, int shard, int ntargets, bson_t *cmd) {
    agg_send_t *a = arg;
    static const char *const skip[] = {"pipeline", "cursor", "explain", NULL};
    bson_t cur;
    (void)t, (void)shard;
    rt_copy_cmd(cmd, a->req, skip);
    BSON_APPEND_ARRAY(cmd, "pipeline", ntargets == 1 ? a->whole : a->shards_part);
    if (a->explain) {
        BSON_APPEND_BOOL(cmd, "explain", true);
        return;
    }
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "cursor", &cur);
    bson_append_document_end(cmd, &cur);
    if (ntargets > 1) {
        BSON_APPEND_BOOL(cmd, "fromRouter", true);
        BSON_APPEND_BOOL(cmd, "needsMerge", true);
    }
}


/* One shard's results, gathered in its order (owned copies). */
typedef struct stream {
    bson_t **docs;
    size_t n, cap, pos;
    int64_t id;            /* the shard's cursor while open */
} stream_t;

static void stream_free(stream_t *s) {
    for (size_t i = 0; i < s->n; i++) bson_destroy(s->docs[i]);
    free(s->docs);
    memset(s, 0, sizeof *s);
}

/* Appends the documents of reply's `key` array to s; counts their bytes in *bytes and
 * refuses past MS_ROUTER_AGG_GATHER_BYTES_MAX. */
/* Appends heap copies of the documents of the array arr to s, charged to *bytes. */
static int take_array(stream_t *s, bson_iter_t *arr, size_t *bytes, ms_error_t *err) {
    while (bson_iter_next(arr)) {
        bson_t d;
        if (!BSON_ITER_HOLDS_DOCUMENT(arr) || !bsonx_view_container(arr, &d)) continue;
        *bytes += d.len;
        if (*bytes > (size_t)MS_ROUTER_AGG_GATHER_BYTES_MAX)
            return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT,
                           "the shards' results of this aggregate exceed the router's limit of "
                           "%lld bytes; filter or group earlier in the pipeline",
                           (long long)MS_ROUTER_AGG_GATHER_BYTES_MAX);
        if (s->n == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 64;
            s->docs = xrealloc(s->docs, s->cap * sizeof *s->docs);
        }
        s->docs[s->n++] = bson_copy(&d);
    }
    return 0;
}

static int take_batch(stream_t *s, const bson_t *reply, const char *key, size_t *bytes,
                      ms_error_t *err) {
    bson_iter_t it, arr;
    s->id = 0;
    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.id", &it))
        s->id = bson_iter_as_int64(&it);
    if (!(bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, key, &it) &&
          BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &arr)))
        return 0;
    return take_array(s, &arr, bytes, err);
}

/* Runs pipeline p over the documents of the array docs (built by the router itself)
 * into *results (initialised here; destroyed again on error). */
static int run_over_array(const agg_pipeline_t *p, const bson_t *docs, bson_t *results,
                          ms_error_t *err) {
    stream_t tmp;
    size_t bytes = 0;
    bson_iter_t arr;
    int rc = 0;
    memset(&tmp, 0, sizeof tmp);
    if (bson_iter_init(&arr, docs)) rc = take_array(&tmp, &arr, &bytes, err);
    bson_init(results);
    if (rc == 0) rc = agg_run_all(p, (const bson_t *const *)tmp.docs, tmp.n, results, err);
    stream_free(&tmp);
    if (rc) bson_destroy(results);
    return rc;
}

/* Drains the shard cursor of s (getMore until its id is 0). */
static int gather(router_t *r, const char *shard, const char *db, const char *coll, stream_t *s,
                  size_t *bytes, ms_error_t *err) {
    for (int round = 0; s->id; round++) {
        bson_t cmd, rep;
        int rc;
        if ((rc = op_check(err)) != 0) return rc;
        if (round > 100000)   /* a shard batch holds at least one document */
            return err_set(err, MS_ERR_INTERNAL, "shard %s keeps returning batches", shard);
        bson_init(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", s->id);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        BSON_APPEND_UTF8(&cmd, "$db", db);
        op_append_lsid(&cmd);   /* the shard cursor was opened in the client's session */
        rc = rt_shard_call(r, shard, &cmd, &rep, err);
        bson_destroy(&cmd);
        if (rc) return rc;
        if ((rc = rt_reply_status(&rep, err)) != 0) {
            s->id = 0;
            err_prefix(err, "getMore on shard %s", shard);
        } else {
            rc = take_batch(s, &rep, "cursor.nextBatch", bytes, err);
        }
        bson_destroy(&rep);
        if (rc) return rc;
    }
    return 0;
}

/* The $sort spec of the merger part's first stage (mergeSorted), as a view into mp. */
static bool first_sort(const bson_t *mp, bson_t *spec) {
    bson_iter_t it, st;
    bson_t stage;
    if (!bson_iter_init(&it, mp) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bsonx_view_container(&it, &stage))
        return false;
    if (!bson_iter_init_find(&st, &stage, "$sort") || !BSON_ITER_HOLDS_DOCUMENT(&st)) return false;
    return bsonx_view_container(&st, spec);
}

/* Feeds the shard streams to the merger run: k-way merged by sort (NULL: one stream
 * after the other, in shard order). */
static int feed(agg_run_t *run, stream_t *ss, int n, const sortspec_t *sort, ms_error_t *err) {
    int rc;
    int64_t k = 0;
    for (;;) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (ss[i].pos >= ss[i].n) continue;
            if (!sort) {
                best = i;
                break;
            }
            if (best < 0 ||
                sortspec_compare_docs(sort, ss[i].docs[ss[i].pos], ss[best].docs[ss[best].pos]) < 0)
                best = i;
        }
        if (best < 0) return 0;
        if (++k % MS_INTERRUPT_CHECK_DOCS == 0 && (rc = op_check(err)) != 0) return rc;
        if ((rc = agg_run_push(run, ss[best].docs[ss[best].pos++], err)) != 0) return rc;
        if (agg_run_done(run)) return 0;
    }
}

/* explain: MongoDB's sharded shape — splitPipeline (null when one shard runs it all),
 * each shard's own explain under shards.<name>, mergeType. */
static void explain_reply(const rt_req_t *reqs, int n, const bson_t *sp, const bson_t *mp,
                          bool msort, bson_t *reply) {
    bson_t split, shards;
    if (n > 1) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "splitPipeline", &split);
        BSON_APPEND_ARRAY(&split, "shardsPart", sp);
        BSON_APPEND_ARRAY(&split, "mergerPart", mp);
        BSON_APPEND_BOOL(&split, "mergeSorted", msort);
        bson_append_document_end(reply, &split);
    } else {
        BSON_APPEND_NULL(reply, "splitPipeline");
    }
    BSON_APPEND_UTF8(reply, "mergeType", n > 1 ? "router" : "none");
    BSON_APPEND_DOCUMENT_BEGIN(reply, "shards", &shards);
    for (int i = 0; i < n; i++) {
        bson_t one;
        bson_iter_t it;
        BSON_APPEND_DOCUMENT_BEGIN(&shards, reqs[i].shard, &one);
        if (bson_iter_init(&it, &reqs[i].reply))
            while (bson_iter_next(&it)) {
                const char *k = bson_iter_key(&it);
                /* the shard's own would-be split is not what ran: the router's is above */
                if (strcmp(k, "ok") == 0 || k[0] == '$' || strcmp(k, "splitPipeline") == 0)
                    continue;
                bson_append_iter(&one, k, -1, &it);
            }
        bson_append_document_end(&shards, &one);
    }
    bson_append_document_end(reply, &shards);
}

/* ---- $shardedDataDistribution (mongosh's sh.status() runs it) -------------------------- */

/* Every document of a config collection (find, then getMore to the end), as heap copies
 * in s (caller frees with stream_free; bounded by MS_ROUTER_AGG_GATHER_BYTES_MAX). */
static int config_all(router_t *r, const char *coll, stream_t *s, ms_error_t *err) {
    bson_t cmd, rep;
    size_t bytes = 0;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_UTF8(&cmd, "$db", "config");
    rc = rt_config_call(r, &cmd, &rep, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if ((rc = rt_reply_status(&rep, err)) == 0) rc = take_batch(s, &rep, "cursor.firstBatch", &bytes, err);
    bson_destroy(&rep);
    for (int round = 0; rc == 0 && s->id; round++) {
        if (round > 100000)
            return err_set(err, MS_ERR_INTERNAL, "the config server keeps returning batches");
        bson_init(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", s->id);
        BSON_APPEND_UTF8(&cmd, "collection", coll);
        BSON_APPEND_UTF8(&cmd, "$db", "config");
        rc = rt_config_call(r, &cmd, &rep, err);
        bson_destroy(&cmd);
        if (rc) return rc;
        if ((rc = rt_reply_status(&rep, err)) == 0) rc = take_batch(s, &rep, "cursor.nextBatch", &bytes, err);
        bson_destroy(&rep);
    }
    return rc;
}

/* An int when it fits, else a long: MongoDB's numbers here come from collStats counts,
 * which it appends that way (mongosh prints 10, not Long('10')). */
static void append_number(bson_t *d, const char *key, int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX)
        BSON_APPEND_INT32(d, key, (int32_t)v);
    else
        BSON_APPEND_INT64(d, key, v);
}

/* One shard's entry for ns, from its collStats (count, avgObjSize, numOrphanDocs), as
 * MongoDB computes it: owned = count - orphans, sizes = avgObjSize x documents. *have =
 * false when the shard does not hold the collection (MongoDB lists only shards that do). */
static int sdd_shard(router_t *r, const char *shard, const char *ns, bson_t *arr, int idx,
                     bool *have, ms_error_t *err) {
    const char *dot = strchr(ns, '.');
    char db[MS_NS_BYTES_MAX + 1], key[16];
    bson_t cmd, rep, one;
    bson_iter_t it;
    int64_t count = 0, avg = 0, orphans = 0;
    int rc;
    *have = false;
    if (!dot || (size_t)(dot - ns) >= sizeof db) return 0;
    snprintf(db, sizeof db, "%.*s", (int)(dot - ns), ns);
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "collStats", dot + 1);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = rt_shard_call(r, shard, &cmd, &rep, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    rc = rt_reply_status(&rep, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND) {
        bson_destroy(&rep);
        return 0;
    }
    if (rc) {
        err_prefix(err, "collStats on shard %s", shard);
        bson_destroy(&rep);
        return rc;
    }
    if (bson_iter_init_find(&it, &rep, "count") && BSON_ITER_HOLDS_NUMBER(&it)) count = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, &rep, "avgObjSize") && BSON_ITER_HOLDS_NUMBER(&it)) avg = bson_iter_as_int64(&it);
    if (bson_iter_init_find(&it, &rep, "numOrphanDocs") && BSON_ITER_HOLDS_NUMBER(&it))
        orphans = bson_iter_as_int64(&it);
    bson_destroy(&rep);
    if (orphans > count) orphans = count;   /* a task counted before its range was copied */
    snprintf(key, sizeof key, "%d", idx);
    BSON_APPEND_DOCUMENT_BEGIN(arr, key, &one);
    BSON_APPEND_UTF8(&one, "shardName", shard);
    append_number(&one, "numOrphanedDocs", orphans);
    append_number(&one, "numOwnedDocuments", count - orphans);
    append_number(&one, "ownedSizeBytes", avg * (count - orphans));
    append_number(&one, "orphanedSizeBytes", avg * orphans);
    bson_append_document_end(arr, &one);
    *have = true;
    return 0;
}

/* {aggregate: 1, pipeline: [{$shardedDataDistribution: {}}, ...], $db: "admin"}: one
 * document per sharded collection {ns, shards: [{shardName, numOrphanedDocs,
 * numOwnedDocuments, ownedSizeBytes, orphanedSizeBytes}]} over the shards that hold it,
 * in config.collections order and shard order; the stages after it run over those. */
static int sharded_data_distribution(cmd_ctx_t *ctx, const bson_t *pipeline, const bson_t *spec,
                                     int64_t batch, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    stream_t colls;
    char shards[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
    bson_t docs, rest, results;
    bson_iter_t it;
    agg_pipeline_t *p = NULL;
    int nshards, rc, k = 0;
    if (!spec || !bson_empty(spec))
        return err_set(err, MS_ERR_LOC_SDD_SPEC, "The $shardedDataDistribution stage "
                       "specification must be an empty object");
    if (strcmp(ctx->db, "admin") != 0 || !bsonx_is_number(&ctx->arg))
        return err_set(err, MS_ERR_LOC_SDD_NOT_ADMIN, "The $shardedDataDistribution stage must "
                       "be run on the admin database");
    /* the stages after it, renumbered, parsed before any call (their errors first) */
    bson_init(&rest);
    if (bson_iter_init(&it, pipeline) && bson_iter_next(&it))
        while (bson_iter_next(&it)) {
            char key[16];
            snprintf(key, sizeof key, "%d", k++);
            bson_append_iter(&rest, key, -1, &it);
        }
    agg_opts_t o = {0};
    if ((rc = agg_parse(&rest, &o, &p, err)) != 0) {
        bson_destroy(&rest);
        return rc;
    }
    memset(&colls, 0, sizeof colls);
    bson_init(&docs);
    if ((nshards = rt_all_shards(r, shards, MS_SHARDS_MAX, err)) < 0) {
        rc = -nshards;
        goto out;
    }
    if ((rc = config_all(r, "collections", &colls, err)) != 0) goto out;
    k = 0;
    for (size_t i = 0; i < colls.n; i++) {
        const char *ns;
        bson_t arr, one;
        char key[16];
        int n = 0;
        if (bson_iter_init_find(&it, colls.docs[i], "dropped") && bsonx_truthy(&it)) continue;
        if (bson_iter_init_find(&it, colls.docs[i], "unsplittable") && bsonx_truthy(&it)) continue;
        if (!bson_iter_init_find(&it, colls.docs[i], "_id") || !BSON_ITER_HOLDS_UTF8(&it)) continue;
        ns = bson_iter_utf8(&it, NULL);
        bson_init(&arr);
        for (int s = 0; s < nshards; s++) {
            bool have;
            if ((rc = op_check(err)) != 0 || (rc = sdd_shard(r, shards[s], ns, &arr, n, &have, err)) != 0) {
                bson_destroy(&arr);
                goto out;
            }
            n += have;
        }
        if (n) {
            snprintf(key, sizeof key, "%d", k++);
            BSON_APPEND_DOCUMENT_BEGIN(&docs, key, &one);
            BSON_APPEND_UTF8(&one, "ns", ns);
            BSON_APPEND_ARRAY(&one, "shards", &arr);
            bson_append_document_end(&docs, &one);
        }
        bson_destroy(&arr);
    }
    /* the rest of the pipeline over those documents */
    if ((rc = run_over_array(p, &docs, &results, err)) != 0) goto out;
    rc = rt_cursor_from_results(r, "admin", "$cmd.aggregate", &results, batch, reply, err);
out:
    stream_free(&colls);
    bson_destroy(&docs);
    bson_destroy(&rest);
    agg_free(p);
    return rc;
}

/* {aggregate: "c", pipeline: [{$collStats: {...}}, ...]} through the router: the stage goes
 * to every shard that holds the collection (sharded: each shard that answers; unsharded:
 * the database's primary), each document gets `shard` after `ns` as mongos adds it, and
 * the rest of the pipeline runs here over those documents. */
static int coll_stats_stage(cmd_ctx_t *ctx, const bson_t *pipeline, int64_t batch, bson_t *reply,
                            ms_error_t *err) {
    router_t *r = ctx->app;
    const char *coll = bson_iter_utf8(&ctx->arg, NULL);
    char ns[MS_NS_BYTES_MAX + 1], shards[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
    bson_t rest, first, results, docs;
    bson_iter_t it;
    rt_table_t *t = NULL;
    agg_pipeline_t *p = NULL;
    agg_opts_t o = {0};
    int n = 0, k = 0, rc;
    snprintf(ns, sizeof ns, "%s.%s", ctx->db, coll);
    bson_init(&rest);
    bson_init(&first);
    bson_init(&docs);
    if (bson_iter_init(&it, pipeline) && bson_iter_next(&it)) {
        bson_append_iter(&first, "0", -1, &it);
        while (bson_iter_next(&it)) {
            char key[16];
            snprintf(key, sizeof key, "%d", k++);
            bson_append_iter(&rest, key, -1, &it);
        }
    }
    k = 0;
    if ((rc = agg_parse(&rest, &o, &p, err)) != 0) goto out;
    if ((rc = rt_table_get(r, ns, &t, err)) != 0) goto out;
    if (t->sharded) {
        if ((n = rt_all_shards(r, shards, MS_SHARDS_MAX, err)) < 0) {
            rc = -n;
            goto out;
        }
    } else {
        if ((rc = rt_db_primary(r, ctx->db, false, shards[0], sizeof shards[0], err)) != 0) goto out;
        n = 1;
    }
    for (int i = 0; i < n; i++) {
        bson_t cmd, rep, cur;
        stream_t s;
        size_t bytes = 0;
        memset(&s, 0, sizeof s);
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "aggregate", coll);
        BSON_APPEND_ARRAY(&cmd, "pipeline", &first);
        BSON_APPEND_DOCUMENT_BEGIN(&cmd, "cursor", &cur);
        bson_append_document_end(&cmd, &cur);
        BSON_APPEND_UTF8(&cmd, "$db", ctx->db);
        rc = rt_shard_call(r, shards[i], &cmd, &rep, err);
        bson_destroy(&cmd);
        if (rc) goto out;
        rc = rt_reply_status(&rep, err);
        if (rc == MS_ERR_NAMESPACE_NOT_FOUND && t->sharded) {   /* this shard lacks it */
            bson_destroy(&rep);
            rc = 0;
            continue;
        }
        if (rc == 0) rc = take_batch(&s, &rep, "cursor.firstBatch", &bytes, err);
        bson_destroy(&rep);
        for (size_t j = 0; rc == 0 && j < s.n; j++) {
            char key[16];
            bson_t one;
            bson_iter_t di;
            snprintf(key, sizeof key, "%d", k++);
            BSON_APPEND_DOCUMENT_BEGIN(&docs, key, &one);
            if (bson_iter_init_find(&di, s.docs[j], "ns")) bson_append_iter(&one, "ns", -1, &di);
            BSON_APPEND_UTF8(&one, "shard", shards[i]);
            bson_iter_init(&di, s.docs[j]);
            while (bson_iter_next(&di))
                if (strcmp(bson_iter_key(&di), "ns") != 0) bson_append_iter(&one, NULL, 0, &di);
            bson_append_document_end(&docs, &one);
        }
        if (s.id) rt_kill_shard_cursor(r, shards[i], ctx->db, coll, s.id);  /* one doc: never */
        stream_free(&s);
        if (rc) {
            err_prefix(err, "shard %s", shards[i]);
            goto out;
        }
    }
    if (k == 0) {
        rc = err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "Unable to retrieve storageStats in "
                     "$collStats stage :: caused by :: Collection [%s] not found.", ns);
        goto out;
    }
    if ((rc = run_over_array(p, &docs, &results, err)) != 0) goto out;
    rc = rt_cursor_from_results(r, ctx->db, coll, &results, batch, reply, err);
out:
    rt_table_release(t);
    agg_free(p);
    bson_destroy(&docs);
    bson_destroy(&first);
    bson_destroy(&rest);
    return rc;
}

/* ---- $currentOp (mongosh's db.currentOp()) ------------------------------------------- */

/* Every shard's $currentOp (the first stage as the client gave it, fromMongos: each shard
 * tags its documents with its name), gathered into *docs (an array, initialised here).
 * Without the client's maxTimeMS the scatter is bounded by MS_CURRENT_OP_SHARD_WAIT_MS, as
 * the currentOp command's. A shard that fails fails the stage, as a mongos aggregate does. */
static int current_op_shards(router_t *r, const bson_t *first, bson_t *docs, ms_error_t *err) {
    char names[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
    rt_req_t reqs[MS_SHARDS_MAX];
    stream_t ss[MS_SHARDS_MAX];
    size_t bytes = 0, k = 0;
    int n = rt_all_shards(r, names, MS_SHARDS_MAX, err), rc = 0;
    if (n < 0) return -n;
    long long own = op_deadline_ms();
    if (own == 0) op_set_deadline_ms(time_mono_ms() + MS_CURRENT_OP_SHARD_WAIT_MS);
    memset(ss, 0, sizeof ss);
    for (int i = 0; i < n; i++) {
        bson_t cur;
        memset(&reqs[i], 0, sizeof reqs[i]);
        memcpy(reqs[i].shard, names[i], sizeof reqs[i].shard);
        bson_init(&reqs[i].cmd);
        BSON_APPEND_INT32(&reqs[i].cmd, "aggregate", 1);
        BSON_APPEND_ARRAY(&reqs[i].cmd, "pipeline", first);
        BSON_APPEND_DOCUMENT_BEGIN(&reqs[i].cmd, "cursor", &cur);
        bson_append_document_end(&reqs[i].cmd, &cur);
        BSON_APPEND_BOOL(&reqs[i].cmd, "fromMongos", true);
        BSON_APPEND_UTF8(&reqs[i].cmd, "$db", "admin");
    }
    rt_send_all(r, reqs, n);
    /* Every first batch (and cursor id) first, so that a failure kills every open cursor. */
    for (int i = 0; i < n; i++) {
        ms_error_t e = reqs[i].err;
        int src = reqs[i].rc;
        if (src == 0 && (src = rt_reply_status(&reqs[i].reply, &e)) == 0)
            src = take_batch(&ss[i], &reqs[i].reply, "cursor.firstBatch", &bytes, &e);
        if (src && rc == 0) {
            rc = src;
            *err = e;
            err_prefix(err, "shard %s", reqs[i].shard);
        }
    }
    for (int i = 0; i < n && rc == 0; i++)   /* gather names the shard in its errors */
        rc = gather(r, reqs[i].shard, "admin", "$cmd.aggregate", &ss[i], &bytes, err);
    op_set_deadline_ms(own);
    bson_init(docs);
    for (int i = 0; i < n; i++) {
        for (size_t j = 0; rc == 0 && j < ss[i].n; j++) {
            char key[24];
            snprintf(key, sizeof key, "%zu", k++);
            BSON_APPEND_DOCUMENT(docs, key, ss[i].docs[j]);
        }
        if (ss[i].id) rt_kill_shard_cursor(r, reqs[i].shard, "admin", "$cmd.aggregate", ss[i].id);
        stream_free(&ss[i]);
        rt_req_clear(&reqs[i]);
    }
    return rc;
}

/* {aggregate: 1, pipeline: [{$currentOp: {...}}, ...], $db: "admin"} as mongos runs it:
 * every shard's operations, each tagged with its shard (opid "<shard>:<n>", client_s), or
 * with localOps: true the router's own; then the rest of the pipeline here. */
static int current_op_stage(cmd_ctx_t *ctx, const bson_t *pipeline, int64_t batch, bson_t *reply,
                            ms_error_t *err) {
    router_t *r = ctx->app;
    curop_spec_t spec;
    bson_iter_t si;
    bson_t first = BSON_INITIALIZER, listed, rest, results;
    agg_pipeline_t *p = NULL;
    agg_opts_t o = {0};
    int rc;
    if ((rc = curop_check_ns(ctx->db, &ctx->arg, err)) != 0) return rc;
    if (!cmd_field(ctx, "cursor", &si))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "The 'cursor' option is required, except "
                       "for aggregate with the explain argument");
    if ((rc = curop_parse_pipeline(pipeline, &spec, err)) != 0) return rc;
    if (spec.local_ops) {
        bson_t **docs = NULL;
        size_t n = 0;
        const char *host = cmd_server_url(ctx->srv);
        if (strncmp(host, "tcp://", 6) == 0) host += 6;
        if ((rc = curop_stage_run(pipeline, &spec, host, NULL, &docs, &n, err)) != 0) return rc;
        bson_init(&results);
        for (size_t i = 0; i < n; i++) {
            char key[24];
            snprintf(key, sizeof key, "%zu", i);
            BSON_APPEND_DOCUMENT(&results, key, docs[i]);
            bson_destroy(docs[i]);
        }
        bson_free(docs);
        return rt_cursor_from_results(r, "admin", "$cmd.aggregate", &results, batch, reply, err);
    }
    /* The rest of the pipeline, parsed before anything is sent (its errors first). */
    agg_pipeline_rest(pipeline, &rest);
    bson_iter_init(&si, pipeline);
    bson_iter_next(&si);
    bson_append_iter(&first, "0", -1, &si);
    if ((rc = agg_parse(&rest, &o, &p, err)) != 0) goto out;
    if ((rc = current_op_shards(r, &first, &listed, err)) == 0) {
        rc = run_over_array(p, &listed, &results, err);
        if (rc == 0) rc = rt_cursor_from_results(r, "admin", "$cmd.aggregate", &results, batch, reply, err);
    }
    bson_destroy(&listed);
out:
    agg_free(p);
    bson_destroy(&rest);
    bson_destroy(&first);
    return rc;
}

/* The first stage's name of pipeline (and its value as a document, when it is one). */
static const char *first_stage(const bson_t *pipeline, bson_t *spec, bool *spec_ok) {
    bson_iter_t si, fi;
    *spec_ok = false;
    if (!bson_iter_init(&si, pipeline) || !bson_iter_next(&si) || !BSON_ITER_HOLDS_DOCUMENT(&si) ||
        !bson_iter_recurse(&si, &fi) || !bson_iter_next(&fi))
        return NULL;
    *spec_ok = BSON_ITER_HOLDS_DOCUMENT(&fi) && bsonx_view_container(&fi, spec);
    return bson_iter_key(&fi);
}

int rt_cmd_aggregate(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    /* The config database lives on the config server, which runs pipelines over it. */
    if (!strcmp(ctx->db, "config")) return rt_cfg_cursor_cmd(ctx, reply, err);
    {
        bson_iter_t pi;
        bson_t pl, spec;
        bool spec_ok = false;
        const char *first = NULL;
        if (cmd_field(ctx, "pipeline", &pi) && BSON_ITER_HOLDS_ARRAY(&pi) &&
            bsonx_view_container(&pi, &pl))
            first = first_stage(&pl, &spec, &spec_ok);
        bool sdd = first && strcmp(first, "$shardedDataDistribution") == 0;
        bool curop = first && strcmp(first, "$currentOp") == 0;
        bool cs = first && strcmp(first, "$collStats") == 0 && BSON_ITER_HOLDS_UTF8(&ctx->arg) &&
                  !cmd_field(ctx, "explain", &pi);
        if (sdd || cs || curop) {
            int64_t batch = -1;
            bson_t cd;
            bson_iter_t bi;
            if (cmd_field(ctx, "cursor", &bi) && bsonx_view_container(&bi, &cd) &&
                bson_iter_init_find(&bi, &cd, "batchSize") && bsonx_is_number(&bi))
                bsonx_as_int64(&bi, &batch);
            if (cs) return coll_stats_stage(ctx, &pl, batch, reply, err);
            if (curop) return current_op_stage(ctx, &pl, batch, reply, err);
            return sharded_data_distribution(ctx, &pl, spec_ok ? &spec : NULL, batch, reply, err);
        }
        if (!BSON_ITER_HOLDS_UTF8(&ctx->arg))
            /* {aggregate: 1}: the other collection-less stages ($listLocalSessions, ...) are
             * not implemented; every other stage minishard has needs a collection. */
            return err_set(err, MS_ERR_INVALID_NAMESPACE, "{aggregate: 1} is not valid for '%s'; "
                           "a collection is required.", first ? first : "$match");
    }
    const char *coll = bson_iter_utf8(&ctx->arg, NULL);
    bson_t pipeline, d, sp, mp, sort_spec, results;
    bson_iter_t it;
    agg_opts_t o = {0};
    expr_vars_t *vars = NULL;
    agg_pipeline_t *p = NULL, *mpp = NULL;
    agg_run_t *run = NULL;
    sortspec_t *sort = NULL;
    rt_req_t reqs[MS_SHARDS_MAX];
    stream_t ss[MS_SHARDS_MAX];
    int64_t batch = -1;
    bool explain = false, have_cursor = false, msort = false, split = false;
    size_t bytes = 0;
    int n = 0, rc;
    memset(ss, 0, sizeof ss);
    if (!cmd_field(ctx, "pipeline", &it) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bsonx_view_container(&it, &pipeline))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'aggregate.pipeline' must be an "
                       "array");
    if (cmd_field(ctx, "explain", &it)) explain = bsonx_truthy(&it);
    if (cmd_field(ctx, "cursor", &it) && bsonx_view_container(&it, &d)) {
        have_cursor = true;
        if (bson_iter_init_find(&it, &d, "batchSize")) {
            if (!bsonx_is_number(&it) || !bsonx_as_int64(&it, &batch))
                return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'batchSize' must be a "
                               "number");
            if (batch < 0)
                return err_set(err, MS_ERR_IDL_VALUE_TOO_LOW, "BSON field 'batchSize' value must "
                               "be >= 0, actual value '%lld'", (long long)batch);
        }
    }
    if (!have_cursor && !explain)
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "The 'cursor' option is required, except "
                       "for aggregate with the explain argument");
    if (cmd_field(ctx, "allowDiskUse", &it)) o.allow_disk_use = bsonx_truthy(&it);
    if (cmd_field(ctx, "let", &it) && bsonx_view_container(&it, &d) &&
        (rc = expr_vars_from_let(&d, &vars, err)) != 0)
        return rc;
    o.vars = vars;
    if ((rc = agg_parse(&pipeline, &o, &p, err)) != 0) goto out;
    agg_split(p, &sp, &mp, &msort);
    split = true;
    agg_send_t a = {ctx->req, &pipeline, &sp, explain};
    rc = rt_scatter(r, ctx->db, coll, agg_leading_match(p), build_agg, &a, reqs, &n, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND) {   /* no such database: an empty collection */
        n = 0;
        rc = 0;
    }
    if (rc) goto out;
    if (explain) {
        explain_reply(reqs, n, &sp, &mp, msort, reply);
        goto out;
    }
    /* Gather: every shard's first batch, then each cursor drained (every id known first,
     * so that a failure kills all of them). */
    for (int i = 0; i < n; i++) {
        bson_iter_t ci;
        if (bson_iter_init(&ci, &reqs[i].reply) && bson_iter_find_descendant(&ci, "cursor.id", &ci))
            ss[i].id = bson_iter_as_int64(&ci);
    }
    for (int i = 0; i < n; i++) {
        if ((rc = take_batch(&ss[i], &reqs[i].reply, "cursor.firstBatch", &bytes, err)) != 0)
            goto out;
    }
    for (int i = 0; i < n; i++)
        if ((rc = gather(r, reqs[i].shard, ctx->db, coll, &ss[i], &bytes, err)) != 0) goto out;
    /* Merge. One shard ran the whole pipeline: its results are the answer. */
    bson_init(&results);
    if (n > 1 && !bson_empty(&mp)) {
        int from = 0;
        if (msort && first_sort(&mp, &sort_spec)) {
            if ((rc = sortspec_compile(&sort_spec, &sort, err)) != 0) goto fail;
            from = 1;   /* the merge-sort is the merger's $sort */
        }
        if ((rc = agg_parse(&mp, &o, &mpp, err)) != 0) goto fail;
        if ((rc = agg_run_new(mpp, from, &run, err)) != 0) goto fail;
        if ((rc = feed(run, ss, n, sort, err)) != 0) goto fail;
        if ((rc = agg_run_finish(run, err)) != 0) goto fail;
        for (size_t i = 0; i < agg_run_count(run); i++) {
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            BSON_APPEND_DOCUMENT(&results, idx, agg_run_result(run, i));
        }
    } else {
        size_t k = 0;
        for (int i = 0; i < n; i++)
            for (size_t j = 0; j < ss[i].n; j++) {
                char idx[24];
                snprintf(idx, sizeof idx, "%zu", k++);
                BSON_APPEND_DOCUMENT(&results, idx, ss[i].docs[j]);
            }
    }
    for (int i = 0; i < n; i++) stream_free(&ss[i]);
    log_debug("aggregate ns=%s.%s shards=%d split=%d mergeSorted=%d", ctx->db, coll, n, n > 1,
              msort);
    rc = rt_cursor_from_results(r, ctx->db, coll, &results, batch, reply, err);
    goto out;
fail:
    bson_destroy(&results);
out:
    for (int i = 0; i < n; i++) {
        if (ss[i].id) rt_kill_shard_cursor(r, reqs[i].shard, ctx->db, coll, ss[i].id);
        stream_free(&ss[i]);
        rt_req_clear(&reqs[i]);
    }
    if (split) {
        bson_destroy(&sp);
        bson_destroy(&mp);
    }
    sortspec_free(sort);
    agg_run_free(run);
    agg_free(mpp);
    agg_free(p);
    expr_vars_free(vars);
    return rc;
}
