/*
 * bal_merge.c — the balancer's secondary thread of the config server (bin/configsvr),
 * and the command mergeAllChunksOnShard {mergeAllChunksOnShard: ns, shard,
 * maxNumberOfChunksToMerge} its auto-merger issues (MongoDB 7.0's AutoMergerPolicy,
 * notes §5.2).
 *
 * MongoDB's balancer has a main thread that issues migrations and a secondary
 * ("streaming") thread that issues every other action asynchronously (notes §4.2). Here
 * the main thread is balancer.c's round; this thread does the rest: defragmentation's
 * non-migration actions (defrag.c cfg_defrag_secondary_step: phase 1's merges and
 * dataSize measures, the merges phase 2 owes after the round's moves, phase 3's merges,
 * every phase transition) and the auto-merger. It is woken by the round (every round
 * that sees a collection with defragmentCollection set), by the end of each of phase 2's
 * migrations, and by stop. Per wake it takes one step of every defragmenting collection;
 * while a step did something (or hit retriable errors) the next comes
 * --defrag-throttle-ms later (MongoDB's chunkDefragmentationThrottlingMS) unless woken
 * sooner; a step with nothing to do (phase 2 waiting for migrations) waits for a wake.
 * It acts only when the balancer may act (mode full, not stopped, in its window) and
 * skips collections with noBalance or migrations not allowed, as the round does. Each
 * step that did something is logged as `balancer.defragmentation` in config.actionlog.
 * No lock is held across a network call; a long auto-merger pass (its throttle) delays
 * the defragmentation steps.
 *
 * Mergeable = contiguous, on the one shard, in one zone, not jumbo, and on that shard
 * since longer than the horizon (--auto-merger-horizon-ms: minishard's stand-in for
 * minSnapshotHistoryWindowInSeconds). Each maximal run becomes one chunk through
 * cat_chunk_merge (versions as mergeChunks: the next minor of the collection version;
 * one `merge` changelog entry per run).
 *
 * The auto-merger's pass comes every --auto-merger-interval-ms (MongoDB's
 * autoMergerIntervalSecs) and, when the balancer may act (mode full, not stopped, in its
 * window) and settings {_id: "automerge"} is not {enabled: false}, runs
 * mergeAllChunksOnShard for every shard of every collection with enableAutoMerge not false and no defragmentation
 * running (noBalance does not stop it: merging moves no data); two merges of one
 * collection are --auto-merger-throttle-ms apart (autoMergerThrottlingMS). A pass that
 * merged is logged as `autoMerger.round` in config.actionlog.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* A collection whose phase-2 migration failed for good (the round's report). */
typedef struct defrag_restart {
    char ns[MS_NS_BYTES_MAX + 1];
    struct defrag_restart *next;
} defrag_restart_t;

struct cfg_merger {
    cfg_t *cfg;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, wake, joined;
    int interval_ms, throttle_ms, horizon_ms, defrag_throttle_ms;
    defrag_restart_t *restarts;  /* under mu */
};

int cfg_merge_all_on_shard(cfg_t *cfg, const char *ns, const char *shard, int max_chunks,
                           int64_t horizon_ms, int *runs_out, int *chunks_out, ms_error_t *err) {
    cat_coll_t coll;
    cat_bal_data_t d;
    char host[MS_URL_BYTES_MAX];
    int rc;
    *runs_out = *chunks_out = 0;
    if ((rc = cat_coll_get(cfg->cat, ns, &coll, err)) != 0) return rc;  /* NamespaceNotSharded */
    cat_coll_free(&coll);
    if ((rc = cat_shard_host(cfg->cat, shard, host, sizeof host, NULL, err)) != 0) return rc;
    /* Only this shard's chunks, with their onCurrentShardSince, in one indexed read. */
    int64_t *since = NULL;
    if ((rc = cat_bal_load_shard(cfg->cat, ns, shard, &d, &since, err)) != 0) return rc;
    int n = d.nchunks;
    bool *ok = calloc((size_t)(n > 0 ? n : 1), sizeof *ok);
    bal_run_t *runs = calloc((size_t)(n > 0 ? n : 1), sizeof *runs);
    if (!ok || !runs) abort();
    int64_t now_ms = time_now_ms();
    for (int i = 0; i < n; i++) {
        d.chunks[i].owner = 0;
        ok[i] = since[i] * 1000 + horizon_ms <= now_ms;
    }
    bal_coll_t bc = {.ns = ns, .chunks = d.chunks, .nchunks = n, .zones = d.zones,
                     .nzones = d.nzones};
    int nr = rc == 0 ? bal_merge_runs(&bc, ok, runs, n) : 0;
    for (int r = 0; r < nr && rc == 0; r++) {
        int first = runs[r].first, last = runs[r].last;
        int left = max_chunks - *chunks_out;
        if (left < 2) break;
        if (last - first + 1 > left) last = first + left - 1;  /* a prefix of the run */
        cfg_ddl_guard_t g = {0};
        rc = cfg_ddl_lock_coll(cfg, ns, "mergeAllChunksOnShard", &g, err);
        if (rc == 0) rc = cat_chunk_merge(cfg->cat, ns, d.chunks[first].min, d.chunks[last].max, NULL, err);
        cfg_ddl_unlock(&g);
        if (rc == 0) {
            (*runs_out)++;
            *chunks_out += last - first + 1;
        }
    }
    if (*runs_out > 0) cfg_flush_shard(cfg, shard, ns);
    log_info("mergeAllChunksOnShard ns=%s shard=%s runs=%d chunks=%d code=%d", log_str(ns),
             log_str(shard), *runs_out, *chunks_out, rc);
    free(since);
    free(ok);
    free(runs);
    cat_bal_free(&d);
    return rc;
}

int cfg_cmd_merge_all_chunks_on_shard(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = cfg_arg_str(ctx);
    bson_iter_t it;
    const char *shard = NULL;
    int64_t max = MS_MERGE_ALL_CHUNKS_DEFAULT;
    int runs = 0, chunks = 0;
    if (cmd_field(ctx, "shard", &it) && BSON_ITER_HOLDS_UTF8(&it)) shard = bson_iter_utf8(&it, NULL);
    if (!shard || !shard[0]) return err_set(err, MS_ERR_BAD_VALUE, "mergeAllChunksOnShard needs a shard");
    if (cmd_field(ctx, "maxNumberOfChunksToMerge", &it)) {
        if (!bsonx_as_int64_exact(&it, &max) || max < 2 || max > MS_MERGE_ALL_CHUNKS_MAX)
            return err_set(err, MS_ERR_BAD_VALUE, "maxNumberOfChunksToMerge must be 2..%d",
                           MS_MERGE_ALL_CHUNKS_MAX);
    }
    /* The command uses the auto-merger's horizon (set before the thread starts). */
    int64_t horizon = cfg->merger ? cfg->merger->horizon_ms : MS_AUTOMERGER_HORIZON_MS_DEFAULT;
    int rc = cfg_merge_all_on_shard(cfg, ns, shard, (int)max, horizon, &runs, &chunks, err);
    if (rc == 0) {
        BSON_APPEND_INT32(reply, "numMerges", runs);
        BSON_APPEND_INT32(reply, "numMergedChunks", chunks);
    }
    return rc;
}

/* ---- the thread -------------------------------------------------------------------------- */

typedef struct names {
    char (*v)[MS_NS_BYTES_MAX + 1];
    int n, cap;
} names_t;

static int name_scan(void *arg, const bson_t *doc) {
    names_t *l = arg;
    bson_iter_t it;
    if (l->n >= l->cap) return 0;
    if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(l->v[l->n++], MS_NS_BYTES_MAX + 1, "%s", bson_iter_utf8(&it, NULL));
    return 0;
}

static bool automerge_enabled(cfg_t *cfg) {
    bson_t doc;
    bool found = false, on = true;
    bson_iter_t it;
    if (cat_settings_get(cfg->cat, "automerge", &doc, &found, NULL) == 0 && found) {
        if (bson_iter_init_find(&it, &doc, "enabled") && BSON_ITER_HOLDS_BOOL(&it))
            on = bson_iter_bool(&it);
        bson_destroy(&doc);
    }
    return on;
}

/* Sleeps ms unless stopped. Called with m->mu held. */
static void nap(cfg_merger_t *m, long long ms) {
    long long until = time_mono_ms() + ms;
    while (!m->stop && time_mono_ms() < until)
        if (time_cond_wait_ms(&m->cv, &m->mu, until - time_mono_ms()) != 0) break;
}

static bool stopping(cfg_merger_t *m) {
    pthread_mutex_lock(&m->mu);
    bool s = m->stop;
    pthread_mutex_unlock(&m->mu);
    return s;
}

/* One pass over every collection; returns the merges done. */
static int pass(cfg_merger_t *m, bson_t *details) {
    cfg_t *cfg = m->cfg;
    names_t cl = {.cap = MS_BALANCER_COLLS_MAX};
    ms_error_t e = {0};
    int total = 0, nc = 0;
    bson_t arr;
    cl.v = calloc((size_t)cl.cap, sizeof *cl.v);
    if (!cl.v) abort();
    BSON_APPEND_ARRAY_BEGIN(details, "collections", &arr);
    if (cat_config_scan(cfg->cat, "collections", name_scan, &cl, &e) != 0)
        log_warn("auto-merger: collections not read err=%s", log_str(e.msg));
    for (int c = 0; c < cl.n && !stopping(m); c++) {
        cat_coll_t coll;
        cat_bal_data_t d;
        long long last_merge = 0;
        int merged_here = 0;
        if (cat_coll_get(cfg->cat, cl.v[c], &coll, &e) != 0) continue;
        bool skip = !coll.enable_auto_merge || coll.defragment;
        cat_coll_free(&coll);
        if (skip || cat_bal_load_summary(cfg->cat, cl.v[c], &d, &e) != 0) continue;
        /* The shards owning chunks, in name order (the catalog's counts: no chunk read). */
        char (*owners)[CAT_SHARD_NAME_BYTES_MAX] = calloc((size_t)(d.ncounts > 0 ? d.ncounts : 1),
                                                          sizeof *owners);
        int no = 0;
        if (!owners) abort();
        for (int k = 0; k < d.ncounts; k++) snprintf(owners[no++], CAT_SHARD_NAME_BYTES_MAX, "%s", d.counts[k].shard);
        cat_bal_free(&d);
        for (int s = 0; s < no && !stopping(m); s++) {
            int runs = 0, chunks = 0;
            if (last_merge > 0 && m->throttle_ms > 0) {
                long long wait = last_merge + m->throttle_ms - time_mono_ms();
                pthread_mutex_lock(&m->mu);
                if (wait > 0) nap(m, wait);
                pthread_mutex_unlock(&m->mu);
            }
            memset(&e, 0, sizeof e);
            if (cfg_merge_all_on_shard(cfg, cl.v[c], owners[s], MS_MERGE_ALL_CHUNKS_DEFAULT,
                                       m->horizon_ms, &runs, &chunks, &e) != 0)
                log_warn("auto-merger merge failed ns=%s shard=%s err=%s", log_str(cl.v[c]),
                         log_str(owners[s]), log_str(e.msg));
            if (runs > 0) {
                bson_t x;
                char k[16];
                const char *key;
                last_merge = time_mono_ms();
                merged_here += runs;
                bson_uint32_to_string((uint32_t)nc++, &key, k, sizeof k);
                BSON_APPEND_DOCUMENT_BEGIN(&arr, key, &x);
                BSON_APPEND_UTF8(&x, "ns", cl.v[c]);
                BSON_APPEND_UTF8(&x, "shard", owners[s]);
                BSON_APPEND_INT32(&x, "numMerges", runs);
                BSON_APPEND_INT32(&x, "numMergedChunks", chunks);
                bson_append_document_end(&arr, &x);
            }
        }
        total += merged_here;
        free(owners);
    }
    bson_append_array_end(details, &arr);
    free(cl.v);
    return total;
}

/* Whether the round reported a phase-2 failure of ns since the last step (taken). */
static bool take_restart(cfg_merger_t *m, const char *ns) {
    bool found = false;
    pthread_mutex_lock(&m->mu);
    for (defrag_restart_t **pp = &m->restarts; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->ns, ns) == 0) {
            defrag_restart_t *dead = *pp;
            *pp = dead->next;
            free(dead);
            found = true;
            break;
        }
    pthread_mutex_unlock(&m->mu);
    return found;
}

/* One defragmentation step of every collection with defragmentCollection set; true when
 * one of them wants another step after the throttle. */
static bool defrag_pass(cfg_merger_t *m) {
    cfg_t *cfg = m->cfg;
    names_t cl = {.cap = MS_BALANCER_COLLS_MAX};
    bal_settings_t st;
    bal_snap_t sn;
    ms_error_t e = {0};
    bool again = false;
    bal_settings_read(cfg, &st);  /* the test of cfg_balancer_may_act, and the chunk size */
    if (!st.enabled) return false;  /* balancerStart wakes the round, which wakes us */
    cl.v = calloc((size_t)cl.cap, sizeof *cl.v);
    if (!cl.v) abort();
    if (cat_config_scan(cfg->cat, "collections", name_scan, &cl, &e) != 0 ||
        bal_snap_shards(cfg, &sn, &e) != 0) {
        log_warn("secondary thread: catalog not read err=%s", log_str(e.msg));
        bal_snap_free(&sn);
        free(cl.v);
        return true;  /* retried after the throttle */
    }
    for (int c = 0; c < cl.n && !stopping(m); c++) {
        cat_coll_t coll;
        if (cat_coll_get(cfg->cat, cl.v[c], &coll, &e) != 0) continue;  /* dropped meanwhile */
        /* As the round: noBalance or migrations not allowed → its defragmentation waits. */
        if (coll.defragment && !coll.no_balance && coll.allow_migrations) {
            int64_t csize = coll.max_chunk_size_bytes > 0 ? coll.max_chunk_size_bytes : st.chunk_size;
            bool restart = take_restart(m, coll.ns);
            if (cfg_defrag_secondary_step(cfg, &coll, sn.shards, sn.nshards, csize, restart))
                again = true;
        }
        cat_coll_free(&coll);
    }
    bal_snap_free(&sn);
    free(cl.v);
    return again;
}

static void auto_merger_pass(cfg_merger_t *m) {
    char why[64] = "";
    if (!cfg_balancer_may_act(m->cfg, why, sizeof why)) {
        log_info("auto-merger skipped reason=%s", log_str(why));
    } else if (!automerge_enabled(m->cfg)) {
        log_info("auto-merger skipped reason=%s", "automerge disabled");
    } else {
        bson_t details = BSON_INITIALIZER;
        ms_error_t e = {0};
        long long t0 = time_mono_ms();
        int n = pass(m, &details);
        BSON_APPEND_INT32(&details, "numMerges", n);
        BSON_APPEND_INT64(&details, "executionTimeMillis", time_mono_ms() - t0);
        /* Only passes that merged: an idle auto-merger must not fill the actionlog. */
        if (n > 0 && cat_actionlog(m->cfg->cat, "autoMerger.round", "", &details, &e) != 0)
            log_warn("autoMerger.round not logged err=%s", log_str(e.msg));
        bson_destroy(&details);
    }
}

static void *merger_main(void *arg) {
    cfg_merger_t *m = arg;
    long long next_merge = time_mono_ms() + m->interval_ms, next_defrag = 0;
    bool defrag_again = false;  /* the last defragmentation pass wants another step */
    pthread_mutex_lock(&m->mu);
    for (;;) {
        long long until = next_merge;
        if (defrag_again && next_defrag < until) until = next_defrag;
        while (!m->stop && !m->wake && time_mono_ms() < until)
            if (time_cond_wait_ms(&m->cv, &m->mu, until - time_mono_ms()) != 0) break;
        if (m->stop) break;
        bool woken = m->wake;
        m->wake = false;
        pthread_mutex_unlock(&m->mu);
        if (woken || (defrag_again && time_mono_ms() >= next_defrag)) {
            defrag_again = defrag_pass(m);
            next_defrag = time_mono_ms() + m->defrag_throttle_ms;
        }
        if (time_mono_ms() >= next_merge && !stopping(m)) {
            auto_merger_pass(m);
            next_merge = time_mono_ms() + m->interval_ms;
        }
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

int cfg_merger_start(cfg_t *cfg, int interval_ms, int throttle_ms, int horizon_ms,
                     int defrag_throttle_ms, ms_error_t *err) {
    cfg_merger_t *m = calloc(1, sizeof *m);
    if (!m) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "balancer secondary thread: out of memory");
    m->cfg = cfg;
    m->interval_ms = interval_ms;
    m->throttle_ms = throttle_ms;
    m->horizon_ms = horizon_ms;
    m->defrag_throttle_ms = defrag_throttle_ms;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    if (pthread_create(&m->th, NULL, merger_main, m) != 0) {
        pthread_cond_destroy(&m->cv);
        pthread_mutex_destroy(&m->mu);
        free(m);
        return err_set(err, MS_ERR_INTERNAL, "balancer secondary thread: cannot start it");
    }
    cfg->merger = m;
    log_info("balancer secondary thread started defrag_throttle_ms=%d auto_merger_interval_ms=%d "
             "auto_merger_throttle_ms=%d auto_merger_horizon_ms=%d", defrag_throttle_ms,
             interval_ms, throttle_ms, horizon_ms);
    return 0;
}

void cfg_merger_shutdown(cfg_t *cfg) {
    cfg_merger_t *m = cfg ? cfg->merger : NULL;
    if (!m || m->joined) return;
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->th, NULL);
    m->joined = true;
}

void cfg_merger_free(cfg_t *cfg) {
    cfg_merger_t *m = cfg ? cfg->merger : NULL;
    if (!m) return;
    cfg_merger_shutdown(cfg);
    while (m->restarts) {
        defrag_restart_t *r = m->restarts;
        m->restarts = r->next;
        free(r);
    }
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
    cfg->merger = NULL;
}

void cfg_secondary_wake(cfg_t *cfg) {
    cfg_merger_t *m = cfg ? cfg->merger : NULL;
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->wake = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

void cfg_secondary_defrag_restart(cfg_t *cfg, const char *ns) {
    cfg_merger_t *m = cfg ? cfg->merger : NULL;
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    defrag_restart_t *r = m->restarts;
    while (r && strcmp(r->ns, ns) != 0) r = r->next;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) abort();
        snprintf(r->ns, sizeof r->ns, "%s", ns);
        r->next = m->restarts;
        m->restarts = r;
    }
    pthread_mutex_unlock(&m->mu);
}
