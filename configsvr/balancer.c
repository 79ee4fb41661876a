/*
 * balancer.c — the balancer thread of the config server (bin/configsvr): MongoDB's
 * Balancer main thread (notes §4.2). It holds the balancer lock (config.locks {_id:
 * "balancer"}) for the life of the process and runs rounds: read config.settings
 * (balancer mode / stopped / activeWindow / policy / _waitForDelete / _secondaryThrottle,
 * chunksize, autosplit); split chunks larger than the chunk size at the points their
 * owner's autoSplitVector gives; build the policy's snapshot per collection
 * (bal_snapshot.c, shared with balancerExplain / balancerCollectionStatus: catalog chunk
 * counts, shard data sizes when the dataSize policy or a maxSize needs them) and
 * ask bal_choose (bal_policy.c) for this round's moves, one per shard at most; run them
 * in parallel, one thread each, through cfg_move_range (the body of _configsvrMoveRange);
 * log the round as `balancer.round` in config.actionlog. A collection with
 * defragmentCollection set is not balanced: the round only adds its phase-2 migrations
 * (defrag.c cfg_defrag_round_moves, with the same busy flags) to the batch and wakes the
 * balancer's secondary thread (bal_merge.c), which does every other defragmentation
 * action, the auto-merger, and the phase transitions. Rounds come every
 * --balancer-idle-ms when nothing moved (or balancing is off); after a round that moved
 * chunks the next one starts at once and its batch waits until --balancer-throttle-ms
 * has passed since the previous batch ended (MongoDB's balancerMigrationsThrottlingMs).
 * balancerStart / balancerStop write config.settings
 * and wake the thread; balancerStop waits for the current round to end.
 *
 * No lock is held across a network call: a split's commit takes the collection's DDL
 * lock only around the catalog transaction (the chunk is re-checked there), and
 * migrations take none (cfg_move_range's commit re-checks everything).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "common/opctx.h"
#include "configsvr/configsvr.h"

/* Whether the last round of a collection moved chunks (the classic rule's "keep going
 * while the difference is >= 2"). */
typedef struct bal_moved {
    char ns[MS_NS_BYTES_MAX + 1];
    struct bal_moved *next;
} bal_moved_t;

/* A collection's auto-split walk: the encoded min of the last chunk a round asked about
 * (the next round goes on after it; at the end it starts again from the first chunk). */
/* What an owner said when it last checked its chunks of a collection that fits one window:
 * its growth token (nothing of the collection grew there while it is the same) and a hash
 * of the ranges it checked (a merge or a migration changes them). Both the same → nothing
 * can have passed the chunk size: the owner answers without checking. */
typedef struct bal_split_seen {
    char shard[CAT_SHARD_NAME_BYTES_MAX];
    char token[64];
    uint64_t ranges_hash;
} bal_split_seen_t;

typedef struct bal_split_pos {
    char ns[MS_NS_BYTES_MAX + 1];
    uint8_t *after;          /* NULL: from the first chunk */
    size_t len;
    bal_split_seen_t *seen;  /* per owner, while the collection fits one window */
    int nseen;
    struct bal_split_pos *next;
} bal_split_pos_t;

struct cfg_balancer {
    cfg_t *cfg;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* wakes the thread (stop, wake) and waiters of a round's end */
    bool stop, wake, in_round;
    int64_t rounds;
    int idle_ms, throttle_ms;
    long long last_batch_end; /* time_mono_ms() when the last batch of migrations ended */
    char last_off[64];       /* why balancing was off last round ("" = it was on) */
    bal_moved_t *moved;      /* collections whose last round moved chunks (thread only) */
    bal_split_pos_t *split_pos; /* where each collection's auto-split walk is (thread only) */
};

/* ---- the cluster's collections ----------------------------------------------------------- */

typedef struct ns_list {
    char (*v)[MS_NS_BYTES_MAX + 1];
    int n;
} ns_list_t;

static int coll_scan(void *arg, const bson_t *doc) {
    ns_list_t *l = arg;
    bson_iter_t it;
    if (l->n >= MS_BALANCER_COLLS_MAX) return 0;
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) return 0;
    snprintf(l->v[l->n++], MS_NS_BYTES_MAX + 1, "%s", bson_iter_utf8(&it, NULL));
    return 0;
}

/* ---- auto-split ---------------------------------------------------------------------------- */

static bal_split_pos_t *split_pos(cfg_balancer_t *b, const char *ns) {
    bal_split_pos_t *p;
    for (p = b->split_pos; p; p = p->next)
        if (strcmp(p->ns, ns) == 0) return p;
    p = calloc(1, sizeof *p);
    if (!p) abort();
    snprintf(p->ns, sizeof p->ns, "%s", ns);
    p->next = b->split_pos;
    b->split_pos = p;
    return p;
}

/* The walk goes on after the window's last chunk, or starts again when it reached the end. */
static void split_pos_advance(bal_split_pos_t *p, const cat_bal_data_t *d, int budget) {
    free(p->after);
    p->after = NULL;
    p->len = 0;
    if (d->nchunks < budget || d->nchunks == 0) return;
    const bal_chunk_t *last = &d->chunks[d->nchunks - 1];
    p->after = malloc(last->min_len ? last->min_len : 1);
    if (!p->after) abort();
    memcpy(p->after, last->min_enc, last->min_len);
    p->len = last->min_len;
}

/* Commits one auto-split of [min, max) at pts and records it in splits. */
static void autosplit_commit(cfg_t *cfg, const cat_coll_t *coll, const char *owner, const bson_t *min,
                             const bson_t *max, const bson_t *const *pts, int np, bson_t *splits,
                             int *nsplits) {
    ms_error_t e = {0};
    if (bal_split_commit(cfg, coll->ns, min, max, owner, pts, np, "balancer auto-split", &e) != 0) {
        log_warn("balancer autosplit commit failed ns=%s err=%s", log_str(coll->ns), log_str(e.msg));
        return;
    }
    bal_split_entry(splits, nsplits, coll->ns, min, max, owner, pts, np, NULL);
    log_info("balancer autosplit ns=%s shard=%s points=%d", log_str(coll->ns), log_str(owner), np);
}

/* The sub-document name of d as a view into d (false when absent or not a document). */
static bool doc_view(const bson_t *d, const char *name, bson_t *out) {
    bson_iter_t it;
    uint32_t len;
    const uint8_t *data;
    if (!bson_iter_init_find(&it, d, name) || !BSON_ITER_HOLDS_DOCUMENT(&it)) return false;
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

/* One result {min, max, splitKeys} of the batch reply, committed. */
static void autosplit_result(cfg_t *cfg, const cat_coll_t *coll, const char *owner, const bson_t *res,
                             bson_t *splits, int *nsplits) {
    bson_t min, max, keys, views[64];
    const bson_t *pts[64];
    bson_iter_t it, a;
    uint32_t len;
    const uint8_t *data;
    int np = 0;
    if (!doc_view(res, "min", &min) || !doc_view(res, "max", &max)) return;
    if (!bson_iter_init_find(&it, res, "splitKeys") || !BSON_ITER_HOLDS_ARRAY(&it)) return;
    bson_iter_array(&it, &len, &data);
    if (!bson_init_static(&keys, data, len) || !bson_iter_init(&a, &keys)) return;
    while (bson_iter_next(&a) && np < 64) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&a)) continue;
        bson_iter_document(&a, &len, &data);
        if (bson_init_static(&views[np], data, len)) {
            pts[np] = &views[np];
            np++;
        }
    }
    if (np > 0) autosplit_commit(cfg, coll, owner, &min, &max, pts, np, splits, nsplits);
}

/* FNV-1a of the encoded bounds of chunks idx[0..n) of d. */
static uint64_t ranges_hash(const cat_bal_data_t *d, const int *idx, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < n; k++) {
        const bal_chunk_t *ch = &d->chunks[idx[k]];
        const uint8_t *parts[2] = {ch->min_enc, ch->max_enc};
        size_t lens[2] = {ch->min_len, ch->max_len};
        for (int p = 0; p < 2; p++) {
            for (size_t i = 0; i < lens[p]; i++) h = (h ^ parts[p][i]) * 1099511628211ull;
            h = (h ^ 0xff) * 1099511628211ull;  /* a separator: bounds do not run together */
        }
    }
    return h;
}

/* The owner's entry in p->seen (added empty when absent). */
static bal_split_seen_t *seen_of(bal_split_pos_t *p, const char *shard) {
    for (int i = 0; i < p->nseen; i++)
        if (strcmp(p->seen[i].shard, shard) == 0) return &p->seen[i];
    p->seen = realloc(p->seen, sizeof *p->seen * (size_t)(p->nseen + 1));
    if (!p->seen) abort();
    bal_split_seen_t *e = &p->seen[p->nseen++];
    memset(e, 0, sizeof *e);
    snprintf(e->shard, sizeof e->shard, "%s", shard);
    return e;
}

/* Asks owner once for the split points of the chunks of d it owns (indexes idx[0..n))
 * with _shardsvrAutoSplitVectorBatch and commits each split it returns. seen (NULL when
 * the collection does not fit one window): what the owner said last time, updated. */
static void autosplit_ask(cfg_t *cfg, const cat_coll_t *coll, const char *db, const char *cname,
                          int64_t chunk_size, const cat_bal_data_t *d, const int *idx, int n,
                          bal_split_seen_t *seen, bson_t *splits, int *nsplits) {
    const char *owner = d->owners[idx[0]];
    uint64_t h = ranges_hash(d, idx, n);
    bson_t cmd = BSON_INITIALIZER, ranges, r, results;
    bson_iter_t it, el;
    ms_error_t e = {0};
    BSON_APPEND_UTF8(&cmd, "_shardsvrAutoSplitVectorBatch", cname);
    BSON_APPEND_DOCUMENT(&cmd, "keyPattern", &coll->key);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "ranges", &ranges);
    for (int k = 0; k < n; k++) {
        char key[16];
        const char *kp;
        bson_t rg;
        bson_uint32_to_string((uint32_t)k, &kp, key, sizeof key);
        BSON_APPEND_DOCUMENT_BEGIN(&ranges, kp, &rg);
        BSON_APPEND_DOCUMENT(&rg, "min", d->chunks[idx[k]].min);
        BSON_APPEND_DOCUMENT(&rg, "max", d->chunks[idx[k]].max);
        bson_append_document_end(&ranges, &rg);
    }
    bson_append_array_end(&cmd, &ranges);
    BSON_APPEND_INT64(&cmd, "maxChunkSizeBytes", chunk_size);
    BSON_APPEND_INT32(&cmd, "limit", CAT_SPLIT_POINTS_MAX);
    if (seen && seen->token[0] && seen->ranges_hash == h) BSON_APPEND_UTF8(&cmd, "ifGrownSince", seen->token);
    /* The shard stops at half the call's timeout and answers what it checked (truncated):
     * a slow shard is asked for the rest next round, never twice at once. */
    BSON_APPEND_INT32(&cmd, "maxTimeMS", CFG_SHARD_CMD_TIMEOUT_MS / 2);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    int rc = cfg_shard_command(cfg, owner, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &r, &e);
    bson_destroy(&cmd);
    if (rc) {
        log_warn("balancer autosplit batch failed ns=%s shard=%s ranges=%d err=%s", log_str(coll->ns),
                 log_str(owner), n, log_str(e.msg));
        return;
    }
    if (seen) {
        /* Remembered only when everything was checked and nothing was to split (a split
         * that failed to commit is asked for again; a truncated answer checked a part). */
        bson_iter_t res;
        bool whole = !(bson_iter_init_find(&it, &r, "truncated") && bson_iter_as_bool(&it)) &&
                     !(bson_iter_init_find(&res, &r, "results") && BSON_ITER_HOLDS_ARRAY(&res) &&
                       bson_iter_recurse(&res, &res) && bson_iter_next(&res));
        seen->token[0] = '\0';
        seen->ranges_hash = h;
        if (whole && bson_iter_init_find(&it, &r, "grownToken") && BSON_ITER_HOLDS_UTF8(&it))
            snprintf(seen->token, sizeof seen->token, "%s", bson_iter_utf8(&it, NULL));
    }
    if (bson_iter_init_find(&it, &r, "truncated") && bson_iter_as_bool(&it))
        log_info("balancer autosplit batch truncated ns=%s shard=%s", log_str(coll->ns), log_str(owner));
    if (bson_iter_init_find(&it, &r, "results") && BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &el))
        while (bson_iter_next(&el)) {
            uint32_t len;
            const uint8_t *data;
            if (!BSON_ITER_HOLDS_DOCUMENT(&el)) continue;
            bson_iter_document(&el, &len, &data);
            if (bson_init_static(&results, data, len))
                autosplit_result(cfg, coll, owner, &results, splits, nsplits);
        }
    bson_destroy(&r);
}

/* Splits chunks of ns larger than chunk_size at their owners' split points: the next
 * window of at most budget non-jumbo chunks of the collection's walk (an indexed read),
 * one _shardsvrAutoSplitVectorBatch per owner. Appends {ns, min, max, shard, points} per
 * split to splits; returns how many chunks were checked (budget). */
static int autosplit_coll(cfg_balancer_t *b, const cat_coll_t *coll, int64_t chunk_size, int budget,
                          bson_t *splits, int *nsplits) {
    cfg_t *cfg = b->cfg;
    cat_bal_data_t d;
    ms_error_t e = {0};
    char db[CAT_DB_NAME_BYTES_MAX];
    const char *cname = NULL;
    if (cfg_ns_split(coll->ns, db, sizeof db, &cname, NULL) != 0) return 0;
    bal_split_pos_t *pos = split_pos(b, coll->ns);
    bool from_start = pos->after == NULL;
    if (cat_bal_chunks_after(cfg->cat, coll->ns, pos->after, pos->len, budget, &d, &e) != 0) {
        log_warn("balancer autosplit load failed ns=%s err=%s", log_str(coll->ns), log_str(e.msg));
        return 0;
    }
    /* The whole collection in this window: the owners' growth tokens apply. */
    bool whole = from_start && d.nchunks < budget;
    if (!whole) pos->nseen = 0;
    split_pos_advance(pos, &d, budget);
    int *idx = malloc(sizeof *idx * (size_t)(d.nchunks > 0 ? d.nchunks : 1));
    bool *done = calloc((size_t)(d.nchunks > 0 ? d.nchunks : 1), sizeof *done);
    if (!idx || !done) abort();
    for (int i = 0; i < d.nchunks; i++) {  /* one request per owner */
        if (done[i]) continue;
        int n = 0;
        for (int k = i; k < d.nchunks; k++)
            if (!done[k] && strcmp(d.owners[k], d.owners[i]) == 0) {
                done[k] = true;
                idx[n++] = k;
            }
        autosplit_ask(cfg, coll, db, cname, chunk_size, &d, idx, n, whole ? seen_of(pos, d.owners[i]) : NULL,
                      splits, nsplits);
    }
    int checked = d.nchunks;
    free(idx);
    free(done);
    cat_bal_free(&d);
    return checked;
}

/* ---- migrations in parallel ---------------------------------------------------------------- */

/* The reason of a defragmentation migration (phase 2) in the round's batch. */
static const char DEFRAG_REASON[] = "defragmentation";

typedef struct mig_job {
    cfg_t *cfg;
    char ns[MS_NS_BYTES_MAX + 1];
    char from[CAT_SHARD_NAME_BYTES_MAX], to[CAT_SHARD_NAME_BYTES_MAX];
    bson_t *min, *max;   /* owned; max NULL for moveRange with only min */
    const char *reason;
    bool wait_delete, throttle;
    int rc;
    ms_error_t err;
    long long ms;
    pthread_t th;
    bool started;
} mig_job_t;

static void *mig_main(void *arg) {
    mig_job_t *j = arg;
    cfg_move_req_t r;
    long long t0 = time_mono_ms();
    memset(&r, 0, sizeof r);
    r.ns = j->ns;
    r.to = j->to;
    r.min = j->min;
    r.max = j->max;
    r.wait_delete = j->wait_delete;
    r.throttle = j->throttle;
    j->rc = cfg_move_range(j->cfg, &r, NULL, &j->err);
    j->ms = time_mono_ms() - t0;
    return NULL;
}

static bool moved_last(cfg_balancer_t *b, const char *ns) {
    for (bal_moved_t *m = b->moved; m; m = m->next)
        if (strcmp(m->ns, ns) == 0) return true;
    return false;
}

static void set_moved(cfg_balancer_t *b, const char *ns, bool moved) {
    bal_moved_t **pp = &b->moved;
    for (; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->ns, ns) == 0) break;
    if (*pp && !moved) {
        bal_moved_t *dead = *pp;
        *pp = dead->next;
        free(dead);
    } else if (!*pp && moved) {
        bal_moved_t *m = calloc(1, sizeof *m);
        if (!m) abort();
        snprintf(m->ns, sizeof m->ns, "%s", ns);
        m->next = b->moved;
        b->moved = m;
    }
}

/* ---- one round ----------------------------------------------------------------------------- */

/* Waits until --balancer-throttle-ms after the previous batch ended (*waited_ms: how
 * long); true when the balancer was shut down or turned off meanwhile (the batch is then
 * dropped). */
static bool throttle_wait(cfg_balancer_t *b, long long *waited_ms) {
    bool stopped;
    long long t0 = time_mono_ms();
    pthread_mutex_lock(&b->mu);
    long long until = b->last_batch_end + b->throttle_ms;
    bool waited = b->last_batch_end > 0 && time_mono_ms() < until;
    while (!b->stop && b->last_batch_end > 0 && time_mono_ms() < until)
        if (time_cond_wait_ms(&b->cv, &b->mu, until - time_mono_ms()) != 0) break;
    stopped = b->stop;
    pthread_mutex_unlock(&b->mu);
    *waited_ms = time_mono_ms() - t0;
    if (!stopped && waited) {
        bal_settings_t st;
        bal_settings_read(b->cfg, &st);  /* a balancerStop during the wait wins */
        stopped = !st.enabled;
    }
    return stopped;
}

/* Runs one round; returns how many chunks moved. */
static int round_run(cfg_balancer_t *b, const bal_settings_t *st) {
    cfg_t *cfg = b->cfg;
    long long t0 = time_mono_ms();
    bal_snap_t sn;  /* the shards (bal_snapshot.c) */
    ns_list_t nl = {0};
    ms_error_t e = {0};
    bson_t details = BSON_INITIALIZER, splits, moves;
    bson_t defrags = BSON_INITIALIZER;  /* defragmenting collections (defrag.c), an array */
    int ndefrag = 0;
    int nsplits = 0, njobs = 0, moved = 0, failed = 0, budget = MS_BALANCER_AUTOSPLIT_CHUNKS_MAX;
    mig_job_t *jobs = NULL;
    bool error = false;
    char why[MS_ERRMSG_BYTES + 32] = "";

    nl.v = calloc(MS_BALANCER_COLLS_MAX, sizeof *nl.v);
    if (!nl.v) abort();
    if (bal_snap_shards(cfg, &sn, &e) != 0 ||
        cat_config_scan(cfg->cat, "collections", coll_scan, &nl, &e) != 0 ||
        /* A shard in a migration started by hand (config.migrations) is busy for this
         * round too: a move chosen for it would only fail with 117. */
        bal_snap_busy(cfg, &sn, NULL, NULL, &e) != 0) {
        error = true;
        snprintf(why, sizeof why, "catalog read failed: %s", e.msg);
    }
    bal_shard_t *shards = sn.shards;

    BSON_APPEND_ARRAY_BEGIN(&details, "splits", &splits);
    int cap = sn.nshards / 2 > 0 ? sn.nshards / 2 : 1;
    jobs = calloc((size_t)cap, sizeof *jobs);
    if (!jobs) abort();
    for (int c = 0; c < nl.n && !error && sn.nshards >= 2; c++) {
        cat_coll_t coll;
        memset(&e, 0, sizeof e);
        if (cat_coll_get(cfg->cat, nl.v[c], &coll, &e) != 0) continue;  /* dropped meanwhile */
        if (coll.no_balance || !coll.allow_migrations) {
            cat_coll_free(&coll);
            continue;
        }
        int64_t csize = coll.max_chunk_size_bytes > 0 ? coll.max_chunk_size_bytes : st->chunk_size;
        bal_zone_split_coll(cfg, coll.ns, &splits, &nsplits);  /* bal_jumbo.c */
        if (coll.defragment) {  /* no balancing: phase 2's migrations only (defrag.c) */
            cfg_defrag_move_t dm[cap];
            int k = cfg_defrag_round_moves(cfg, &coll, shards, sn.nshards, csize, dm, cap - njobs,
                                           &defrags, &ndefrag);
            for (int m = 0; m < k; m++) {
                mig_job_t *j = &jobs[njobs++];
                *j = (mig_job_t){.cfg = cfg, .min = dm[m].min, .max = dm[m].max,
                                 .reason = DEFRAG_REASON, .wait_delete = st->wait_delete,
                                 .throttle = st->throttle};
                snprintf(j->ns, sizeof j->ns, "%s", coll.ns);
                snprintf(j->from, sizeof j->from, "%s", shards[dm[m].from].name);
                snprintf(j->to, sizeof j->to, "%s", shards[dm[m].to].name);
            }
            cat_coll_free(&coll);
            if (njobs >= cap) break;
            continue;
        }
        if (st->autosplit && budget > 0)
            budget -= autosplit_coll(b, &coll, csize, budget, &splits, &nsplits);
        cat_bal_data_t d;
        if (bal_snap_coll(cfg, &sn, coll.ns, st->policy, &d, &e) != 0) {
            log_warn("balancer load failed ns=%s err=%s", log_str(coll.ns), log_str(e.msg));
            cat_coll_free(&coll);
            continue;
        }
        bal_coll_t bc = {.ns = coll.ns, .no_balance = coll.no_balance,
                         .moved_last_round = moved_last(b, coll.ns), .chunk_size_bytes = csize};
        bal_coll_view(&d, &bc);
        bal_move_t mv[cap];
        int n = bal_choose(&bc, shards, sn.nshards, st->policy, mv, cap - njobs);
        set_moved(b, coll.ns, n > 0);
        for (int m = 0; m < n; m++) {
            mig_job_t *j = &jobs[njobs++];
            const bal_chunk_t *ch = &d.chunks[mv[m].chunk];
            j->cfg = cfg;
            snprintf(j->ns, sizeof j->ns, "%s", coll.ns);
            snprintf(j->from, sizeof j->from, "%s", shards[mv[m].from].name);
            snprintf(j->to, sizeof j->to, "%s", shards[mv[m].to].name);
            j->min = bson_copy(ch->min);
            j->max = mv[m].min_only ? NULL : bson_copy(ch->max);
            j->reason = mv[m].reason;
            j->wait_delete = st->wait_delete;
            j->throttle = st->throttle;
        }
        cat_bal_free(&d);
        cat_coll_free(&coll);
        if (njobs >= cap) break;
    }
    bson_append_array_end(&details, &splits);

    /* MongoDB's throttle (balancerMigrationsThrottlingMs): a batch starts no sooner than
     * --balancer-throttle-ms after the previous one ended; the choosing above already
     * counts toward it, so a round whose choosing took longer waits for nothing. */
    long long throttle_ms = 0;
    if (njobs > 0 && throttle_wait(b, &throttle_ms)) {
        for (int i = 0; i < njobs; i++) {
            bson_destroy(jobs[i].min);
            if (jobs[i].max) bson_destroy(jobs[i].max);
        }
        njobs = 0;
        snprintf(why, sizeof why, "balancing turned off before the migrations started");
    }
    /* The migrations of the round, all at once: each shard is in one at most. */
    for (int i = 0; i < njobs; i++)
        jobs[i].started = pthread_create(&jobs[i].th, NULL, mig_main, &jobs[i]) == 0;
    for (int i = 0; i < njobs; i++) {
        if (jobs[i].started) pthread_join(jobs[i].th, NULL);
        else {
            jobs[i].rc = MS_ERR_INTERNAL;
            snprintf(jobs[i].err.msg, sizeof jobs[i].err.msg, "could not start a thread");
        }
    }
    BSON_APPEND_ARRAY_BEGIN(&details, "migrations", &moves);
    for (int i = 0; i < njobs; i++) {
        mig_job_t *j = &jobs[i];
        bson_t m;
        char k[16];
        const char *key;
        bson_uint32_to_string((uint32_t)i, &key, k, sizeof k);
        BSON_APPEND_DOCUMENT_BEGIN(&moves, key, &m);
        BSON_APPEND_UTF8(&m, "ns", j->ns);
        BSON_APPEND_DOCUMENT(&m, "min", j->min);
        if (j->max) BSON_APPEND_DOCUMENT(&m, "max", j->max);
        BSON_APPEND_UTF8(&m, "from", j->from);
        BSON_APPEND_UTF8(&m, "to", j->to);
        BSON_APPEND_UTF8(&m, "reason", j->reason);
        BSON_APPEND_BOOL(&m, "ok", j->rc == 0);
        if (j->rc) {
            BSON_APPEND_INT32(&m, "code", j->rc);
            BSON_APPEND_UTF8(&m, "errmsg", j->err.msg);
        }
        if (j->reason == DEFRAG_REASON)  /* reported to defragmentation, not split */
            cfg_defrag_move_done(cfg, j->ns, j->rc, &j->err);
        else if (j->rc == MS_ERR_CHUNK_TOO_BIG || j->rc == MS_ERR_EXCEEDED_MEMORY_LIMIT)
            bal_split_or_mark_jumbo(cfg, j->ns, j->min, j->max, j->from, &m);  /* bal_jumbo.c */
        BSON_APPEND_INT64(&m, "durationMillis", j->ms);
        bson_append_document_end(&moves, &m);
        if (j->rc == 0) moved++;
        else failed++;
        log_info("balancer move ns=%s from=%s to=%s reason=%s code=%d ms=%lld", log_str(j->ns),
                 log_str(j->from), log_str(j->to), j->reason, j->rc, j->ms);
        bson_destroy(j->min);
        if (j->max) bson_destroy(j->max);
    }
    bson_append_array_end(&details, &moves);
    if (njobs > 0) {
        pthread_mutex_lock(&b->mu);
        b->last_batch_end = time_mono_ms();
        pthread_mutex_unlock(&b->mu);
    }
    if (!why[0] && njobs == 0)
        snprintf(why, sizeof why, sn.nshards < 2 ? "fewer than two shards"
                                            : "nothing to move: every collection within the rule");
    BSON_APPEND_INT64(&details, "executionTimeMillis", time_mono_ms() - t0);
    BSON_APPEND_INT64(&details, "throttleWaitMillis", throttle_ms);
    BSON_APPEND_BOOL(&details, "errorOccurred", error || failed > 0);
    BSON_APPEND_INT32(&details, "candidateChunks", njobs);
    BSON_APPEND_INT32(&details, "chunksMoved", moved);
    BSON_APPEND_INT32(&details, "chunksSplit", nsplits);
    BSON_APPEND_UTF8(&details, "policy", st->policy == BAL_POLICY_DATA_SIZE ? "dataSize" : "chunkCount");
    if (why[0]) BSON_APPEND_UTF8(&details, "why", why);
    if (ndefrag > 0) BSON_APPEND_ARRAY(&details, "defragmentation", &defrags);
    bson_destroy(&defrags);
    memset(&e, 0, sizeof e);
    if (cat_actionlog(cfg->cat, "balancer.round", "", &details, &e) != 0)
        log_warn("balancer.round not logged err=%s", log_str(e.msg));
    bson_destroy(&details);
    free(jobs);
    bal_snap_free(&sn);
    free(nl.v);
    return moved;
}

/* ---- the thread ---------------------------------------------------------------------------- */

/* Sleeps up to ms unless woken or stopped. Called with b->mu held. */
static void nap(cfg_balancer_t *b, int ms) {
    long long until = time_mono_ms() + ms;
    while (!b->stop && !b->wake && time_mono_ms() < until)
        if (time_cond_wait_ms(&b->cv, &b->mu, until - time_mono_ms()) != 0) break;
    b->wake = false;
}

static void *bal_main(void *arg) {
    cfg_balancer_t *b = arg;
    pthread_mutex_lock(&b->mu);
    /* The first round one idle interval after start-up (or at balancerStart): a restarted
     * config server lets recovery and routers settle before it moves anything. */
    nap(b, b->idle_ms);
    while (!b->stop) {
        bal_settings_t st;
        int moved = 0;
        b->in_round = true;  /* before reading settings: balancerStop waits for this round */
        pthread_mutex_unlock(&b->mu);
        bal_settings_read(b->cfg, &st);
        if (st.enabled) {
            b->last_off[0] = '\0';
            moved = round_run(b, &st);
        } else if (strcmp(b->last_off, st.off_reason) != 0) {
            /* Off: logged once per reason, not every idle interval. */
            bson_t d = BSON_INITIALIZER;
            ms_error_t e = {0};
            BSON_APPEND_BOOL(&d, "errorOccurred", false);
            BSON_APPEND_INT32(&d, "candidateChunks", 0);
            BSON_APPEND_INT32(&d, "chunksMoved", 0);
            BSON_APPEND_UTF8(&d, "why", st.off_reason);
            if (cat_actionlog(b->cfg->cat, "balancer.round", "", &d, &e) != 0)
                log_warn("balancer.round not logged err=%s", log_str(e.msg));
            bson_destroy(&d);
            log_info("balancer off reason=%s", log_str(st.off_reason));
            snprintf(b->last_off, sizeof b->last_off, "%s", st.off_reason);
        }
        pthread_mutex_lock(&b->mu);
        b->in_round = false;
        if (st.enabled) b->rounds++;
        pthread_cond_broadcast(&b->cv);
        /* After a round that moved: the next one at once (its batch waits for the
         * throttle in round_run); otherwise the idle interval. */
        nap(b, moved > 0 ? 0 : b->idle_ms);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

int cfg_balancer_start(cfg_t *cfg, int idle_ms, int throttle_ms, ms_error_t *err) {
    cfg_balancer_t *b = calloc(1, sizeof *b);
    bson_t lock = BSON_INITIALIZER;
    char who[MS_URL_BYTES_MAX + 16];
    if (!b) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "balancer: out of memory");
    b->cfg = cfg;
    b->idle_ms = idle_ms;
    b->throttle_ms = throttle_ms;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    /* The balancer lock as MongoDB 3.4 kept it: taken by the config server at start-up and
     * never released. The dbpath's lock file already guarantees that only this process
     * holds it; the document says who does. */
    snprintf(who, sizeof who, "%s:Balancer", cfg->url);
    BSON_APPEND_UTF8(&lock, "_id", "balancer");
    BSON_APPEND_INT32(&lock, "state", 2);
    BSON_APPEND_UTF8(&lock, "process", cfg->url);
    BSON_APPEND_DATE_TIME(&lock, "when", time_now_ms());
    BSON_APPEND_UTF8(&lock, "who", who);
    BSON_APPEND_UTF8(&lock, "why", "CSRS Balancer");
    int rc = cat_lock_doc_put(cfg->cat, "balancer", &lock, err);
    bson_destroy(&lock);
    if (rc == 0 && pthread_create(&b->th, NULL, bal_main, b) != 0)
        rc = err_set(err, MS_ERR_INTERNAL, "balancer: cannot start its thread");
    if (rc) {
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        free(b);
        return rc;
    }
    cfg->bal = b;
    log_info("balancer started idle_ms=%d throttle_ms=%d", idle_ms, throttle_ms);
    return 0;
}

void cfg_balancer_shutdown(cfg_t *cfg) {
    cfg_balancer_t *b = cfg ? cfg->bal : NULL;
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->stop = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->th, NULL);
}

void cfg_balancer_free(cfg_t *cfg) {
    cfg_balancer_t *b = cfg ? cfg->bal : NULL;
    if (!b) return;
    while (b->moved) {
        bal_moved_t *m = b->moved;
        b->moved = m->next;
        free(m);
    }
    while (b->split_pos) {
        bal_split_pos_t *p = b->split_pos;
        b->split_pos = p->next;
        free(p->after);
        free(p->seen);
        free(p);
    }
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
    cfg->bal = NULL;
}

void cfg_balancer_wake(cfg_t *cfg) {
    cfg_balancer_t *b = cfg->bal;
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->wake = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void cfg_balancer_counters(cfg_t *cfg, bool *in_round, int64_t *rounds) {
    cfg_balancer_t *b = cfg->bal;
    *in_round = false;
    *rounds = 0;
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    *in_round = b->in_round;
    *rounds = b->rounds;
    pthread_mutex_unlock(&b->mu);
}

/* ---- balancerStart / balancerStop --------------------------------------------------------- */

/* Upserts config.settings {_id: "balancer"} with {$set: {stopped, mode}} (what
 * sh.startBalancer / sh.stopBalancer write). */
static int set_mode(cfg_t *cfg, bool stopped, ms_error_t *err) {
    bson_t q = BSON_INITIALIZER, u = BSON_INITIALIZER, set, id;
    int64_t n = 0, nmod = 0;
    bool upserted = false;
    BSON_APPEND_UTF8(&q, "_id", "balancer");
    BSON_APPEND_DOCUMENT_BEGIN(&u, "$set", &set);
    BSON_APPEND_BOOL(&set, "stopped", stopped);
    BSON_APPEND_UTF8(&set, "mode", stopped ? "off" : "full");
    bson_append_document_end(&u, &set);
    int rc = cat_settings_update(cfg->cat, &q, &u, true, false, &n, &nmod, &upserted, &id, err);
    if (rc == 0 && upserted) bson_destroy(&id);
    bson_destroy(&q);
    bson_destroy(&u);
    return rc;
}

int cfg_cmd_balancer_start(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    (void)reply;
    int rc = set_mode(cfg, false, err);
    if (rc == 0) cfg_balancer_wake(cfg);
    return rc;
}

int cfg_cmd_balancer_stop(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    cfg_balancer_t *b = cfg->bal;
    (void)reply;
    int rc = set_mode(cfg, true, err);
    if (rc || !b) return rc;
    /* Wait for the round in progress (it read the settings before our write): once it
     * ends, no round moves anything until balancerStart. */
    long long left = op_time_left_ms(MS_BALANCER_STOP_WAIT_MS);
    long long until = time_mono_ms() + (left > 0 ? left : 1);
    pthread_mutex_lock(&b->mu);
    while (b->in_round) {
        long long now = time_mono_ms();
        if (now >= until) break;
        time_cond_wait_ms(&b->cv, &b->mu, until - now < 100 ? until - now : 100);
    }
    bool still = b->in_round;
    pthread_mutex_unlock(&b->mu);
    if (still)
        return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT, "the balancer is stopped but its current "
                       "round (a migration) has not ended yet");
    return 0;
}

/* ---- for the secondary thread (bal_merge.c) ------------------------------------------------ */

bool cfg_balancer_may_act(cfg_t *cfg, char *why, size_t cap) {
    bal_settings_t st;
    bal_settings_read(cfg, &st);
    if (!st.enabled) snprintf(why, cap, "%s", st.off_reason);
    return st.enabled;
}
