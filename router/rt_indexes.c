/*
 * rt_indexes.c — createIndexes and dropIndexes as the router (bin/router) sends them:
 * versioned, so that the same indexes exist on every shard that owns chunks whatever
 * the router's cache believed (MongoDB's cluster_create_indexes_cmd /
 * cluster_drop_indexes_cmd with scatterGatherVersionedTargetByRoutingTable and
 * shardVersionRetry).
 *
 * The rule (docs/versioning-and-routing.md "DDL: createIndexes and dropIndexes"):
 *   - unsharded in our cache → the database's primary shard with shardVersion UNSHARDED
 *     and databaseVersion. A primary that knows the collection is sharded (another
 *     router sharded it) answers StaleConfig; we refresh and target again;
 *   - sharded → every shard that owns chunks with its own shardVersion, and the primary
 *     shard (MongoDB sends there too) with its version, (0,0) when it owns none. A shard
 *     that owns none and lacks the collection answers CannotImplicitlyCreateCollection
 *     (227) to createIndexes, which is ignored as mongos ignores it;
 *   - dropIndexes also goes to every other shard with version (0,0): a shard that gave
 *     its last chunk away keeps its local collection and would otherwise keep an index
 *     dropped everywhere else, and show it again once a chunk comes back (MongoDB's
 *     recipient drops such indexes at the start of a migration; here the drop reaches
 *     them). NamespaceNotFound and IndexNotFound from those shards are ignored.
 * StaleConfig / StaleDbVersion from a shard → refresh and send again, bounded
 * (rt_dispatch, MS_STALE_RETRIES_MAX), to every target again, also the shards that
 * already applied it: both commands are idempotent, and a stale answer means a migration
 * committed meanwhile, whose index sync (_recvChunkSetIndexes) may have made a shard that
 * applied the command equal to a donor that had not yet — the recipient would then lack
 * an index it acknowledged (or keep one it dropped). A shard that applied it before may
 * answer IndexNotFound / NamespaceNotFound to the drop this time: that is success.
 *
 * Reply: the primary's reply (else the first shard's) with `raw: {<shard>: reply}` of
 * every shard that applied it; the first real failure fails the command with its code,
 * errmsg prefixed by the shard.
 */
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "router/router.h"

/* What one createIndexes / dropIndexes has done so far (across rt_dispatch attempts). */
typedef struct idx_op {
    cmd_ctx_t *ctx;
    bool create;                       /* createIndexes (else dropIndexes) */
    /* The generation the done set belongs to: shards that applied the command under
     * another generation (or while unsharded) must get it again. */
    bool gen_sharded;
    bson_oid_t gen_epoch;
    bool gen_set;
    int ndone;
    char done[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
    int attempts;                      /* builds so far: > 1 is a retry after StaleConfig */
    /* This attempt: request i may fail benignly (a shard that owns no chunk). */
    bool optional[MS_SHARDS_MAX];
    char primary[RT_NAME_BYTES_MAX];
    bson_t raw;                        /* shard → reply of every shard that applied it */
    int nraw;
    bson_t first;                      /* the primary's reply, else the first one */
    bool have_first, first_is_primary;
    int fail_code;                     /* first real failure */
    ms_error_t fail;
    bson_t fail_reply;
    bool have_fail_reply;
    rt_req_t *reqs;                    /* the dispatch's array: absorb finds a slot by it */
} idx_op_t;

static bool is_done(const idx_op_t *o, const char *shard) {
    for (int i = 0; i < o->ndone; i++)
        if (strcmp(o->done[i], shard) == 0) return true;
    return false;
}

static void mark_done(idx_op_t *o, const char *shard) {
    if (is_done(o, shard) || o->ndone >= MS_SHARDS_MAX) return;
    snprintf(o->done[o->ndone++], RT_NAME_BYTES_MAX, "%s", shard);
}

/* A new generation (sharded ↔ unsharded, or another epoch) forgets what was done. */
static void note_generation(idx_op_t *o, const rt_table_t *t) {
    bool sharded = t && t->sharded;
    if (o->gen_set && o->gen_sharded == sharded &&
        (!sharded || bson_oid_equal(&o->gen_epoch, &t->rt.epoch)))
        return;
    if (o->gen_set && o->ndone > 0)
        log_info("index ddl: collection generation changed, sending again ns_sharded=%d", sharded);
    o->gen_set = true;
    o->gen_sharded = sharded;
    if (sharded) bson_oid_copy(&t->rt.epoch, &o->gen_epoch);
    o->ndone = 0;
    /* what the old generation's shards answered is not this one's reply */
    bson_reinit(&o->raw);
    o->nraw = 0;
    bson_reinit(&o->first);
    o->have_first = o->first_is_primary = false;
}

/* Appends one request to shard `name` with shardVersion of shard index `idx` of t (-1:
 * owns none) or UNSHARDED (t NULL / unsharded) plus databaseVersion when dbv. */
static void add_req(idx_op_t *o, rt_req_t *reqs, int *n, const char *name, const rt_table_t *t,
                    int idx, const rt_db_version_t *dbv, bool optional) {
    rt_req_t *q = &reqs[*n];
    memset(q, 0, sizeof *q);
    q->rc = -1;   /* not sent: no reply to destroy if the build fails after this (rt_req_clear) */
    snprintf(q->shard, sizeof q->shard, "%s", name);
    bson_init(&q->cmd);
    rt_copy_cmd(&q->cmd, o->ctx->req, NULL);
    rt_append_version(&q->cmd, t, idx);
    if (dbv) rt_append_db_version(&q->cmd, dbv);
    o->optional[*n] = optional;
    (*n)++;
}

static bool listed(char names[][RT_NAME_BYTES_MAX], int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return true;
    return false;
}

/* rt_dispatch's build: this attempt's targets from the current table. */
static int idx_build(void *p, router_t *r, const rt_table_t *t, rt_req_t *reqs, int *n,
                     ms_error_t *err) {
    idx_op_t *o = p;
    rt_db_version_t dbv;
    int rc;
    *n = 0;
    if (o->attempts++ > 0 && (rc = fp_eval(RT_FP_HANG_INDEX_DDL_RETRY, err)) != 0) return rc;
    note_generation(o, t);
    rc = rt_db_get(r, o->ctx->db, o->create, o->primary, sizeof o->primary, &dbv, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND && !o->create)
        return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "ns not found %s.%s", o->ctx->db,
                       bson_iter_utf8(&o->ctx->arg, NULL));
    if (rc) return rc;
    if (!t->sharded) {
        add_req(o, reqs, n, o->primary, NULL, -1, &dbv, false);
        return 0;
    }
    if (o->create) {
        /* Every unique index must be one the shard key can keep unique (MongoDB 7.0,
         * CannotCreateIndex 67), checked against the table we target with: a shard that
         * owns no chunk does not know the key. */
        bson_iter_t it, spec;
        if (cmd_field(o->ctx, "indexes", &it) && BSON_ITER_HOLDS_ARRAY(&it) &&
            bson_iter_recurse(&it, &spec))
            while (bson_iter_next(&spec)) {
                bson_t doc;
                if (bsonx_view_container(&spec, &doc) &&
                    (rc = keys_unique_index_spec_check(&t->rt.pattern, &doc, err)) != 0)
                    return rc;
            }
    }
    /* Owners: shard indexes of t that hold at least one chunk. */
    char owners[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
    int nowners = 0;
    bool owns[MS_SHARDS_MAX] = {0};
    for (int s = 0; s < t->rt.nshards; s++) owns[s] = t->rt.shard_nchunks[s] > 0;
    for (int s = 0; s < t->rt.nshards; s++) {
        if (!owns[s]) continue;
        snprintf(owners[nowners++], RT_NAME_BYTES_MAX, "%s", t->rt.shards[s]);
        add_req(o, reqs, n, t->rt.shards[s], t, s, NULL, false);
    }
    if (!listed(owners, nowners, o->primary))
        add_req(o, reqs, n, o->primary, t, rtable_shard_index(&t->rt, o->primary), NULL, true);
    if (!o->create) {
        char names[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
        int all = rt_all_shards(r, names, MS_SHARDS_MAX, err);
        if (all < 0) {
            for (int i = 0; i < *n; i++) rt_req_clear(&reqs[i]);
            *n = 0;
            return -all;
        }
        for (int i = 0; i < all && *n < MS_SHARDS_MAX; i++)
            if (!listed(owners, nowners, names[i]) && strcmp(names[i], o->primary) != 0)
                add_req(o, reqs, n, names[i], t, rtable_shard_index(&t->rt, names[i]), NULL, true);
    }
    return 0;
}

/* A reply without ok (the shard's fields as they go under raw). */
static void copy_reply(bson_t *dst, const bson_t *src) {
    bson_iter_t it;
    if (!bson_iter_init(&it, src)) return;
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), "ok") != 0) bson_append_iter(dst, NULL, 0, &it);
}

/* rt_dispatch's absorb: every reply of every attempt that is not stale as a whole. */
static int idx_absorb(void *p, router_t *r, rt_req_t *q, int code) {
    idx_op_t *o = p;
    long slot = q - o->reqs;
    bool optional = slot >= 0 && slot < MS_SHARDS_MAX && o->optional[slot];
    (void)r;
    bool again = is_done(o, q->shard);   /* applied in an earlier attempt */
    if (code == 0) {
        bson_t d;
        bool primary = strcmp(q->shard, o->primary) == 0;
        mark_done(o, q->shard);
        if (!again) {
            BSON_APPEND_DOCUMENT_BEGIN(&o->raw, q->shard, &d);
            copy_reply(&d, &q->reply);
            bson_append_document_end(&o->raw, &d);
            o->nraw++;
        }
        if (!o->have_first || (primary && !o->first_is_primary)) {
            bson_reinit(&o->first);
            copy_reply(&o->first, &q->reply);
            o->have_first = true;
            o->first_is_primary = primary;
        }
        return 0;
    }
    /* A shard that owns no chunk: nothing to create there (mongos ignores
     * CannotImplicitlyCreateCollection), or nothing to drop. */
    /* Sent again after a StaleConfig: the drop it already made stands. */
    if (again && !o->create && q->rc == 0 &&
        (code == MS_ERR_NAMESPACE_NOT_FOUND || code == MS_ERR_INDEX_NOT_FOUND))
        return 0;
    if (optional && q->rc == 0 &&
        ((o->create && code == MS_ERR_CANNOT_IMPLICITLY_CREATE_COLLECTION) ||
         (!o->create && (code == MS_ERR_NAMESPACE_NOT_FOUND || code == MS_ERR_INDEX_NOT_FOUND)))) {
        mark_done(o, q->shard);
        log_debug("index ddl: nothing to do on a shard that owns no chunk shard=%s code=%d",
                  log_str(q->shard), code);
        return 0;
    }
    if (!o->fail_code) {
        o->fail_code = code;
        if (q->rc) {
            o->fail = q->err;
        } else {
            rt_reply_status(&q->reply, &o->fail);
            bson_copy_to(&q->reply, &o->fail_reply);
            o->have_fail_reply = true;
        }
        err_prefix(&o->fail, "shard %s", q->shard);
    }
    return RT_ABSORB_END;
}

/* Both commands: dispatch with stale retries, then the reply. */
static int index_ddl(cmd_ctx_t *ctx, bool create, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    char ns[RT_NAME_BYTES_MAX + MS_NS_BYTES_MAX + 2];
    rt_req_t reqs[MS_SHARDS_MAX];
    idx_op_t *o = calloc(1, sizeof *o);
    int n = 0, failed = -1, rc;
    if (!o) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "%s: out of memory", ctx->name);
    snprintf(ns, sizeof ns, "%s.%s", ctx->db, bson_iter_utf8(&ctx->arg, NULL));
    o->ctx = ctx;
    o->create = create;
    o->reqs = reqs;
    bson_init(&o->raw);
    bson_init(&o->first);
    rt_dispatch_t d = {.db = ctx->db, .ns = ns, .what = ns, .build = idx_build,
                       .absorb = idx_absorb, .arg = o};
    rc = rt_dispatch(r, &d, reqs, &n, &failed, err);
    if (rc) goto out;
    if (o->fail_code) {
        rc = o->fail_code;
        *err = o->fail;
        if (o->have_fail_reply) {
            /* Extra fields of the shard's error (keyPattern, keyValue, ...) go along. */
            bson_iter_t it;
            if (bson_iter_init(&it, &o->fail_reply))
                while (bson_iter_next(&it)) {
                    const char *k = bson_iter_key(&it);
                    if (strcmp(k, "ok") && strcmp(k, "code") && strcmp(k, "codeName") &&
                        strcmp(k, "errmsg"))
                        bson_append_iter(&ctx->err_info, k, -1, &it);
                }
        }
        goto out;
    }
    if (!o->have_first) {
        rc = err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "ns not found %s", ns);
        goto out;
    }
    bson_concat(reply, &o->first);
    BSON_APPEND_DOCUMENT(reply, "raw", &o->raw);
out:
    if (o->have_fail_reply) bson_destroy(&o->fail_reply);
    bson_destroy(&o->raw);
    bson_destroy(&o->first);
    free(o);
    return rc;
}

int rt_cmd_create_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    return index_ddl(ctx, true, reply, err);
}

int rt_cmd_drop_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    return index_ddl(ctx, false, reply, err);
}
