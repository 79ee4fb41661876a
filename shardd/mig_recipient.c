/*
 * mig_recipient.c — the recipient side of a chunk migration, run by bin/shardd (notes
 * §1.4–1.5; MongoDB's MigrationDestinationManager).
 *
 * `_recvChunkStart` starts the migrate thread, whose first act (after overlapping range
 * deletions here are gone) persists this shard's own pending range-deletion task for the
 * range, so a crash or an abort can never leave copied documents behind unnoticed; its
 * states `_recvChunkStatus` reports:
 *   ready → clone → catchup → steady → commitStart → done, or fail / abort.
 * Timed steps (moveChunk.to), each followed by migrateThreadHangAtStepN (a hold there
 * counts in step N's time; currentOp's heldAt names the point while one holds the thread):
 *   1 wait for overlapping range deletions here (bounded), then the collection with the
 *     donor's uuid and every index the donor has, built before any document arrives
 *   2 clone: `_migrateClone` batches applied in shard-key order
 *   3 catch-up: `_transferMods` until nothing is pending
 *   4 steady: keep draining until the donor says commitStart
 *   5 commit: a final drain after commitStart, the session migration's final pull
 *     (mig_session.c: the retryable-write records of the range, pulled by a thread of
 *     their own from the start of the clone), then count and checksum of the range
 * Points 6 and 7 (migrateThreadHangAtStep6/7) are after the decision arrives and after
 * the task is dealt with. Every applied document is range-checked, and a document whose
 * `_id` exists here outside the range fails the migration (MongoDB's guard: `_id` is
 * unique per shard only).
 * The decision: `_recvChunkReleaseCritSec` (committed) deletes the pending task, the range
 * is ours; `_recvChunkAbort` makes it ready, and the range deleter removes the copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/opctx.h"
#include "common/rpc.h"
#include "shardd/mig.h"

enum rstate { RS_READY, RS_CLONE, RS_CATCHUP, RS_STEADY, RS_COMMIT_START, RS_DONE, RS_FAIL,
              RS_ABORT };
static const char *const rstate_names[] = {"ready", "clone", "catchup", "steady", "commitStart",
                                           "done", "fail", "abort"};

struct mig_recv {
    mig_t *m;
    int refs;                    /* under m->mu: the thread and every command using it */
    char ns[MS_NS_BYTES_MAX + 1];
    char session[320], from_url[MS_URL_BYTES_MAX], from_shard[128], to_shard[128];
    uint8_t mig_uuid[16], coll_uuid[16];
    char id[33];
    bson_t min, max;
    keys_pattern_t pat;
    buf_t min_enc, max_enc;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum rstate state;
    char errmsg[512];
    int64_t cloned, cloned_bytes, catchup, steady;
    bool commit_start, abort_req, released, thread_done;
    bool writes_over;                /* the thread will write no more documents of the
                                      * range here (set by it, under mu): the task can be
                                      * made ready */
    int64_t range_count;             /* the range's running digest here (apply_fn keeps it) */
    uint64_t range_sum;
    int64_t step_ms[5];
    long long started_ms;
    const char *held_at;             /* under mu: the failpoint whose hang holds the migrate
                                      * thread now, or NULL (currentOp's heldAt) */
    /* Session migration's puller (mig_session.c). Owner: the migrate thread, which sets it
     * and clears it under mu before freeing it; status readers use it under mu. */
    mig_sessdest_t *sd;
    int64_t sess_records, sess_sentinels, sess_wait_ms;   /* for moveChunk.to */
};

/* ---- state --------------------------------------------------------------------------- */

static void set_state(mig_recv_t *r, enum rstate s) {
    pthread_mutex_lock(&r->mu);
    /* States only move forward (commitStart, set by _recvChunkCommit, may come while the
     * thread still reports catch-up); fail and abort are final. */
    if (r->state != RS_FAIL && r->state != RS_ABORT && s > r->state) r->state = s;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void fail(mig_recv_t *r, const ms_error_t *e) {
    pthread_mutex_lock(&r->mu);
    if (r->state != RS_FAIL && r->state != RS_ABORT) {
        r->state = r->abort_req ? RS_ABORT : RS_FAIL;
        snprintf(r->errmsg, sizeof r->errmsg, "%s", e->msg);
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    log_warn("migration receive failed ns=%s session=%s errmsg=%s", log_str(r->ns),
             log_str(r->session), log_str(e->msg));
}

/* The session puller's question between pulls: is this receive over? */
static bool recv_stopping(void *arg) {
    mig_recv_t *r = arg;
    bool over;
    pthread_mutex_lock(&r->mu);
    over = r->abort_req || r->m->stopping || r->state == RS_FAIL || r->state == RS_ABORT;
    pthread_mutex_unlock(&r->mu);
    return over;
}

/* The migrate thread ends the puller: no status reader sees it any more, it is woken (a
 * receive that failed or was aborted makes it stop at once) and joined; its counts stay
 * for moveChunk.to. */
static void sessdest_end(mig_recv_t *r) {
    mig_sessdest_t *sd;
    int64_t records = 0, sentinels = 0;
    pthread_mutex_lock(&r->mu);
    sd = r->sd;
    r->sd = NULL;
    pthread_mutex_unlock(&r->mu);
    if (!sd) return;
    mig_sessdest_kick(sd);
    mig_sessdest_counts(sd, &records, &sentinels);
    mig_sessdest_free(sd);
    pthread_mutex_lock(&r->mu);
    r->sess_records = records;
    r->sess_sentinels = sentinels;
    pthread_mutex_unlock(&r->mu);
}

static bool aborted(mig_recv_t *r, ms_error_t *err) {
    bool a;
    pthread_mutex_lock(&r->mu);
    a = r->abort_req || r->m->stopping;
    pthread_mutex_unlock(&r->mu);
    if (a) err_set(err, MS_ERR_OPERATION_FAILED, "migration aborted");
    return a;
}

void mig_recv_free(mig_recv_t *r) {
    if (!r) return;
    bson_destroy(&r->min);
    bson_destroy(&r->max);
    keys_pattern_free(&r->pat);
    buf_free(&r->min_enc);
    buf_free(&r->max_enc);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static void recv_unref_locked(mig_recv_t *r) {
    if (--r->refs == 0) mig_recv_free(r);
}

/* ---- applying documents (one write transaction per batch) ------------------------------- */

typedef struct apply_arg {
    mig_recv_t *r;
    bson_iter_t docs;            /* the array of documents or of {_id} */
    bool deletes;
    bool fresh;                  /* clone batch: insert first, look up only on a duplicate */
    int64_t applied, bytes;
    int64_t delta;               /* documents added (+) or removed (-) in the range */
    uint64_t dsum;               /* the change to the range's checksum */
} apply_arg_t;

/* Upserts one document by _id (full replacement), inside the range only; a document of
 * the same _id outside the range fails the migration. */
static int apply_one(store_txn_t *t, store_coll_t *c, mig_recv_t *r, const bson_t *doc, bool fresh,
                     int64_t *applied, int64_t *added, uint64_t *dsum, ms_error_t *err) {
    buf_t key = {0}, okey = {0};
    bson_t old;
    int64_t rid = 0;
    bool exists = false;
    int rc;
    if ((rc = keys_extract(&r->pat, doc, NULL, &key, err)) != 0) goto out;
    if (!mig_key_in_range(&key, &r->min_enc, &r->max_enc)) goto out;   /* not ours to take */
    if (fp_active(FP_SKIP_ONE_MIGRATED_DOC) && fp_check(FP_SKIP_ONE_MIGRATED_DOC, NULL, NULL, NULL))
        goto out;
    if (fresh) {
        /* Clone batches are nearly always new here: insert first, and look the _id up
         * only when the insert meets it (MongoDB's guard then decides). */
        bson_t info = BSON_INITIALIZER;
        bson_iter_t kp, f;
        rc = store_write_doc(t, c, 0, NULL, doc, NULL, &info, err);
        bool id_dup = rc == MS_ERR_DUPLICATE_KEY && bson_iter_init_find(&kp, &info, "keyPattern") &&
                      bson_iter_recurse(&kp, &f) && bson_iter_next(&f) &&
                      strcmp(bson_iter_key(&f), "_id") == 0 && !bson_iter_next(&f);
        bson_destroy(&info);
        if (rc == 0) {
            *dsum += xfer_doc_hash(bson_get_data(doc), doc->len);
            (*added)++;
            (*applied)++;
            goto out;
        }
        if (!id_dup) goto out;
        memset(err, 0, sizeof *err);
    }
    bson_init(&old);
    if ((rc = mig_find_by_id(t, c, doc, &rid, &old, &exists, err)) != 0) {
        bson_destroy(&old);
        goto out;
    }
    if (exists) {
        if (keys_extract(&r->pat, &old, NULL, &okey, NULL) != 0 ||
            !mig_key_in_range(&okey, &r->min_enc, &r->max_enc)) {
            char *js = bsonx_to_json(doc);
            rc = err_set(err, MS_ERR_OPERATION_FAILED,
                         "cannot migrate chunk, local document %.200s has same _id as cloned "
                         "remote document", js ? js : "?");
            bson_free(js);
        } else if ((rc = store_write_doc(t, c, rid, &old, doc, NULL, NULL, err)) == 0) {
            *dsum -= xfer_doc_hash(bson_get_data(&old), old.len);
            *dsum += xfer_doc_hash(bson_get_data(doc), doc->len);
        }
    } else if ((rc = store_write_doc(t, c, 0, NULL, doc, NULL, NULL, err)) == 0) {
        *dsum += xfer_doc_hash(bson_get_data(doc), doc->len);
        (*added)++;
    }
    bson_destroy(&old);
    if (rc == 0) (*applied)++;
out:
    buf_free(&key);
    buf_free(&okey);
    return rc;
}

/* Deletes the document of this _id when it is here and inside the range. */
static int delete_one(store_txn_t *t, store_coll_t *c, mig_recv_t *r, const bson_t *idv,
                      int64_t *applied, int64_t *added, uint64_t *dsum, ms_error_t *err) {
    bson_t old;
    buf_t key = {0};
    int64_t rid = 0;
    bool exists = false;
    int rc;
    bson_init(&old);
    if ((rc = mig_find_by_id(t, c, idv, &rid, &old, &exists, err)) == 0 && exists &&
        keys_extract(&r->pat, &old, NULL, &key, NULL) == 0 &&
        mig_key_in_range(&key, &r->min_enc, &r->max_enc)) {
        if ((rc = store_write_doc(t, c, rid, &old, NULL, NULL, NULL, err)) == 0) {
            (*applied)++;
            (*added)--;
            *dsum -= xfer_doc_hash(bson_get_data(&old), old.len);
        }
    }
    buf_free(&key);
    bson_destroy(&old);
    return rc;
}

static int apply_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    apply_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->r->ns);
    bson_iter_t it = a->docs;
    int rc;
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "%s vanished during the migration", a->r->ns);
    while (bson_iter_next(&it)) {
        bson_t doc;
        if (!bsonx_view_container(&it, &doc))
            return err_set(err, MS_ERR_INVALID_BSON, "migration batch holds a non-document");
        rc = a->deletes ? delete_one(t, c, a->r, &doc, &a->applied, &a->delta, &a->dsum, err)
                        : apply_one(t, c, a->r, &doc, a->fresh, &a->applied, &a->delta, &a->dsum, err);
        if (rc != 0) return rc;
        a->bytes += doc.len;
    }
    /* Until the commit these documents are orphans here (MongoDB's numOrphanDocs on the
     * recipient's task, counted in the same transaction as the documents). */
    return a->delta ? mig_task_add_orphans(t, a->r->id, a->delta, false, err) : 0;
}

static int apply_array(mig_recv_t *r, const bson_t *reply, const char *field, bool deletes,
                       int64_t *n, int64_t *bytes, int64_t *count, ms_error_t *err) {
    bson_iter_t it;
    apply_arg_t a = {.r = r, .deletes = deletes, .fresh = strcmp(field, "objects") == 0};
    int rc;
    *n = 0;
    if (!bson_iter_init_find(&it, reply, field) || !BSON_ITER_HOLDS_ARRAY(&it)) return 0;
    if (!bson_iter_recurse(&it, &a.docs)) return 0;
    {
        bson_iter_t probe = a.docs;
        while (bson_iter_next(&probe)) (*count)++;
    }
    if ((rc = store_write(r->m->app->st, apply_fn, &a, err)) != 0) return rc;
    /* Committed: the running digest moves with it (read by _recvChunkCommit). */
    pthread_mutex_lock(&r->mu);
    r->range_count += a.delta;
    r->range_sum += a.dsum;
    pthread_mutex_unlock(&r->mu);
    *n = a.applied;
    if (bytes) *bytes += a.bytes;
    return 0;
}

static int donor_call(mig_recv_t *r, const char *cmdname, bson_t *reply, ms_error_t *err) {
    bson_t cmd;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, cmdname, r->ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", r->session);
    rc = mig_call(r->from_url, &cmd, MS_RPC_PEER_TIMEOUT_MS_DEFAULT, reply, err);
    bson_destroy(&cmd);
    return rc;
}

/* One `_transferMods` round applied: deletes first, then the reloaded documents. *size is
 * the donor's byte count (0 = nothing was pending). */
static int transfer_round(mig_recv_t *r, int64_t *applied, int64_t *size, ms_error_t *err) {
    bson_t reply;
    int64_t nd = 0, nr = 0, cnt = 0;
    bson_iter_t it;
    int rc;
    if ((rc = donor_call(r, "_transferMods", &reply, err)) != 0) return rc;
    *size = 0;
    if (bson_iter_init_find(&it, &reply, "size")) bsonx_as_int64(&it, size);
    if ((rc = apply_array(r, &reply, "deleted", true, &nd, NULL, &cnt, err)) == 0)
        rc = apply_array(r, &reply, "reload", false, &nr, NULL, &cnt, err);
    bson_destroy(&reply);
    *applied = cnt;
    return rc;
}

typedef struct task_arg {
    const char *id;
    const bson_t *task;
    bool del;                    /* delete the task; neither: make it ready */
} task_arg_t;
static int task_fn(store_txn_t *t, void *arg, ms_error_t *err);

/* The clone prefetch: one `_migrateClone` call on a thread of its own. */
typedef struct fetch {
    mig_recv_t *r;
    bson_t reply;
    int rc;
    ms_error_t err;
} fetch_t;

static void *fetch_main(void *p) {
    fetch_t *f = p;
    f->rc = donor_call(f->r, "_migrateClone", &f->reply, &f->err);
    return NULL;
}

/* ---- the migrate thread ------------------------------------------------------------------ */

/* Every failpoint the migrate thread evaluates: while one holds it, currentOp says where
 * (heldAt). */
static int recv_fp(mig_recv_t *r, const char *name, ms_error_t *err) {
    fp_held_t held = {.mu = &r->mu, .slot = &r->held_at};
    return fp_eval_held(name, &held, err);
}

/* Ends timed step N (1..5): its failpoint migrateThreadHangAtStepN first, then the clock,
 * so a hold there counts in step N's time. */
static int step_done(mig_recv_t *r, int step, long long *t0, ms_error_t *err) {
    int rc = recv_fp(r, mig_recv_step_fps[step - 1], err);
    long long now = time_mono_ms();
    r->step_ms[step - 1] = now - *t0;
    *t0 = now;
    return rc;
}

/* Step 1's second half: the collection with the donor's uuid, sharded by the same key, and
 * every index the donor has (unique ones included), before any document arrives. */
static int create_collection_and_indexes(mig_recv_t *r, ms_error_t *err) {
    bson_t cmd, reply, specs_arr;
    bson_iter_t it, cur, batch;
    char db[MS_NS_BYTES_MAX + 1];
    const char *dot = strchr(r->ns, '.');
    int rc;
    snprintf(db, sizeof db, "%.*s", (int)(dot - r->ns), r->ns);
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "listIndexes", dot + 1);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = mig_call(r->from_url, &cmd, MS_RPC_PEER_TIMEOUT_MS_DEFAULT, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0) return rc;
    bson_init(&specs_arr);
    if (bsonx_find_path(&reply, "cursor.firstBatch", &cur) && bson_iter_recurse(&cur, &batch)) {
        int i = 0;
        char k[16];
        while (bson_iter_next(&batch)) {
            bson_t spec, clean;
            bson_iter_t f;
            if (!bsonx_view_container(&batch, &spec)) continue;
            /* The user's form of the spec: key, name, unique. */
            bson_init(&clean);
            if (bson_iter_init(&f, &spec))
                while (bson_iter_next(&f))
                    if (strcmp(bson_iter_key(&f), "key") == 0 || strcmp(bson_iter_key(&f), "name") == 0 ||
                        strcmp(bson_iter_key(&f), "unique") == 0)
                        bsonx_append_iter(&clean, bson_iter_key(&f), &f);
            snprintf(k, sizeof k, "%d", i++);
            BSON_APPEND_DOCUMENT(&specs_arr, k, &clean);
            bson_destroy(&clean);
        }
    }
    bson_destroy(&reply);
    /* Collection (donor's uuid) and indexes. */
    bson_t wrap;
    bson_init(&wrap);
    BSON_APPEND_ARRAY(&wrap, "a", &specs_arr);
    bson_destroy(&specs_arr);
    if (!bson_iter_init_find(&it, &wrap, "a") || !bson_iter_recurse(&it, &cur)) {
        bson_destroy(&wrap);
        return err_set(err, MS_ERR_INTERNAL, "index list");
    }
    shardd_index_result_t res;
    rc = shardd_build_indexes(r->m->app, NULL, r->ns, r->coll_uuid, false, &cur, &res, err);
    bson_destroy(&wrap);
    if (rc == MS_ERR_BAD_VALUE) rc = 0;   /* no index at all besides _id_: nothing to build */
    if (rc != 0) return rc;
    return shardd_set_shard_key(r->m->app, r->ns, &r->pat, err);
}

static void *recv_main(void *p) {
    mig_recv_t *r = p;
    mig_t *m = r->m;
    long long t0 = time_mono_ms();
    int step = 0, rc = 0;
    ms_error_t e = {0};
    op_set_deadline_ms(0);
    r->started_ms = time_now_ms();

    /* 1: overlapping range deletions here must finish first (notes §1.5 step 1), then the
     * collection and its indexes. */
    if (aborted(r, &e)) goto failed;
    if (m->app->rdel &&
        (rc = rdel_wait_coll(m->app->rdel, r->ns, r->coll_uuid, &r->min, &r->max,
                             time_mono_ms() + MS_MIG_RECV_OVERLAP_WAIT_MS, &e)) != 0) {
        err_set(&e, MS_ERR_EXCEEDED_TIME_LIMIT,
                "Failed to receive range: an overlapping range on the recipient is still being "
                "deleted after %d ms (try again once it is gone)", MS_MIG_RECV_OVERLAP_WAIT_MS);
        goto failed;
    }
    {
        /* Our own pending task before anything is copied: whatever arrives from now on is
         * accounted for, and deleted if the migration does not commit. */
        bson_t task;
        mig_task_doc(r->mig_uuid, r->ns, r->coll_uuid, r->from_shard, &r->min, &r->max, &r->pat,
                     true, true, &task);
        task_arg_t a = {.task = &task};
        rc = store_write(m->app->st, task_fn, &a, &e);
        bson_destroy(&task);
        if (rc != 0) goto failed;
    }
    if (aborted(r, &e)) goto failed;
    if ((rc = create_collection_and_indexes(r, &e)) != 0) goto failed;
    {
        /* Whatever the range holds here already (nothing, once overlapping deletions are
         * done): the start of the running digest that apply_array keeps. */
        int64_t cnt = 0;
        uint64_t sum = 0;
        if ((rc = mig_range_digest(m->app->st, r->ns, &r->min_enc, &r->max_enc, &cnt, &sum, NULL,
                                   &e)) != 0)
            goto failed;
        pthread_mutex_lock(&r->mu);
        r->range_count = cnt;
        r->range_sum = sum;
        pthread_mutex_unlock(&r->mu);
    }
    if ((rc = step_done(r, ++step, &t0, &e)) != 0) goto failed;

    /* 2: clone. The next batch is fetched while this one is applied (MongoDB's fetcher
     * and inserter threads with a queue of one), so reading on the donor and writing
     * here overlap. */
    set_state(r, RS_CLONE);
    {
        /* Session migration runs beside the clone and catch-up, as MongoDB starts its
         * SessionCatalogMigrationDestination before cloning. */
        mig_sessdest_t *sd = NULL;
        if ((rc = mig_sessdest_start(m, r->ns, r->from_url, r->session, &r->min_enc, &r->max_enc,
                                     recv_stopping, r, &sd, &e)) != 0)
            goto failed;
        pthread_mutex_lock(&r->mu);
        r->sd = sd;
        pthread_mutex_unlock(&r->mu);
    }
    {
        fetch_t f = {.r = r};
        bool have = false;
        if ((f.rc = donor_call(r, "_migrateClone", &f.reply, &f.err)) != 0) {
            e = f.err;
            rc = f.rc;
            goto failed;
        }
        have = true;
        for (;;) {
            bson_t cur;
            int64_t n = 0, cnt = 0, bytes = 0;
            pthread_t th;
            bool started = false;
            if (aborted(r, &e)) {
                if (have) bson_destroy(&f.reply);
                goto failed;
            }
            bson_steal(&cur, &f.reply);   /* f.reply is free for the next fetch */
            have = false;
            {
                bson_iter_t it, arr;
                bool empty = !(bson_iter_init_find(&it, &cur, "objects") &&
                               bson_iter_recurse(&it, &arr) && bson_iter_next(&arr));
                if (!empty && pthread_create(&th, NULL, fetch_main, &f) == 0) started = true;
                if (empty) {
                    bson_destroy(&cur);
                    break;
                }
            }
            rc = apply_array(r, &cur, "objects", false, &n, &bytes, &cnt, &e);
            bson_destroy(&cur);
            if (!started) {
                f.rc = donor_call(r, "_migrateClone", &f.reply, &f.err);
            } else {
                pthread_join(th, NULL);
            }
            if (f.rc == 0) have = true;
            if (rc != 0 || f.rc != 0) {
                if (have) bson_destroy(&f.reply);
                if (rc == 0) {
                    rc = f.rc;
                    e = f.err;
                }
                goto failed;
            }
            pthread_mutex_lock(&r->mu);
            r->cloned += cnt;
            r->cloned_bytes += bytes;
            pthread_mutex_unlock(&r->mu);
        }
    }
    if ((rc = step_done(r, ++step, &t0, &e)) != 0) goto failed;

    /* 3: catch-up until a round comes back empty. */
    set_state(r, RS_CATCHUP);
    for (;;) {
        int64_t n = 0, size = 0;
        if (aborted(r, &e) || mig_sessdest_failed(r->sd, &e)) goto failed;
        if ((rc = transfer_round(r, &n, &size, &e)) != 0) goto failed;
        pthread_mutex_lock(&r->mu);
        r->catchup += n;
        pthread_mutex_unlock(&r->mu);
        if (size == 0) break;
    }
    if ((rc = step_done(r, ++step, &t0, &e)) != 0) goto failed;

    /* 4: steady until commitStart; MongoDB's 10 ms between empty rounds. */
    set_state(r, RS_STEADY);
    for (;;) {
        int64_t n = 0, size = 0;
        bool go;
        if (aborted(r, &e) || mig_sessdest_failed(r->sd, &e)) goto failed;
        pthread_mutex_lock(&r->mu);
        go = r->commit_start;
        if (!go) {
            time_cond_wait_ms(&r->cv, &r->mu, 10);
            go = r->commit_start;
        }
        pthread_mutex_unlock(&r->mu);
        if (go) break;
        if ((rc = transfer_round(r, &n, &size, &e)) != 0) goto failed;
        pthread_mutex_lock(&r->mu);
        r->steady += n;
        pthread_mutex_unlock(&r->mu);
    }
    if ((rc = step_done(r, ++step, &t0, &e)) != 0) goto failed;

    /* 5: commitStart: the donor's writes are blocked; drain what is left (at least one
     * round), then count and checksum the range for the donor to compare. */
    for (;;) {
        int64_t n = 0, size = 0;
        if (aborted(r, &e)) goto failed;
        if ((rc = transfer_round(r, &n, &size, &e)) != 0) goto failed;
        pthread_mutex_lock(&r->mu);
        r->steady += n;
        pthread_mutex_unlock(&r->mu);
        if (size == 0) break;
    }
    {
        /* MongoDB's step 7: the session history is here too before the receive is done;
         * the donor's commit waits for done, so a migration never commits without it. */
        long long w0 = time_mono_ms();
        rc = mig_sessdest_wait(r->sd, w0 + MS_MIG_RECV_COMMIT_MS, &e);
        r->sess_wait_ms = time_mono_ms() - w0;
        if (rc != 0) goto failed;
    }

    if ((rc = step_done(r, ++step, &t0, &e)) != 0) goto failed;
    pthread_mutex_lock(&r->mu);
    r->writes_over = true;
    pthread_mutex_unlock(&r->mu);
    set_state(r, RS_DONE);

    /* Wait for the decision (the donor always sends one, from its recovery if it has to). */
    {
        long long until = time_mono_ms() + MS_MIG_RECV_DECISION_WAIT_MS;
        pthread_mutex_lock(&r->mu);
        while (!r->released && !r->abort_req && !m->stopping && time_mono_ms() < until) {
            time_cond_wait_ms(&r->cv, &r->mu, 1000);
        }
        bool ab = r->abort_req;
        pthread_mutex_unlock(&r->mu);
        recv_fp(r, mig_recv_step_fps[5], NULL);
        if (ab) {
            err_set(&e, MS_ERR_OPERATION_FAILED, "migration aborted by the donor after the final drain");
            goto failed;
        }
    }
    goto finish;

failed:
    fail(r, &e);
    pthread_mutex_lock(&r->mu);
    r->writes_over = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    /* Stay until the donor's decision (it aborts when it sees `fail`), bounded. */
    {
        long long until = time_mono_ms() + MS_MIG_RECV_DECISION_WAIT_MS;
        pthread_mutex_lock(&r->mu);
        while (!r->abort_req && !r->released && !m->stopping && time_mono_ms() < until) {
            time_cond_wait_ms(&r->cv, &r->mu, 1000);
        }
        pthread_mutex_unlock(&r->mu);
    }
finish:
    sessdest_end(r);
    recv_fp(r, mig_recv_step_fps[6], NULL);
    {
        bool ok;
        pthread_mutex_lock(&r->mu);
        ok = r->released;
        const char *note = ok ? "success" : "aborted";
        bson_t details;
        bson_init(&details);
        BSON_APPEND_DOCUMENT(&details, "min", &r->min);
        BSON_APPEND_DOCUMENT(&details, "max", &r->max);
        BSON_APPEND_UTF8(&details, "from", r->from_shard);
        BSON_APPEND_UTF8(&details, "to", r->to_shard);
        char k[32];
        for (int i = 0; i < 5; i++) {
            snprintf(k, sizeof k, "step %d of 5", i + 1);
            if (i < step) BSON_APPEND_INT64(&details, k, r->step_ms[i]);
        }
        BSON_APPEND_INT64(&details, "clonedDocs", r->cloned);
        BSON_APPEND_INT64(&details, "clonedBytes", r->cloned_bytes);
        BSON_APPEND_INT64(&details, "catchup", r->catchup);
        BSON_APPEND_INT64(&details, "steady", r->steady);
        BSON_APPEND_INT64(&details, "sessionRecords", r->sess_records);
        BSON_APPEND_INT64(&details, "sessionSentinels", r->sess_sentinels);
        BSON_APPEND_INT64(&details, "sessionMigrationWaitMS", r->sess_wait_ms);
        BSON_APPEND_UTF8(&details, "note", note);
        if (r->errmsg[0]) BSON_APPEND_UTF8(&details, "errmsg", r->errmsg);
        pthread_mutex_unlock(&r->mu);
        mig_log_change(m, "moveChunk.to", r->ns, &details);
        log_info("migration received ns=%s from=%s ok=%d docs=%lld bytes=%lld catchup=%lld "
                 "steady=%lld ms=%lld", log_str(r->ns), log_str(r->from_shard), ok,
                 (long long)r->cloned, (long long)r->cloned_bytes, (long long)r->catchup,
                 (long long)r->steady, time_now_ms() - r->started_ms);
        bson_destroy(&details);
        pthread_mutex_lock(&m->mu);
        if (ok) m->received++;
        pthread_mutex_unlock(&m->mu);
    }
    {
        /* Aborted or failed: our copy is an orphan range; the decision handler (or this,
         * when the donor told us) makes the task ready. */
        bool ab;
        pthread_mutex_lock(&r->mu);
        ab = r->abort_req && !r->released;
        r->thread_done = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        if (ab) {
            ms_error_t e2 = {0};
            if (mig_recv_task_ready(m, r->id, &e2) != 0)
                log_error("recipient range-deletion task not made ready id=%s errmsg=%s", r->id,
                          log_str(e2.msg));
        }
    }
    pthread_mutex_lock(&m->mu);
    if (m->recv == r) m->recv = NULL;
    pthread_cond_broadcast(&m->cv);
    recv_unref_locked(r);
    pthread_mutex_unlock(&m->mu);
    (void)rc;
    return NULL;
}

/* ---- persisted task helpers ---------------------------------------------------------------- */


static int task_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    task_arg_t *a = arg;
    if (a->task) return rdel_task_insert(t, a->task, err);
    if (a->del) return rdel_task_delete(t, a->id, err);
    /* Ready only when it is still there (a second abort is a no-op). */
    bson_t doc;
    int rc = store_sdoc_get(t, SDOC_RANGE_DELETIONS, a->id, &doc, err);
    if (rc == MS_ERR_NO_SUCH_KEY) {
        memset(err, 0, sizeof *err);
        return 0;
    }
    if (rc != 0) return rc;
    bson_destroy(&doc);
    return rdel_task_set_ready(t, a->id, err);
}

int mig_recv_task_ready(mig_t *m, const char *id, ms_error_t *err) {
    task_arg_t a = {.id = id};
    int rc = store_write(m->app->st, task_fn, &a, err);
    if (rc == 0 && m->app->rdel) rdel_kick(m->app->rdel);
    return rc;
}

static int task_delete(mig_t *m, const char *id, ms_error_t *err) {
    task_arg_t a = {.id = id, .del = true};
    return store_write(m->app->st, task_fn, &a, err);
}

/* ---- commands ----------------------------------------------------------------------------- */

static bool uuid_field(cmd_ctx_t *ctx, const char *name, uint8_t out[16]) {
    bson_iter_t it;
    bson_subtype_t st;
    uint32_t len = 0;
    const uint8_t *data = NULL;
    if (!cmd_field(ctx, name, &it) || !BSON_ITER_HOLDS_BINARY(&it)) return false;
    bson_iter_binary(&it, &st, &len, &data);
    if (len != 16) return false;
    memcpy(out, data, 16);
    return true;
}

static const char *str_arg(cmd_ctx_t *ctx, const char *name) {
    bson_iter_t it;
    return cmd_field(ctx, name, &it) && BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
}

int cmd_recv_chunk_start(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_t *m = app->mig;
    mig_recv_t *r;
    bson_iter_t it;
    bson_t v;
    int rc;
    const char *ns = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    /* Tests: the request held up on its way, as a network cut that heals would. */
    fp_eval(FP_HANG_BEFORE_RECV_CHUNK_START, NULL);
    if (!strchr(ns, '.') || strlen(ns) > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "_recvChunkStart needs \"db.coll\"");
    if (!(r = mem_calloc_aligned(1, sizeof *r))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    r->m = m;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    bson_init(&r->min);
    bson_init(&r->max);
    snprintf(r->ns, sizeof r->ns, "%s", ns);
    snprintf(r->session, sizeof r->session, "%s", str_arg(ctx, "sessionId"));
    snprintf(r->from_url, sizeof r->from_url, "%s", str_arg(ctx, "from"));
    snprintf(r->from_shard, sizeof r->from_shard, "%s", str_arg(ctx, "fromShardName"));
    snprintf(r->to_shard, sizeof r->to_shard, "%s", str_arg(ctx, "toShardName"));
    rc = 0;
    if (!r->session[0] || !r->from_url[0] || !uuid_field(ctx, "migrationId", r->mig_uuid) ||
        !uuid_field(ctx, "collectionUUID", r->coll_uuid))
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE,
                     "_recvChunkStart needs sessionId, from, migrationId and collectionUUID");
    if (rc == 0 && cmd_field(ctx, "min", &it) && bsonx_view_container(&it, &v)) bson_concat(&r->min, &v);
    if (rc == 0 && cmd_field(ctx, "max", &it) && bsonx_view_container(&it, &v)) bson_concat(&r->max, &v);
    if (rc == 0) {
        if (!cmd_field(ctx, "shardKeyPattern", &it) || !bsonx_view_container(&it, &v))
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "_recvChunkStart needs shardKeyPattern");
        else if ((rc = keys_pattern_parse(&v, &r->pat, err)) == 0 &&
                 (rc = keys_encode_bound(&r->pat, &r->min, &r->min_enc, err)) == 0)
            rc = keys_encode_bound(&r->pat, &r->max, &r->max_enc, err);
    }
    if (rc != 0) {
        mig_recv_free(r);
        return rc;
    }
    mig_uuid_hex(r->mig_uuid, r->id);

    pthread_mutex_lock(&m->mu);
    if (mig_abort_remembered_locked(m, r->mig_uuid)) {
        pthread_mutex_unlock(&m->mu);
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "migration %s was aborted by its donor before this start arrived", r->id);
        log_warn("late migration start refused id=%s ns=%s", r->id, log_str(r->ns));
        mig_recv_free(r);
        return rc;
    }
    if (m->recv && strcmp(m->recv->session, r->session) == 0) {
        pthread_mutex_unlock(&m->mu);
        mig_recv_free(r);
        BSON_APPEND_BOOL(reply, "started", true);   /* the same start, again */
        return 0;
    }
    if (mig_index_ddl_running_locked(m, r->ns)) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "Unable to start new migration because an index build or drop of %s is "
                     "running on this shard", r->ns);
        pthread_mutex_unlock(&m->mu);
        mig_recv_free(r);
        return rc;
    }
    if (m->stopping || m->recv || m->donor || m->recoveries > 0 || m->stuck > 0) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "Unable to start new migration because this shard is currently %s",
                     m->donor ? "donating a chunk" : m->recv ? "receiving a chunk"
                     : m->recoveries || m->stuck ? "recovering a migration" : "shutting down");
        pthread_mutex_unlock(&m->mu);
        mig_recv_free(r);
        return rc;
    }
    r->refs = 1;
    m->recv = r;
    pthread_mutex_unlock(&m->mu);

    /* Must know the collection is sharded, with current metadata (notes §1.5). */
    rc = shv_refresh(app->shv, r->ns, err);
    if (rc == 0) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_mutex_lock(&m->mu);
        r->refs++;
        if (pthread_create(&th, &at, recv_main, r) != 0) {
            r->refs--;
            rc = err_set(err, MS_ERR_INTERNAL, "cannot start the migrate thread");
        }
        pthread_mutex_unlock(&m->mu);
        pthread_attr_destroy(&at);
    }
    pthread_mutex_lock(&m->mu);
    if (rc != 0 && m->recv == r) m->recv = NULL;
    recv_unref_locked(r);
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (rc == 0) BSON_APPEND_BOOL(reply, "started", true);
    return rc;
}

/* The receive of this command's sessionId (or migrationId), with a reference. */
static mig_recv_t *recv_for(cmd_ctx_t *ctx, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_t *m = app->mig;
    const char *sid = str_arg(ctx, "sessionId");
    uint8_t mid[16];
    bool has_mid = uuid_field(ctx, "migrationId", mid);
    mig_recv_t *r = NULL;
    pthread_mutex_lock(&m->mu);
    if (m->recv && ((sid[0] && strcmp(m->recv->session, sid) == 0) ||
                    (has_mid && memcmp(m->recv->mig_uuid, mid, 16) == 0))) {
        r = m->recv;
        r->refs++;
    }
    pthread_mutex_unlock(&m->mu);
    if (!r && err)
        err_set(err, MS_ERR_CONFLICTING_OPERATION, "no active receive with session %s", sid);
    return r;
}

static void recv_release(mig_t *m, mig_recv_t *r) {
    pthread_mutex_lock(&m->mu);
    recv_unref_locked(r);
    pthread_mutex_unlock(&m->mu);
}

static void append_status_locked(mig_recv_t *r, bson_t *out) {
    bson_t counts;
    BSON_APPEND_BOOL(out, "active", r->state != RS_DONE && r->state != RS_FAIL && r->state != RS_ABORT);
    BSON_APPEND_UTF8(out, "sessionId", r->session);
    BSON_APPEND_UTF8(out, "ns", r->ns);
    BSON_APPEND_UTF8(out, "from", r->from_url);
    BSON_APPEND_UTF8(out, "fromShardId", r->from_shard);
    BSON_APPEND_DOCUMENT(out, "min", &r->min);
    BSON_APPEND_DOCUMENT(out, "max", &r->max);
    BSON_APPEND_DOCUMENT(out, "shardKeyPattern", &r->pat.spec);
    BSON_APPEND_UTF8(out, "state", rstate_names[r->state]);
    if (r->errmsg[0]) BSON_APPEND_UTF8(out, "errmsg", r->errmsg);
    BSON_APPEND_DOCUMENT_BEGIN(out, "counts", &counts);
    BSON_APPEND_INT64(&counts, "cloned", r->cloned);
    BSON_APPEND_INT64(&counts, "clonedBytes", r->cloned_bytes);
    BSON_APPEND_INT64(&counts, "catchup", r->catchup);
    BSON_APPEND_INT64(&counts, "steady", r->steady);
    bson_append_document_end(out, &counts);
    if (r->sd) mig_sessdest_status(r->sd, out);
}

static bool steady_or_done(enum rstate s) {
    return s == RS_STEADY || s == RS_COMMIT_START || s == RS_DONE || s == RS_FAIL || s == RS_ABORT;
}

static void wait_locked(mig_recv_t *r, long long until_ms) {
    long long left = until_ms - time_mono_ms();
    if (left > 0) time_cond_wait_ms(&r->cv, &r->mu, left > 100 ? 100 : left);
}

int cmd_recv_chunk_status(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_recv_t *r = recv_for(ctx, err);
    if (!r) return err->code;
    pthread_mutex_lock(&r->mu);
    if (cmd_flag(ctx, "waitForSteadyOrDone", false)) {
        /* MongoDB's recipient waits up to a second for steady or done. */
        long long until = time_mono_ms() + 1000;
        while (!steady_or_done(r->state) && time_mono_ms() < until) wait_locked(r, until);
    }
    append_status_locked(r, reply);
    pthread_mutex_unlock(&r->mu);
    recv_release(app->mig, r);
    return 0;
}

int cmd_recv_chunk_commit(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_recv_t *r = recv_for(ctx, err);
    int rc = 0;
    if (!r) return err->code;
    pthread_mutex_lock(&r->mu);
    long long until = time_mono_ms() + MS_MIG_RECV_COMMIT_MS;
    /* The donor may go early (write-pause budget): catch-up is fine, cloning is not. */
    while ((r->state == RS_READY || r->state == RS_CLONE) && time_mono_ms() < until)
        wait_locked(r, until);
    if (r->state == RS_CATCHUP || r->state == RS_STEADY) {
        /* MongoDB's commitStart: the donor's writes are blocked, the final drain runs. */
        r->commit_start = true;
        r->state = RS_COMMIT_START;
        pthread_cond_broadcast(&r->cv);
        until = time_mono_ms() + MS_MIG_RECV_COMMIT_MS;
        while (r->state != RS_DONE && r->state != RS_FAIL && r->state != RS_ABORT &&
               time_mono_ms() < until)
            wait_locked(r, until);
    }
    if (r->state == RS_DONE) {
        append_status_locked(r, reply);
        BSON_APPEND_INT64(reply, "rangeCount", r->range_count);
        BSON_APPEND_INT64(reply, "rangeChecksum", (int64_t)r->range_sum);
    } else {
        rc = err_set(err, MS_ERR_OPERATION_FAILED, "_recvChunkCommit failed: recipient state %s%s%s",
                     rstate_names[r->state], r->errmsg[0] ? ": " : "", r->errmsg);
        if (r->state != RS_FAIL && r->state != RS_ABORT) {
            r->state = RS_FAIL;
            snprintf(r->errmsg, sizeof r->errmsg, "timed out waiting for the commit drain");
            pthread_cond_broadcast(&r->cv);
        }
    }
    pthread_mutex_unlock(&r->mu);
    recv_release(app->mig, r);
    return rc;
}

/* `_recvChunkAbort`: the running receive stops; once its thread writes no more (it checks
 * between batches), the task is made ready here, and only then is the abort
 * acknowledged: the donor forgets its coordinator document on our answer, so a kill -9
 * right after must find the task ready, never pending with nobody left to decide it. A
 * thread that does not stop in time gets an error answer, and the donor asks again.
 * With no receive running, the task named by migrationId becomes ready here (the donor's
 * recovery after a restart of either side), and the id is remembered: a _recvChunkStart
 * of that migration that arrives later (held up in the network past the donor's
 * deadline) is refused instead of starting a receive nobody will ever decide. */
int cmd_recv_chunk_abort(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_t *m = app->mig;
    mig_recv_t *r = recv_for(ctx, NULL);
    uint8_t mid[16];
    char id[33];
    bool has_mid = uuid_field(ctx, "migrationId", mid);
    (void)reply;
    if (r) {
        bool over;
        pthread_mutex_lock(&r->mu);
        r->abort_req = true;
        pthread_cond_broadcast(&r->cv);
        long long until = time_mono_ms() + MS_MIG_RECV_ABORT_WAIT_MS;
        while (!r->writes_over && time_mono_ms() < until) wait_locked(r, until);
        over = r->writes_over;
        memcpy(id, r->id, sizeof id);
        pthread_mutex_unlock(&r->mu);
        if (!over) {
            recv_release(m, r);
            return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT,
                           "the receive of migration %s has not stopped writing yet; ask again",
                           id);
        }
        int rc = mig_recv_task_ready(m, id, err);
        /* A moment for the thread to end too (its moveChunk.to), so the donor's next
         * migration does not find this shard still receiving. */
        pthread_mutex_lock(&r->mu);
        until = time_mono_ms() + 1000;
        while (rc == 0 && !r->thread_done && time_mono_ms() < until) wait_locked(r, until);
        pthread_mutex_unlock(&r->mu);
        recv_release(m, r);
        return rc;
    }
    if (!has_mid) return 0;   /* nothing running, nothing named */
    mig_uuid_hex(mid, id);
    mig_remember_abort(m, mid);
    return mig_recv_task_ready(m, id, err);
}

/* `_recvChunkReleaseCritSec`: the migration committed; the range is ours now, so the
 * pending task goes (idempotent: a second release finds nothing). */
int cmd_recv_chunk_release(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_t *m = app->mig;
    mig_recv_t *r = recv_for(ctx, NULL);
    uint8_t mid[16];
    char id[33];
    int rc;
    (void)reply;
    if (!uuid_field(ctx, "migrationId", mid)) {
        if (r) recv_release(m, r);
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "_recvChunkReleaseCritSec needs migrationId");
    }
    mig_uuid_hex(mid, id);
    if (r) {
        pthread_mutex_lock(&r->mu);
        bool ok = r->state == RS_DONE;
        pthread_mutex_unlock(&r->mu);
        if (!ok) {
            recv_release(m, r);
            return err_set(err, MS_ERR_CONFLICTING_OPERATION,
                           "cannot release: the receive has not finished its final drain");
        }
    }
    if ((rc = task_delete(m, id, err)) == 0 && r) {
        pthread_mutex_lock(&r->mu);
        r->released = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    if (r) recv_release(m, r);
    return rc;
}

const char *mig_recv_ns(const mig_recv_t *r) { return r->ns; }

typedef struct setix_arg {
    const char *ns;
    const bson_t *specs;          /* the donor's list */
    int dropped;
} setix_arg_t;

/* Drops every index here that the donor's list does not name (never _id_). */
static int drop_extra_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    setix_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "%s vanished during the migration", a->ns);
    for (int i = c->nindexes - 1; i >= 0; i--) {
        bson_iter_t it, f;
        bool named = false;
        if (c->ix[i]->is_id) continue;
        if (bson_iter_init(&it, a->specs))
            while (!named && bson_iter_next(&it)) {
                bson_t spec;
                if (bsonx_view_container(&it, &spec) && bson_iter_init_find(&f, &spec, "name") &&
                    BSON_ITER_HOLDS_UTF8(&f) && strcmp(bson_iter_utf8(&f, NULL), c->ix[i]->name) == 0)
                    named = true;
            }
        if (!named) {
            char name[sizeof c->ix[i]->name];
            int rc;
            snprintf(name, sizeof name, "%s", c->ix[i]->name);
            if ((rc = store_index_drop(t, c, name, err)) != 0) return rc;
            log_info("migration index sync dropped index ns=%s name=%s", log_str(a->ns), log_str(name));
            a->dropped++;
        }
    }
    return 0;
}

/* `_recvChunkSetIndexes` (minishard): the donor, inside its critical
 * section and before the config commit, sends its index list; the recipient builds what
 * it lacks and drops what the donor no longer has. Index commands of ns wait on both
 * shards meanwhile (mig_index_ddl_begin), so the list is final. A build that fails (a
 * unique index the range's documents violate here) fails the migration. */
int cmd_recv_chunk_set_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_recv_t *r = recv_for(ctx, err);
    bson_iter_t it, specs;
    bson_t arr;
    shardd_index_result_t res;
    int rc = 0;
    if (!r) return err->code;
    pthread_mutex_lock(&r->mu);
    bool done = r->state == RS_DONE;
    pthread_mutex_unlock(&r->mu);
    if (!done) {
        recv_release(app->mig, r);
        return err_set(err, MS_ERR_CONFLICTING_OPERATION,
                       "_recvChunkSetIndexes before the receive's final drain");
    }
    if (!cmd_field(ctx, "indexes", &it) || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &specs) ||
        !bsonx_view_container(&it, &arr)) {
        recv_release(app->mig, r);
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "_recvChunkSetIndexes needs indexes: [specs]");
    }
    memset(&res, 0, sizeof res);
    rc = shardd_build_indexes(app, NULL, r->ns, r->coll_uuid, false, &specs, &res, err);
    if (rc == MS_ERR_BAD_VALUE) rc = 0;   /* nothing but _id_ */
    setix_arg_t a = {r->ns, &arr, 0};
    if (rc == 0) rc = store_ddl(app->st, drop_extra_fn, &a, err);
    if (rc == 0) {
        BSON_APPEND_INT32(reply, "built", res.after - res.before);
        BSON_APPEND_INT32(reply, "dropped", a.dropped);
        log_info("migration index sync ns=%s built=%d dropped=%d", log_str(r->ns),
                 res.after - res.before, a.dropped);
    } else {
        fail(r, err);
    }
    recv_release(app->mig, r);
    return rc;
}

void mig_recv_status(mig_recv_t *r, bson_t *out) {
    pthread_mutex_lock(&r->mu);
    BSON_APPEND_UTF8(out, "desc", "MigrationDestinationManager");
    BSON_APPEND_UTF8(out, "role", "recipient");
    BSON_APPEND_UTF8(out, "migrationId", r->id);
    append_status_locked(r, out);
    /* The donor's field names too, so one reader (shardctl status) reads both sides. The
     * recipient does not know how many documents the range holds: no estimate here. */
    long long elapsed = time_now_ms() - r->started_ms;
    BSON_APPEND_UTF8(out, "to", r->to_shard);
    BSON_APPEND_UTF8(out, "phase", rstate_names[r->state]);
    if (r->held_at) BSON_APPEND_UTF8(out, "heldAt", r->held_at);
    BSON_APPEND_INT64(out, "docsCloned", r->cloned);
    BSON_APPEND_INT64(out, "bytesCloned", r->cloned_bytes);
    BSON_APPEND_INT64(out, "modsApplied", r->catchup + r->steady);
    BSON_APPEND_INT64(out, "elapsedMS", elapsed);
    BSON_APPEND_DOUBLE(out, "docsPerSec", elapsed > 0 ? (double)r->cloned * 1000.0 / (double)elapsed : 0);
    pthread_mutex_unlock(&r->mu);
}
