/*
 * defrag.c — collection defragmentation on the config server (bin/configsvr, run by the
 * balancer thread of balancer.c once per round for every collection whose
 * defragmentCollection is set, instead of balancing it), and the command that starts
 * it: configureCollectionBalancing {chunkSize, defragmentCollection, enableAutoMerger}.
 *
 * MongoDB's BalancerDefragmentationPolicy (notes §5.1) in three phases, the current one
 * stored in config.collections defragmentationPhase so that a restarted config server
 * goes on where it was:
 *   1 mergeAndMeasureChunks: merge every maximal run of contiguous chunks on one shard
 *     and zone; measure each chunk without an estimate with its owner's dataSize
 *     (estimate: true) into config.chunks estimatedDataSizeBytes;
 *   2 moveAndMergeChunks: each chunk below 25 % of the collection's chunk size is moved to
 *     the shard of the neighbour bal_defrag_pick scores best (no move when that is its
 *     own shard) and merged with it; a shard is in one migration per round (the round's
 *     busy flags, shared with normal balancing);
 *   3 mergeChunks: merge every run of contiguous same-shard chunks again;
 * then defragmentCollection and the phase are removed and the estimates cleared. A step
 * whose actions hit retriable errors stays in its phase (reissued next round); a
 * non-retriable one restarts the phase, phase 2 from phase 1 (bal_defrag_next).
 * Merges and measures run in the round's thread (MongoDB's secondary thread does them
 * asynchronously; here a round is short enough); a round's migrations run in parallel,
 * one thread each, through cfg_move_range.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* ---- configureCollectionBalancing ---------------------------------------------------------- */

int cfg_cmd_configure_collection_balancing(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = cfg_arg_str(ctx);
    bson_iter_t it;
    char db[CAT_DB_NAME_BYTES_MAX];
    int chunk_mb = -1, defrag = -1, auto_merge = -1;
    (void)reply;
    if (cfg_ns_split(ns, db, sizeof db, NULL, NULL) != 0)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s'", ns);
    if (cmd_field(ctx, "chunkSize", &it)) {
        int64_t v = 0;
        bsonx_as_int64(&it, &v);
        /* MongoDB: 0 = back to the cluster default; else 1 MB .. 1 GB, InvalidOptions. */
        if (v < 0 || v > MS_COLL_CHUNK_SIZE_MB_MAX)
            return err_set(err, MS_ERR_INVALID_OPTIONS, "Chunk size '%lld' out of range [1MB, 1GB]",
                           (long long)v);
        chunk_mb = (int)v;
    }
    if (cmd_field(ctx, "defragmentCollection", &it)) defrag = bsonx_truthy(&it) ? 1 : 0;
    if (cmd_field(ctx, "enableAutoMerger", &it)) auto_merge = bsonx_truthy(&it) ? 1 : 0;
    /* No field: a no-op, as MongoDB (new options must not break old clients). */
    if (chunk_mb < 0 && defrag < 0 && auto_merge < 0) return 0;
    int rc = cat_coll_configure_balancing(cfg->cat, ns, chunk_mb, defrag, auto_merge, err);
    if (rc == 0) cfg_balancer_wake(cfg);  /* defragmentation starts at the next round */
    return rc;
}

/* ---- one step -------------------------------------------------------------------------------- */

typedef struct step {
    cfg_t *cfg;
    const cat_coll_t *coll;
    int merged, measured, moved, pending;
    bool restart;
    bson_t errors;  /* array of {action, code, errmsg} */
    int nerrors;
} step_t;

static void step_error(step_t *s, const char *action, const ms_error_t *e, int rc) {
    bool retry = bal_defrag_retriable(rc);
    if (retry) s->pending++;
    else s->restart = true;
    log_warn("defragmentation action failed ns=%s action=%s code=%d retriable=%d err=%s",
             log_str(s->coll->ns), action, rc, retry, log_str(e->msg));
    if (s->nerrors >= MS_DEFRAG_LOGGED_ERRORS_MAX) return;
    bson_t d;
    char k[16];
    const char *key;
    bson_uint32_to_string((uint32_t)s->nerrors++, &key, k, sizeof k);
    BSON_APPEND_DOCUMENT_BEGIN(&s->errors, key, &d);
    BSON_APPEND_UTF8(&d, "action", action);
    BSON_APPEND_INT32(&d, "code", rc);
    BSON_APPEND_UTF8(&d, "errmsg", e->msg);
    BSON_APPEND_BOOL(&d, "retriable", retry);
    bson_append_document_end(&s->errors, &d);
}

/* Merges [min, max) of ns (all on shard) the way mergeChunks does: the collection's DDL
 * lock around the catalog transaction only, then the owner told to refresh. */
static int merge_range(cfg_t *cfg, const char *ns, const bson_t *min, const bson_t *max,
                       const char *shard, ms_error_t *err) {
    cfg_ddl_guard_t g = {0};
    int rc = cfg_ddl_lock_coll(cfg, ns, "defragmentation merge", &g, err);
    if (rc == 0) rc = cat_chunk_merge(cfg->cat, ns, min, max, NULL, err);
    cfg_ddl_unlock(&g);
    if (rc == 0) cfg_flush_shard(cfg, shard, ns);
    return rc;
}

/* Loads the chunks of the collection with owners mapped to shards[] (-1 = unknown). */
static int load(step_t *s, const bal_shard_t *shards, int nshards, cat_bal_data_t *d,
                bal_coll_t *bc) {
    ms_error_t e = {0};
    int rc = cat_bal_load(s->cfg->cat, s->coll->ns, d, &e);
    if (rc) {
        step_error(s, "load", &e, rc);
        return rc;
    }
    for (int i = 0; i < d->nchunks; i++)
        for (int k = 0; k < nshards; k++)
            if (strcmp(d->owners[i], shards[k].name) == 0) d->chunks[i].owner = k;
    *bc = (bal_coll_t){.ns = s->coll->ns, .chunks = d->chunks, .nchunks = d->nchunks,
                       .zones = d->zones, .nzones = d->nzones};
    return 0;
}

/* Merges every run of contiguous chunks on one shard and zone. */
static void merge_runs(step_t *s, const bal_shard_t *shards, int nshards) {
    cat_bal_data_t d;
    bal_coll_t bc;
    if (load(s, shards, nshards, &d, &bc) != 0) return;
    bal_run_t runs[d.nchunks > 0 ? d.nchunks : 1];
    int n = bal_merge_runs(&bc, NULL, runs, d.nchunks);
    for (int r = 0; r < n; r++) {
        ms_error_t e = {0};
        const bal_chunk_t *a = &d.chunks[runs[r].first], *b = &d.chunks[runs[r].last];
        int rc = merge_range(s->cfg, s->coll->ns, a->min, b->max, d.owners[runs[r].first], &e);
        if (rc) step_error(s, "merge", &e, rc);
        else s->merged++;
    }
    cat_bal_free(&d);
}

/* dataSize {keyPattern, min, max, estimate: true} of every chunk without an estimate. */
static void measure(step_t *s, const bal_shard_t *shards, int nshards) {
    cat_bal_data_t d;
    bal_coll_t bc;
    char db[CAT_DB_NAME_BYTES_MAX];
    if (cfg_ns_split(s->coll->ns, db, sizeof db, NULL, NULL) != 0) return;
    if (load(s, shards, nshards, &d, &bc) != 0) return;
    for (int i = 0; i < d.nchunks; i++) {
        bal_chunk_t *ch = &d.chunks[i];
        bson_t cmd = BSON_INITIALIZER, r;
        bson_iter_t it;
        ms_error_t e = {0};
        int64_t size = 0;
        if (ch->est_bytes >= 0 || ch->jumbo) continue;
        BSON_APPEND_UTF8(&cmd, "dataSize", s->coll->ns);
        BSON_APPEND_DOCUMENT(&cmd, "keyPattern", &s->coll->key);
        BSON_APPEND_DOCUMENT(&cmd, "min", ch->min);
        BSON_APPEND_DOCUMENT(&cmd, "max", ch->max);
        BSON_APPEND_BOOL(&cmd, "estimate", true);
        BSON_APPEND_UTF8(&cmd, "$db", db);
        int rc = cfg_shard_command(s->cfg, d.owners[i], &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &r, &e);
        bson_destroy(&cmd);
        if (rc == 0) {
            if (bson_iter_init_find(&it, &r, "size")) bsonx_as_int64(&it, &size);
            bson_destroy(&r);
            rc = cat_chunk_set_est(s->cfg->cat, s->coll->ns, ch->min_enc, ch->min_len, ch->max_enc,
                                   ch->max_len, size, &e);
        }
        if (rc) step_error(s, "dataSize", &e, rc);
        else s->measured++;
    }
    cat_bal_free(&d);
}

/* One phase-2 migration, run in a thread of its own so that the round's moves (each on
 * two shards no other move of the round uses) go in parallel, as the balancer's own. */
typedef struct move_job {
    cfg_t *cfg;
    cfg_move_req_t req;
    int rc;
    ms_error_t err;
    pthread_t th;
    bool started;
} move_job_t;

static void *move_main(void *arg) {
    move_job_t *j = arg;
    j->rc = cfg_move_range(j->cfg, &j->req, NULL, &j->err);
    return NULL;
}

/* Phase 2: small chunks moved to (or merged into) their best neighbour. */
static void move_and_merge(step_t *s, bal_shard_t *shards, int nshards, int64_t small,
                           bool wait_delete, bool throttle) {
    cat_bal_data_t d;
    bal_coll_t bc;
    int waiting = 0;
    if (load(s, shards, nshards, &d, &bc) != 0) return;
    bal_defrag_act_t acts[d.nchunks > 0 ? d.nchunks : 1];
    move_job_t jobs[d.nchunks > 0 ? d.nchunks : 1];
    int n = bal_defrag_moves(&bc, shards, nshards, small, acts, d.nchunks, &waiting);
    s->pending += waiting;
    memset(jobs, 0, sizeof jobs);
    for (int a = 0; a < n; a++) {
        if (!acts[a].move) continue;
        const bal_chunk_t *ch = &d.chunks[acts[a].chunk];
        move_job_t *j = &jobs[a];
        j->cfg = s->cfg;
        j->req = (cfg_move_req_t){.ns = s->coll->ns, .to = shards[acts[a].to].name, .min = ch->min,
                                  .max = ch->max, .wait_delete = wait_delete, .throttle = throttle};
        j->started = pthread_create(&j->th, NULL, move_main, j) == 0;
        if (!j->started) {
            j->rc = MS_ERR_INTERNAL;
            snprintf(j->err.msg, sizeof j->err.msg, "could not start a thread");
        }
    }
    for (int a = 0; a < n; a++)
        if (jobs[a].started) pthread_join(jobs[a].th, NULL);
    for (int a = 0; a < n; a++) {
        const bal_chunk_t *ch = &d.chunks[acts[a].chunk], *nb = &d.chunks[acts[a].into];
        const bal_chunk_t *lo = acts[a].chunk < acts[a].into ? ch : nb;
        const bal_chunk_t *hi = acts[a].chunk < acts[a].into ? nb : ch;
        ms_error_t e = {0};
        int rc = 0;
        if (acts[a].move) {
            log_info("defragmentation move ns=%s from=%s to=%s code=%d", log_str(s->coll->ns),
                     log_str(shards[acts[a].from].name), log_str(shards[acts[a].to].name), jobs[a].rc);
            if (jobs[a].rc) {
                step_error(s, "moveRange", &jobs[a].err, jobs[a].rc);
                continue;
            }
            s->moved++;
        }
        rc = merge_range(s->cfg, s->coll->ns, lo->min, hi->max, shards[acts[a].to].name, &e);
        if (rc == 0) {
            /* The merged chunk's estimate is the sum: no new measure needed. */
            rc = cat_chunk_set_est(s->cfg->cat, s->coll->ns, lo->min_enc, lo->min_len, hi->max_enc,
                                   hi->max_len, ch->est_bytes + nb->est_bytes, &e);
        }
        if (rc) step_error(s, "merge", &e, rc);
        else s->merged++;
        s->pending++;  /* the merged chunk may still be small: phase 2 looks again */
    }
    cat_bal_free(&d);
}

int cfg_defrag_step(cfg_t *cfg, const cat_coll_t *coll, bal_shard_t *shards, int nshards,
                    int64_t chunk_size, bool wait_delete, bool throttle, bson_t *arr, int *n) {
    step_t s = {.cfg = cfg, .coll = coll};
    bal_defrag_phase_t ph = bal_defrag_phase_parse(coll->defrag_phase), next;
    int64_t small = chunk_size / 4;  /* MongoDB: small = below 25 % of the chunk size */
    ms_error_t e = {0};
    bson_init(&s.errors);
    switch (ph) {
    case BAL_DEFRAG_MERGE_MEASURE:
        merge_runs(&s, shards, nshards);
        measure(&s, shards, nshards);
        break;
    case BAL_DEFRAG_MOVE_MERGE:
        move_and_merge(&s, shards, nshards, small, wait_delete, throttle);
        break;
    case BAL_DEFRAG_MERGE:
        merge_runs(&s, shards, nshards);
        break;
    default:
        break;
    }
    next = bal_defrag_next(ph, s.pending, s.restart);
    if (next != ph) {
        int rc = next == BAL_DEFRAG_FINISHED
                     ? cat_coll_set_defrag_phase(cfg->cat, coll->ns, NULL, &e)
                     : cat_coll_set_defrag_phase(cfg->cat, coll->ns, bal_defrag_phase_name(next), &e);
        if (rc) {
            log_warn("defragmentation phase not stored ns=%s err=%s", log_str(coll->ns), log_str(e.msg));
            next = ph;
        } else {
            log_info("defragmentation phase ns=%s from=%s to=%s", log_str(coll->ns),
                     bal_defrag_phase_name(ph), bal_defrag_phase_name(next));
        }
    }
    bson_t doc;
    char k[16];
    const char *key;
    bson_uint32_to_string((uint32_t)(*n)++, &key, k, sizeof k);
    BSON_APPEND_DOCUMENT_BEGIN(arr, key, &doc);
    BSON_APPEND_UTF8(&doc, "ns", coll->ns);
    BSON_APPEND_UTF8(&doc, "phase", bal_defrag_phase_name(ph));
    BSON_APPEND_UTF8(&doc, "next", bal_defrag_phase_name(next));
    BSON_APPEND_INT32(&doc, "merged", s.merged);
    BSON_APPEND_INT32(&doc, "measured", s.measured);
    BSON_APPEND_INT32(&doc, "moved", s.moved);
    BSON_APPEND_INT32(&doc, "pending", s.pending);
    BSON_APPEND_ARRAY(&doc, "errors", &s.errors);
    bson_append_document_end(arr, &doc);
    bson_destroy(&s.errors);
    /* A phase change counts as progress: the next round comes after the short pause. */
    return s.merged + s.measured + s.moved + (next != ph ? 1 : 0);
}
