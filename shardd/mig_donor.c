/*
 * mig_donor.c — the donor side of a chunk migration, run by bin/shardd (notes §1.2–1.3,
 * §1.7; MongoDB's MigrationSourceManager, MigrationChunkClonerSource and
 * MigrationCoordinator).
 *
 * `_shardsvrMoveRange` (from the config server) starts a donor thread and waits for its
 * end. The thread runs MongoDB's six timed steps, each followed by its failpoint
 * moveChunkHangAtStepN:
 *   1 checks       the range lies in one chunk this shard owns (max computed with
 *                  autoSplitVector when absent); overlapping range deletions finished
 *   2 startClone   changelog moveChunk.start; write capture on; coordinator document
 *                  and a pending range-deletion task persisted (one transaction) before
 *                  any data moves; clone list built (ChunkTooBig past the limit);
 *                  `_recvChunkStart` to the recipient
 *   3 catch-up     polls `_recvChunkStatus` while the recipient pulls `_migrateClone` and
 *                  `_transferMods`; goes on once what is left fits the write-pause budget
 *   4 critical section: writes to the collection wait (shv_crit_enter fences those
 *                  already past their version check)
 *   5 commit on the recipient: `_recvChunkCommit` (its final drain), then count and
 *                  checksum of the range compared on both sides
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
#include "shardd/mig.h"

enum donor_phase { DP_CHECKS, DP_CLONE, DP_CATCHUP, DP_CRITSEC, DP_COMMIT_RECIPIENT,
                   DP_COMMIT_CONFIG, DP_COMPLETING, DP_DONE };
static const char *const phase_names[] = {"checks", "clone", "catchup", "criticalSection",
                                          "commitOnRecipient", "commitOnConfig", "completing",
                                          "done"};

/* What a coordinator document says: everything recovery needs to finish a migration. */
typedef struct coord {
    char id[33];
    uint8_t mig_uuid[16];
    uint8_t coll_uuid[16];
    char ns[MS_NS_BYTES_MAX + 1];
    char session[320];
    char donor[128], recipient[128], recipient_host[MS_URL_BYTES_MAX];
    bson_t range_min, range_max;     /* the moved range */
    bson_t chunk_min, chunk_max;     /* the chunk that held it when the migration started */
    bson_t pre_version;              /* preMigrationChunkVersion {e, t, v} */
    char decision[16];               /* "", "committed", "aborted" */
} coord_t;

struct mig_donor {
    mig_t *m;
    int refs;                        /* under m->mu: the thread and every waiting command */
    bool done;
    int rc;
    ms_error_t err;
    /* the request */
    char ns[MS_NS_BYTES_MAX + 1];
    char to[128], to_url[MS_URL_BYTES_MAX];
    bson_t req_min, req_max;         /* as asked (max may be empty) */
    bool has_min, has_max;
    bool asked_max;                  /* max was in the request (has_max may be worked out) */
    int64_t max_chunk_bytes;
    bool wait_for_delete;
    int force_jumbo;
    bson_oid_t epoch;
    uint32_t ts_t, ts_i;
    /* worked out in step 1 */
    keys_pattern_t pat;
    buf_t min_enc, max_enc;
    coord_t co;
    long long started_ms;
    /* the clone list (MongoDB's recordIds) and capture, used by the command workers */
    pthread_mutex_t mu;
    int64_t *rids;
    size_t nrids, pos;
    xfer_t *x;
    enum donor_phase phase;
    int64_t cloned_docs, cloned_bytes, mods_sent;
    int64_t step_ms[6];
    long long pause_start_ms;
    int64_t pause_ms;
    int64_t recv_cloned, recv_catchup, recv_steady;
    char recv_state[16];
    bool capture_on, crit_held;
    bson_t from_version;             /* this shard's version when the migration started */
    int64_t digest_count;            /* the range at the clone-list snapshot */
    uint64_t digest_sum;
};

/* ---- coordinator documents ------------------------------------------------------------ */

static void coord_init(coord_t *c) {
    memset(c, 0, sizeof *c);
    bson_init(&c->range_min);
    bson_init(&c->range_max);
    bson_init(&c->chunk_min);
    bson_init(&c->chunk_max);
    bson_init(&c->pre_version);
}

static void coord_destroy(coord_t *c) {
    bson_destroy(&c->range_min);
    bson_destroy(&c->range_max);
    bson_destroy(&c->chunk_min);
    bson_destroy(&c->chunk_max);
    bson_destroy(&c->pre_version);
}

static void append_range(bson_t *dst, const char *key, const bson_t *min, const bson_t *max) {
    bson_t r;
    BSON_APPEND_DOCUMENT_BEGIN(dst, key, &r);
    BSON_APPEND_DOCUMENT(&r, "min", min);
    BSON_APPEND_DOCUMENT(&r, "max", max);
    bson_append_document_end(dst, &r);
}

static void coord_to_doc(const coord_t *c, bson_t *doc) {
    bson_init(doc);
    BSON_APPEND_BINARY(doc, "_id", BSON_SUBTYPE_UUID, c->mig_uuid, 16);
    BSON_APPEND_UTF8(doc, "migrationSessionId", c->session);
    BSON_APPEND_UTF8(doc, "nss", c->ns);
    BSON_APPEND_BINARY(doc, "collectionUuid", BSON_SUBTYPE_UUID, c->coll_uuid, 16);
    BSON_APPEND_UTF8(doc, "donorShardId", c->donor);
    BSON_APPEND_UTF8(doc, "recipientShardId", c->recipient);
    BSON_APPEND_UTF8(doc, "recipientHost", c->recipient_host);
    append_range(doc, "range", &c->range_min, &c->range_max);
    append_range(doc, "chunkRange", &c->chunk_min, &c->chunk_max);
    BSON_APPEND_DOCUMENT(doc, "preMigrationChunkVersion", &c->pre_version);
    if (c->decision[0]) BSON_APPEND_UTF8(doc, "decision", c->decision);
}

static void copy_str(char *dst, size_t cap, const bson_t *doc, const char *key) {
    bson_iter_t it;
    dst[0] = 0;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(dst, cap, "%s", bson_iter_utf8(&it, NULL));
}

static bool copy_uuid(uint8_t out[16], const bson_t *doc, const char *key) {
    bson_iter_t it;
    bson_subtype_t st;
    uint32_t len = 0;
    const uint8_t *data = NULL;
    if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_BINARY(&it)) return false;
    bson_iter_binary(&it, &st, &len, &data);
    if (len != 16) return false;
    memcpy(out, data, 16);
    return true;
}

static bool copy_doc(bson_t *dst, const bson_t *doc, const char *path) {
    bson_iter_t it;
    bson_t v;
    if (!bsonx_find_path(doc, path, &it) || !bsonx_view_container(&it, &v)) return false;
    bson_reinit(dst);
    bson_concat(dst, &v);
    return true;
}

static int coord_from_doc(const bson_t *doc, coord_t *c, ms_error_t *err) {
    coord_init(c);
    if (!copy_uuid(c->mig_uuid, doc, "_id") || !copy_uuid(c->coll_uuid, doc, "collectionUuid") ||
        !copy_doc(&c->range_min, doc, "range.min") || !copy_doc(&c->range_max, doc, "range.max") ||
        !copy_doc(&c->chunk_min, doc, "chunkRange.min") ||
        !copy_doc(&c->chunk_max, doc, "chunkRange.max") ||
        !copy_doc(&c->pre_version, doc, "preMigrationChunkVersion")) {
        coord_destroy(c);
        return err_set(err, MS_ERR_INVALID_BSON, "malformed migration coordinator document");
    }
    mig_uuid_hex(c->mig_uuid, c->id);
    copy_str(c->session, sizeof c->session, doc, "migrationSessionId");
    copy_str(c->ns, sizeof c->ns, doc, "nss");
    copy_str(c->donor, sizeof c->donor, doc, "donorShardId");
    copy_str(c->recipient, sizeof c->recipient, doc, "recipientShardId");
    copy_str(c->recipient_host, sizeof c->recipient_host, doc, "recipientHost");
    copy_str(c->decision, sizeof c->decision, doc, "decision");
    return 0;
}

/* The range-deletion task of a migration (config.rangeDeletions shape, notes §1.7). */
void mig_task_doc(const uint8_t mig_uuid[16], const char *ns, const uint8_t coll_uuid[16],
                  const char *donor, const bson_t *min, const bson_t *max,
                  const keys_pattern_t *pat, bool pending, bool now, bson_t *doc) {
    bson_init(doc);
    BSON_APPEND_BINARY(doc, "_id", BSON_SUBTYPE_UUID, mig_uuid, 16);
    BSON_APPEND_UTF8(doc, "nss", ns);
    BSON_APPEND_BINARY(doc, "collectionUuid", BSON_SUBTYPE_UUID, coll_uuid, 16);
    BSON_APPEND_UTF8(doc, "donorShardId", donor);
    append_range(doc, "range", min, max);
    if (pending) BSON_APPEND_BOOL(doc, "pending", true);
    BSON_APPEND_UTF8(doc, "whenToClean", now ? "now" : "delayed");
    BSON_APPEND_DATE_TIME(doc, "timestamp", time_now_ms());
    BSON_APPEND_INT64(doc, "numOrphanDocs", 0);
    BSON_APPEND_DOCUMENT(doc, "keyPattern", &pat->spec);
}

typedef struct persist_arg {
    const coord_t *co;
    const bson_t *task;       /* insert this task too, or NULL */
    bool del_coord, task_ready, task_delete;
} persist_arg_t;

static int persist_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    persist_arg_t *a = arg;
    int rc = 0;
    if (a->del_coord) {
        rc = store_sdoc_delete(t, SDOC_COORDINATORS, a->co->id, err);
    } else {
        bson_t doc;
        coord_to_doc(a->co, &doc);
        rc = store_sdoc_put(t, SDOC_COORDINATORS, a->co->id, &doc, err);
        bson_destroy(&doc);
    }
    if (rc == 0 && a->task) rc = rdel_task_insert(t, a->task, err);
    if (rc == 0 && a->task_ready) rc = rdel_task_set_ready(t, a->co->id, err);
    if (rc == 0 && a->task_delete) rc = rdel_task_delete(t, a->co->id, err);
    return rc;
}

static int persist(mig_t *m, persist_arg_t *a, ms_error_t *err) {
    return store_write(m->app->st, persist_fn, a, err);
}

typedef struct pat_arg {
    const char *ns;
    keys_pattern_t *pat;
    uint8_t *uuid;
    bool found;
} pat_arg_t;

static int pat_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    pat_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    if (!c || !c->sharded) return 0;
    if (a->uuid) memcpy(a->uuid, c->uuid, 16);
    a->found = true;
    return keys_pattern_parse(&c->sk.spec, a->pat, err);
}

/* The shard-key pattern of ns as this shard's catalog has it (set by shardCollection or
 * by the recipient of an earlier migration). NamespaceNotSharded when it has none. */
int mig_local_pattern(store_t *st, const char *ns, keys_pattern_t *pat, uint8_t uuid[16],
                      ms_error_t *err) {
    pat_arg_t a = {ns, pat, uuid, false};
    int rc = store_read(st, pat_fn, &a, err);
    if (rc == 0 && !a.found)
        rc = err_set(err, MS_ERR_NAMESPACE_NOT_SHARDED, "%s is not sharded on this shard", ns);
    return rc;
}

/* ---- completing a decided migration (notes §1.7 "Commit completion", "Abort completion") */

/* Tells the recipient the decision: committed → it deletes its pending task (the range is
 * its own now); aborted → its task becomes ready and the copy is deleted. Retried with a
 * backoff while the recipient is unreachable, up to `until_ms` (0 = once). */
static int notify_recipient(mig_t *m, const coord_t *c, bool committed, long long until_ms,
                            ms_error_t *err) {
    int wait_ms = 100, rc;
    for (;;) {
        bson_t cmd, reply;
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, committed ? "_recvChunkReleaseCritSec" : "_recvChunkAbort", c->ns);
        BSON_APPEND_UTF8(&cmd, "sessionId", c->session);
        BSON_APPEND_BINARY(&cmd, "migrationId", BSON_SUBTYPE_UUID, c->mig_uuid, 16);
        rc = mig_call(c->recipient_host, &cmd, MS_RPC_PEER_TIMEOUT_MS_DEFAULT, &reply, err);
        bson_destroy(&cmd);
        if (rc == 0) {
            bson_destroy(&reply);
            return 0;
        }
        if (m->stopping || time_mono_ms() + wait_ms > until_ms) return rc;
        log_warn("migration recipient not told yet id=%s to=%s errmsg=%s", c->id,
                 log_str(c->recipient), log_str(err->msg));
        nanosleep(&(struct timespec){wait_ms / 1000, (wait_ms % 1000) * 1000000L}, NULL);
        if (wait_ms < 5000) wait_ms *= 2;
    }
}

static int archive_range(mig_t *m, const coord_t *c, ms_error_t *err);

typedef struct orphans_arg {
    const char *id;
    int64_t n;
} orphans_arg_t;

static int orphans_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    orphans_arg_t *a = arg;
    return mig_task_add_orphans(t, a->id, a->n, true, err);
}

/* The donor's copy of a committed range is orphaned now: its task says how many
 * documents the range deleter has ahead (MongoDB's numOrphanDocs, set at commit). */
static void count_orphans(mig_t *m, const coord_t *c) {
    keys_pattern_t pat;
    buf_t min = {0}, max = {0};
    uint8_t uuid[16];
    int64_t n = 0;
    uint64_t sum = 0;
    ms_error_t e = {0};
    memset(&pat, 0, sizeof pat);
    if (mig_local_pattern(m->app->st, c->ns, &pat, uuid, &e) == 0 &&
        keys_encode_bound(&pat, &c->range_min, &min, &e) == 0 &&
        keys_encode_bound(&pat, &c->range_max, &max, &e) == 0 &&
        mig_range_digest(m->app->st, c->ns, &min, &max, &n, &sum, NULL, &e) == 0) {
        orphans_arg_t a = {c->id, n};
        if (store_write(m->app->st, orphans_fn, &a, &e) != 0)
            log_warn("numOrphanDocs not recorded id=%s errmsg=%s", c->id, log_str(e.msg));
    }
    keys_pattern_free(&pat);
    buf_free(&min);
    buf_free(&max);
}

/* Finishes a decided migration: persists the decision, tells the recipient, hands this
 * shard's copy to the range deleter (commit) or drops the task (abort), forgets the
 * coordinator document. Returns non-zero when a step could not be done yet (the document
 * stays and recovery finishes it later). */
static int complete(mig_t *m, coord_t *c, bool committed, long long until_ms, ms_error_t *err) {
    persist_arg_t a = {.co = c};
    int rc;
    snprintf(c->decision, sizeof c->decision, "%s", committed ? "committed" : "aborted");
    if ((rc = persist(m, &a, err)) != 0) return rc;
    if (!committed) {
        persist_arg_t d = {.co = c, .task_delete = true};
        if ((rc = persist(m, &d, err)) != 0) return rc;
    }
    if ((rc = notify_recipient(m, c, committed, until_ms, err)) != 0) return rc;
    if (committed) count_orphans(m, c);
    if (committed && m->archive && (rc = archive_range(m, c, err)) != 0)
        log_error("archive of moved chunk failed id=%s errmsg=%s", c->id, log_str(err->msg));
    persist_arg_t f = {.co = c, .del_coord = true, .task_ready = committed};
    if ((rc = persist(m, &f, err)) != 0) return rc;
    if (committed && m->app->rdel) rdel_kick(m->app->rdel);
    log_info("migration completed id=%s ns=%s decision=%s", c->id, log_str(c->ns), c->decision);
    return 0;
}

/* Does this shard still own the migrated range's min? Asks the config server after fencing
 * off any commit still in flight (`_configsvrEnsureChunkVersionIsGreaterThan`, notes
 * §1.7): *committed set on success. */
static int decide(mig_t *m, const coord_t *c, bool *committed, ms_error_t *err) {
    char url[MS_URL_BYTES_MAX];
    bson_t cmd, reply, kmin, kmax, vdoc;
    buf_t key = {0};
    keys_pattern_t pat;
    uint8_t uuid[16];
    int rc;
    shv_identity(m->app->shv, NULL, 0, url, sizeof url);
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "_configsvrEnsureChunkVersionIsGreaterThan", 1);
    BSON_APPEND_UTF8(&cmd, "nss", c->ns);
    BSON_APPEND_BINARY(&cmd, "collectionUUID", BSON_SUBTYPE_UUID, c->coll_uuid, 16);
    BSON_APPEND_DOCUMENT(&cmd, "minKey", &c->chunk_min);
    BSON_APPEND_DOCUMENT(&cmd, "maxKey", &c->chunk_max);
    BSON_APPEND_DOCUMENT(&cmd, "version", &c->pre_version);
    rc = mig_call(url, &cmd, MS_RPC_CONFIG_TIMEOUT_MS_DEFAULT, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0) return rc;
    bson_destroy(&reply);
    if ((rc = shv_refresh(m->app->shv, c->ns, err)) != 0) {
        if (rc == MS_ERR_NAMESPACE_NOT_SHARDED) {   /* dropped meanwhile: nothing to keep */
            *committed = false;
            return 0;
        }
        return rc;
    }
    /* Owning range.min means the chunk never left. */
    bson_init(&kmin);
    bson_init(&kmax);
    bson_init(&vdoc);
    memset(&pat, 0, sizeof pat);
    if ((rc = mig_local_pattern(m->app->st, c->ns, &pat, uuid, err)) != 0) {
        if (rc == MS_ERR_NAMESPACE_NOT_SHARDED) {
            *committed = false;
            rc = 0;
        }
    } else if ((rc = keys_encode_bound(&pat, &c->range_min, &key, err)) == 0) {
        bson_t sv;
        bson_init(&sv);
        ms_error_t e2 = {0};
        int orc = shv_owned_chunk(m->app->shv, c->ns, &key, &kmin, &kmax, &vdoc, &sv, NULL, uuid, &e2);
        bson_destroy(&sv);
        *committed = orc != 0;
        if (orc != 0 && orc != MS_ERR_STALE_CONFIG && orc != MS_ERR_NAMESPACE_NOT_SHARDED &&
            orc != MS_ERR_CONFLICTING_OPERATION)
            rc = err_set(err, orc, "%s", e2.msg);
    }
    keys_pattern_free(&pat);
    buf_free(&key);
    bson_destroy(&kmin);
    bson_destroy(&kmax);
    bson_destroy(&vdoc);
    return rc;
}

/* ---- recovery (notes §1.7 "Donor step-up recovery") ---------------------------------------- */

typedef struct recov {
    mig_t *m;
    coord_t co;
    bool crit;           /* this recovery holds the collection's critical section */
} recov_t;

static void *recover_main(void *p) {
    recov_t *r = p;
    mig_t *m = r->m;
    coord_t *c = &r->co;
    int wait_ms = 200;
    bool crit = r->crit;
    ms_error_t e = {0};
    fp_eval(FP_HANG_DONOR_RECOVERY, NULL);
    while (!m->stopping) {
        bool committed = strcmp(c->decision, "committed") == 0;
        int rc = 0;
        if (!c->decision[0]) rc = decide(m, c, &committed, &e);
        if (rc == 0 && crit) {
            snprintf(c->decision, sizeof c->decision, "%s", committed ? "committed" : "aborted");
            persist_arg_t a = {.co = c};
            if ((rc = persist(m, &a, &e)) == 0) {
                shv_crit_leave(m->app->shv, c->ns);
                crit = false;
            }
        }
        if (rc == 0) rc = complete(m, c, committed, time_mono_ms() + 2000, &e);
        if (rc == 0) {
            log_info("migration recovered id=%s ns=%s decision=%s", c->id, log_str(c->ns),
                     c->decision);
            break;
        }
        log_warn("migration recovery retrying id=%s ns=%s errmsg=%s", c->id, log_str(c->ns),
                 log_str(e.msg));
        for (int slept = 0; slept < wait_ms && !m->stopping; slept += 50)
            nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
        if (wait_ms < 10000) wait_ms *= 2;
    }
    if (crit) shv_crit_leave(m->app->shv, c->ns);
    pthread_mutex_lock(&m->mu);
    m->recoveries--;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    coord_destroy(c);
    free(r);
    return NULL;
}

/* Starts a recovery thread for c. crit_held: the caller hands over the collection's
 * critical section (a commit whose outcome is unknown). Otherwise an undecided migration
 * enters it here, before this returns: a commit may still be in flight at the config
 * server, so no write may land on the range until the chunk table has decided (MongoDB's
 * recoverable critical section). */
static void start_recovery(mig_t *m, const coord_t *c, bool crit_held) {
    recov_t *r = mem_calloc_aligned(1, sizeof *r);
    pthread_t th;
    pthread_attr_t at;
    bson_t doc;
    ms_error_t e = {0};
    if (!r) {
        if (crit_held) shv_crit_leave(m->app->shv, c->ns);
        return;
    }
    r->m = m;
    r->crit = crit_held;
    if (!crit_held && !c->decision[0] &&
        shv_crit_enter(m->app->shv, m->app->st, c->ns, &e) == 0)
        r->crit = true;
    coord_to_doc(c, &doc);
    if (coord_from_doc(&doc, &r->co, &e) != 0) {
        bson_destroy(&doc);
        free(r);
        return;
    }
    bson_destroy(&doc);
    pthread_mutex_lock(&m->mu);
    m->recoveries++;
    pthread_mutex_unlock(&m->mu);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, recover_main, r) != 0) {
        pthread_mutex_lock(&m->mu);
        m->recoveries--;
        pthread_mutex_unlock(&m->mu);
        if (r->crit) shv_crit_leave(m->app->shv, c->ns);
        coord_destroy(&r->co);
        free(r);
    }
    pthread_attr_destroy(&at);
}

static int recover_scan_fn(void *arg, const char *id, const bson_t *doc) {
    mig_t *m = arg;
    coord_t c;
    ms_error_t e = {0};
    if (coord_from_doc(doc, &c, &e) != 0) {
        log_error("migration coordinator document unreadable id=%s errmsg=%s", log_str(id),
                  log_str(e.msg));
        return 0;
    }
    log_info("migration recovery starting id=%s ns=%s decision=%s", c.id, log_str(c.ns),
             c.decision[0] ? c.decision : "none");
    start_recovery(m, &c, false);
    coord_destroy(&c);
    return 0;
}

typedef struct scan_arg {
    mig_t *m;
} scan_arg_t;

static int recover_txn(store_txn_t *t, void *arg, ms_error_t *err) {
    scan_arg_t *a = arg;
    return store_sdoc_scan(t, SDOC_COORDINATORS, recover_scan_fn, a->m, err);
}

void mig_donor_recover_all(mig_t *m) {
    scan_arg_t a = {m};
    ms_error_t e = {0};
    if (store_read(m->app->st, recover_txn, &a, &e) != 0)
        log_error("migration recovery scan failed errmsg=%s", log_str(e.msg));
}

/* ---- the donor thread ------------------------------------------------------------------ */

static void donor_set_phase(mig_donor_t *d, enum donor_phase p) {
    pthread_mutex_lock(&d->mu);
    d->phase = p;
    pthread_mutex_unlock(&d->mu);
}

static int step_done(mig_donor_t *d, int step, long long *t0, ms_error_t *err) {
    long long now = time_mono_ms();
    d->step_ms[step - 1] = now - *t0;
    *t0 = now;
    return fp_eval(mig_donor_step_fps[step - 1], err);
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

typedef struct clone_list_arg {
    mig_donor_t *d;
    int64_t cap;
    int64_t coll_docs, coll_bytes;
} clone_list_arg_t;

static int clone_list_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    clone_list_arg_t *a = arg;
    mig_donor_t *d = a->d;
    store_coll_t *c = store_coll_get(t, d->ns);
    int rc;
    if (!c) return 0;
    if ((rc = store_coll_stats(t, c, &a->coll_docs, &a->coll_bytes, NULL, NULL, err)) != 0) return rc;
    /* MongoDB's older too-big rule (notes §1.2): 250,000 documents, or 1.3 × the chunk
     * size over the average document size. */
    int64_t avg = a->coll_docs > 0 ? a->coll_bytes / a->coll_docs : 0;
    a->cap = MS_CHUNK_OBJECTS_MAX;
    if (avg > 0) {
        int64_t by_size = (int64_t)(1.3 * (double)d->max_chunk_bytes / (double)avg);
        if (by_size < a->cap) a->cap = by_size;
    }
    if (d->force_jumbo) a->cap = INT64_MAX / 2;
    /* One scan: the record ids in key order and the range's digest at this snapshot (the
     * capture adds every later write to it). */
    return mig_range_rowids_digest(t, c, &d->min_enc, &d->max_enc, (size_t)a->cap, &d->rids,
                                   &d->nrids, &d->digest_count, &d->digest_sum, err);
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
    if ((rc = xfer_start(m->app->st, d->ns, &d->min_enc, &d->max_enc, MS_MIG_CAPTURE_BYTES_MAX,
                         &d->x, err)) != 0)
        return rc;
    d->capture_on = true;

    mig_task_doc(d->co.mig_uuid, d->ns, d->co.coll_uuid, d->co.donor, &d->req_min, &d->req_max,
                 &d->pat, true, d->wait_for_delete, &task);
    persist_arg_t pa = {.co = &d->co, .task = &task};
    rc = persist(m, &pa, err);
    bson_destroy(&task);
    if (rc != 0) return rc;

    clone_list_arg_t ca = {.d = d};
    /* The clone list and the digest read one snapshot, taken where the capture's running
     * digest restarts: snapshot + captured changes = the range at any later moment. */
    if ((rc = store_read_fenced(m->app->st, xfer_digest_reset, d->x, clone_list_fn, &ca, err)) != 0)
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
    copy_str(buf, cap, doc, key);
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

/* Step 3 (awaitToCatchUp): goes on once the clone is done and what remains of the
 * captured writes would take the recipient no longer than the write-pause budget at the
 * rate it has been applying them (MongoDB waits for zero or for < 10 % of the chunk size:
 * minishard bounds the pause instead). Aborts when the recipient fails, the capture
 * overflows, or writes keep it from converging within the catch-up bound. */
static int step_catch_up(mig_donor_t *d, ms_error_t *err) {
    mig_t *m = d->m;
    long long start = time_mono_ms(), last_t = start;
    int64_t last_applied = 0;
    double rate_per_ms = 0;   /* mods the recipient applies per ms (smoothed) */
    for (int iter = 0;; iter++) {
        bson_t st;
        char state[16], errmsg[512];
        int rc;
        if (m->stopping) return err_set(err, MS_ERR_SHUTDOWN_IN_PROGRESS, "shard shutting down");
        if ((rc = xfer_failed(d->x, err)) != 0) return rc;
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
        pthread_mutex_unlock(&d->mu);
        if (cloned && (steady || catchup)) {
            int64_t ndel, nrel, bytes;
            xfer_pending(d->x, &ndel, &nrel, &bytes);
            int64_t pending = ndel + nrel;
            if (pending == 0 && steady) return 0;
            double est_ms = rate_per_ms > 0 ? (double)pending / rate_per_ms : 1e9;
            if (est_ms <= (double)m->write_pause_budget_ms) {
                log_info("migration entering critical section early ns=%s pending=%lld est_ms=%.1f "
                         "budget_ms=%d", log_str(d->ns), (long long)pending, est_ms,
                         m->write_pause_budget_ms);
                return 0;
            }
            if (now - start > m->catchup_timeout_ms)
                return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT,
                               "migration could not converge: %lld writes still pending after "
                               "%lld ms of catch-up (writes outpace the recipient at %.2f/ms)",
                               (long long)pending, now - start, rate_per_ms);
        } else if (now - start > MS_MIG_CLONE_TIMEOUT_MS) {
            return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT, "migration clone took longer than %d ms",
                           MS_MIG_CLONE_TIMEOUT_MS);
        }
        /* The recipient waited for us up to a second; when it did not, back off. */
        if (time_mono_ms() - t0 < 5) {
            int ms = 1 << (iter < 6 ? iter : 6);
            nanosleep(&(struct timespec){0, ms * 1000000L}, NULL);
        }
    }
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
    /* Writes are blocked: the snapshot's digest plus every change the capture saw since is
     * the range now — no scan while writes wait (the pause must not grow with the chunk). */
    {
        int64_t dc = 0;
        uint64_t ds = 0;
        xfer_digest(d->x, &dc, &ds);
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
    shv_crit_block_reads(m->app->shv, d->ns);
    if ((rc = fp_eval(FP_MIGRATION_COMMIT_NETWORK_ERROR, err)) != 0) {
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
    if (rc == 0 && (rc = fp_eval(FP_FAIL_MIGRATION_COMMIT, err)) != 0)
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

    donor_set_phase(d, DP_CLONE);
    if ((rc = step_start_clone(d, err)) != 0 || (rc = step_done(d, ++step, &t0, err)) != 0)
        goto abort;

    donor_set_phase(d, DP_CATCHUP);
    if ((rc = step_catch_up(d, err)) != 0 || (rc = step_done(d, ++step, &t0, err)) != 0) goto abort;

    donor_set_phase(d, DP_CRITSEC);
    if ((rc = shv_crit_enter(m->app->shv, m->app->st, d->ns, err)) != 0) goto abort;
    d->crit_held = true;
    d->pause_start_ms = time_mono_ms();
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
            if (decide(m, &d->co, &committed, &e2) == 0) {
                unknown = false;
                break;
            }
            nanosleep(&(struct timespec){0, 200 * 1000000L}, NULL);
        }
        if (unknown) {
            /* Recovery finishes it: the coordinator document stays, and the critical
             * section passes to the recovery, which leaves it once the config server's
             * chunk table has decided. */
            d->crit_held = false;
            start_recovery(m, &d->co, true);
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
        if (persist(m, &a, &e2) != 0)
            log_error("migration decision not persisted id=%s errmsg=%s", d->co.id, log_str(e2.msg));
        if (shv_refresh(m->app->shv, d->ns, &e2) != 0) shv_invalidate(m->app->shv, d->ns);
    }
    /* After the commit a point's "error" cannot undo anything: the command reports it
     * once the migration is complete (as MongoDB's failpoints after the commit do). */
    late_rc = fp_eval(FP_HANG_BEFORE_LEAVING_CRIT_SEC, &late_err);
    d->pause_ms = time_mono_ms() - d->pause_start_ms;
    shv_crit_leave(m->app->shv, d->ns);
    d->crit_held = false;
    d->step_ms[5] = time_mono_ms() - t0;
    step = 6;
    if (late_rc == 0) late_rc = fp_eval(mig_donor_step_fps[5], &late_err);
    xfer_stop(m->app->st, d->x);
    d->x = NULL;
    d->capture_on = false;

    donor_set_phase(d, DP_COMPLETING);
    {
        ms_error_t e2 = {0};
        if (complete(m, &d->co, true, time_mono_ms() + 5000, &e2) != 0) {
            log_warn("migration completion deferred to recovery id=%s errmsg=%s", d->co.id,
                     log_str(e2.msg));
            start_recovery(m, &d->co, false);
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
        if (d->capture_on) {
            xfer_stop(m->app->st, d->x);
            d->x = NULL;
            d->capture_on = false;
        }
        if (d->crit_held) {
            d->crit_held = false;
            shv_crit_leave(m->app->shv, d->ns);
        }
        if (complete(m, &d->co, false, time_mono_ms() + 5000, &e2) != 0) {
            log_warn("migration abort completion deferred to recovery id=%s errmsg=%s", d->co.id,
                     log_str(e2.msg));
            start_recovery(m, &d->co, false);
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
    if (d->capture_on) xfer_stop(m->app->st, d->x);
    d->x = NULL;
    if (d->crit_held) shv_crit_leave(m->app->shv, d->ns);
    d->rc = rc;
    {
        bson_t details;
        bson_init(&details);
        BSON_APPEND_DOCUMENT(&details, "min", &d->req_min);
        if (d->has_max) BSON_APPEND_DOCUMENT(&details, "max", &d->req_max);
        BSON_APPEND_UTF8(&details, "from", d->co.donor);
        BSON_APPEND_UTF8(&details, "to", d->to);
        append_steps(&details, d->step_ms, 6, step);
        BSON_APPEND_INT64(&details, "clonedDocs", d->cloned_docs);
        BSON_APPEND_INT64(&details, "clonedBytes", d->cloned_bytes);
        BSON_APPEND_INT64(&details, "modsSent", d->mods_sent);
        BSON_APPEND_INT64(&details, "writePauseMS", d->pause_ms);
        BSON_APPEND_UTF8(&details, "note", committed ? "success" : unknown ? "unknown" : "aborted");
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
    coord_destroy(&d->co);
    free(d->rids);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* Drops one reference, under m->mu. */
static void donor_unref_locked(mig_donor_t *d) {
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
    donor_unref_locked(d);
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

/* The recipient's URL from the config server's shard list (config.shards). */
static int shard_host(mig_t *m, const char *shard, char *out, size_t cap, ms_error_t *err) {
    char url[MS_URL_BYTES_MAX];
    bson_t cmd, reply;
    bson_iter_t it, arr;
    int rc;
    shv_identity(m->app->shv, NULL, 0, url, sizeof url);
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "listShards", 1);
    rc = mig_call(url, &cmd, MS_RPC_CONFIG_TIMEOUT_MS_DEFAULT, &reply, err);
    bson_destroy(&cmd);
    if (rc != 0) return rc;
    rc = err_set(err, MS_ERR_SHARD_NOT_FOUND, "shard %s not found", shard);
    if (bson_iter_init_find(&it, &reply, "shards") && bson_iter_recurse(&it, &arr))
        while (bson_iter_next(&arr)) {
            bson_t s;
            char id[128], host[MS_URL_BYTES_MAX];
            if (!bsonx_view_container(&arr, &s)) continue;
            copy_str(id, sizeof id, &s, "_id");
            copy_str(host, sizeof host, &s, "host");
            if (strcmp(id, shard) == 0) {
                snprintf(out, cap, "%s", host);
                memset(err, 0, sizeof *err);
                rc = 0;
                break;
            }
        }
    bson_destroy(&reply);
    return rc;
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
    bson_init(&d->req_min);
    bson_init(&d->req_max);
    bson_init(&d->from_version);
    coord_init(&d->co);
    if ((rc = parse_request(ctx, d, err)) != 0) {
        donor_free(d);
        return rc;
    }
    if (strcmp(d->to, name) == 0) {
        donor_free(d);
        return err_set(err, MS_ERR_BAD_VALUE, "cannot move a range to the shard that owns it");
    }
    if ((rc = shard_host(m, d->to, d->to_url, sizeof d->to_url, err)) != 0) {
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
    } else if (m->recoveries > 0) {
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
        donor_unref_locked(run);
    }
    pthread_mutex_unlock(&m->mu);
    if (d) donor_free(d);
    return rc;
}

/* ---- served to the recipient: _migrateClone, _transferMods ------------------------------ */

/* The running donation of sessionId, with a reference (NULL + error when none). */
static mig_donor_t *donor_for(cmd_ctx_t *ctx, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_t *m = app->mig;
    bson_iter_t it;
    mig_donor_t *d = NULL;
    const char *sid = cmd_field(ctx, "sessionId", &it) && BSON_ITER_HOLDS_UTF8(&it)
                          ? bson_iter_utf8(&it, NULL) : "";
    pthread_mutex_lock(&m->mu);
    if (m->donor && !m->donor->done && strcmp(m->donor->co.session, sid) == 0) {
        d = m->donor;
        d->refs++;
    }
    pthread_mutex_unlock(&m->mu);
    if (!d)
        err_set(err, MS_ERR_CONFLICTING_OPERATION, "no active migration with session %s", sid);
    return d;
}

static void donor_release(mig_t *m, mig_donor_t *d) {
    pthread_mutex_lock(&m->mu);
    donor_unref_locked(d);
    pthread_mutex_unlock(&m->mu);
}

typedef struct clone_batch_arg {
    mig_donor_t *d;
    bson_t *arr;
    int n;
    size_t bytes;
} clone_batch_arg_t;

/* Pops record ids and appends their current documents: gone ones are skipped, and so are
 * ones whose key left the range since the scan (the recipient never deletes what it should
 * not have got). At most MS_BATCH_BYTES_MAX, at least one document. */
static int clone_batch_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    clone_batch_arg_t *a = arg;
    mig_donor_t *d = a->d;
    store_coll_t *c = store_coll_get(t, d->ns);
    char k[16];
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "%s was dropped", d->ns);
    while (d->pos < d->nrids) {
        bson_t doc;
        buf_t key = {0};
        int rc = store_get_by_rowid(t, c, d->rids[d->pos], &doc, err);
        if (rc == MS_ERR_NO_MATCHING_DOCUMENT) {
            d->pos++;
            continue;
        }
        if (rc != 0) return rc;
        bool keep = keys_extract(&d->pat, &doc, NULL, &key, NULL) == 0 &&
                    mig_key_in_range(&key, &d->min_enc, &d->max_enc);
        buf_free(&key);
        if (keep) {
            if (a->n > 0 && a->bytes + doc.len > MS_BATCH_BYTES_MAX) {
                bson_destroy(&doc);
                break;
            }
            snprintf(k, sizeof k, "%d", a->n++);
            BSON_APPEND_DOCUMENT(a->arr, k, &doc);
            a->bytes += doc.len;
        }
        bson_destroy(&doc);
        d->pos++;
    }
    return 0;
}

int cmd_migrate_clone(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_donor_t *d = donor_for(ctx, err);
    bson_t arr;
    int rc;
    if (!d) return err->code;
    BSON_APPEND_ARRAY_BEGIN(reply, "objects", &arr);
    pthread_mutex_lock(&d->mu);
    clone_batch_arg_t a = {d, &arr, 0, 0};
    rc = store_read(app->st, clone_batch_fn, &a, err);
    d->cloned_docs += a.n;
    d->cloned_bytes += (int64_t)a.bytes;
    pthread_mutex_unlock(&d->mu);
    bson_append_array_end(reply, &arr);
    donor_release(app->mig, d);
    return rc;
}

typedef struct mods_arg {
    mig_donor_t *d;
    buf_t *reload;
    int nreload, used;
    bson_t *arr;
    size_t bytes;
} mods_arg_t;

static int reload_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    mods_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->d->ns);
    char k[16];
    int n = 0;
    if (!c) return 0;
    for (a->used = 0; a->used < a->nreload; a->used++) {
        bson_t idv, doc;
        int64_t rid;
        bool exists = false;
        int rc;
        if (!bson_init_static(&idv, a->reload[a->used].data, a->reload[a->used].len)) continue;
        bson_init(&doc);
        if ((rc = mig_find_by_id(t, c, &idv, &rid, &doc, &exists, err)) != 0) {
            bson_destroy(&doc);
            return rc;
        }
        if (exists) {
            if (n > 0 && a->bytes + doc.len > MS_BATCH_BYTES_MAX) {
                bson_destroy(&doc);
                break;
            }
            snprintf(k, sizeof k, "%d", n++);
            BSON_APPEND_DOCUMENT(a->arr, k, &doc);
            a->bytes += doc.len;
        }
        bson_destroy(&doc);
    }
    return 0;
}

/* `_transferMods`: deletes first, then the current documents of the reloaded ids (notes
 * §1.3); what does not fit goes back to the head of the lists. */
int cmd_transfer_mods(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_donor_t *d = donor_for(ctx, err);
    buf_t *del = NULL, *rel = NULL;
    int ndel = 0, nrel = 0, rc = 0;
    bson_t arr;
    char k[16];
    size_t bytes = 0;
    if (!d) return err->code;
    pthread_mutex_lock(&d->mu);
    if (!d->x) {
        pthread_mutex_unlock(&d->mu);
        donor_release(app->mig, d);
        return err_set(err, MS_ERR_CONFLICTING_OPERATION, "the migration's capture has ended");
    }
    if ((rc = xfer_failed(d->x, err)) != 0) {
        pthread_mutex_unlock(&d->mu);
        donor_release(app->mig, d);
        return rc;
    }
    xfer_take(d->x, MS_BATCH_BYTES_MAX / 2, &del, &ndel, &rel, &nrel);
    BSON_APPEND_ARRAY_BEGIN(reply, "deleted", &arr);
    for (int i = 0; i < ndel; i++) {
        bson_t idv;
        if (!bson_init_static(&idv, del[i].data, del[i].len)) continue;
        snprintf(k, sizeof k, "%d", i);
        BSON_APPEND_DOCUMENT(&arr, k, &idv);
        bytes += del[i].len;
    }
    bson_append_array_end(reply, &arr);
    BSON_APPEND_ARRAY_BEGIN(reply, "reload", &arr);
    mods_arg_t a = {d, rel, nrel, 0, &arr, bytes};
    rc = store_read(app->st, reload_fn, &a, err);
    bson_append_array_end(reply, &arr);
    if (rc == 0 && a.used < nrel) {
        /* Did not fit: back to the head, after nothing (deletes all went out). */
        int left = nrel - a.used;
        buf_t *rest = calloc((size_t)left, sizeof *rest);
        if (rest) {
            memcpy(rest, rel + a.used, (size_t)left * sizeof *rest);
            memset(rel + a.used, 0, (size_t)left * sizeof *rest);
            xfer_putback(d->x, NULL, 0, rest, left);
        }
    }
    BSON_APPEND_INT64(reply, "size", (int64_t)a.bytes);
    d->mods_sent += ndel + a.used;
    pthread_mutex_unlock(&d->mu);
    xfer_ids_free(del, ndel);
    xfer_ids_free(rel, nrel);
    donor_release(app->mig, d);
    return rc;
}

/* ---- progress ------------------------------------------------------------------------ */

void mig_donor_status(mig_donor_t *d, bson_t *out) {
    int64_t ndel = 0, nrel = 0, bytes = 0;
    long long elapsed = time_now_ms() - d->started_ms;
    pthread_mutex_lock(&d->mu);
    if (d->x) xfer_pending(d->x, &ndel, &nrel, &bytes);
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
    BSON_APPEND_INT64(out, "docsToClone", (int64_t)d->nrids);
    BSON_APPEND_INT64(out, "docsCloned", d->cloned_docs);
    BSON_APPEND_INT64(out, "bytesCloned", d->cloned_bytes);
    BSON_APPEND_INT64(out, "modsPending", ndel + nrel);
    BSON_APPEND_INT64(out, "modsSent", d->mods_sent);
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

/* ---- archive (--archive-moved-chunks; MongoDB <= 3.0's moveParanoia) --------------------- */

typedef struct archive_arg {
    const coord_t *c;
    FILE *f;
    int64_t n;
} archive_arg_t;

static int archive_doc(void *arg, const uint8_t *doc, size_t len, ms_error_t *err) {
    archive_arg_t *a = arg;
    if (fwrite(doc, 1, len, a->f) != len)
        return err_set(err, MS_ERR_INTERNAL, "archive write failed: %s", strerror(errno));
    a->n++;
    return 0;
}

static int archive_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    archive_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->c->ns);
    buf_t min = {0}, max = {0};
    int rc;
    if (!c || !c->sharded) return 0;
    if ((rc = keys_encode_bound(&c->sk, &a->c->range_min, &min, err)) == 0 &&
        (rc = keys_encode_bound(&c->sk, &a->c->range_max, &max, err)) == 0)
        rc = mig_range_docs(t, c, &min, &max, archive_doc, a, err);
    buf_free(&min);
    buf_free(&max);
    return rc;
}

/* Writes the moved documents to DBPATH/moveChunk/<ns>/<migrationId>.bson (a plain
 * concatenation of BSON documents, readable with bsondump) before the range deleter may
 * remove them. */
static int archive_range(mig_t *m, const coord_t *c, ms_error_t *err) {
    char dir[4400], path[4500];
    archive_arg_t a = {c, NULL, 0};
    int rc;
    snprintf(dir, sizeof dir, "%s/moveChunk", m->dbpath);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/moveChunk/%s", m->dbpath, c->ns);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s.bson", dir, c->id);
    if (!(a.f = fopen(path, "wb")))
        return err_set(err, MS_ERR_INTERNAL, "cannot open %s: %s", path, strerror(errno));
    rc = store_read(m->app->st, archive_fn, &a, err);
    if (fflush(a.f) != 0 || fsync(fileno(a.f)) != 0)
        if (rc == 0) rc = err_set(err, MS_ERR_INTERNAL, "archive flush failed: %s", strerror(errno));
    fclose(a.f);
    if (rc == 0) log_info("moved chunk archived path=%s docs=%lld", log_str(path), (long long)a.n);
    return rc;
}
