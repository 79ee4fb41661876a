/*
 * cmd_migrate.c — the config server's migration commands (bin/configsvr):
 * _configsvrMoveRange (router → config: check the request, record it in
 * config.migrations, send _shardsvrMoveRange to the donor and wait for the end),
 * _configsvrCommitChunkMigration and _configsvrEnsureChunkVersionIsGreaterThan (donor →
 * config: the commit and the recovery fence, cat_migrate.c), and _configsvrLogChange
 * (a shard's changelog entry). The migration itself is the donor's; the config server
 * only starts it, waits for it, and commits what the donor asks it to commit.
 */
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/lclock.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/rpc.h"
#include "configsvr/configsvr.h"

/* A Timestamp field of doc into *out; false when absent or of another type. */
static bool ts_field(const bson_t *doc, const char *key, cat_ts_t *out) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_TIMESTAMP(&it)) return false;
    bson_iter_timestamp(&it, &out->t, &out->i);
    return true;
}

/* A document field of doc as a view; false when absent or not a document. */
static bool doc_field(const bson_t *doc, const char *key, bson_t *out) {
    bson_iter_t it;
    uint32_t len;
    const uint8_t *data;
    if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_DOCUMENT(&it)) return false;
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

static const char *str_field(const cmd_ctx_t *ctx, const char *name) {
    bson_iter_t it;
    if (cmd_field(ctx, name, &it) && BSON_ITER_HOLDS_UTF8(&it)) return bson_iter_utf8(&it, NULL);
    return "";
}

/* ---- _configsvrMoveRange --------------------------------------------------------------- */

/* Sends the donor its _shardsvrMoveRange and waits for the end. The donor's {ok: 0}
 * reply becomes our error with its code and errmsg unchanged and its other fields in
 * err_info, so the router's client sees exactly what the donor said. */
static int call_donor(cfg_t *cfg, bson_t *err_info, const char *donor, const bson_t *cmd,
                      ms_error_t *err) {
    char host[MS_URL_BYTES_MAX];
    rpc_client_t *cl = NULL;
    bson_t rep;
    bson_iter_t it;
    int rc = cat_shard_host(cfg->cat, donor, host, sizeof host, NULL, err);
    if (rc == 0) rc = rpc_peer(host, &cl, err);
    if (rc) return rc;
    /* A migration takes as long as its chunk needs: the op's maxTimeMS, else the long
     * migration deadline (not CFG_SHARD_CMD_TIMEOUT_MS). */
    rc = rpc_call_op(cl, cmd, MS_MOVE_CHUNK_TIMEOUT_MS, &rep, err);
    if (rc) {
        err_prefix(err, "donor shard %s (%s)", donor, host);
        return rc;
    }
    if (bson_iter_init_find(&it, &rep, "ok") && bsonx_truthy(&it)) {
        bson_destroy(&rep);
        return 0;
    }
    {
        int64_t v = 0;
        int code = MS_ERR_UNKNOWN_ERROR;
        const char *msg = "donor replied without ok: 1";
        if (bson_iter_init_find(&it, &rep, "code") && bsonx_as_int64(&it, &v) && v > 0 && v <= INT32_MAX)
            code = (int)v;
        if (bson_iter_init_find(&it, &rep, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
            msg = bson_iter_utf8(&it, NULL);
        rc = err_set(err, code, "%s", msg);
        if (err_info && bson_iter_init(&it, &rep))
            while (bson_iter_next(&it)) {
                const char *k = bson_iter_key(&it);
                if (strcmp(k, "ok") && strcmp(k, "code") && strcmp(k, "codeName") && strcmp(k, "errmsg"))
                    bson_append_iter(err_info, k, -1, &it);
            }
    }
    bson_destroy(&rep);
    return rc;
}

int cfg_cmd_move_range(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    cfg_move_req_t r;
    bson_t min, max, find, wc;
    bool has_min = cfg_field_doc(ctx, "min", &min), has_max = cfg_field_doc(ctx, "max", &max);
    bool has_find = cfg_field_doc(ctx, "find", &find), has_wc = cfg_field_doc(ctx, "writeConcern", &wc);
    bson_iter_t bounds_it, it;
    bool has_bounds = cmd_field(ctx, "bounds", &bounds_it);
    int64_t force_jumbo = 0;
    (void)reply;
    memset(&r, 0, sizeof r);
    r.ns = cfg_arg_str(ctx);
    r.to = str_field(ctx, "toShard");
    r.wait_delete = cmd_flag(ctx, "waitForDelete", false);
    r.throttle = cmd_flag(ctx, "secondaryThrottle", false);
    if (cmd_field(ctx, "forceJumbo", &it) &&
        (!bsonx_as_int64(&it, &force_jumbo) || force_jumbo < 0 || force_jumbo > 2))
        return err_set(err, MS_ERR_BAD_VALUE, "forceJumbo must be 0 (doNotForce), 1 (forceManual) or "
                       "2 (forceBalancer)");
    r.force_jumbo = (int)force_jumbo;
    if ((int)has_find + (int)has_bounds + (int)(has_min || has_max) > 1)
        return err_set(err, MS_ERR_BAD_VALUE, "give one of find, bounds or min/max");
    if (has_bounds) {
        /* moveChunk's bounds name a chunk exactly (MongoDB: InvalidOptions otherwise). */
        bson_iter_t a;
        int n = 0;
        if (bson_iter_recurse(&bounds_it, &a))
            while (bson_iter_next(&a) && n < 3) {
                uint32_t len;
                const uint8_t *data;
                if (!BSON_ITER_HOLDS_DOCUMENT(&a)) break;
                bson_iter_document(&a, &len, &data);
                if (n < 2) bson_init_static(n == 0 ? &min : &max, data, len);
                n++;
            }
        if (n != 2)
            return err_set(err, MS_ERR_BAD_VALUE, "bounds must be an array of two documents [min, max]");
        has_min = has_max = true;
        r.bounds = true;
    }
    if (!has_find && !has_min && !has_max)
        return err_set(err, MS_ERR_BAD_VALUE, "at least one of min or max must be given");
    r.min = has_min ? &min : NULL;
    r.max = has_max ? &max : NULL;
    r.find = has_find ? &find : NULL;
    r.wc = has_wc ? &wc : NULL;
    return cfg_move_range(cfg, &r, &ctx->err_info, err);
}

int cfg_move_range(cfg_t *cfg, const cfg_move_req_t *r, bson_t *err_info, ms_error_t *err) {
    const char *ns = r->ns, *to = r->to;
    bson_t min, max;
    bool has_min = r->min != NULL, has_max = r->max != NULL, has_find = r->find != NULL;
    bool has_bounds = r->bounds, has_wc = r->wc != NULL;
    bool wait_delete = r->wait_delete, throttle = r->throttle;
    bool draining = false, joined = true, have_chunk = false, have_coll = false;
    int64_t force_jumbo = r->force_jumbo, max_bytes;
    cat_coll_t coll;
    cat_chunk_info_t ch;
    bson_t doc = BSON_INITIALIZER, cmd = BSON_INITIALIZER, fmin, fmax;
    char id[MS_NS_BYTES_MAX + 600] = "";
    int rc;
    if (has_min) bson_init_static(&min, bson_get_data(r->min), r->min->len);
    if (has_max) bson_init_static(&max, bson_get_data(r->max), r->max->len);
    /* No lock is held across the checks and the donor's call: the commit re-checks all
     * of it in its own transaction, and split / merge of the collection must go on
     * during a migration of one of its chunks. */
    rc = cat_coll_get(cfg->cat, ns, &coll, err);
    if (rc) goto out;
    have_coll = true;
    rc = cat_shard_host(cfg->cat, to, NULL, 0, &draining, err);
    if (rc) goto out;
    if (draining) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "cannot move a range of %s to %s: the shard is draining", ns, to);
        goto out;
    }
    if (!coll.allow_migrations) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "migrations of %s are not allowed (allowMigrations: false)", ns);
        goto out;
    }
    if (has_find) {
        /* moveChunk's find: the whole chunk holding that shard key value. */
        keys_pattern_t p;
        bson_t key;
        char owner[CAT_SHARD_NAME_BYTES_MAX];
        memset(&p, 0, sizeof p);
        rc = keys_pattern_parse(&coll.key, &p, err);
        if (rc == 0) rc = cfg_key_of_query(&p, r->find, &key, err);
        keys_pattern_free(&p);
        if (rc) goto out;
        rc = cat_chunk_containing(cfg->cat, ns, &key, &fmin, &fmax, owner, sizeof owner, err);
        bson_destroy(&key);
        if (rc) goto out;
        rc = cat_chunk_for_range(cfg->cat, ns, &fmin, &fmax, &ch, err);
        bson_destroy(&fmin);
        bson_destroy(&fmax);
        if (rc) goto out;
        have_chunk = true;
        bson_init_static(&min, bson_get_data(&ch.min), ch.min.len);
        bson_init_static(&max, bson_get_data(&ch.max), ch.max.len);
        has_min = has_max = true;
    } else {
        if (has_bounds) {
            char owner[CAT_SHARD_NAME_BYTES_MAX];
            rc = cat_chunk_exact(cfg->cat, ns, &min, &max, owner, sizeof owner, err);
            if (rc == MS_ERR_BAD_VALUE && strstr(err->msg, "precondition")) {
                char *a = bson_as_relaxed_extended_json(&min, NULL);
                char *b = bson_as_relaxed_extended_json(&max, NULL);
                rc = err_set(err, MS_ERR_INVALID_OPTIONS, "no chunk found with the shard key "
                             "bounds [%s, %s)", a ? a : "?", b ? b : "?");
                bson_free(a);
                bson_free(b);
            }
            if (rc) goto out;
        }
        rc = cat_chunk_for_range(cfg->cat, ns, has_min ? &min : NULL, has_max ? &max : NULL, &ch, err);
        if (rc) goto out;
        have_chunk = true;
    }
    if (strcmp(ch.shard, to) == 0) {
        /* As MongoDB: the range is already on the destination, nothing to do. */
        log_info("moveRange no-op ns=%s toShard=%s reason=already_owner", log_str(ns), log_str(to));
        goto out;
    }
    max_bytes = coll.max_chunk_size_bytes > 0 ? coll.max_chunk_size_bytes
                                              : cat_chunk_size_bytes(cfg->cat);
    {
        char *j = bson_as_relaxed_extended_json(has_min ? &min : &ch.min, NULL);
        snprintf(id, sizeof id, "%s-%s", ns, j ? j : "?");
        bson_free(j);
    }
    /* config.migrations (MongoDB 3.4–4.4's MigrationType): what is in flight, so a
     * crash leaves a trace and an identical request can be recognised. */
    {
        cat_version_t cv;
        bson_oid_copy(&coll.epoch, &cv.epoch);
        cv.ts = coll.ts;
        cv.major = ch.major;
        cv.minor = ch.minor;
        BSON_APPEND_UTF8(&doc, "_id", id);
        BSON_APPEND_UTF8(&doc, "ns", ns);
        if (has_min) BSON_APPEND_DOCUMENT(&doc, "min", &min);
        if (has_max) BSON_APPEND_DOCUMENT(&doc, "max", &max);
        BSON_APPEND_UTF8(&doc, "fromShard", ch.shard);
        BSON_APPEND_UTF8(&doc, "toShard", to);
        cat_version_append(&doc, "chunkVersion", &cv);
        BSON_APPEND_BOOL(&doc, "waitForDelete", wait_delete);
        BSON_APPEND_INT32(&doc, "forceJumbo", (int32_t)force_jumbo);
        BSON_APPEND_INT64(&doc, "maxChunkSizeBytes", max_bytes);
        BSON_APPEND_BOOL(&doc, "secondaryThrottle", throttle);
    }
    rc = cat_migration_record(cfg->cat, &doc, &joined, err);
    if (rc) goto out;

    BSON_APPEND_UTF8(&cmd, "_shardsvrMoveRange", ns);
    BSON_APPEND_UTF8(&cmd, "fromShard", ch.shard);
    BSON_APPEND_UTF8(&cmd, "toShard", to);
    /* Only max: the donor moves [chunk min, max). (MongoDB searches split points backwards
     * from max for one chunk-sized piece; minishard takes the chunk's lower part whole.) */
    BSON_APPEND_DOCUMENT(&cmd, "min", has_min ? &min : &ch.min);
    if (has_max) BSON_APPEND_DOCUMENT(&cmd, "max", &max);
    BSON_APPEND_INT64(&cmd, "maxChunkSizeBytes", max_bytes);
    BSON_APPEND_BOOL(&cmd, "waitForDelete", wait_delete);
    BSON_APPEND_INT32(&cmd, "forceJumbo", (int32_t)force_jumbo);
    BSON_APPEND_BOOL(&cmd, "secondaryThrottle", throttle);
    BSON_APPEND_OID(&cmd, "epoch", &coll.epoch);
    bson_append_timestamp(&cmd, "timestamp", -1, coll.ts.t, coll.ts.i);
    if (has_wc) BSON_APPEND_DOCUMENT(&cmd, "writeConcern", r->wc);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (op_deadline_ms() > 0) {
        long long left = op_time_left_ms(0);
        BSON_APPEND_INT64(&cmd, "maxTimeMS", left > 0 ? left : 1);
    }
    log_info("moveRange start ns=%s from=%s to=%s joined=%d", log_str(ns), log_str(ch.shard),
             log_str(to), (int)joined);
    rc = call_donor(cfg, err_info, ch.shard, &cmd, err);
    log_info("moveRange end ns=%s from=%s to=%s code=%d", log_str(ns), log_str(ch.shard),
             log_str(to), rc);
    if (!joined) {
        ms_error_t e2 = {0};
        if (cat_migration_forget(cfg->cat, id, &e2) != 0)
            log_warn("config.migrations entry not removed id=%s err=%s", log_str(id), log_str(e2.msg));
    }
out:
    if (have_chunk) {
        bson_destroy(&ch.min);
        bson_destroy(&ch.max);
    }
    if (have_coll) cat_coll_free(&coll);
    bson_destroy(&doc);
    bson_destroy(&cmd);
    return rc;
}

void cfg_migrations_recover(cfg_t *cfg) {
    int64_t n = 0;
    ms_error_t e = {0};
    /* An entry here means the config server died while it waited on a donor. The
     * outcome is not ours to decide: the donor persisted its own coordinator document
     * and its recovery finishes or aborts the migration (with the chunk table as the
     * truth, fenced by _configsvrEnsureChunkVersionIsGreaterThan). Nobody waits on the
     * entry any more, so it goes. */
    if (cat_migrations_clear(cfg->cat, &n, &e) != 0)
        log_warn("config.migrations not cleared at start-up err=%s", log_str(e.msg));
    else if (n > 0)
        log_info("config.migrations cleared at start-up entries=%lld", (long long)n);
}

/* ---- _configsvrCommitChunkMigration ----------------------------------------------------- */

int cfg_cmd_commit_chunk_migration(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    cat_mig_commit_t m;
    cat_version_t fromv, donor;
    bson_t chunk, min, max, fv;
    bson_iter_t it;
    int rc;
    memset(&m, 0, sizeof m);
    m.ns = cfg_arg_str(ctx);
    m.from = str_field(ctx, "fromShard");
    m.to = str_field(ctx, "toShard");
    if (!cfg_field_doc(ctx, "migratedChunk", &chunk) || !doc_field(&chunk, "min", &min) ||
        !doc_field(&chunk, "max", &max) || !ts_field(&chunk, "lastmod", &(cat_ts_t){0, 0}))
        return err_set(err, MS_ERR_BAD_VALUE, "migratedChunk must be {min: doc, max: doc, "
                       "lastmod: Timestamp}");
    {
        cat_ts_t lm;
        ts_field(&chunk, "lastmod", &lm);
        m.chunk_major = lm.t;
        m.chunk_minor = lm.i;
    }
    m.min = &min;
    m.max = &max;
    if (!cfg_field_doc(ctx, "fromShardCollectionVersion", &fv))
        return err_set(err, MS_ERR_BAD_VALUE, "fromShardCollectionVersion must be {e, t, v}");
    rc = cat_version_parse(&fv, &fromv, err);
    if (rc) return rc;
    bson_oid_copy(&fromv.epoch, &m.epoch);
    m.ts = fromv.ts;
    if (cmd_field(ctx, "validAfter", &it)) bson_iter_timestamp(&it, &m.valid_after.t, &m.valid_after.i);
    {
        lclock_ts_t ct;   /* the commit's cluster time (common/lclock.h) */
        if ((rc = lclock_write_begin(&ct, err)) != 0) return rc;
        rc = cat_migration_commit(cfg->cat, &m, &donor, err);
        lclock_write_end(ct, rc == 0);
    }
    if (rc) return rc;
    cat_version_append(reply, "shardVersion", &donor);
    return 0;
}

/* ---- _configsvrEnsureChunkVersionIsGreaterThan ------------------------------------------ */

int cfg_cmd_ensure_chunk_version_gt(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = str_field(ctx, "nss");
    bson_t min, max, vdoc;
    cat_version_t v;
    bson_iter_t it;
    bson_subtype_t sub;
    uint32_t len = 0;
    const uint8_t *data = NULL;
    bool bumped = false;
    int rc;
    if (!cmd_field(ctx, "collectionUUID", &it)) return err_set(err, MS_ERR_BAD_VALUE, "collectionUUID missing");
    bson_iter_binary(&it, &sub, &len, &data);
    if (len != 16) return err_set(err, MS_ERR_BAD_VALUE, "collectionUUID must be a 16-byte UUID");
    if (!cfg_field_doc(ctx, "minKey", &min) || !cfg_field_doc(ctx, "maxKey", &max) ||
        !cfg_field_doc(ctx, "version", &vdoc))
        return err_set(err, MS_ERR_BAD_VALUE, "minKey, maxKey and version must be documents");
    rc = cat_version_parse(&vdoc, &v, err);
    if (rc == 0) rc = cat_chunk_ensure_version_gt(cfg->cat, ns, data, &min, &max, &v, &bumped, err);
    (void)reply;
    return rc;
}

/* ---- _configsvrLogChange ---------------------------------------------------------------- */

int cfg_cmd_log_change(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    bson_t details;
    bool has = cfg_field_doc(ctx, "details", &details);
    (void)reply;
    return cat_changelog_from(cfg->cat, str_field(ctx, "shard"), str_field(ctx, "what"),
                              str_field(ctx, "ns"), has ? &details : NULL, err);
}
