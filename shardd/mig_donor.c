/*
 * mig_donor.c — the donor's six-step driver of a chunk migration, run by bin/shardd:
 * MongoDB's MigrationSourceManager (notes §1.2). The migration coordinator (persisted
 * decision, completion, recovery: mig_coord.c) and the chunk cloner source (clone list,
 * write capture, _migrateClone / _transferMods: mig_cloner.c) are its partners.
 *
 * `_shardsvrMoveRange` (from the config server) starts a donor thread and waits for its
 * end. The thread runs MongoDB's six timed steps, each followed by its failpoint
 * moveChunkHangAtStepN (a hold there counts in step N's time; the phase in currentOp
 * names the step, held or not, and heldAt the point while one holds the thread):
 *   1 checks       the range lies in one chunk this shard owns (max computed with
 *                  autoSplitVector when absent); overlapping range deletions finished
 *   2 startClone   changelog moveChunk.start; write capture on; coordinator document
 *                  and a pending range-deletion task persisted (one transaction) before
 *                  any data moves; clone list built (ChunkTooBig past the limit);
 *                  `_recvChunkStart` to the recipient
 *   3 clone        polls `_recvChunkStatus` while the recipient pulls `_migrateClone`
 *                  (its state `clone`), then `_transferMods` (`catchup`, `steady`) and
 *                  `_getNextSessionMods` (mig_session.c); goes on once what is left fits
 *                  the write-pause budget and a session pull found nothing new
 *   4 critical section: index commands of the collection wait from here to the end
 *                  (mig_index_ddl_fence); writes to it wait (shv_crit_enter_as, owned by
 *                  this migration's id, fences those already past their version check)
 *   5 commit on the recipient: `_recvChunkCommit` (its final drain), the recipient's
 *                  index list made equal to ours (`_recvChunkSetIndexes`), then count
 *                  and checksum of the range compared on both sides
 *   6 commit on the config server: reads wait too; `_configsvrCommitChunkMigration`;
 *                  decision persisted; filtering metadata refreshed; critical section left
 * then the coordinator completes: the recipient's task is deleted, this shard's task made
 * ready for the range deleter, the coordinator document forgotten. Any error before the
 * config commit aborts (moveChunk.error; the recipient deletes what it copied). An error
 * on the commit call itself leaves the outcome unknown: the recovery asks the config
 * server (after fencing it with `_configsvrEnsureChunkVersionIsGreaterThan`) and finishes
 * whichever it was — the same code that runs after a kill -9 at any step.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/opctx.h"
#include "common/rpc.h"
#include "common/rtable.h"
#include "shardd/mig.h"
#include "shardd/mig_priv.h"

static const char *const phase_names[] = {"checks", "startClone", "clone", "criticalSection",
                                          "commitOnRecipient", "commitOnConfig", "completing",
                                          "done"};

/* ---- the donor thread ------------------------------------------------------------------ */

static void donor_set_phase(mig_donor_t *d, enum donor_phase p) {
    pthread_mutex_lock(&d->mu);
    d->phase = p;
    pthread_mutex_unlock(&d->mu);
}

/* Every failpoint the donor thread evaluates: while one holds it, currentOp says where
 * (heldAt). */
static int donor_fp(mig_donor_t *d, const char *name, ms_error_t *err) {
    fp_held_t held = {.mu = &d->mu, .slot = &d->held_at};
    return fp_eval_held(name, &held, err);
}

/* Ends step N: its failpoint moveChunkHangAtStepN first, then the clock, so a hold there
 * counts in step N's time (as the phase, still step N's, shows it). */
static int step_done(mig_donor_t *d, int step, long long *t0, ms_error_t *err) {
    int rc = donor_fp(d, mig_donor_step_fps[step - 1], err);
    long long now = time_mono_ms();
    d->step_ms[step - 1] = now - *t0;
    *t0 = now;
    return rc;
}

/* Step 1: the range lies in one chunk this shard owns, of the generation the config
 * server saw; max worked out when absent (MongoDB's moveRange with only min). */
static int step_checks(mig_donor_t *d, ms_error_t *err) {
    mig_t *m = d->m;
    bson_t sv, cmin, cmax;
    buf_t key = {0};
    uint8_t uuid[16];
    int rc;
    bson_init(&sv);
    bson_init(&cmin);
    bson_init(&cmax);
    if ((rc = shv_refresh(m->app->shv, d->ns, err)) != 0) goto out;
    if ((rc = mig_local_pattern(m->app->st, d->ns, &d->pat, uuid, err)) != 0) goto out;
    if (!d->has_min) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "_shardsvrMoveRange needs min (the config server "
                     "works it out when a moveRange gives only max)");
        goto out;
    }
    if ((rc = keys_encode_bound(&d->pat, &d->req_min, &key, err)) != 0) goto out;
    if ((rc = shv_owned_chunk(m->app->shv, d->ns, &key, &cmin, &cmax, &d->co.pre_version, &sv,
                              NULL, uuid, err)) != 0) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "%s: this shard does not own the chunk holding the range's min: %s", d->ns,
                     err->msg);
        goto out;
    }
    {
        /* The generation the config server asked about must be ours. */
        bson_iter_t it;
        bson_oid_t zero;
        memset(&zero, 0, sizeof zero);
        if (!bson_oid_equal(&d->epoch, &zero) && bson_iter_init_find(&it, &sv, "e") &&
            BSON_ITER_HOLDS_OID(&it) && !bson_oid_equal(bson_iter_oid(&it), &d->epoch)) {
            rc = err_set(err, MS_ERR_STALE_EPOCH, "%s: the collection's generation changed", d->ns);
            goto out;
        }
    }
    memcpy(d->co.coll_uuid, uuid, 16);
    bson_reinit(&d->from_version);
    bson_concat(&d->from_version, &sv);
    bson_reinit(&d->co.chunk_min);
    bson_concat(&d->co.chunk_min, &cmin);
    bson_reinit(&d->co.chunk_max);
    bson_concat(&d->co.chunk_max, &cmax);
    buf_reset(&d->min_enc);
    buf_put(&d->min_enc, key.data, key.len);
    if (!d->has_max) {
        /* autoSplitVector from min, limit 1: one max-sized piece (or the whole chunk). */
        split_args_t sa;
        bson_t arr;
        bool cont = false;
        memset(&sa, 0, sizeof sa);
        sa.ns = d->ns;
        bson_init_static(&sa.key_pattern, bson_get_data(&d->pat.spec), d->pat.spec.len);
        bson_init_static(&sa.min, bson_get_data(&d->req_min), d->req_min.len);
        bson_init_static(&sa.max, bson_get_data(&cmax), cmax.len);
        sa.max_chunk_bytes = d->max_chunk_bytes;
        sa.limit = 1;
        sa.auto_mode = true;
        bson_init(&arr);
        rc = split_compute(m->app->st, &sa, &arr, &cont, err);
        bson_reinit(&d->req_max);
        if (rc == 0) {
            bson_iter_t it;
            bson_t k;
            if (bson_iter_init(&it, &arr) && bson_iter_next(&it) &&
                bsonx_view_container(&it, &k)) {
                bson_concat(&d->req_max, &k);
            } else {
                bson_concat(&d->req_max, &cmax);
            }
        }
        bson_destroy(&arr);
        if (rc != 0) goto out;
        d->has_max = true;
    }
    buf_reset(&key);
    if ((rc = keys_encode_bound(&d->pat, &d->req_max, &key, err)) != 0) goto out;
    buf_reset(&d->max_enc);
    buf_put(&d->max_enc, key.data, key.len);
    {
        buf_t cmx = {0};
        if ((rc = keys_encode_bound(&d->pat, &cmax, &cmx, err)) != 0) goto out;
        bool inside = mig_key_cmp(&d->max_enc, &cmx) <= 0 && mig_key_cmp(&d->min_enc, &d->max_enc) < 0;
        buf_free(&cmx);
        if (!inside) {
            rc = err_set(err, MS_ERR_BAD_VALUE,
                         "%s: [min, max) must be a non-empty range inside one chunk", d->ns);
            goto out;
        }
    }
    bson_reinit(&d->co.range_min);
    bson_concat(&d->co.range_min, &d->req_min);
    bson_reinit(&d->co.range_max);
    bson_concat(&d->co.range_max, &d->req_max);
    /* A range still being deleted here (an earlier move back) must be gone first. */
    if (m->app->rdel &&
        (rc = rdel_wait_coll(m->app->rdel, d->ns, d->co.coll_uuid, &d->req_min, &d->req_max,
                             time_mono_ms() + MS_MIG_OVERLAP_WAIT_MS, err)) != 0)
        rc = err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT,
                     "%s: an overlapping range is still being deleted on the donor: %s", d->ns,
                     err->msg);
out:
    buf_free(&key);
    bson_destroy(&sv);
    bson_destroy(&cmin);
    bson_destroy(&cmax);
    return rc;
}

/* Step 2: changelog, capture on, documents persisted, clone list, recipient started. */
static int step_start_clone(mig_donor_t *d, ms_error_t *err) {
    mig_t *m = d->m;
    bson_t details, task, cmd, reply;
    int rc;
    bson_init(&details);
    BSON_APPEND_DOCUMENT(&details, "min", &d->req_min);
    BSON_APPEND_DOCUMENT(&details, "max", &d->req_max);
    BSON_APPEND_UTF8(&details, "from", d->co.donor);
    BSON_APPEND_UTF8(&details, "to", d->to);
    mig_log_change(m, "moveChunk.start", d->ns, &details);
    bson_destroy(&details);

    /* Capture before the clone list is read, so no write falls between the two. */
    if ((rc = mig_cloner_start(d, err)) != 0) return rc;

    mig_task_doc(d->co.mig_uuid, d->ns, d->co.coll_uuid, d->co.donor, &d->req_min, &d->req_max,
                 &d->pat, true, d->wait_for_delete, &task);
    persist_arg_t pa = {.co = &d->co, .task = &task};
    rc = mig_coord_persist(m, &pa, err);
    bson_destroy(&task);
    if (rc != 0) return rc;

    clone_list_arg_t ca;
    if ((rc = mig_cloner_build_list(d, &ca.cap, &ca.coll_docs, &ca.coll_bytes, err)) != 0)
        return rc;
    if ((int64_t)d->nrids > ca.cap)
        return err_set(err, MS_ERR_CHUNK_TOO_BIG,
                       "Cannot move range: more than %lld documents (limit from %d objects or "
                       "1.3 x chunk size %lld / average document size %lld)",
                       (long long)ca.cap, MS_CHUNK_OBJECTS_MAX, (long long)d->max_chunk_bytes,
                       (long long)(ca.coll_docs ? ca.coll_bytes / ca.coll_docs : 0));

    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "_recvChunkStart", d->ns);
    BSON_APPEND_BINARY(&cmd, "migrationId", BSON_SUBTYPE_UUID, d->co.mig_uuid, 16);
    BSON_APPEND_UTF8(&cmd, "sessionId", d->co.session);
    BSON_APPEND_UTF8(&cmd, "from", m->app->url);
    BSON_APPEND_UTF8(&cmd, "fromShardName", d->co.donor);
    BSON_APPEND_UTF8(&cmd, "toShardName", d->to);
    BSON_APPEND_DOCUMENT(&cmd, "min", &d->req_min);
    BSON_APPEND_DOCUMENT(&cmd, "max", &d->req_max);
    BSON_APPEND_DOCUMENT(&cmd, "shardKeyPattern", &d->pat.spec);
    BSON_APPEND_BINARY(&cmd, "collectionUUID", BSON_SUBTYPE_UUID, d->co.coll_uuid, 16);
    rc = mig_call(d->to_url, &cmd, MS_RPC_PEER_TIMEOUT_MS_DEFAULT, &reply, err);
    bson_destroy(&cmd);
    if (rc == 0) bson_destroy(&reply);
    return rc;
}

static const char *str_field(const bson_t *doc, const char *key, char *buf, size_t cap) {
    mig_copy_str(buf, cap, doc, key);
    return buf;
}

static int64_t int_field(const bson_t *doc, const char *path) {
    bson_iter_t it;
    int64_t v = 0;
    if (bsonx_find_path(doc, path, &it)) bsonx_as_int64(&it, &v);
    return v;
}

static void absorb_status(mig_donor_t *d, const bson_t *st) {
    char state[16];
    pthread_mutex_lock(&d->mu);
    snprintf(d->recv_state, sizeof d->recv_state, "%s", str_field(st, "state", state, sizeof state));
    d->recv_cloned = int_field(st, "counts.cloned");
    d->recv_catchup = int_field(st, "counts.catchup");
    d->recv_steady = int_field(st, "counts.steady");
    pthread_mutex_unlock(&d->mu);
}

static int recv_status(mig_donor_t *d, bool wait, bson_t *reply, ms_error_t *err) {
    bson_t cmd;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "_recvChunkStatus", d->ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", d->co.session);
    BSON_APPEND_BOOL(&cmd, "waitForSteadyOrDone", wait);
    rc = mig_call(d->to_url, &cmd, MS_RPC_PEER_TIMEOUT_MS_DEFAULT, reply, err);
    bson_destroy(&cmd);
    if (rc == 0) absorb_status(d, reply);
    return rc;
}

/* Sleeps ms between status polls of step 3, cut short when the session history catches
 * up (cmd_get_next_session_mods broadcasts on cv): often the last thing the step waits
 * for, it should not wait a whole backoff more. */
static void backoff(mig_donor_t *d, int ms) {
    long long until = time_mono_ms() + ms, left;
    pthread_mutex_lock(&d->mu);
    bool was = d->sess_caught_up;
    while (d->sess_caught_up == was && (left = until - time_mono_ms()) > 0)
        time_cond_wait_ms(&d->cv, &d->mu, left);
    pthread_mutex_unlock(&d->mu);
}

/* Step 3, clone (MongoDB's awaitToCatchUp): goes on once the recipient has cloned and
 * what remains of the captured writes would take it no longer than the write-pause
 * budget at the rate it has been applying them (MongoDB waits for zero or for < 10 % of
 * the chunk size: minishard bounds the pause instead). Aborts when the recipient fails,
 * the capture overflows, or writes keep its catch-up from converging within
 * --migration-catchup-timeout-ms, counted from the end of the clone (the clone itself has
 * MS_MIG_CLONE_TIMEOUT_MS). */
static int step_clone(mig_donor_t *d, ms_error_t *err) {
    mig_t *m = d->m;
    long long start = time_mono_ms(), last_t = start;
    long long catchup_start = 0;   /* when the clone was first found done: the catch-up's clock */
    int64_t last_applied = 0;
    double rate_per_ms = 0;   /* mods the recipient applies per ms (smoothed) */
    for (int iter = 0;; iter++) {
        bson_t st;
        char state[16], errmsg[512];
        int rc;
        if (m->stopping) return err_set(err, MS_ERR_SHUTDOWN_IN_PROGRESS, "shard shutting down");
        if ((rc = mig_cloner_failed(d, err)) != 0) return rc;
        long long t0 = time_mono_ms();
        if ((rc = recv_status(d, true, &st, err)) != 0) return rc;
        str_field(&st, "state", state, sizeof state);
        if (strcmp(state, "fail") == 0 || strcmp(state, "abort") == 0) {
            str_field(&st, "errmsg", errmsg, sizeof errmsg);
            bson_destroy(&st);
            return err_set(err, MS_ERR_OPERATION_FAILED, "Data transfer error: %s",
                           errmsg[0] ? errmsg : state);
        }
        int64_t applied = int_field(&st, "counts.catchup") + int_field(&st, "counts.steady");
        bson_destroy(&st);
        long long now = time_mono_ms();
        if (now > last_t && applied > last_applied) {
            double r = (double)(applied - last_applied) / (double)(now - last_t);
            rate_per_ms = rate_per_ms > 0 ? 0.5 * rate_per_ms + 0.5 * r : r;
        }
        last_t = now;
        last_applied = applied;
        bool steady = strcmp(state, "steady") == 0, catchup = strcmp(state, "catchup") == 0;
        pthread_mutex_lock(&d->mu);
        bool cloned = d->pos >= d->nrids;
        /* The session history must have moved too (a pull found nothing new), or its
         * last batches would lengthen the write pause (MongoDB's inCatchupPhase). */
        bool sess_ready = d->sess_caught_up;
        pthread_mutex_unlock(&d->mu);
        if (cloned && sess_ready && (steady || catchup)) {
            if (catchup_start == 0) catchup_start = now;
            int64_t ndel, nrel, bytes;
            mig_cloner_pending(d, &ndel, &nrel, &bytes);
            int64_t pending = ndel + nrel;
            if (pending == 0 && steady) return 0;
            double est_ms = rate_per_ms > 0 ? (double)pending / rate_per_ms : 1e9;
            if (est_ms <= (double)m->write_pause_budget_ms) {
                log_info("migration entering critical section early ns=%s pending=%lld est_ms=%.1f "
                         "budget_ms=%d", log_str(d->ns), (long long)pending, est_ms,
                         m->write_pause_budget_ms);
                return 0;
            }
            if (now - catchup_start > m->catchup_timeout_ms)
                return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT,
                               "migration could not converge: %lld writes still pending after "
                               "%lld ms of catch-up in step 3, clone (writes outpace the "
                               "recipient's catch-up at %.2f/ms)",
                               (long long)pending, now - catchup_start, rate_per_ms);
        } else if (now - start > MS_MIG_CLONE_TIMEOUT_MS) {
            return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT, "migration clone took longer than %d ms",
                           MS_MIG_CLONE_TIMEOUT_MS);
        }
        /* The recipient waited for us up to a second; when it did not, back off. */
        if (time_mono_ms() - t0 < 5) backoff(d, 1 << (iter < 6 ? iter : 6));
    }
}

/* Step 5's index sync: the recipient's index list becomes this shard's.
 * Index commands of ns wait on both shards (fence), so the list is final; an index made
 * or dropped here while the migration ran reaches the recipient this way even when the
 * command never reached it. */
static int sync_indexes(mig_donor_t *d, ms_error_t *err) {
    bson_t cmd, reply, arr;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "_recvChunkSetIndexes", d->ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", d->co.session);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "indexes", &arr);
    rc = mig_index_specs(d->m->app->st, d->ns, &arr, err);
    bson_append_array_end(&cmd, &arr);
    if (rc == 0) rc = mig_call(d->to_url, &cmd, MS_MIG_RECV_COMMIT_MS + 5000, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0) {
        err_prefix(err, "making the recipient's indexes equal to the donor's: ");
        return rc;
    }
    bson_destroy(&reply);
    return 0;
}

/* Step 5: the recipient's final drain, then both sides' digests of the range. */
static int step_commit_recipient(mig_donor_t *d, ms_error_t *err) {
    bson_t cmd, reply;
    int64_t count = 0, rcount;
    uint64_t sum = 0, rsum;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "_recvChunkCommit", d->ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", d->co.session);
    rc = mig_call(d->to_url, &cmd, MS_MIG_RECV_COMMIT_MS + 5000, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0) return rc;
    absorb_status(d, &reply);
    rcount = int_field(&reply, "rangeCount");
    rsum = (uint64_t)int_field(&reply, "rangeChecksum");
    bson_destroy(&reply);
    if ((rc = sync_indexes(d, err)) != 0) return rc;
    /* Writes are blocked: the snapshot's digest plus every change the capture saw since is
     * the range now — no scan while writes wait (the pause must not grow with the chunk). */
    {
        int64_t dc = 0;
        uint64_t ds = 0;
        mig_cloner_digest(d, &dc, &ds);
        count = d->digest_count + dc;
        sum = d->digest_sum + ds;
    }
    if (count != rcount || sum != rsum)
        return err_set(err, MS_ERR_OPERATION_FAILED,
                       "range digest mismatch before commit: donor %lld documents checksum %llx, "
                       "recipient %lld documents checksum %llx",
                       (long long)count, (unsigned long long)sum, (long long)rcount,
                       (unsigned long long)rsum);
    return 0;
}

/* Step 6: the commit on the config server. *sent tells whether the request may have
 * reached it (then a failure leaves the outcome to recovery). */
static int step_commit_config(mig_donor_t *d, bool *sent, ms_error_t *err) {
    mig_t *m = d->m;
    char url[MS_URL_BYTES_MAX];
    bson_t cmd, reply, chunk;
    int rc;
    *sent = false;
    /* The critical section is held across the commit (by this migration). */
    ASSERT(d->crit_held && shv_crit_held(m->app->shv, d->ns));
    shv_crit_block_reads(m->app->shv, d->ns);
    if ((rc = donor_fp(d, FP_MIGRATION_COMMIT_NETWORK_ERROR, err)) != 0) {
        *sent = true;   /* as if the connection broke after the request left */
        return err_set(err, MS_ERR_HOST_UNREACHABLE, "failpoint %s: network error on commit",
                       FP_MIGRATION_COMMIT_NETWORK_ERROR);
    }
    shv_identity(m->app->shv, NULL, 0, url, sizeof url);
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "_configsvrCommitChunkMigration", d->ns);
    BSON_APPEND_UTF8(&cmd, "fromShard", d->co.donor);
    BSON_APPEND_UTF8(&cmd, "toShard", d->to);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "migratedChunk", &chunk);
    BSON_APPEND_DOCUMENT(&chunk, "min", &d->req_min);
    BSON_APPEND_DOCUMENT(&chunk, "max", &d->req_max);
    {
        bson_iter_t it;
        if (bson_iter_init_find(&it, &d->co.pre_version, "v")) bsonx_append_iter(&chunk, "lastmod", &it);
    }
    bson_append_document_end(&cmd, &chunk);
    BSON_APPEND_DOCUMENT(&cmd, "fromShardCollectionVersion", &d->from_version);
    BSON_APPEND_TIMESTAMP(&cmd, "validAfter", (uint32_t)(time_now_ms() / 1000), 0);
    *sent = true;
    rc = mig_call(url, &cmd, MS_RPC_CONFIG_TIMEOUT_MS_DEFAULT, &reply, err);
    bson_destroy(&cmd);
    if (rc == 0) bson_destroy(&reply);
    if (rc == 0 && (rc = donor_fp(d, FP_FAIL_MIGRATION_COMMIT, err)) != 0)
        rc = err_set(err, MS_ERR_INTERNAL, "failpoint %s generated error after the commit",
                     FP_FAIL_MIGRATION_COMMIT);
    /* A refusal that certainly did not commit (the config server checked and said no)
     * can abort at once; anything else is unknown. */
    if (rc == MS_ERR_STALE_EPOCH || rc == MS_ERR_CONFLICTING_OPERATION ||
        rc == MS_ERR_SHARD_NOT_FOUND || rc == MS_ERR_NAMESPACE_NOT_SHARDED)
        *sent = false;
    return rc;
}

static void append_steps(bson_t *doc, const int64_t *ms, int n, int upto) {
    char k[32];
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof k, "step %d of %d", i + 1, n);
        if (i < upto) BSON_APPEND_INT64(doc, k, ms[i]);
    }
}

/* moveChunk.from's details but the note (written by whoever learns the outcome). */
static void from_details(const mig_donor_t *d, int step, bson_t *details) {
    bson_init(details);
    BSON_APPEND_DOCUMENT(details, "min", &d->req_min);
    if (d->has_max) BSON_APPEND_DOCUMENT(details, "max", &d->req_max);
    BSON_APPEND_UTF8(details, "from", d->co.donor);
    BSON_APPEND_UTF8(details, "to", d->to);
    append_steps(details, d->step_ms, 6, step);
    BSON_APPEND_INT64(details, "clonedDocs", d->cloned_docs);
    BSON_APPEND_INT64(details, "clonedBytes", d->cloned_bytes);
    BSON_APPEND_INT64(details, "modsSent", d->mods_sent);
    BSON_APPEND_INT64(details, "sessionRecordsSent", d->sess_sent);
    BSON_APPEND_INT64(details, "sessionSentinelsSent", d->sess_sentinels);
    BSON_APPEND_INT64(details, "writePauseMS", d->pause_ms);
}

static void donor_run(mig_donor_t *d) {
    mig_t *m = d->m;
    long long t0 = time_mono_ms();
    int step = 0, rc, late_rc = 0;
    bool commit_sent = false, committed = false, unknown = false;
    ms_error_t late_err = {0};
    ms_error_t *err = &d->err;

    d->started_ms = time_now_ms();
    donor_set_phase(d, DP_CHECKS);
    if ((rc = step_checks(d, err)) != 0 || (rc = step_done(d, ++step, &t0, err)) != 0) goto early;

    donor_set_phase(d, DP_START_CLONE);
    if ((rc = step_start_clone(d, err)) != 0 || (rc = step_done(d, ++step, &t0, err)) != 0)
        goto abort;

    donor_set_phase(d, DP_CLONE);
    if ((rc = step_clone(d, err)) != 0 || (rc = step_done(d, ++step, &t0, err)) != 0) goto abort;

    donor_set_phase(d, DP_CRITSEC);
    /* Index commands of the collection wait from here to the end (mig_index_ddl_begin);
     * running ones finish first, so the index list sent in step 5 is final. */
    if ((rc = mig_index_ddl_fence(m, d->ns, time_mono_ms() + MS_MIG_INDEX_DDL_WAIT_MS, err)) != 0)
        goto abort;
    d->ddl_fenced = true;
    if ((rc = shv_crit_enter_as(m->app->shv, m->app->st, d->ns, d->co.id, err)) != 0) goto abort;
    d->crit_held = true;
    d->pause_start_ms = time_mono_ms();
    /* From here no write of the collection commits here: the recipient's next empty
     * _getNextSessionMods is its last (MongoDB's onCommitCloneStarted). */
    pthread_mutex_lock(&d->mu);
    d->sess_commit_started = true;
    pthread_mutex_unlock(&d->mu);
    if ((rc = step_done(d, ++step, &t0, err)) != 0) goto abort;

    donor_set_phase(d, DP_COMMIT_RECIPIENT);
    if ((rc = step_commit_recipient(d, err)) != 0 || (rc = step_done(d, ++step, &t0, err)) != 0)
        goto abort;

    donor_set_phase(d, DP_COMMIT_CONFIG);
    rc = step_commit_config(d, &commit_sent, err);
    if (rc != 0 && !commit_sent) goto abort;
    if (rc != 0) {
        /* Outcome unknown (notes §1.8): forget what we know, ask the config server. */
        ms_error_t e2 = {0};
        log_warn("migration commit outcome unknown ns=%s errmsg=%s", log_str(d->ns),
                 log_str(err->msg));
        shv_invalidate(m->app->shv, d->ns);
        unknown = true;
        for (int tries = 0; tries < 5 && !m->stopping; tries++) {
            if (mig_coord_decide(m, &d->co, &committed, &e2) == 0) {
                unknown = false;
                break;
            }
            nanosleep(&(struct timespec){0, 200 * 1000000L}, NULL);
        }
        if (unknown) {
            /* Recovery finishes it: the coordinator document stays, and the critical
             * section passes to the recovery (same owner: this migration's id), which
             * leaves it once the config server's chunk table has decided; it writes
             * moveChunk.from then, with the outcome. */
            bson_t details;
            from_details(d, step, &details);
            d->crit_held = false;
            d->handed_over = true;
            mig_coord_start_recovery(m, &d->co, true, &details);
            bson_destroy(&details);
            goto finish;
        }
        if (!committed) goto abort;
        rc = 0;
        memset(err, 0, sizeof *err);
    } else {
        committed = true;
    }
    /* Committed: decision first, then our own metadata, then writes may go on (they get
     * StaleConfig and the router sends them to the recipient). */
    snprintf(d->co.decision, sizeof d->co.decision, "committed");
    {
        persist_arg_t a = {.co = &d->co};
        ms_error_t e2 = {0};
        if (mig_coord_persist(m, &a, &e2) != 0)
            log_error("migration decision not persisted id=%s errmsg=%s", d->co.id, log_str(e2.msg));
        if (shv_refresh(m->app->shv, d->ns, &e2) != 0) shv_invalidate(m->app->shv, d->ns);
    }
    /* After the commit a point's "error" cannot undo anything: the command reports it
     * once the migration is complete (as MongoDB's failpoints after the commit do). */
    late_rc = donor_fp(d, FP_HANG_BEFORE_LEAVING_CRIT_SEC, &late_err);
    ASSERT(d->crit_held && shv_crit_held(m->app->shv, d->ns));
    d->pause_ms = time_mono_ms() - d->pause_start_ms;
    shv_crit_leave_as(m->app->shv, d->ns, d->co.id);
    d->crit_held = false;
    /* Step 6's point fires after the critical section is left: its hold is in step 6's
     * time, not in the write pause. */
    step = 6;
    if (late_rc == 0) late_rc = donor_fp(d, mig_donor_step_fps[5], &late_err);
    d->step_ms[5] = time_mono_ms() - t0;
    mig_cloner_stop(d);

    donor_set_phase(d, DP_COMPLETING);
    {
        ms_error_t e2 = {0};
        if (mig_coord_complete(m, &d->co, true, time_mono_ms() + 5000, &e2) != 0) {
            log_warn("migration completion deferred to recovery id=%s errmsg=%s", d->co.id,
                     log_str(e2.msg));
            mig_coord_start_recovery(m, &d->co, false, NULL);
        }
    }
    {
        bson_t details, counts;
        bson_init(&details);
        BSON_APPEND_DOCUMENT(&details, "min", &d->req_min);
        BSON_APPEND_DOCUMENT(&details, "max", &d->req_max);
        BSON_APPEND_UTF8(&details, "from", d->co.donor);
        BSON_APPEND_UTF8(&details, "to", d->to);
        BSON_APPEND_DOCUMENT_BEGIN(&details, "counts", &counts);
        BSON_APPEND_INT64(&counts, "cloned", d->recv_cloned);
        BSON_APPEND_INT64(&counts, "clonedBytes", d->cloned_bytes);
        BSON_APPEND_INT64(&counts, "catchup", d->recv_catchup);
        BSON_APPEND_INT64(&counts, "steady", d->recv_steady);
        bson_append_document_end(&details, &counts);
        BSON_APPEND_INT64(&details, "writePauseMS", d->pause_ms);
        mig_log_change(m, "moveChunk.commit", d->ns, &details);
        bson_destroy(&details);
    }
    pthread_mutex_lock(&m->mu);
    m->donated++;
    pthread_mutex_unlock(&m->mu);
    if (late_rc != 0) {
        rc = late_rc;
        *err = late_err;
    }
    if (d->wait_for_delete && m->app->rdel) {
        ms_error_t e2 = {0};
        if (rdel_wait_coll(m->app->rdel, d->ns, d->co.coll_uuid, &d->req_min, &d->req_max,
                           time_mono_ms() + MS_MIG_WAIT_FOR_DELETE_MS, &e2) != 0) {
            rc = err_set(err, MS_ERR_OPERATION_FAILED,
                         "OrphanedRangeCleanUpFailed: the move committed but deleting the range "
                         "on the donor did not finish: %s", e2.msg);
        }
    }
    goto finish;

abort:
    {
        /* Before the commit: moveChunk.error, the recipient aborts, the decision is
         * "aborted" (notes §1.2 "Error before the commit phase"). */
        ms_error_t keep = *err, e2 = {0};
        bson_t details;
        bson_init(&details);
        BSON_APPEND_DOCUMENT(&details, "min", &d->req_min);
        BSON_APPEND_DOCUMENT(&details, "max", &d->req_max);
        BSON_APPEND_UTF8(&details, "from", d->co.donor);
        BSON_APPEND_UTF8(&details, "to", d->to);
        BSON_APPEND_UTF8(&details, "errmsg", keep.msg);
        mig_log_change(m, "moveChunk.error", d->ns, &details);
        bson_destroy(&details);
        if (d->capture_on) mig_cloner_stop(d);
        if (d->crit_held) {
            d->crit_held = false;
            shv_crit_leave_as(m->app->shv, d->ns, d->co.id);
        }
        if (mig_coord_complete(m, &d->co, false, time_mono_ms() + 5000, &e2) != 0) {
            log_warn("migration abort completion deferred to recovery id=%s errmsg=%s", d->co.id,
                     log_str(e2.msg));
            mig_coord_start_recovery(m, &d->co, false, NULL);
        }
        *err = keep;
        pthread_mutex_lock(&m->mu);
        m->aborted++;
        pthread_mutex_unlock(&m->mu);
    }
    goto finish;

early:
    /* Nothing persisted, nothing started: only the timing entry below. */
    ;
finish:
    if (d->capture_on) mig_cloner_stop(d);
    if (d->crit_held) shv_crit_leave_as(m->app->shv, d->ns, d->co.id);
    if (d->ddl_fenced) mig_index_ddl_unfence(m);
    d->rc = rc;
    if (!d->handed_over) {
        bson_t details;
        from_details(d, step, &details);
        BSON_APPEND_UTF8(&details, "note", committed ? "success" : "aborted");
        if (rc != 0) BSON_APPEND_UTF8(&details, "errmsg", d->err.msg);
        mig_log_change(m, "moveChunk.from", d->ns, &details);
        bson_destroy(&details);
    }
    log_info("migration ended ns=%s to=%s ok=%d ms=%lld docs=%lld pause_ms=%lld%s%s",
             log_str(d->ns), log_str(d->to), rc == 0, time_now_ms() - d->started_ms,
             (long long)d->cloned_docs, (long long)d->pause_ms, rc ? " errmsg=" : "",
             rc ? log_str(d->err.msg) : "");
    donor_set_phase(d, DP_DONE);
}

static void donor_free(mig_donor_t *d) {
    if (!d) return;
    bson_destroy(&d->req_min);
    bson_destroy(&d->req_max);
    bson_destroy(&d->from_version);
    keys_pattern_free(&d->pat);
    buf_free(&d->min_enc);
    buf_free(&d->max_enc);
    mig_coord_destroy(&d->co);
    free(d->rids);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}

/* Drops one reference, under m->mu. */
void mig_donor_unref_locked(mig_donor_t *d) {
    if (--d->refs == 0) donor_free(d);
}

static void *donor_main(void *p) {
    mig_donor_t *d = p;
    mig_t *m = d->m;
    op_set_deadline_ms(0);
    donor_run(d);
    pthread_mutex_lock(&m->mu);
    d->done = true;
    if (m->donor == d) m->donor = NULL;
    pthread_cond_broadcast(&m->cv);
    mig_donor_unref_locked(d);
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ---- _shardsvrMoveRange ------------------------------------------------------------------ */

static bool same_request(const mig_donor_t *a, const mig_donor_t *b) {
    return strcmp(a->ns, b->ns) == 0 && strcmp(a->to, b->to) == 0 &&
           a->has_min == b->has_min && bson_equal(&a->req_min, &b->req_min) &&
           a->asked_max == b->asked_max && (!a->asked_max || bson_equal(&a->req_max, &b->req_max)) &&
           a->wait_for_delete == b->wait_for_delete && a->force_jumbo == b->force_jumbo;
}

static int parse_request(cmd_ctx_t *ctx, mig_donor_t *d, ms_error_t *err) {
    bson_iter_t it;
    bson_t v;
    const char *ns = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    if (!strchr(ns, '.') || strlen(ns) > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "_shardsvrMoveRange needs \"db.coll\"");
    snprintf(d->ns, sizeof d->ns, "%s", ns);
    if (!cmd_field(ctx, "toShard", &it) || !BSON_ITER_HOLDS_UTF8(&it))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'toShard' is missing");
    snprintf(d->to, sizeof d->to, "%s", bson_iter_utf8(&it, NULL));
    if (cmd_field(ctx, "min", &it) && bsonx_view_container(&it, &v)) {
        bson_concat(&d->req_min, &v);
        d->has_min = true;
    }
    if (cmd_field(ctx, "max", &it) && bsonx_view_container(&it, &v)) {
        bson_concat(&d->req_max, &v);
        d->has_max = d->asked_max = true;
    }
    d->max_chunk_bytes = MS_CHUNK_BYTES_DEFAULT;
    if (cmd_field(ctx, "maxChunkSizeBytes", &it)) bsonx_as_int64(&it, &d->max_chunk_bytes);
    if (d->max_chunk_bytes <= 0) d->max_chunk_bytes = MS_CHUNK_BYTES_DEFAULT;
    d->wait_for_delete = cmd_flag(ctx, "waitForDelete", false);
    if (cmd_field(ctx, "forceJumbo", &it)) {
        int64_t fj = 0;
        if (BSON_ITER_HOLDS_BOOL(&it)) fj = bson_iter_bool(&it);
        else bsonx_as_int64(&it, &fj);
        d->force_jumbo = (int)(fj > 0 ? fj : 0);
    }
    if (cmd_field(ctx, "epoch", &it) && BSON_ITER_HOLDS_OID(&it))
        bson_oid_copy(bson_iter_oid(&it), &d->epoch);
    return 0;
}

int cmd_shardsvr_move_range(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_t *m = app->mig;
    mig_donor_t *d, *run = NULL;
    char name[128], url[MS_URL_BYTES_MAX];
    int rc;
    (void)reply;
    shv_identity(app->shv, name, sizeof name, url, sizeof url);
    if (!url[0] || !name[0])
        return err_set(err, MS_ERR_ILLEGAL_OPERATION, "this shard is not part of a cluster");
    if (!(d = mem_calloc_aligned(1, sizeof *d))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    d->m = m;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    bson_init(&d->req_min);
    bson_init(&d->req_max);
    bson_init(&d->from_version);
    mig_coord_init(&d->co);
    if ((rc = parse_request(ctx, d, err)) != 0) {
        donor_free(d);
        return rc;
    }
    if (strcmp(d->to, name) == 0) {
        donor_free(d);
        return err_set(err, MS_ERR_BAD_VALUE, "cannot move a range to the shard that owns it");
    }
    if ((rc = mig_shard_host(m, d->to, d->to_url, sizeof d->to_url, err)) != 0) {
        donor_free(d);
        return rc;
    }
    mig_uuid_new(d->co.mig_uuid);
    mig_uuid_hex(d->co.mig_uuid, d->co.id);
    {
        bson_oid_t sid;
        char hex[25];
        bson_oid_init(&sid, NULL);
        bson_oid_to_string(&sid, hex);
        snprintf(d->co.session, sizeof d->co.session, "%s_%s_%s", name, d->to, hex);
    }
    snprintf(d->co.ns, sizeof d->co.ns, "%s", d->ns);
    snprintf(d->co.donor, sizeof d->co.donor, "%s", name);
    snprintf(d->co.recipient, sizeof d->co.recipient, "%s", d->to);
    snprintf(d->co.recipient_host, sizeof d->co.recipient_host, "%s", d->to_url);

    pthread_mutex_lock(&m->mu);
    if (m->stopping) {
        rc = err_set(err, MS_ERR_SHUTDOWN_IN_PROGRESS, "shard shutting down");
    } else if (m->recoveries > 0 || m->stuck > 0) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "a migration interrupted earlier is still being recovered on this shard");
    } else if (m->donor) {
        if (same_request(m->donor, d)) {
            run = m->donor;   /* an identical request joins the running one */
            run->refs++;
        } else {
            rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                         "Unable to start new balancer operation because this shard is currently "
                         "donating range '%s' to shard %s", m->donor->ns, m->donor->to);
        }
    } else if (m->recv) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "Unable to start new migration because this shard is currently receiving a "
                     "chunk");
    } else {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        d->refs = 2;
        m->donor = d;
        if (pthread_create(&th, &at, donor_main, d) != 0) {
            m->donor = NULL;
            d->refs = 1;
            rc = err_set(err, MS_ERR_INTERNAL, "cannot start the donor thread");
        } else {
            run = d;
            d = NULL;
        }
        pthread_attr_destroy(&at);
    }
    if (run) {
        long long until = time_mono_ms() + op_time_left_ms(MS_MOVE_CHUNK_TIMEOUT_MS);
        while (!run->done && time_mono_ms() < until) {
            time_cond_wait_ms(&m->cv, &m->mu, 100);
        }
        if (run->done) {
            rc = run->rc;
            if (rc) *err = run->err;
        } else {
            rc = err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT,
                         "the migration is still running (it goes on; watch shardctl status)");
        }
        mig_donor_unref_locked(run);
    }
    pthread_mutex_unlock(&m->mu);
    if (d) donor_free(d);
    return rc;
}

/* ---- progress ------------------------------------------------------------------------ */

void mig_donor_status(mig_donor_t *d, bson_t *out) {
    int64_t ndel = 0, nrel = 0, bytes = 0;
    long long elapsed = time_now_ms() - d->started_ms;
    pthread_mutex_lock(&d->mu);
    mig_cloner_pending_locked(d, &ndel, &nrel, &bytes);
    BSON_APPEND_UTF8(out, "desc", "MigrationSourceManager");
    BSON_APPEND_UTF8(out, "role", "donor");
    BSON_APPEND_UTF8(out, "ns", d->ns);
    BSON_APPEND_UTF8(out, "migrationId", d->co.id);
    BSON_APPEND_UTF8(out, "sessionId", d->co.session);
    BSON_APPEND_UTF8(out, "from", d->co.donor);
    BSON_APPEND_UTF8(out, "to", d->to);
    BSON_APPEND_DOCUMENT(out, "min", &d->req_min);
    /* A max the donor picks itself is written during the checks without the lock. */
    if (d->has_max && d->phase > DP_CHECKS) BSON_APPEND_DOCUMENT(out, "max", &d->req_max);
    BSON_APPEND_UTF8(out, "phase", phase_names[d->phase]);
    BSON_APPEND_UTF8(out, "recipientState", d->recv_state[0] ? d->recv_state : "none");
    if (d->held_at) BSON_APPEND_UTF8(out, "heldAt", d->held_at);
    BSON_APPEND_INT64(out, "docsToClone", (int64_t)d->nrids);
    BSON_APPEND_INT64(out, "docsCloned", d->cloned_docs);
    BSON_APPEND_INT64(out, "bytesCloned", d->cloned_bytes);
    BSON_APPEND_INT64(out, "modsPending", ndel + nrel);
    BSON_APPEND_INT64(out, "modsSent", d->mods_sent);
    BSON_APPEND_INT64(out, "sessionRecordsSent", d->sess_sent);
    BSON_APPEND_INT64(out, "elapsedMS", elapsed);
    double rate = elapsed > 0 ? (double)d->cloned_docs * 1000.0 / (double)elapsed : 0;
    BSON_APPEND_DOUBLE(out, "docsPerSec", rate);
    /* What is left: documents not yet cloned plus the mods captured and not yet sent. */
    int64_t left = (int64_t)d->nrids - (int64_t)d->pos;
    if (left < 0) left = 0;
    if (d->phase < DP_CRITSEC) left += ndel + nrel;
    BSON_APPEND_INT64(out, "estimatedMSLeft", rate > 0 ? (int64_t)((double)left * 1000.0 / rate) : -1);
    pthread_mutex_unlock(&d->mu);
}
