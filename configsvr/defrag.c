/*
 * defrag.c — collection defragmentation on the config server (bin/configsvr), split the
 * way MongoDB splits it between the balancer's two threads (notes §4.2, §5.1), and the
 * command that starts it: configureCollectionBalancing {chunkSize, defragmentCollection,
 * enableAutoMerger}.
 *
 * MongoDB's BalancerDefragmentationPolicy in three phases, the current one stored in
 * config.collections defragmentationPhase so that a restarted config server goes on
 * where it was:
 *   1 mergeAndMeasureChunks: merge every maximal run of contiguous chunks on one shard
 *     and zone; measure each chunk without an estimate with its owner's dataSize
 *     (estimate: true) into config.chunks estimatedDataSizeBytes;
 *   2 moveAndMergeChunks: each chunk below 25 % of the collection's chunk size is moved to
 *     the shard of the neighbour bal_defrag_pick scores best (no move when that is its
 *     own shard) and merged with it;
 *   3 mergeChunks: merge every run of contiguous same-shard chunks again;
 * then defragmentCollection and the phase are removed and the estimates cleared.
 *
 * Who does what:
 *   - the balancer's round (balancer.c, main thread) calls cfg_defrag_round_moves for
 *     every collection with defragmentCollection set: in phase 2 it chooses the
 *     migrations with the round's busy flags (a shard in one migration per round,
 *     balancing and defragmentation together) and runs them in the round's batch; every
 *     call wakes the secondary thread. cfg_defrag_move_done gets each move's outcome.
 *   - the secondary thread (bal_merge.c) calls cfg_defrag_secondary_step: phase 1's
 *     merges and measures, the merges phase 2 owes after its moves (a moved chunk sits
 *     next to its neighbour on one shard: a run), phase 3's merges, and every phase
 *     transition (bal_defrag_next, stored with cat_coll_set_defrag_phase) — only this
 *     thread writes the phase.
 * A step whose actions hit retriable errors stays in its phase (reissued at the next
 * step); a non-retriable one restarts the phase, phase 2 from phase 1 — a phase-2
 * migration's non-retriable failure reaches the secondary thread through
 * cfg_secondary_defrag_restart. The two threads may act on one collection at once (a
 * merge while a neighbour migrates): every catalog commit re-checks its chunks, so a lost
 * race is an error of that action, retriable (bal_defrag_retriable), and the phase goes on.
 */
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* ---- configureCollectionBalancing ---------------------------------------------------------- */

/* A number as the error reply shows it ("nan", "inf", "1e+308", "0.5"). */
static void num_text(const bson_iter_t *it, char *buf, size_t cap) {
    double d = 0;
    if (BSON_ITER_HOLDS_DECIMAL128(it)) {
        bson_decimal128_t dec;
        char s[BSON_DECIMAL128_STRING];
        bson_iter_decimal128(it, &dec);
        bson_decimal128_to_string(&dec, s);
        snprintf(buf, cap, "%s", s);
        return;
    }
    bsonx_as_double(it, &d);
    snprintf(buf, cap, "%g", d);
}

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
        /* A whole number of MB: NaN, an infinity, 1e308 or 0.5 would truncate to 0 (back to
         * the default) or wrap; they are refused like -1, not read as something else. */
        if (!bsonx_as_int64_exact(&it, &v)) {
            char shown[64];
            num_text(&it, shown, sizeof shown);
            log_warn("configureCollectionBalancing refused ns=%s chunkSize=%s", log_str(ns),
                     log_str(shown));
            return err_set(err, MS_ERR_INVALID_OPTIONS,
                           "Chunk size '%s' out of range [1MB, 1GB]: not a whole number of MB",
                           shown);
        }
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
    /* Defragmentation starts at the next round, which wakes the secondary thread. */
    if (rc == 0) cfg_balancer_wake(cfg);
    return rc;
}

/* ---- the secondary thread's step ----------------------------------------------------------- */

typedef struct step {
    cfg_t *cfg;
    const cat_coll_t *coll;
    int merged, measured, pending;
    bool restart;
    bson_t errors;  /* array of {action, code, errmsg, retriable} */
    int nerrors;
} step_t;

static void note_error(bson_t *arr, int *n, const char *action, int rc, const char *msg,
                       bool retry) {
    if (*n >= MS_DEFRAG_LOGGED_ERRORS_MAX) return;
    bson_t d;
    char k[16];
    const char *key;
    bson_uint32_to_string((uint32_t)(*n)++, &key, k, sizeof k);
    BSON_APPEND_DOCUMENT_BEGIN(arr, key, &d);
    BSON_APPEND_UTF8(&d, "action", action);
    BSON_APPEND_INT32(&d, "code", rc);
    BSON_APPEND_UTF8(&d, "errmsg", msg);
    BSON_APPEND_BOOL(&d, "retriable", retry);
    bson_append_document_end(arr, &d);
}

static void step_error(step_t *s, const char *action, const ms_error_t *e, int rc) {
    bool retry = bal_defrag_retriable(rc);
    if (retry) s->pending++;
    else s->restart = true;
    log_warn("defragmentation action failed ns=%s action=%s code=%d retriable=%d err=%s",
             log_str(s->coll->ns), action, rc, retry, log_str(e->msg));
    note_error(&s->errors, &s->nerrors, action, rc, e->msg, retry);
}

/* Merges [min, max) of ns (all on shard) the way mergeChunks does: the collection's DDL
 * lock around the catalog transaction only (cat_chunk_merge re-checks that the range is
 * still contiguous chunks on one shard), then the owner told to refresh. */
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
static int load(cfg_t *cfg, const char *ns, const bal_shard_t *shards, int nshards,
                cat_bal_data_t *d, bal_coll_t *bc, ms_error_t *e) {
    int rc = cat_bal_load(cfg->cat, ns, d, e);
    if (rc) return rc;
    for (int i = 0; i < d->nchunks; i++)
        for (int k = 0; k < nshards; k++)
            if (strcmp(d->owners[i], shards[k].name) == 0) d->chunks[i].owner = k;
    *bc = (bal_coll_t){.ns = ns, .chunks = d->chunks, .nchunks = d->nchunks,
                       .zones = d->zones, .nzones = d->nzones};
    return 0;
}

static int step_load(step_t *s, const bal_shard_t *shards, int nshards, cat_bal_data_t *d,
                     bal_coll_t *bc) {
    ms_error_t e = {0};
    int rc = load(s->cfg, s->coll->ns, shards, nshards, d, bc, &e);
    if (rc) step_error(s, "load", &e, rc);
    return rc;
}

/* Merges every run of contiguous chunks on one shard and zone. When every piece has an
 * estimate the merged chunk gets their sum (phase 2 needs it at once: a moved chunk and
 * its neighbour); otherwise it has none and phase 1 measures it. */
static void merge_runs(step_t *s, const bal_shard_t *shards, int nshards) {
    cat_bal_data_t d;
    bal_coll_t bc;
    if (step_load(s, shards, nshards, &d, &bc) != 0) return;
    bal_run_t runs[d.nchunks > 0 ? d.nchunks : 1];
    int n = bal_merge_runs(&bc, NULL, runs, d.nchunks);
    for (int r = 0; r < n; r++) {
        ms_error_t e = {0};
        const bal_chunk_t *a = &d.chunks[runs[r].first], *b = &d.chunks[runs[r].last];
        int64_t sum = 0;
        for (int i = runs[r].first; i <= runs[r].last && sum >= 0; i++)
            sum = d.chunks[i].est_bytes < 0 ? -1 : sum + d.chunks[i].est_bytes;
        int rc = merge_range(s->cfg, s->coll->ns, a->min, b->max, d.owners[runs[r].first], &e);
        if (rc) {
            step_error(s, "merge", &e, rc);
            continue;
        }
        s->merged++;   /* committed: counted even when its estimate is not stored */
        if (sum >= 0 && (rc = cat_chunk_set_est(s->cfg->cat, s->coll->ns, a->min_enc, a->min_len,
                                                b->max_enc, b->max_len, sum, &e)) != 0)
            step_error(s, "estimate", &e, rc);
    }
    cat_bal_free(&d);
}

/* dataSize {keyPattern, min, max, estimate: true} of every chunk without an estimate. A
 * chunk merged or moved meanwhile: its estimate lands nowhere (cat_chunk_set_est on a
 * range that is no chunk any more is a no-op) and the next step measures what is there. */
static void measure(step_t *s, const bal_shard_t *shards, int nshards) {
    cat_bal_data_t d;
    bal_coll_t bc;
    char db[CAT_DB_NAME_BYTES_MAX];
    if (cfg_ns_split(s->coll->ns, db, sizeof db, NULL, NULL) != 0) return;
    if (step_load(s, shards, nshards, &d, &bc) != 0) return;
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

/* Phase 2's part here: merge what the round's moves left next to their neighbour, then
 * count the small chunks still to move (the round's work: pending until none is left). */
static void phase2_merges(step_t *s, const bal_shard_t *shards, int nshards, int64_t small) {
    cat_bal_data_t d;
    bal_coll_t bc;
    merge_runs(s, shards, nshards);
    if (step_load(s, shards, nshards, &d, &bc) != 0) return;
    s->pending += bal_defrag_small_left(&bc, shards, nshards, small);
    cat_bal_free(&d);
}

bool cfg_defrag_secondary_step(cfg_t *cfg, const cat_coll_t *coll, const bal_shard_t *shards,
                               int nshards, int64_t chunk_size, bool restart) {
    step_t s = {.cfg = cfg, .coll = coll, .restart = restart};
    bal_defrag_phase_t ph = bal_defrag_phase_parse(coll->defrag_phase), next;
    int64_t small = chunk_size / 4;  /* MongoDB: small = below 25 % of the chunk size */
    long long t0 = time_mono_ms();
    ms_error_t e = {0};
    bson_init(&s.errors);
    /* A restart reported by the round (a phase-2 migration failed for good, its error is
     * in that round's migrations) is acted on before any work of the phase; reported
     * while this thread had already left phase 2, it no longer applies. */
    restart = restart && ph == BAL_DEFRAG_MOVE_MERGE;
    s.restart = restart;
    if (!restart) {
        switch (ph) {
        case BAL_DEFRAG_MERGE_MEASURE:
            merge_runs(&s, shards, nshards);
            measure(&s, shards, nshards);
            break;
        case BAL_DEFRAG_MOVE_MERGE:
            phase2_merges(&s, shards, nshards, small);
            break;
        case BAL_DEFRAG_MERGE:
            merge_runs(&s, shards, nshards);
            break;
        default:
            break;
        }
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
    bool acted = s.merged + s.measured > 0 || next != ph;
    /* Phase 2's migrations are the round's: it is woken when this thread has made room
     * for more (a merge) or phase 2 begins. */
    if (next == BAL_DEFRAG_MOVE_MERGE && acted) cfg_balancer_wake(cfg);
    /* Logged when something happened: a phase-2 step that only waits for the round's
     * migrations must not fill the actionlog. */
    if (acted || s.nerrors > 0) {
        bson_t doc = BSON_INITIALIZER;
        BSON_APPEND_UTF8(&doc, "ns", coll->ns);
        BSON_APPEND_UTF8(&doc, "phase", bal_defrag_phase_name(ph));
        BSON_APPEND_UTF8(&doc, "next", bal_defrag_phase_name(next));
        BSON_APPEND_INT32(&doc, "merged", s.merged);
        BSON_APPEND_INT32(&doc, "measured", s.measured);
        BSON_APPEND_INT32(&doc, "pending", s.pending);
        if (restart) BSON_APPEND_BOOL(&doc, "restartedAfterMigrationError", true);
        BSON_APPEND_ARRAY(&doc, "errors", &s.errors);
        BSON_APPEND_INT64(&doc, "executionTimeMillis", time_mono_ms() - t0);
        memset(&e, 0, sizeof e);
        if (cat_actionlog(cfg->cat, "balancer.defragmentation", coll->ns, &doc, &e) != 0)
            log_warn("balancer.defragmentation not logged err=%s", log_str(e.msg));
        bson_destroy(&doc);
    }
    bson_destroy(&s.errors);
    /* Another step soon (after the throttle) when this one did something or has retriable
     * work; a phase-2 step with nothing to merge waits for a wake (a move's end, a round). */
    return next != BAL_DEFRAG_FINISHED && (acted || s.nerrors > 0);
}

/* ---- the round's part: phase 2's migrations ------------------------------------------------ */

int cfg_defrag_round_moves(cfg_t *cfg, const cat_coll_t *coll, bal_shard_t *shards, int nshards,
                           int64_t chunk_size, cfg_defrag_move_t *out, int cap, bson_t *arr,
                           int *n) {
    bal_defrag_phase_t ph = bal_defrag_phase_parse(coll->defrag_phase);
    int nmoves = 0, waiting = 0;
    cfg_secondary_wake(cfg);  /* MongoDB: the round starts defragmentation, wakes the thread */
    if (ph == BAL_DEFRAG_MOVE_MERGE) {
        cat_bal_data_t d;
        bal_coll_t bc;
        ms_error_t e = {0};
        if (load(cfg, coll->ns, shards, nshards, &d, &bc, &e) != 0) {
            log_warn("defragmentation load failed ns=%s err=%s", log_str(coll->ns), log_str(e.msg));
        } else {
            bal_defrag_act_t acts[d.nchunks > 0 ? d.nchunks : 1];
            int na = bal_defrag_moves(&bc, shards, nshards, chunk_size / 4, acts, d.nchunks,
                                      &waiting);
            for (int a = 0; a < na; a++) {
                const bal_chunk_t *ch = &d.chunks[acts[a].chunk];
                /* Merges on the chunk's own shard are the secondary thread's. The round's
                 * cap is never reached in practice: each move takes two busy shards and
                 * the cap is half the shards. */
                if (!acts[a].move) continue;
                if (nmoves >= cap) {
                    waiting++;
                    continue;
                }
                out[nmoves++] = (cfg_defrag_move_t){.from = acts[a].from, .to = acts[a].to,
                                                    .min = bson_copy(ch->min),
                                                    .max = bson_copy(ch->max)};
            }
            cat_bal_free(&d);
        }
    }
    bson_t doc;
    char k[16];
    const char *key;
    bson_uint32_to_string((uint32_t)(*n)++, &key, k, sizeof k);
    BSON_APPEND_DOCUMENT_BEGIN(arr, key, &doc);
    BSON_APPEND_UTF8(&doc, "ns", coll->ns);
    BSON_APPEND_UTF8(&doc, "phase", bal_defrag_phase_name(ph));
    BSON_APPEND_INT32(&doc, "migrations", nmoves);
    BSON_APPEND_INT32(&doc, "waiting", waiting);
    bson_append_document_end(arr, &doc);
    return nmoves;
}

void cfg_defrag_move_done(cfg_t *cfg, const char *ns, int rc, const ms_error_t *err) {
    bool retry = rc == 0 || bal_defrag_retriable(rc);
    if (rc)
        log_warn("defragmentation move failed ns=%s code=%d retriable=%d err=%s", log_str(ns), rc,
                 retry, log_str(err->msg));
    /* Non-retriable: phase 2 restarts from phase 1, decided by the thread that owns the
     * phase; retriable: the chunk is still small, a later round moves it again. */
    if (!retry) cfg_secondary_defrag_restart(cfg, ns);
    cfg_secondary_wake(cfg);  /* a finished move leaves a merge to do */
}
