/*
 * rdel.c — the range deleter of bin/shardd (MongoDB's RangeDeleterService in miniature;
 * notes §3, docs/range-deleter.md). After a migration the donor still holds the moved
 * documents: orphans, hidden by the ownership filter, removed here.
 *
 * A task is a persisted document of shard_docs rangeDeletions (store_docs.c), in MongoDB's
 * shape {_id: UUID, nss, collectionUuid, donorShardId, range: {min, max}, pending?,
 * processing?, whenToClean, timestamp, numOrphanDocs, keyPattern}. One thread runs the
 * ready (non-pending) tasks one at a time, those already processing first, and never
 * blocks on one of them:
 *   1. a "delayed" task waits cleanup_delay_ms from when the deleter first saw it ready;
 *   2. while a live ownership snapshot of the namespace owns part of the range
 *      (shv_wait_snapshots, checked once: a running query or open cursor that may still
 *      return those documents) the task is set aside and re-checked MS_RDEL_READERS_POLL_MS
 *      later, other tasks running meanwhile; the open cursors are logged once a second;
 *   before each batch, the last guard: the shard must not own any part of the range
 *      (shv_range_owned, asked again after a refresh); else the task is refused (an error
 *      line, serverStatus.rangeDeleter.refused), kept and re-checked later, nothing deleted;
 *   3. it deletes in batches of batch_docs documents, each its own write transaction
 *      through store_write_doc over the collection's `sk` index range [min, max), which
 *      also persists processing: true and the decremented numOrphanDocs; the last batch
 *      (fewer documents than asked) deletes the task in the same transaction;
 *   4. it sleeps batch_delay_ms between batches so user writes get the writer lock.
 * Every step is restartable: after kill -9 the task is still there (processing: true when
 * a batch had committed) and the thread picks it up first at start.
 * The failpoint suspendRangeDeletion is evaluated before each batch (hang, error → the
 * task is retried MS_RDEL_RETRY_MS later, crash).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <sqlite3.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/rtable.h"
#include "shardd/shardd.h"

/* How often rdel_wait re-reads the tasks even without a wake-up (a task deleted by a
 * migration's abort path that forgot rdel_kick still ends the wait). */
#define RDEL_WAIT_POLL_MS 200

typedef struct sched {
    char id[RDEL_ID_BYTES];
    long long since;             /* monotonic ms: ready since (the order tasks run in) */
    long long ready_at;          /* monotonic ms: not before (delay, readers, retry) */
    bool seen;                   /* still persisted at the last scan */
    bool readers_done;           /* no snapshot owns the range any more: never again */
    bool blocked;                /* set aside: readers' snapshots own part of the range */
    bool refused;                /* set aside: the shard owns part of the range */
    long long readers_log_at;    /* next "waits for readers" line */
} sched_t;

/* A refused task as serverStatus shows it. */
typedef struct refusal {
    char id[RDEL_ID_BYTES];
    char ns[MS_NS_BYTES_MAX + 1];
    char why[160];
} refusal_t;

struct rdel {
    store_t *st;
    shv_t *shv;
    curs_reg_t *cs;               /* may be NULL: only for logging */
    rdel_opts_t o;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* kicks, stop (monotonic clock) */
    pthread_cond_t done_cv;      /* a task ended (rdel_wait) */
    bool stop;
    uint64_t kicks;
    /* scheduling, only the thread touches it */
    sched_t *sched;
    int nsched, capsched;
    /* status, under mu */
    const char *state;
    char current[RDEL_ID_BYTES];
    char current_ns[MS_NS_BYTES_MAX + 1];
    int64_t batches, docs_deleted, tasks_completed, batch_errors, snapshot_waits;
    int64_t refusals;            /* times a task was refused (a task counts once per refusal) */
    int blocked_now;             /* tasks set aside for readers at the last scan */
    refusal_t refused[MS_RDEL_REFUSED_LIST_MAX];
    int nrefused;                /* tasks refused now (the list holds the first ones) */
};

/* ---- task documents ------------------------------------------------------------------ */

/* A parsed task (views into the document it came from). */
typedef struct task {
    const char *nss;
    bson_t min, max, key_pattern;
    bool has_pattern;
    bool pending, processing, delayed;
    bool has_uuid;
    uint8_t uuid[16];
    int64_t orphans;
} task_t;

static bool view_doc(const bson_iter_t *it, bson_t *out) {
    uint32_t len;
    const uint8_t *data;
    if (!BSON_ITER_HOLDS_DOCUMENT(it)) return false;
    bson_iter_document(it, &len, &data);
    return bson_init_static(out, data, len);
}

static int task_parse(const bson_t *doc, task_t *t, ms_error_t *err) {
    bson_iter_t it, r;
    memset(t, 0, sizeof *t);
    if (!bson_iter_init_find(&it, doc, "nss") || !BSON_ITER_HOLDS_UTF8(&it))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "range deletion task lacks nss");
    t->nss = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init_find(&it, doc, "range") || !bson_iter_recurse(&it, &r))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "range deletion task lacks range");
    bson_iter_t m = r, x = r;
    if (!bson_iter_find(&m, "min") || !view_doc(&m, &t->min) || !bson_iter_find(&x, "max") ||
        !view_doc(&x, &t->max))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "range deletion task needs range.min/max");
    if (bson_iter_init_find(&it, doc, "keyPattern") && view_doc(&it, &t->key_pattern))
        t->has_pattern = true;
    t->pending = bson_iter_init_find(&it, doc, "pending") && bsonx_truthy(&it);
    t->processing = bson_iter_init_find(&it, doc, "processing") && bsonx_truthy(&it);
    t->delayed = bson_iter_init_find(&it, doc, "whenToClean") && BSON_ITER_HOLDS_UTF8(&it) &&
                 strcmp(bson_iter_utf8(&it, NULL), "delayed") == 0;
    if (bson_iter_init_find(&it, doc, "collectionUuid") && BSON_ITER_HOLDS_BINARY(&it)) {
        bson_subtype_t st;
        uint32_t n;
        const uint8_t *d;
        bson_iter_binary(&it, &st, &n, &d);
        if (n == 16) {
            memcpy(t->uuid, d, 16);
            t->has_uuid = true;
        }
    }
    if (bson_iter_init_find(&it, doc, "numOrphanDocs") && BSON_ITER_HOLDS_NUMBER(&it))
        t->orphans = bson_iter_as_int64(&it);
    return 0;
}

/* The task's bounds encoded as the `sk` column is (keys_encode_bound). pattern: the task's
 * keyPattern, else fallback (the collection's shard key). */
static int task_bounds(const task_t *t, const keys_pattern_t *fallback, buf_t *min, buf_t *max,
                       ms_error_t *err) {
    keys_pattern_t p;
    const keys_pattern_t *use = fallback;
    int rc;
    if (t->has_pattern) {
        if ((rc = keys_pattern_parse(&t->key_pattern, &p, err)) != 0) return rc;
        use = &p;
    }
    if (!use) return err_set(err, MS_ERR_FAILED_TO_PARSE, "range deletion task lacks keyPattern");
    rc = keys_encode_bound(use, &t->min, min, err);
    if (rc == 0) rc = keys_encode_bound(use, &t->max, max, err);
    if (use == &p) keys_pattern_free(&p);
    return rc;
}

void rdel_id_of(const uint8_t uuid[16], char out[RDEL_ID_BYTES]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[uuid[i] >> 4];
        out[2 * i + 1] = hex[uuid[i] & 15];
    }
    out[32] = '\0';
}

static int task_id(const bson_t *task, char id[RDEL_ID_BYTES], ms_error_t *err) {
    bson_iter_t it;
    bson_subtype_t st;
    uint32_t n = 0;
    const uint8_t *d = NULL;
    if (bson_iter_init_find(&it, task, "_id") && BSON_ITER_HOLDS_BINARY(&it))
        bson_iter_binary(&it, &st, &n, &d);
    if (n != 16) return err_set(err, MS_ERR_FAILED_TO_PARSE, "range deletion task _id must be a UUID");
    rdel_id_of(d, id);
    return 0;
}

int rdel_task_insert(store_txn_t *t, const bson_t *task, ms_error_t *err) {
    char id[RDEL_ID_BYTES];
    task_t tk;
    int rc;
    if ((rc = task_id(task, id, err)) != 0 || (rc = task_parse(task, &tk, err)) != 0) return rc;
    return store_sdoc_put(t, SDOC_RANGE_DELETIONS, id, task, err);
}

/* Copies task without the fields named in drop, then appends what add says. */
static void copy_without(const bson_t *src, bson_t *dst, const char *const *drop, int ndrop) {
    bson_iter_t it;
    bson_init(dst);
    if (!bson_iter_init(&it, src)) return;
    while (bson_iter_next(&it)) {
        bool skip = false;
        for (int i = 0; i < ndrop; i++) skip |= strcmp(bson_iter_key(&it), drop[i]) == 0;
        if (!skip) bson_append_iter(dst, bson_iter_key(&it), -1, &it);
    }
}

int rdel_task_set_ready(store_txn_t *t, const char *id, ms_error_t *err) {
    static const char *const drop[] = {"pending"};
    bson_t doc, out;
    int rc;
    if ((rc = store_sdoc_get(t, SDOC_RANGE_DELETIONS, id, &doc, err)) != 0) return rc;
    copy_without(&doc, &out, drop, 1);
    rc = store_sdoc_put(t, SDOC_RANGE_DELETIONS, id, &out, err);
    bson_destroy(&out);
    bson_destroy(&doc);
    return rc;
}

int rdel_task_delete(store_txn_t *t, const char *id, ms_error_t *err) {
    return store_sdoc_delete(t, SDOC_RANGE_DELETIONS, id, err);
}

/* ---- waiting ---------------------------------------------------------------------------- */

/* Waits on cv until the monotonic deadline (ms). Caller holds r->mu. */
static void wait_until_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long long deadline) {
    struct timespec ts;
    ts.tv_sec = deadline / 1000;
    ts.tv_nsec = (deadline % 1000) * 1000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

static bool stopping(rdel_t *r) {
    pthread_mutex_lock(&r->mu);
    bool s = r->stop;
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* Sleeps up to ms, less when stopped or kicked. */
static void nap(rdel_t *r, long long ms) {
    pthread_mutex_lock(&r->mu);
    uint64_t k = r->kicks;
    long long dl = time_mono_ms() + ms;
    while (!r->stop && r->kicks == k && time_mono_ms() < dl) wait_until_ms(&r->cv, &r->mu, dl);
    pthread_mutex_unlock(&r->mu);
}

/* Sleeps ms unless stopped (kicks do not shorten a batch delay). */
static void sleep_unless_stopped(rdel_t *r, long long ms) {
    pthread_mutex_lock(&r->mu);
    long long dl = time_mono_ms() + ms;
    while (!r->stop && time_mono_ms() < dl) wait_until_ms(&r->cv, &r->mu, dl);
    pthread_mutex_unlock(&r->mu);
}

static void set_state(rdel_t *r, const char *state, const char *id, const char *ns) {
    pthread_mutex_lock(&r->mu);
    r->state = state;
    snprintf(r->current, sizeof r->current, "%s", id ? id : "");
    snprintf(r->current_ns, sizeof r->current_ns, "%s", ns ? ns : "");
    pthread_mutex_unlock(&r->mu);
}

/* ---- one batch ----------------------------------------------------------------------------- */

typedef struct batch {
    const char *id;
    int limit;
    int deleted;
    bool finished;            /* the task is gone now (deleted here, or already) */
    char ns[MS_NS_BYTES_MAX + 1];
} batch_t;

static int finish_task(store_txn_t *t, batch_t *b, ms_error_t *err) {
    b->finished = true;
    return store_sdoc_delete(t, SDOC_RANGE_DELETIONS, b->id, err);
}

static int batch_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    batch_t *b = arg;
    bson_t doc, upd;
    task_t tk;
    buf_t min = {0}, max = {0};
    int64_t *rids = NULL;
    bson_t **docs = NULL;
    int n = 0, rc;
    b->deleted = 0;
    b->finished = false;
    rc = store_sdoc_get(t, SDOC_RANGE_DELETIONS, b->id, &doc, err);
    if (rc == MS_ERR_NO_SUCH_KEY) {   /* deleted meanwhile (a migration's abort) */
        b->finished = true;
        return 0;
    }
    if (rc) return rc;
    if ((rc = task_parse(&doc, &tk, err)) != 0) goto out;
    snprintf(b->ns, sizeof b->ns, "%s", tk.nss);
    store_coll_t *c = store_coll_get(t, tk.nss);
    if (!c || !c->sharded || (tk.has_uuid && memcmp(tk.uuid, c->uuid, 16) != 0)) {
        /* Nothing of that collection incarnation is left here: MongoDB drops the task. */
        log_info("range deletion task has no collection to clean id=%s ns=%s", b->id,
                 log_str(tk.nss));
        rc = finish_task(t, b, err);
        goto out;
    }
    if ((rc = task_bounds(&tk, &c->sk, &min, &max, err)) != 0) goto out;
    {
        sqlite3_stmt *s = store_sk_range_stmt(t, c, "rid, doc", "ORDER BY sk LIMIT ?3", &min,
                                              &max, err);
        if (!s) {
            rc = err->code;
            goto out;
        }
        sqlite3_bind_int(s, 3, b->limit);
        rids = calloc((size_t)b->limit, sizeof *rids);
        docs = calloc((size_t)b->limit, sizeof *docs);
        ASSERT(rids && docs);
        int src;
        while (n < b->limit && (src = sqlite3_step(s)) == SQLITE_ROW) {
            const void *p = sqlite3_column_blob(s, 1);
            int len = sqlite3_column_bytes(s, 1);
            rids[n] = sqlite3_column_int64(s, 0);
            docs[n] = p && len >= 5 ? bson_new_from_data(p, (size_t)len) : NULL;
            if (!docs[n]) {
                sqlite3_reset(s);
                rc = err_set(err, MS_ERR_INVALID_BSON, "bad document in %s", tk.nss);
                goto out;
            }
            n++;
        }
        if (n < b->limit && src != SQLITE_DONE) {
            rc = err_from_sqlite(err, src, "range deleter scan", store_txn_db(t));
            sqlite3_reset(s);
            goto out;
        }
        sqlite3_reset(s);
    }
    for (int i = 0; i < n; i++)
        if ((rc = store_write_doc(t, c, rids[i], docs[i], NULL, NULL, NULL, err)) != 0) goto out;
    b->deleted = n;
    if (n < b->limit) {   /* the range is empty now */
        rc = finish_task(t, b, err);
        goto out;
    }
    {
        static const char *const drop[] = {"processing", "numOrphanDocs"};
        int64_t left = tk.orphans - n;
        copy_without(&doc, &upd, drop, 2);
        BSON_APPEND_BOOL(&upd, "processing", true);
        BSON_APPEND_INT64(&upd, "numOrphanDocs", left > 0 ? left : 0);
        rc = store_sdoc_put(t, SDOC_RANGE_DELETIONS, b->id, &upd, err);
        bson_destroy(&upd);
    }
out:
    for (int i = 0; i < n; i++) bson_destroy(docs[i]);
    free(docs);
    free(rids);
    buf_free(&min);
    buf_free(&max);
    bson_destroy(&doc);
    return rc;
}

/* ---- one task ---------------------------------------------------------------------------- */

typedef struct get_arg {
    const char *id;
    bson_t doc;
    bool found;
} get_arg_t;

static int get_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    get_arg_t *g = arg;
    int rc = store_sdoc_get(t, SDOC_RANGE_DELETIONS, g->id, &g->doc, err);
    if (rc == MS_ERR_NO_SUCH_KEY) return 0;
    if (rc == 0) g->found = true;
    return rc;
}

typedef struct ids_arg {
    char *buf;
    size_t cap, len;
    int n;
} ids_arg_t;

static void cursor_id(void *arg, int64_t id) {
    ids_arg_t *a = arg;
    if (a->len + 24 < a->cap)
        a->len += (size_t)snprintf(a->buf + a->len, a->cap - a->len, "%s%lld", a->n ? "," : "",
                                   (long long)id);
    a->n++;
}

/* Outcomes of run_task besides 0 (done or gone), 1 (stopping) and an error code (> 1). */
#define RDEL_BLOCKED (-1)   /* readers' snapshots still own part of the range: set aside */
#define RDEL_REFUSED (-2)   /* the shard owns part of the range: set aside, loudly */

/* Whether readers still own part of the range (checked once, never waited for here: a
 * task held by readers must not hold up the others). Logs the open cursors at most once
 * per MS_RDEL_SNAPSHOT_WAIT_SLICE_MS. */
static bool readers_block(rdel_t *r, sched_t *sc, const char *ns, const buf_t *min,
                          const buf_t *max) {
    ms_error_t e = {0};
    if (shv_wait_snapshots(r->shv, ns, min, max, 0, &e) == 0) return false;
    long long now = time_mono_ms();
    if (now < sc->readers_log_at) return true;
    sc->readers_log_at = now + MS_RDEL_SNAPSHOT_WAIT_SLICE_MS;
    pthread_mutex_lock(&r->mu);
    r->snapshot_waits++;
    pthread_mutex_unlock(&r->mu);
    if (r->cs) {
        char ids[256] = "";
        ids_arg_t a = {ids, sizeof ids, 0, 0};
        int n = curs_list_ns(r->cs, ns, cursor_id, &a);
        log_info("range deletion waits for readers id=%s ns=%s openCursors=%d cursorIds=%s "
                 "why=%s", sc->id, log_str(ns), n, ids, log_str(e.msg));
    } else {
        log_info("range deletion waits for readers id=%s ns=%s why=%s", sc->id, log_str(ns),
                 log_str(e.msg));
    }
    return true;
}

/* The refused list of serverStatus (under r->mu). */
static void refusal_set(rdel_t *r, const char *id, const char *ns, const char *why) {
    pthread_mutex_lock(&r->mu);
    int i = 0;
    while (i < r->nrefused && strcmp(r->refused[i].id, id) != 0) i++;
    if (i == r->nrefused && i < MS_RDEL_REFUSED_LIST_MAX) r->nrefused++;
    if (i < r->nrefused) {
        snprintf(r->refused[i].id, sizeof r->refused[i].id, "%s", id);
        snprintf(r->refused[i].ns, sizeof r->refused[i].ns, "%s", ns);
        snprintf(r->refused[i].why, sizeof r->refused[i].why, "%s", why);
    }
    pthread_mutex_unlock(&r->mu);
}

static void refusal_clear(rdel_t *r, const char *id) {
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->nrefused; i++)
        if (strcmp(r->refused[i].id, id) == 0) {
            r->refused[i] = r->refused[--r->nrefused];
            break;
        }
    pthread_mutex_unlock(&r->mu);
}

typedef struct local_arg {
    const task_t *tk;
    bool same;      /* the shard holds the task's collection incarnation */
} local_arg_t;

static int local_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    local_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->tk->nss);
    (void)err;
    a->same = c && c->sharded && (!a->tk->has_uuid || memcmp(a->tk->uuid, c->uuid, 16) == 0);
    return 0;
}

/* The last guard before a batch deletes anything: the shard must not own any part of the
 * range. A "yes" from the cached filtering metadata is checked again after a refresh (it
 * may predate the migration's commit); a second "yes" refuses the task: an error line, the
 * task left as it is, the documents kept, serverStatus.rangeDeleter.refused naming it.
 * A task of another (or no) collection incarnation deletes nothing (batch_fn drops it), so
 * it needs no guard. 0 (go on), RDEL_REFUSED, or the error that kept us from knowing. */
static int ownership_guard(rdel_t *r, sched_t *sc, const task_t *tk, const buf_t *min,
                           const buf_t *max, ms_error_t *err) {
    local_arg_t la = {.tk = tk};
    char why[160];
    bool owned = true;
    int rc;
    if ((rc = store_read(r->st, local_fn, &la, err)) != 0) return rc;
    if (!la.same) return 0;
    const bson_t *pat = tk->has_pattern ? &tk->key_pattern : NULL;
    if ((rc = shv_range_owned(r->shv, tk->nss, pat, min, max, false, &owned, why, sizeof why,
                              err)) != 0)
        return rc;
    if (owned && (rc = shv_range_owned(r->shv, tk->nss, pat, min, max, true, &owned, why,
                                       sizeof why, err)) != 0)
        return rc;
    if (!owned) {
        if (sc->refused) {
            log_info("range deletion no longer refused id=%s ns=%s", sc->id, log_str(tk->nss));
            sc->refused = false;
            refusal_clear(r, sc->id);
        }
        return 0;
    }
    if (!sc->refused) {   /* loudly once; quietly on each later re-check */
        char *lo = bsonx_to_json(&tk->min), *hi = bsonx_to_json(&tk->max);
        log_error("range deletion refused, the shard owns the range id=%s ns=%s min=%s max=%s "
                  "why=%s recheckMs=%d", sc->id, log_str(tk->nss), log_str(lo ? lo : "?"),
                  log_str(hi ? hi : "?"), log_str(why), MS_RDEL_REFUSED_RECHECK_MS);
        bson_free(lo);
        bson_free(hi);
        sc->refused = true;
        pthread_mutex_lock(&r->mu);
        r->refusals++;
        pthread_mutex_unlock(&r->mu);
    }
    refusal_set(r, sc->id, tk->nss, why);
    return RDEL_REFUSED;
}

/* Runs one ready task: sets it aside while readers own its range (RDEL_BLOCKED) or the
 * shard owns it (RDEL_REFUSED), else deletes it to its end. 0 done (or gone), 1 stopped,
 * else the error (retry). */
static int run_task(rdel_t *r, sched_t *sc, ms_error_t *err) {
    const char *id = sc->id;
    get_arg_t g = {.id = id};
    task_t tk;
    buf_t min = {0}, max = {0};
    int rc;
    char ns[MS_NS_BYTES_MAX + 1];
    long long t0 = time_mono_ms();
    int64_t deleted = 0, nbatches = 0;

    if ((rc = store_read(r->st, get_fn, &g, err)) != 0) return rc;
    if (!g.found) return 0;
    if ((rc = task_parse(&g.doc, &tk, err)) != 0) goto out;
    if (!tk.has_pattern || task_bounds(&tk, NULL, &min, &max, err) != 0) {
        /* No usable keyPattern: the batch reads the collection's own shard key, and
         * without bounds we wait for every snapshot of ns that owns anything. */
        buf_free(&min);
        buf_free(&max);
        keys_encode_minkey(&min);
        keys_encode_maxkey(&max);
        rc = 0;
    }
    snprintf(ns, sizeof ns, "%s", tk.nss);
    if (!sc->readers_done) {
        if (readers_block(r, sc, ns, &min, &max)) {
            sc->blocked = true;
            rc = RDEL_BLOCKED;
            goto out;
        }
        sc->readers_done = true;   /* later snapshots do not own the range (notes §3) */
        sc->blocked = false;
    }
    if (!sc->refused)   /* a refused task's quiet re-checks say nothing */
        log_info("range deletion starts id=%s ns=%s processing=%d numOrphanDocs=%lld", id,
                 log_str(ns), tk.processing, (long long)tk.orphans);
    set_state(r, "deleting", id, ns);
    for (;;) {
        if (stopping(r)) {
            rc = 1;
            goto out;
        }
        if ((rc = fp_eval(FP_SUSPEND_RANGE_DELETION, err)) != 0) goto out;
        if (stopping(r)) {   /* released from a hang by shutdown */
            rc = 1;
            goto out;
        }
        if ((rc = ownership_guard(r, sc, &tk, &min, &max, err)) != 0) goto out;
        batch_t b = {.id = id, .limit = r->o.batch_docs};
        if ((rc = store_write(r->st, batch_fn, &b, err)) != 0) goto out;
        deleted += b.deleted;
        nbatches++;
        pthread_mutex_lock(&r->mu);
        r->batches++;
        r->docs_deleted += b.deleted;
        if (b.finished) {
            r->tasks_completed++;
            pthread_cond_broadcast(&r->done_cv);
        }
        pthread_mutex_unlock(&r->mu);
        if (b.finished) break;
        sleep_unless_stopped(r, r->o.batch_delay_ms);
    }
    log_info("range deletion done id=%s ns=%s deleted=%lld batches=%lld ms=%lld", id, log_str(ns),
             (long long)deleted, (long long)nbatches, time_mono_ms() - t0);
    rc = 0;
out:
    buf_free(&min);
    buf_free(&max);
    if (g.found) bson_destroy(&g.doc);
    return rc;
}

/* ---- the scheduler thread ----------------------------------------------------------------- */

typedef struct scan_arg {
    rdel_t *r;
    long long now;
    char pick[RDEL_ID_BYTES];
    bool pick_processing;
    long long pick_since, next_at;
    char blocked[RDEL_ID_BYTES];      /* a task set aside for readers (status) */
    char blocked_ns[MS_NS_BYTES_MAX + 1];
    int nblocked;
} scan_arg_t;

static sched_t *sched_find(rdel_t *r, const char *id) {
    for (int i = 0; i < r->nsched; i++)
        if (strcmp(r->sched[i].id, id) == 0) return &r->sched[i];
    return NULL;
}

static int scan_task(void *arg, const char *id, const bson_t *doc) {
    scan_arg_t *a = arg;
    rdel_t *r = a->r;
    task_t tk;
    ms_error_t e = {0};
    if (task_parse(doc, &tk, &e) != 0 || tk.pending) return 0;
    sched_t *s = sched_find(r, id);
    if (!s) {
        if (r->nsched == r->capsched) {
            r->capsched = r->capsched ? 2 * r->capsched : 8;
            r->sched = realloc(r->sched, (size_t)r->capsched * sizeof *r->sched);
            ASSERT(r->sched);
        }
        s = &r->sched[r->nsched++];
        memset(s, 0, sizeof *s);
        snprintf(s->id, sizeof s->id, "%s", id);
        /* A task already processing was delayed before the restart: go on at once. */
        s->ready_at = a->now + (tk.delayed && !tk.processing ? r->o.cleanup_delay_ms : 0);
        s->since = s->ready_at;
        if (s->ready_at > a->now)
            log_info("range deletion scheduled id=%s ns=%s inMs=%d", id, log_str(tk.nss),
                     r->o.cleanup_delay_ms);
    }
    s->seen = true;
    if (s->blocked) {
        if (!a->nblocked++) {
            snprintf(a->blocked, sizeof a->blocked, "%s", id);
            snprintf(a->blocked_ns, sizeof a->blocked_ns, "%s", tk.nss);
        }
    }
    if (s->ready_at > a->now) {
        if (!a->next_at || s->ready_at < a->next_at) a->next_at = s->ready_at;
        return 0;
    }
    /* processing ones first, then the one ready longest */
    if (!a->pick[0] || (tk.processing && !a->pick_processing) ||
        (tk.processing == a->pick_processing && s->since < a->pick_since)) {
        snprintf(a->pick, sizeof a->pick, "%s", id);
        a->pick_processing = tk.processing;
        a->pick_since = s->since;
    }
    return 0;
}

static int scan_fn_txn(store_txn_t *t, void *arg, ms_error_t *err) {
    return store_sdoc_scan(t, SDOC_RANGE_DELETIONS, scan_task, arg, err);
}

static void *rdel_main(void *arg) {
    rdel_t *r = arg;
    while (!stopping(r)) {
        scan_arg_t a = {.r = r, .now = time_mono_ms()};
        ms_error_t err = {0};
        for (int i = 0; i < r->nsched; i++) r->sched[i].seen = false;
        if (store_read(r->st, scan_fn_txn, &a, &err) != 0) {
            log_warn("range deleter cannot read its tasks code=%d err=%s", err.code, log_str(err.msg));
            nap(r, MS_RDEL_RETRY_MS);
            continue;
        }
        for (int i = 0; i < r->nsched;)   /* forget tasks no longer there (or pending again) */
            if (!r->sched[i].seen) {
                if (r->sched[i].refused) refusal_clear(r, r->sched[i].id);
                r->sched[i] = r->sched[--r->nsched];
            } else {
                i++;
            }
        pthread_mutex_lock(&r->mu);
        r->blocked_now = a.nblocked;
        pthread_mutex_unlock(&r->mu);
        if (!a.pick[0]) {
            if (a.nblocked) set_state(r, "waitingForReaders", a.blocked, a.blocked_ns);
            else set_state(r, a.next_at ? "waitingForDelay" : "idle", NULL, NULL);
            /* Wake for the next delayed task, a kick, or once a second at most. */
            long long wait = a.next_at ? a.next_at - time_mono_ms() : MS_RDEL_RETRY_MS;
            nap(r, wait < 1 ? 1 : wait > MS_RDEL_RETRY_MS ? MS_RDEL_RETRY_MS : wait);
            continue;
        }
        sched_t *s = sched_find(r, a.pick);
        ASSERT(s);
        int rc = run_task(r, s, &err);
        if (rc == RDEL_BLOCKED) {
            s->ready_at = time_mono_ms() + MS_RDEL_READERS_POLL_MS;
        } else if (rc == RDEL_REFUSED) {
            s->ready_at = time_mono_ms() + MS_RDEL_REFUSED_RECHECK_MS;
        } else if (rc > 1) {
            s->ready_at = time_mono_ms() + MS_RDEL_RETRY_MS;
            pthread_mutex_lock(&r->mu);
            r->batch_errors++;
            pthread_mutex_unlock(&r->mu);
            log_warn("range deletion failed, will retry id=%s code=%d err=%s inMs=%d", a.pick, rc,
                     log_str(err.msg), MS_RDEL_RETRY_MS);
        }
    }
    set_state(r, "stopped", NULL, NULL);
    return NULL;
}

/* ---- the API ------------------------------------------------------------------------------- */

int rdel_open(store_t *st, shv_t *shv, const rdel_opts_t *o, rdel_t **out, ms_error_t *err) {
    rdel_t *r = calloc(1, sizeof *r);
    pthread_condattr_t ca;
    if (!r) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "rdel_open: out of memory");
    r->st = st;
    r->shv = shv;
    r->o.batch_docs = o && o->batch_docs > 0 ? o->batch_docs : MS_RDEL_BATCH_DOCS_DEFAULT;
    r->o.batch_delay_ms = o && o->batch_delay_ms >= 0 ? o->batch_delay_ms
                                                      : MS_RDEL_BATCH_DELAY_MS_DEFAULT;
    r->o.cleanup_delay_ms = o && o->cleanup_delay_ms >= 0 ? o->cleanup_delay_ms
                                                          : MS_RDEL_CLEANUP_DELAY_MS_DEFAULT;
    r->state = "idle";
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_cond_init(&r->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&r->th, NULL, rdel_main, r) != 0) {
        rdel_close(r);
        return err_set(err, MS_ERR_INTERNAL, "cannot start the range deleter thread");
    }
    r->started = true;
    log_info("range deleter started batchSize=%d batchDelayMs=%d orphanCleanupDelayMs=%d",
             r->o.batch_docs, r->o.batch_delay_ms, r->o.cleanup_delay_ms);
    *out = r;
    return 0;
}

void rdel_set_cursors(rdel_t *r, curs_reg_t *cs) {
    if (r) r->cs = cs;
}

void rdel_close(rdel_t *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_cond_broadcast(&r->done_cv);
    pthread_mutex_unlock(&r->mu);
    if (r->started) pthread_join(r->th, NULL);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->done_cv);
    pthread_mutex_destroy(&r->mu);
    free(r->sched);
    free(r);
}

void rdel_kick(rdel_t *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->kicks++;
    pthread_cond_broadcast(&r->cv);
    pthread_cond_broadcast(&r->done_cv);
    pthread_mutex_unlock(&r->mu);
}

typedef struct overlap_arg {
    const char *ns;
    const uint8_t *uuid;   /* NULL: every incarnation of ns */
    const bson_t *min, *max;
    int n;
} overlap_arg_t;

static int overlap_task(void *arg, const char *id, const bson_t *doc) {
    overlap_arg_t *a = arg;
    task_t tk;
    ms_error_t e = {0};
    (void)id;
    if (task_parse(doc, &tk, &e) != 0 || strcmp(tk.nss, a->ns) != 0) return 0;
    /* A task of another incarnation of ns (dropped, re-created) covers documents that are
     * gone with it: it can meet nothing of this one (MongoDB's
     * checkForConflictingDeletions filters on collectionUuid). */
    if (a->uuid && tk.has_uuid && memcmp(a->uuid, tk.uuid, 16) != 0) return 0;
    if (!a->min || !a->max || !tk.has_pattern) {
        a->n++;
        return 0;
    }
    /* Compare encoded under the task's own pattern. */
    keys_pattern_t p;
    buf_t tmin = {0}, tmax = {0}, qmin = {0}, qmax = {0};
    bool overlap = true;   /* when undecidable, wait (safe side) */
    if (keys_pattern_parse(&tk.key_pattern, &p, &e) == 0) {
        if (keys_encode_bound(&p, &tk.min, &tmin, &e) == 0 &&
            keys_encode_bound(&p, &tk.max, &tmax, &e) == 0 &&
            keys_encode_bound(&p, a->min, &qmin, &e) == 0 &&
            keys_encode_bound(&p, a->max, &qmax, &e) == 0)
            overlap = rtable_bytes_cmp(tmin.data, tmin.len, qmax.data, qmax.len) < 0 &&
                      rtable_bytes_cmp(qmin.data, qmin.len, tmax.data, tmax.len) < 0;
        keys_pattern_free(&p);
    }
    buf_free(&tmin);
    buf_free(&tmax);
    buf_free(&qmin);
    buf_free(&qmax);
    if (overlap) a->n++;
    return 0;
}

static int overlap_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    overlap_arg_t *a = arg;
    a->n = 0;
    return store_sdoc_scan(t, SDOC_RANGE_DELETIONS, overlap_task, a, err);
}

int rdel_wait(rdel_t *r, const char *ns, const bson_t *min, const bson_t *max, long long deadline_ms,
              ms_error_t *err) {
    return rdel_wait_coll(r, ns, NULL, min, max, deadline_ms, err);
}

int rdel_wait_coll(rdel_t *r, const char *ns, const uint8_t *uuid, const bson_t *min,
                   const bson_t *max, long long deadline_ms, ms_error_t *err) {
    overlap_arg_t a = {.ns = ns, .uuid = uuid, .min = min, .max = max};
    long long t0 = time_mono_ms();
    int rc;
    for (;;) {
        if ((rc = store_read(r->st, overlap_fn, &a, err)) != 0) return rc;
        if (a.n == 0) return 0;
        long long now = time_mono_ms();
        if (deadline_ms <= 0 || now >= deadline_ms)
            return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT,
                           "%d range deletion task(s) of %s still present after %lld ms", a.n, ns,
                           now - t0);
        long long dl = now + RDEL_WAIT_POLL_MS < deadline_ms ? now + RDEL_WAIT_POLL_MS : deadline_ms;
        pthread_mutex_lock(&r->mu);
        if (!r->stop) wait_until_ms(&r->done_cv, &r->mu, dl);
        bool stop = r->stop;
        pthread_mutex_unlock(&r->mu);
        if (stop)
            return err_set(err, MS_ERR_SHUTDOWN_IN_PROGRESS, "range deleter is shutting down");
    }
}

typedef struct count_arg {
    int total, pending, processing;
} count_arg_t;

static int count_task(void *arg, const char *id, const bson_t *doc) {
    count_arg_t *a = arg;
    task_t tk;
    ms_error_t e = {0};
    (void)id;
    a->total++;
    if (task_parse(doc, &tk, &e) == 0) {
        a->pending += tk.pending;
        a->processing += tk.processing;
    }
    return 0;
}

static int count_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    return store_sdoc_scan(t, SDOC_RANGE_DELETIONS, count_task, arg, err);
}

void rdel_append_status(rdel_t *r, bson_t *out) {
    count_arg_t c = {0};
    ms_error_t e = {0};
    bson_t d;
    if (!r) return;
    store_read(r->st, count_fn, &c, &e);
    BSON_APPEND_DOCUMENT_BEGIN(out, "rangeDeleter", &d);
    pthread_mutex_lock(&r->mu);
    BSON_APPEND_UTF8(&d, "state", r->state);
    BSON_APPEND_UTF8(&d, "currentTask", r->current);
    BSON_APPEND_UTF8(&d, "currentNs", r->current_ns);
    BSON_APPEND_INT32(&d, "tasks", c.total);
    BSON_APPEND_INT32(&d, "tasksPending", c.pending);
    BSON_APPEND_INT32(&d, "tasksProcessing", c.processing);
    BSON_APPEND_INT64(&d, "tasksCompleted", r->tasks_completed);
    BSON_APPEND_INT64(&d, "batches", r->batches);
    BSON_APPEND_INT64(&d, "docsDeleted", r->docs_deleted);
    BSON_APPEND_INT64(&d, "batchErrors", r->batch_errors);
    BSON_APPEND_INT64(&d, "snapshotWaits", r->snapshot_waits);
    BSON_APPEND_INT32(&d, "tasksWaitingForReaders", r->blocked_now);
    BSON_APPEND_INT64(&d, "tasksRefused", r->refusals);
    {
        bson_t arr, one;
        char k[16];
        BSON_APPEND_ARRAY_BEGIN(&d, "refused", &arr);
        for (int i = 0; i < r->nrefused; i++) {
            snprintf(k, sizeof k, "%d", i);
            BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &one);
            BSON_APPEND_UTF8(&one, "id", r->refused[i].id);
            BSON_APPEND_UTF8(&one, "ns", r->refused[i].ns);
            BSON_APPEND_UTF8(&one, "why", r->refused[i].why);
            bson_append_document_end(&arr, &one);
        }
        bson_append_array_end(&d, &arr);
    }
    BSON_APPEND_INT32(&d, "batchSize", r->o.batch_docs);
    BSON_APPEND_INT32(&d, "batchDelayMs", r->o.batch_delay_ms);
    BSON_APPEND_INT32(&d, "orphanCleanupDelayMs", r->o.cleanup_delay_ms);
    pthread_mutex_unlock(&r->mu);
    bson_append_document_end(out, &d);
}

/* ---- commands ------------------------------------------------------------------------------- */

static int cmd_full_ns(const cmd_ctx_t *ctx, char *ns, size_t sz, ms_error_t *err) {
    const char *v;
    if (!BSON_ITER_HOLDS_UTF8(&ctx->arg))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "namespace must be a string");
    v = bson_iter_utf8(&ctx->arg, NULL);
    if (!strchr(v, '.') || v[0] == '.' || strlen(v) > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s'", v);
    snprintf(ns, sz, "%s", v);
    return 0;
}

int cmd_cleanup_orphaned(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    int rc;
    (void)reply;
    if ((rc = cmd_full_ns(ctx, ns, sizeof ns, err)) != 0) return rc;
    if (!app->rdel) return err_set(err, MS_ERR_ILLEGAL_OPERATION, "no range deleter");
    long long dl = op_deadline_ms();
    if (!dl) dl = time_mono_ms() + MS_CLEANUP_ORPHANED_WAIT_MS;
    return rdel_wait(app->rdel, ns, NULL, NULL, dl, err);   /* {ok: 1} as MongoDB 4.4+ */
}

typedef struct tins {
    const char *ns;
    bson_t min, max;
    bool pending;
    const char *when;
    char id[RDEL_ID_BYTES];
    uint8_t uuid[16];
    const char *donor;
} tins_t;

static int tins_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    tins_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    buf_t min = {0}, max = {0};
    int64_t n = 0;
    int rc;
    if (!c || !c->sharded)
        return err_set(err, MS_ERR_NAMESPACE_NOT_SHARDED, "%s is not sharded on this shard", a->ns);
    if ((rc = keys_encode_bound(&c->sk, &a->min, &min, err)) != 0 ||
        (rc = keys_encode_bound(&c->sk, &a->max, &max, err)) != 0)
        goto out;
    {
        sqlite3_stmt *s = store_sk_range_stmt(t, c, "count(*)", NULL, &min, &max, err);
        if (!s) {
            rc = err->code;
            goto out;
        }
        if (sqlite3_step(s) == SQLITE_ROW) n = sqlite3_column_int64(s, 0);
        sqlite3_reset(s);
    }
    bson_t task, r;
    bson_init(&task);
    bson_append_binary(&task, "_id", -1, BSON_SUBTYPE_UUID, a->uuid, 16);
    BSON_APPEND_UTF8(&task, "nss", a->ns);
    bson_append_binary(&task, "collectionUuid", -1, BSON_SUBTYPE_UUID, c->uuid, 16);
    BSON_APPEND_UTF8(&task, "donorShardId", a->donor);
    BSON_APPEND_DOCUMENT_BEGIN(&task, "range", &r);
    BSON_APPEND_DOCUMENT(&r, "min", &a->min);
    BSON_APPEND_DOCUMENT(&r, "max", &a->max);
    bson_append_document_end(&task, &r);
    if (a->pending) BSON_APPEND_BOOL(&task, "pending", true);
    BSON_APPEND_UTF8(&task, "whenToClean", a->when);
    BSON_APPEND_DATE_TIME(&task, "timestamp", (int64_t)time(NULL) * 1000);
    BSON_APPEND_INT64(&task, "numOrphanDocs", n);
    BSON_APPEND_DOCUMENT(&task, "keyPattern", &c->sk.spec);
    rc = rdel_task_insert(t, &task, err);
    bson_destroy(&task);
out:
    buf_free(&min);
    buf_free(&max);
    return rc;
}

static bool doc_arg(const cmd_ctx_t *ctx, const char *name, bson_t *out) {
    bson_iter_t it;
    return cmd_field(ctx, name, &it) && view_doc(&it, out);
}

int cmd_test_insert_range_deletion(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8], me[128];
    tins_t a;
    bson_iter_t it;
    int rc;
    memset(&a, 0, sizeof a);
    if ((rc = cmd_full_ns(ctx, ns, sizeof ns, err)) != 0) return rc;
    if (!doc_arg(ctx, "min", &a.min) || !doc_arg(ctx, "max", &a.max))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "min and max must be documents");
    a.ns = ns;
    a.pending = cmd_field(ctx, "pending", &it) && bsonx_truthy(&it);
    a.when = "now";
    if (cmd_field(ctx, "whenToClean", &it)) {
        a.when = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
        if (strcmp(a.when, "now") != 0 && strcmp(a.when, "delayed") != 0)
            return err_set(err, MS_ERR_BAD_VALUE, "whenToClean must be \"now\" or \"delayed\"");
    }
    shv_identity(app->shv, me, sizeof me, NULL, 0);
    a.donor = me;
    if (getrandom(a.uuid, 16, 0) != 16)
        return err_set(err, MS_ERR_INTERNAL, "no randomness for a task id");
    a.uuid[6] = (uint8_t)((a.uuid[6] & 0x0f) | 0x40);   /* UUID version 4 */
    a.uuid[8] = (uint8_t)((a.uuid[8] & 0x3f) | 0x80);
    rdel_id_of(a.uuid, a.id);
    if ((rc = store_write(app->st, tins_fn, &a, err)) != 0) return rc;
    rdel_kick(app->rdel);
    BSON_APPEND_UTF8(reply, "id", a.id);
    return 0;
}

typedef struct tready {
    const char *id;
} tready_t;

static int tready_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    return rdel_task_set_ready(t, ((tready_t *)arg)->id, err);
}

int cmd_test_set_range_deletion_ready(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    bson_iter_t it;
    tready_t a;
    int rc;
    (void)reply;
    if (!cmd_field(ctx, "id", &it) || !BSON_ITER_HOLDS_UTF8(&it))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "id must be the task's 32-hex id");
    a.id = bson_iter_utf8(&it, NULL);
    if ((rc = store_write(app->st, tready_fn, &a, err)) != 0) return rc;
    rdel_kick(app->rdel);
    return 0;
}
