/*
 * cmd_bal.c — the config server's balancer questions and per-collection switch
 * (bin/configsvr; routers forward them): balancerCollectionStatus (MongoDB 7.0's reply:
 * chunkSize in MB, balancerCompliant, firstComplianceViolation, details), balancerExplain
 * (beyond MongoDB: the policy's view of one collection from bal_explain plus everything
 * that stops the balancer now, with one verdict), and the update of config.collections
 * noBalance that mongosh's sh.disableBalancing / sh.enableBalancing send. The first two
 * read the same snapshot as a balancer round (bal_snapshot.c).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* The collection, its snapshot against sn and the policy's view of it. Everything is
 * released by view_free. NamespaceNotSharded when ns is not a sharded collection. */
typedef struct coll_view {
    cat_coll_t coll;
    bool have_coll;
    cat_bal_data_t d;
    bal_coll_t bc;
} coll_view_t;

static void view_free(coll_view_t *v) {
    if (v->have_coll) cat_coll_free(&v->coll);
    cat_bal_free(&v->d);
}

static int view_load(cfg_t *cfg, const char *ns, bal_snap_t *sn, const bal_settings_t *st,
                     coll_view_t *v, ms_error_t *err) {
    memset(v, 0, sizeof *v);
    int rc = cat_coll_get(cfg->cat, ns, &v->coll, err);  /* absent: NamespaceNotSharded */
    if (rc) return rc;
    v->have_coll = true;
    rc = bal_snap_coll(cfg, sn, ns, st->policy, &v->d, err);
    if (rc) return rc;
    int64_t csize = v->coll.max_chunk_size_bytes > 0 ? v->coll.max_chunk_size_bytes : st->chunk_size;
    v->bc = (bal_coll_t){.ns = v->coll.ns, .no_balance = v->coll.no_balance, .chunk_size_bytes = csize};
    bal_coll_view(&v->d, &v->bc);
    return 0;
}

/* ---- balancerCollectionStatus -------------------------------------------------------------- */

int cfg_cmd_balancer_collection_status(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = bson_iter_utf8(&ctx->arg, NULL);
    bal_settings_t st;
    bal_snap_t sn;
    coll_view_t v;
    bal_settings_read(cfg, &st);
    int rc = bal_snap_shards(cfg, &sn, err);
    if (rc == 0) rc = view_load(cfg, ns, &sn, &st, &v, err);
    else memset(&v, 0, sizeof v);
    if (rc == 0) {
        /* MongoDB 7.0: the chunk size in MB rounded up to two decimals. */
        double mb = ceil((double)v.bc.chunk_size_bytes / (1024.0 * 1024.0) * 100.0) / 100.0;
        const char *viol = NULL;
        if (v.coll.defragment) viol = "defragmentingChunks";
        else viol = bal_compliance(&v.bc, sn.shards, sn.nshards, st.policy);
        BSON_APPEND_DOUBLE(reply, "chunkSize", mb);
        BSON_APPEND_BOOL(reply, "balancerCompliant", viol == NULL);
        if (viol) BSON_APPEND_UTF8(reply, "firstComplianceViolation", viol);
        if (v.coll.defragment) {
            bson_t d;
            BSON_APPEND_DOCUMENT_BEGIN(reply, "details", &d);
            BSON_APPEND_UTF8(&d, "currentPhase", v.coll.defrag_phase[0] ? v.coll.defrag_phase : "none");
            bson_append_document_end(reply, &d);
        }
    }
    view_free(&v);
    bal_snap_free(&sn);
    return rc;
}

/* ---- balancerExplain ------------------------------------------------------------------------ */

/* The first thing that stops the balancer moving chunks of the collection now, as a
 * verdict name and a sentence; policy_why is bal_explain's own answer ("" when it would
 * move). */
static const char *verdict(const bal_settings_t *st, const cat_coll_t *coll, int nmig,
                           const char *decision, const char *policy_why, char *msg, size_t cap) {
    if (!st->enabled && strcmp(st->off_reason, "stopped") == 0) {
        snprintf(msg, cap, "the balancer is stopped (balancerStop / sh.stopBalancer); "
                 "balancerStart resumes it");
        return "stopped";
    }
    if (!st->enabled && strcmp(st->off_reason, "mode off") == 0) {
        snprintf(msg, cap, "config.settings balancer mode is \"off\"");
        return "modeOff";
    }
    if (!st->enabled) {
        snprintf(msg, cap, "outside the balancer's activeWindow %s-%s (config server local time)",
                 st->window_start, st->window_stop);
        return "outsideActiveWindow";
    }
    if (coll->no_balance) {
        snprintf(msg, cap, "balancing is disabled for this collection (noBalance: true; "
                 "sh.enableBalancing clears it)");
        return "noBalance";
    }
    if (!coll->allow_migrations) {
        snprintf(msg, cap, "migrations of this collection are not allowed (allowMigrations: false)");
        return "allowMigrationsFalse";
    }
    if (coll->defragment) {
        snprintf(msg, cap, "the collection is being defragmented (phase %s); "
                 "the defragmentation moves its chunks, not the balancing rule",
                 coll->defrag_phase[0] ? coll->defrag_phase : "none");
        return "defragmenting";
    }
    if (strcmp(decision, "move") == 0) {
        snprintf(msg, cap, "the next round moves the chunks listed in `next`");
        return "move";
    }
    if (strcmp(policy_why, "shardBusy") == 0 && nmig > 0) {
        snprintf(msg, cap, "the shards that would take part are in a migration now "
                 "(migrationsInProgress); the round after it ends moves");
        return "shardBusy";
    }
    snprintf(msg, cap, "nothing to move: %s", policy_why);
    return policy_why;
}

int cfg_cmd_balancer_explain(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = bson_iter_utf8(&ctx->arg, NULL);
    bal_settings_t st;
    bal_snap_t sn;
    coll_view_t v;
    bson_t migs = BSON_INITIALIZER, pol = BSON_INITIALIZER, d;
    int nmig = 0;
    bal_settings_read(cfg, &st);
    int rc = bal_snap_shards(cfg, &sn, err);
    if (rc == 0) rc = bal_snap_busy(cfg, &sn, &migs, &nmig, err);
    if (rc == 0) rc = view_load(cfg, ns, &sn, &st, &v, err);
    else memset(&v, 0, sizeof v);
    if (rc == 0) {
        char msg[512];
        bal_explain(&v.bc, sn.shards, sn.nshards, st.policy, &pol);
        const char *decision = bsonx_utf8_or(&pol, "decision", "");
        const char *why = bsonx_utf8_or(&pol, "why", "");
        const char *vd = verdict(&st, &v.coll, nmig, decision, why, msg, sizeof msg);
        BSON_APPEND_UTF8(reply, "verdict", vd);
        BSON_APPEND_UTF8(reply, "verdictMessage", msg);
        BSON_APPEND_DOCUMENT_BEGIN(reply, "balancer", &d);
        BSON_APPEND_BOOL(&d, "enabled", st.enabled);
        if (!st.enabled) BSON_APPEND_UTF8(&d, "offReason", st.off_reason);
        if (st.has_window) {
            bson_t w;
            BSON_APPEND_DOCUMENT_BEGIN(&d, "activeWindow", &w);
            BSON_APPEND_UTF8(&w, "start", st.window_start);
            BSON_APPEND_UTF8(&w, "stop", st.window_stop);
            bson_append_document_end(&d, &w);
            BSON_APPEND_BOOL(&d, "inWindow", st.in_window);
        }
        BSON_APPEND_BOOL(&d, "autoSplit", st.autosplit);
        bson_append_document_end(reply, &d);
        BSON_APPEND_DOCUMENT_BEGIN(reply, "collection", &d);
        BSON_APPEND_BOOL(&d, "noBalance", v.coll.no_balance);
        BSON_APPEND_BOOL(&d, "allowMigrations", v.coll.allow_migrations);
        BSON_APPEND_BOOL(&d, "defragmentCollection", v.coll.defragment);
        if (v.coll.defrag_phase[0]) BSON_APPEND_UTF8(&d, "defragmentationPhase", v.coll.defrag_phase);
        BSON_APPEND_INT64(&d, "maxChunkSizeBytes", v.coll.max_chunk_size_bytes);
        bson_append_document_end(reply, &d);
        BSON_APPEND_ARRAY(reply, "migrationsInProgress", &migs);
        /* The policy's own view (bal_policy.c bal_explain) under its own key, so that its
         * decision / why / message stay apart from the verdict. */
        BSON_APPEND_DOCUMENT(reply, "policy", &pol);
    }
    bson_destroy(&pol);
    bson_destroy(&migs);
    view_free(&v);
    bal_snap_free(&sn);
    return rc;
}

/* ---- config.collections noBalance / enableAutoMerge (sh.disableBalancing, ------------
 * ---- sh.disableAutoMerger and their enable forms) --------------------------------------- */

/* The config.collections fields a client may write, in cat_coll_flags_t's order. The
 * catalog owns every other field (shardCollection, migrations, DDL write them). */
static const char *const coll_writable[CAT_COLL_FLAGS] = {"noBalance", "enableAutoMerge"};

/* Reads one $set / $unset operand into vals (the index of coll_writable): a $set needs a
 * boolean, a $unset clears (noBalance → false, enableAutoMerge → absent = enabled). */
static int coll_flag_operand(bson_iter_t *op, bool set, cat_coll_flags_t *f, int *have,
                             ms_error_t *err) {
    const char *k = bson_iter_key(op);
    int i = 0;
    while (i < CAT_COLL_FLAGS && strcmp(coll_writable[i], k) != 0) i++;
    if (i == CAT_COLL_FLAGS)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "config.collections: only noBalance and enableAutoMerge may be written, not "
                       "%s; the catalog owns the other fields", k);
    if (set && !BSON_ITER_HOLDS_BOOL(op))
        return err_set(err, MS_ERR_BAD_VALUE, "%s must be a boolean", k);
    if (f->v[i] != CAT_FLAG_KEEP)
        return err_set(err, MS_ERR_CONFLICTING_UPDATE_OPERATORS,
                       "Updating the path '%s' would create a conflict at '%s'", k, k);
    f->v[i] = set ? (bson_iter_bool(op) ? 1 : 0) : CAT_FLAG_UNSET;
    (*have)++;
    return 0;
}

int cfg_coll_update_flags(cfg_t *cfg, const bson_t *q, const bson_t *u, bool upsert, int64_t *n,
                          int64_t *nmod, ms_error_t *err) {
    bson_iter_t it, op;
    const char *ns = NULL;
    cat_coll_flags_t f = {{CAT_FLAG_KEEP, CAT_FLAG_KEEP}};
    int have = 0, rc;
    *n = *nmod = 0;
    if (upsert)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION, "config.collections: upsert is not allowed; "
                       "shardCollection creates a collection's entry");
    if (bson_iter_init(&it, q) && bson_iter_next(&it) && strcmp(bson_iter_key(&it), "_id") == 0 &&
        BSON_ITER_HOLDS_UTF8(&it))
        ns = bson_iter_utf8(&it, NULL);
    if (!ns || bson_iter_next(&it))
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "config.collections updates must select one collection: q {_id: \"db.coll\"}");
    bson_iter_init(&it, u);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bool set = strcmp(k, "$set") == 0, unset = strcmp(k, "$unset") == 0;
        if ((!set && !unset) || !BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &op))
            return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                           "config.collections: only $set of a boolean or $unset of noBalance / "
                           "enableAutoMerge may be written; the catalog owns the other fields "
                           "(got %s)", k);
        while (bson_iter_next(&op))
            if ((rc = coll_flag_operand(&op, set, &f, &have, err)) != 0) return rc;
    }
    if (!have)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION, "config.collections: the update must $set or "
                       "$unset noBalance or enableAutoMerge");
    rc = cat_coll_set_flags(cfg->cat, ns, &f, n, nmod, err);
    if (rc == 0 && *nmod) {
        log_info("config.collections flags ns=%s noBalance=%d enableAutoMerge=%d", log_str(ns),
                 f.v[CAT_FLAG_NO_BALANCE], f.v[CAT_FLAG_AUTO_MERGE]);
        if (f.v[CAT_FLAG_NO_BALANCE] != CAT_FLAG_KEEP)
            cfg_balancer_wake(cfg);  /* enableBalancing: a round now rather than after the idle nap */
    }
    return rc;
}
