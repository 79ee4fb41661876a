/*
 * mig_coord.c — the donor's migration coordinator, run by bin/shardd: MongoDB's
 * MigrationCoordinator (notes §1.7). It owns what must survive a kill -9 of the donor: the
 * coordinator document (config.migrationCoordinators) and the donor's range-deletion
 * task, persisted before anything moves; the decision, persisted before anyone acts on it;
 * the completion that tells the recipient (found by shard name) and hands this shard's
 * copy to the range deleter or drops the task; and the recovery that finishes every
 * migration a crash or an unknown commit outcome left — fencing the chunk at the config
 * server, then deciding from a routing table it fetches itself after the fence, holding
 * the collection's critical section (as its owner) until the decision is persisted. The
 * moved-chunk archive (--archive-moved-chunks) is written here at completion.
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
#include "common/rpc.h"
#include "common/rtable.h"
#include "shardd/mig.h"
#include "shardd/mig_priv.h"

/* ---- coordinator documents ------------------------------------------------------------ */

void mig_coord_init(coord_t *c) {
    memset(c, 0, sizeof *c);
    bson_init(&c->range_min);
    bson_init(&c->range_max);
    bson_init(&c->chunk_min);
    bson_init(&c->chunk_max);
    bson_init(&c->pre_version);
}

void mig_coord_destroy(coord_t *c) {
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

void mig_copy_str(char *dst, size_t cap, const bson_t *doc, const char *key) {
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
    mig_coord_init(c);
    if (!copy_uuid(c->mig_uuid, doc, "_id") || !copy_uuid(c->coll_uuid, doc, "collectionUuid") ||
        !copy_doc(&c->range_min, doc, "range.min") || !copy_doc(&c->range_max, doc, "range.max") ||
        !copy_doc(&c->chunk_min, doc, "chunkRange.min") ||
        !copy_doc(&c->chunk_max, doc, "chunkRange.max") ||
        !copy_doc(&c->pre_version, doc, "preMigrationChunkVersion")) {
        mig_coord_destroy(c);
        return err_set(err, MS_ERR_INVALID_BSON, "malformed migration coordinator document");
    }
    mig_uuid_hex(c->mig_uuid, c->id);
    mig_copy_str(c->session, sizeof c->session, doc, "migrationSessionId");
    mig_copy_str(c->ns, sizeof c->ns, doc, "nss");
    mig_copy_str(c->donor, sizeof c->donor, doc, "donorShardId");
    mig_copy_str(c->recipient, sizeof c->recipient, doc, "recipientShardId");
    mig_copy_str(c->recipient_host, sizeof c->recipient_host, doc, "recipientHost");
    mig_copy_str(c->decision, sizeof c->decision, doc, "decision");
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

int mig_coord_persist(mig_t *m, persist_arg_t *a, ms_error_t *err) {
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
/* (The recipient is found by its shard name in config.shards at each attempt: the host
 * persisted in the coordinator document may be long gone after a restart.) */
static int notify_recipient(mig_t *m, const coord_t *c, bool committed, long long until_ms,
                            ms_error_t *err) {
    int wait_ms = 100, rc;
    for (;;) {
        bson_t cmd, reply;
        char host[MS_URL_BYTES_MAX];
        if ((rc = mig_shard_host(m, c->recipient, host, sizeof host, err)) != 0) {
            if (m->stopping || time_mono_ms() + wait_ms > until_ms) return rc;
            log_warn("migration recipient not found yet id=%s to=%s errmsg=%s", c->id,
                     log_str(c->recipient), log_str(err->msg));
            nanosleep(&(struct timespec){wait_ms / 1000, (wait_ms % 1000) * 1000000L}, NULL);
            if (wait_ms < 5000) wait_ms *= 2;
            continue;
        }
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, committed ? "_recvChunkReleaseCritSec" : "_recvChunkAbort", c->ns);
        BSON_APPEND_UTF8(&cmd, "sessionId", c->session);
        BSON_APPEND_BINARY(&cmd, "migrationId", BSON_SUBTYPE_UUID, c->mig_uuid, 16);
        rc = mig_call(host, &cmd, MS_RPC_PEER_TIMEOUT_MS_DEFAULT, &reply, err);
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
int mig_coord_complete(mig_t *m, coord_t *c, bool committed, long long until_ms, ms_error_t *err) {
    persist_arg_t a = {.co = c};
    int rc;
    /* One owner per range: a migration decided one way is never completed the other
     * (the recipient keeps the range only when the donor hands its copy to the deleter). */
    ASSERT(!c->decision[0] || strcmp(c->decision, committed ? "committed" : "aborted") == 0);
    snprintf(c->decision, sizeof c->decision, "%s", committed ? "committed" : "aborted");
    if ((rc = mig_coord_persist(m, &a, err)) != 0) return rc;
    if (!committed) {
        persist_arg_t d = {.co = c, .task_delete = true};
        if ((rc = mig_coord_persist(m, &d, err)) != 0) return rc;
    }
    if ((rc = notify_recipient(m, c, committed, until_ms, err)) != 0) return rc;
    if (committed) count_orphans(m, c);
    if (committed && m->archive && (rc = archive_range(m, c, err)) != 0)
        log_error("archive of moved chunk failed id=%s errmsg=%s", c->id, log_str(err->msg));
    persist_arg_t f = {.co = c, .del_coord = true, .task_ready = committed};
    if ((rc = mig_coord_persist(m, &f, err)) != 0) return rc;
    if (committed && m->app->rdel) rdel_kick(m->app->rdel);
    log_info("migration completed id=%s ns=%s decision=%s", c->id, log_str(c->ns), c->decision);
    return 0;
}

/* One getRoutingTable page for fetch_owner (rtable_fetch's call): *other_uuid when a page
 * is of another incarnation of the collection than the migration's. */
typedef struct owner_call {
    const char *url;
    const uint8_t *uuid;
    bool other_uuid;
} owner_call_t;

static int owner_page(void *arg, const bson_t *cmd, bson_t *reply, ms_error_t *err) {
    owner_call_t *oc = arg;
    uint8_t u[16];
    int rc = mig_call(oc->url, cmd, MS_RPC_CONFIG_TIMEOUT_MS_DEFAULT, reply, err);
    if (rc == 0 && rtable_reply_uuid(reply, u) && memcmp(u, oc->uuid, 16) != 0)
        oc->other_uuid = true;
    return rc;
}

/* The owner of the migrated range's min in a routing table fetched from the config
 * server now — by this call, never from a refresh some other caller started earlier —
 * so it reflects every commit that landed before the caller's fence. *gone: the
 * collection was dropped (or dropped and recreated: another uuid). */
static int fetch_owner(mig_t *m, const coord_t *c, char *owner, size_t cap, bool *gone,
                       ms_error_t *err) {
    char url[MS_URL_BYTES_MAX];
    rtable_version_t pre, now;
    bson_iter_t vi;
    bson_t w;
    bool comparable = false, parsed;
    *gone = false;
    owner[0] = 0;
    shv_identity(m->app->shv, NULL, 0, url, sizeof url);
    owner_call_t oc = {.url = url, .uuid = c->coll_uuid};
    bson_init(&w);
    BSON_APPEND_DOCUMENT(&w, "v", &c->pre_version);
    parsed = bson_iter_init_find(&vi, &w, "v") && rtable_version_parse(&vi, &pre, NULL) == 0;
    bson_destroy(&w);
    /* Only the chunks changed since the migration began (its chunk then had lastmod
     * pre.v; whatever holds its min now is newer): a page, not the whole table. Without a
     * readable version, all of them. */
    int rc = rtable_fetch_owner(c->ns, parsed ? &pre : NULL, &c->range_min, owner_page, &oc,
                                owner, cap, &now, err);
    if (rc == MS_ERR_NAMESPACE_NOT_SHARDED || (rc == 0 && oc.other_uuid)) {
        *gone = true;
        owner[0] = 0;
        memset(err, 0, sizeof *err);
        return 0;
    }
    /* Versions only grow, and the fence made the collection's newer than the version the
     * migration started from: an older answer was read before the fence (stale), and
     * deciding from it is what this function exists to avoid. */
    if (rc == 0 && parsed && rtable_version_cmp(&now, &pre, &comparable) <= 0 && comparable)
        rc = err_set(err, MS_ERR_STALE_CONFIG, "routing table of %s older than the recovery's "
                     "fence (collection version %u|%u)", c->ns, now.major, now.minor);
    if (rc) owner[0] = 0;
    return rc;
}

/* Did the migration commit? Fences off any commit still in flight at the config server
 * (`_configsvrEnsureChunkVersionIsGreaterThan`, notes §1.7), then reads who owns the
 * range's min from a table fetched after that fence (fetch_owner): the donor → aborted;
 * any other shard → committed (while this coordinator is undecided nothing but this
 * migration can move the range off the donor); collection dropped → aborted (nothing is
 * left to keep). Anything else — the fence or the fetch failed — is an error, and the
 * caller asks again: "unknown" is never taken for either outcome. *committed set on 0. */
int mig_coord_decide(mig_t *m, const coord_t *c, bool *committed, ms_error_t *err) {
    char url[MS_URL_BYTES_MAX], owner[RTABLE_NAME_BYTES_MAX];
    bson_t cmd, reply;
    bool gone = false;
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
    if ((rc = fetch_owner(m, c, owner, sizeof owner, &gone, err)) != 0) return rc;
    *committed = !gone && strcmp(owner, c->donor) != 0;
    log_info("migration decided id=%s ns=%s owner=%s decision=%s", c->id, log_str(c->ns),
             gone ? "(dropped)" : log_str(owner), *committed ? "committed" : "aborted");
    /* Our own filtering metadata follows from a fresh refresh, not from this table. */
    shv_invalidate(m->app->shv, c->ns);
    return 0;
}

/* ---- recovery (notes §1.7 "Donor step-up recovery") ---------------------------------------- */

typedef struct recov {
    mig_t *m;
    coord_t co;
    bool crit;           /* this recovery holds the collection's critical section */
    bool log_from;       /* writes moveChunk.from once the outcome is known */
    bson_t from_details; /* ... with these details (the donor's, or the bare range) */
} recov_t;

static void copy_coord(const coord_t *src, coord_t *dst) {
    mig_coord_init(dst);
    memcpy(dst->id, src->id, sizeof dst->id);
    memcpy(dst->mig_uuid, src->mig_uuid, 16);
    memcpy(dst->coll_uuid, src->coll_uuid, 16);
    memcpy(dst->ns, src->ns, sizeof dst->ns);
    memcpy(dst->session, src->session, sizeof dst->session);
    memcpy(dst->donor, src->donor, sizeof dst->donor);
    memcpy(dst->recipient, src->recipient, sizeof dst->recipient);
    memcpy(dst->recipient_host, src->recipient_host, sizeof dst->recipient_host);
    memcpy(dst->decision, src->decision, sizeof dst->decision);
    bson_concat(&dst->range_min, &src->range_min);
    bson_concat(&dst->range_max, &src->range_max);
    bson_concat(&dst->chunk_min, &src->chunk_min);
    bson_concat(&dst->chunk_max, &src->chunk_max);
    bson_concat(&dst->pre_version, &src->pre_version);
}

static void *recover_main(void *p) {
    recov_t *r = p;
    mig_t *m = r->m;
    coord_t *c = &r->co;
    int wait_ms = 200;
    bool known = c->decision[0] != 0;
    ms_error_t e = {0};
    fp_eval(FP_HANG_DONOR_RECOVERY, NULL);
    while (!m->stopping) {
        bool committed = strcmp(c->decision, "committed") == 0;
        int rc = 0;
        /* Undecided: no write may land on the range until the chunk table has decided
         * (a commit may still be in flight). Entered here when start_recovery could not. */
        if (!c->decision[0] && !r->crit) {
            if ((rc = shv_crit_enter_as(m->app->shv, m->app->st, c->ns, c->id, &e)) == 0)
                r->crit = true;
        }
        if (rc == 0 && !c->decision[0] && (rc = mig_coord_decide(m, c, &committed, &e)) == 0) {
            snprintf(c->decision, sizeof c->decision, "%s", committed ? "committed" : "aborted");
            persist_arg_t a = {.co = c};
            if ((rc = mig_coord_persist(m, &a, &e)) != 0) c->decision[0] = 0;  /* decide again */
        }
        /* Decided and persisted: writes may go on (they get StaleConfig and go where the
         * chunk table says). Only the recovery that entered the section leaves it. */
        if (rc == 0 && r->crit) {
            shv_crit_leave_as(m->app->shv, c->ns, c->id);
            r->crit = false;
        }
        if (rc == 0) rc = mig_coord_complete(m, c, committed, time_mono_ms() + 2000, &e);
        if (rc == 0) {
            log_info("migration recovered id=%s ns=%s decision=%s", c->id, log_str(c->ns),
                     c->decision);
            if (r->log_from) {
                /* The donor's moveChunk.from, held back while the outcome was unknown. */
                BSON_APPEND_UTF8(&r->from_details, "note", committed ? "success" : "aborted");
                BSON_APPEND_BOOL(&r->from_details, "outcomeWasUnknown", !known);
                mig_log_change(m, "moveChunk.from", c->ns, &r->from_details);
            }
            break;
        }
        log_warn("migration recovery retrying id=%s ns=%s errmsg=%s", c->id, log_str(c->ns),
                 log_str(e.msg));
        for (int slept = 0; slept < wait_ms && !m->stopping; slept += 50)
            nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
        if (wait_ms < 10000) wait_ms *= 2;
    }
    /* Stopping undecided: the section stays held until the process exits, and the next
     * start's recovery holds it again from the persisted document. */
    pthread_mutex_lock(&m->mu);
    m->recoveries--;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    mig_coord_destroy(c);
    bson_destroy(&r->from_details);
    free(r);
    return NULL;
}

/* A recovery that cannot run (no memory, no thread): the collection stays blocked — its
 * critical section held when the migration is undecided — and new migrations on this
 * shard stay refused (a recovery stays pending), until a restart recovers it from the
 * persisted document. Never guess an outcome. */
static void recovery_stuck(mig_t *m, const char *id, const char *ns, const char *why) {
    log_error("migration recovery cannot run; the collection stays blocked until restart "
              "id=%s ns=%s errmsg=%s", log_str(id), log_str(ns), why);
    pthread_mutex_lock(&m->mu);
    m->stuck++;
    pthread_mutex_unlock(&m->mu);
}

/* Starts a recovery thread for c. crit_held: the caller hands over the collection's
 * critical section (a commit whose outcome is unknown; entered as c->id, so the recovery
 * now owns it). Otherwise an undecided migration enters it here, before this returns: a
 * commit may still be in flight at the config server, so no write may land on the range
 * until the chunk table has decided (MongoDB's recoverable critical section).
 * from_details (borrowed, may be NULL): the moveChunk.from entry to write once decided. */
void mig_coord_start_recovery(mig_t *m, const coord_t *c, bool crit_held, const bson_t *from_details) {
    recov_t *r;
    pthread_t th;
    pthread_attr_t at;
    bool crit = crit_held;
    ms_error_t e = {0};
    if (!crit && !c->decision[0]) {
        if (shv_crit_enter_as(m->app->shv, m->app->st, c->ns, c->id, &e) == 0)
            crit = true;
        else
            log_warn("migration recovery will enter the critical section later id=%s ns=%s "
                     "errmsg=%s", c->id, log_str(c->ns), log_str(e.msg));
    }
    if (!(r = mem_calloc_aligned(1, sizeof *r))) {
        recovery_stuck(m, c->id, c->ns, "out of memory");
        return;
    }
    r->m = m;
    r->crit = crit;
    copy_coord(c, &r->co);
    bson_init(&r->from_details);
    if (from_details) {
        bson_concat(&r->from_details, from_details);
        r->log_from = true;
    } else if (!c->decision[0]) {
        /* A run a crash cut short never wrote its moveChunk.from: written once decided. */
        BSON_APPEND_DOCUMENT(&r->from_details, "min", &c->range_min);
        BSON_APPEND_DOCUMENT(&r->from_details, "max", &c->range_max);
        BSON_APPEND_UTF8(&r->from_details, "from", c->donor);
        BSON_APPEND_UTF8(&r->from_details, "to", c->recipient);
        BSON_APPEND_BOOL(&r->from_details, "recovered", true);
        r->log_from = true;
    }
    pthread_mutex_lock(&m->mu);
    m->recoveries++;
    pthread_mutex_unlock(&m->mu);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, recover_main, r) != 0) {
        /* The section (if held) stays held. */
        pthread_mutex_lock(&m->mu);
        m->recoveries--;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        recovery_stuck(m, c->id, c->ns, "cannot start a thread");
        mig_coord_destroy(&r->co);
        bson_destroy(&r->from_details);
        free(r);
    }
    pthread_attr_destroy(&at);
}

static int recover_scan_fn(void *arg, const char *id, const bson_t *doc) {
    mig_t *m = arg;
    coord_t c;
    ms_error_t e = {0};
    if (coord_from_doc(doc, &c, &e) != 0) {
        /* Which outcome it had cannot be known from here: block what can be named (its
         * namespace, when readable) and keep new migrations out, until someone repairs
         * the document and restarts the shard. */
        char ns[MS_NS_BYTES_MAX + 1];
        mig_copy_str(ns, sizeof ns, doc, "nss");
        log_error("migration coordinator document unreadable id=%s ns=%s errmsg=%s",
                  log_str(id), log_str(ns), log_str(e.msg));
        if (ns[0] && shv_crit_enter_as(m->app->shv, m->app->st, ns, id, &e) != 0)
            log_error("cannot block the collection of an unreadable migration document id=%s "
                      "ns=%s errmsg=%s", log_str(id), log_str(ns), log_str(e.msg));
        recovery_stuck(m, id, ns, "unreadable coordinator document");
        return 0;
    }
    log_info("migration recovery starting id=%s ns=%s decision=%s", c.id, log_str(c.ns),
             c.decision[0] ? c.decision : "none");
    mig_coord_start_recovery(m, &c, false, NULL);
    mig_coord_destroy(&c);
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

/* The recipient's URL from the config server's shard list (config.shards). */
int mig_shard_host(mig_t *m, const char *shard, char *out, size_t cap, ms_error_t *err) {
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
            mig_copy_str(id, sizeof id, &s, "_id");
            mig_copy_str(host, sizeof host, &s, "host");
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
