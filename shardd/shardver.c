/*
 * shardver.c — shard versioning and the ownership filter, run by the shard daemon
 * (contract in shardver.h; DESIGN §6; notes §2.3 and §2.4).
 *
 * Per namespace the shard caches what the config server's getRoutingTable said: either
 * "unsharded" (NamespaceNotSharded) or an immutable, reference-counted snapshot holding
 * the generation (epoch, timestamp), the key pattern, the whole chunk table (needed to
 * merge incremental refreshes) and the sorted list of chunks this shard owns. A request's
 * shardVersion is checked against it in MongoDB's order (onShardVersionMismatch then
 * the write-compatibility check): unknown metadata, or a request newer than what we
 * know, makes us refresh first; then a generation or major mismatch is StaleConfig.
 *
 * Concurrency: one mutex guards the namespace list; a refresh runs without the lock and
 * only one refresh per namespace is in flight (others wait on a condition variable,
 * bounded by the refresh deadline). Snapshots are never changed once published, so a
 * cursor can keep its filter however the metadata moves on.
 */
#include "shardd/shardver.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/buf.h"
#include "common/failpoint.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/rpc.h"
#include "common/rtable.h"
#include "shardd/shardd.h"   /* store_key_decode: chunk bounds back to documents */

/* Deadline of one getRoutingTable call and of waiting for another thread's refresh of
 * the same namespace: long enough for a large table, short enough that a request whose
 * config server is gone fails within the router's own retry budget. */
#define SHV_REFRESH_TIMEOUT_MS 10000

struct shv_filter {
    atomic_int refs;              /* memory: the cache's reference plus every holder's */
    /* Live holders (requests and cursors, shv_check / shv_filter_ref): while > 0 the
     * snapshot is on its entry's live list, and the range deleter waits for it
     * (shv_wait_snapshots). Under owner->mu; owner NULL once shv_close detached it. */
    int live;
    struct shv *owner;
    struct shv_entry *entry;
    struct shv_filter *lprev, *lnext;
    rtable_t rt;                  /* the whole table (common/rtable.h), built in place */
    int me;                       /* this shard's index in rt.shards, -1 when it owns none */
    uint32_t shard_major, shard_minor;
    int nowned;                   /* chunks this shard owns */
    uint8_t uuid[16];             /* the collection's UUID (getRoutingTable's uuid) */
    bool has_uuid;
};

enum shv_state { SHV_UNKNOWN = 0, SHV_SHARDED, SHV_UNSHARDED };

typedef struct shv_entry {
    char *ns;
    enum shv_state state;
    shv_filter_t *snap;           /* when SHARDED */
    bool refreshing;
    uint64_t refresh_seq;         /* completed refreshes (waiters look for a change) */
    uint64_t invalidations;       /* a refresh started before an invalidation is discarded */
    shv_filter_t *live;           /* snapshots some request or cursor holds (live > 0) */
    struct shv_entry *next;
} shv_entry_t;

typedef rtable_dbv_t shv_dbv_t;   /* config.databases version (common/rtable.h) */

enum shv_db_state { SHV_DB_UNKNOWN = 0, SHV_DB_KNOWN, SHV_DB_ABSENT };

/* What this shard knows of a database: its version and primary (MongoDB's
 * DatabaseShardingState), refreshed from config.databases. */
typedef struct shv_db {
    char *name;
    enum shv_db_state state;
    shv_dbv_t v;
    char primary[128];
    /* v and primary hold what the last successful refresh found, whatever state says
     * since (shv_db_recheck compares a write against it under the writer lock). */
    bool fetched;
    uint64_t invalidations;       /* a refresh started before an invalidation is discarded */
    struct shv_db *next;
} shv_db_t;

struct shv {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char shard_name[128];
    char config_url[MS_URL_BYTES_MAX];
    shv_entry_t *entries;
    shv_db_t *dbs;
    uint64_t refreshes, stale_replies, db_refreshes, stale_db_replies;
    pthread_cond_t live_cv;       /* a live snapshot was released (shv_wait_snapshots) */
};

/* What a request carried. */
typedef struct shv_recv {
    bool unsharded;
    rtable_version_t v;
} shv_recv_t;

/* ---- snapshots ----------------------------------------------------------------------- */

static void snap_free(shv_filter_t *f) {
    if (!f) return;
    rtable_clear(&f->rt);
    free(f);
}

/* Memory references only: the cache's own and the refresh's base. */
static shv_filter_t *snap_ref(shv_filter_t *f) {
    if (f) atomic_fetch_add(&f->refs, 1);
    return f;
}

static void snap_unref(shv_filter_t *f) {
    if (!f) return;
    if (atomic_fetch_sub(&f->refs, 1) == 1) snap_free(f);
}

/* Caller holds s->mu: one more live holder of f (which belongs to entry e). */
static void live_add(shv_t *s, shv_entry_t *e, shv_filter_t *f) {
    if (f->live++ > 0) return;
    f->owner = s;
    f->entry = e;
    f->lprev = NULL;
    f->lnext = e->live;
    if (e->live) e->live->lprev = f;
    e->live = f;
}

/* Caller holds s->mu. True when f is no longer live. */
static bool live_drop(shv_t *s, shv_filter_t *f) {
    if (--f->live > 0) return false;
    shv_entry_t *e = f->entry;
    if (f->lprev) f->lprev->lnext = f->lnext;
    else e->live = f->lnext;
    if (f->lnext) f->lnext->lprev = f->lprev;
    f->lprev = f->lnext = NULL;
    pthread_cond_broadcast(&s->live_cv);
    return true;
}

shv_filter_t *shv_filter_ref(shv_filter_t *f) {
    if (!f) return f;
    snap_ref(f);
    shv_t *s = f->owner;   /* set before the first holder saw f, cleared only by shv_close */
    if (s) {
        pthread_mutex_lock(&s->mu);
        if (f->owner) live_add(s, f->entry, f);
        pthread_mutex_unlock(&s->mu);
    }
    return f;
}

void shv_filter_release(shv_filter_t *f) {
    if (!f) return;
    shv_t *s = f->owner;
    if (s) {
        pthread_mutex_lock(&s->mu);
        if (f->owner && f->live > 0) live_drop(s, f);
        pthread_mutex_unlock(&s->mu);
    }
    snap_unref(f);
}

const keys_pattern_t *shv_filter_pattern(const shv_filter_t *f) {
    return &f->rt.pattern;
}

bool shv_filter_owns(const shv_filter_t *f, const uint8_t *key, size_t len) {
    if (!f || f->me < 0 || f->rt.nchunks == 0) return false;
    /* The chunks tile the key space: the one containing key decides. */
    return rtable_find_chunk(&f->rt, key, len)->shard == f->me;
}

/* This shard's place in the table: its index, version and owned count. */
static void snap_finish(shv_filter_t *f, const char *me) {
    f->me = rtable_shard_index(&f->rt, me);
    f->nowned = f->me >= 0 ? f->rt.shard_nchunks[f->me] : 0;
    rtable_version_t v;
    rtable_shard_version(&f->rt, f->me, &v);
    f->shard_major = v.major;
    f->shard_minor = v.minor;
}

/* ---- wire helpers ------------------------------------------------------------------- */

static void append_snap_version(bson_t *dst, const char *key, const shv_filter_t *f,
                                bool coll) {
    rtable_version_t v;
    if (coll) rtable_coll_version(&f->rt, &v);
    else rtable_shard_version(&f->rt, f->me, &v);
    rtable_version_append(dst, key, &v);
}

static bool snap_same_generation(const shv_filter_t *f, const rtable_version_t *v) {
    rtable_version_t ours;
    rtable_coll_version(&f->rt, &ours);
    return rtable_same_generation(&ours, v);
}

static void append_unsharded(bson_t *dst, const char *key) {
    rtable_version_t v;
    rtable_version_unsharded(&v);
    rtable_version_append(dst, key, &v);
}

/* Parses {e: ObjectId, t: Timestamp, v: Timestamp} at it. */
static int parse_version(const bson_iter_t *it, shv_recv_t *out, ms_error_t *err) {
    memset(out, 0, sizeof *out);
    int rc = rtable_version_parse(it, &out->v, err);
    if (rc) {
        err_prefix(err, "shardVersion");
        return rc;
    }
    out->unsharded = rtable_version_is_unsharded(&out->v);
    return 0;
}

/* ---- the namespace list --------------------------------------------------------------- */

int shv_open(shv_t **out, ms_error_t *err) {
    shv_t *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "shv_open: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->live_cv, NULL);
    *out = s;
    return 0;
}

void shv_close(shv_t *s) {
    if (!s) return;
    shv_entry_t *e = s->entries;
    while (e) {
        shv_entry_t *next = e->next;
        /* Holders that outlive us keep their memory; they just stop being tracked. */
        for (shv_filter_t *f = e->live, *n; f; f = n) {
            n = f->lnext;
            f->owner = NULL;
            f->entry = NULL;
            f->lprev = f->lnext = NULL;
        }
        snap_unref(e->snap);
        free(e->ns);
        free(e);
        e = next;
    }
    for (shv_db_t *d = s->dbs, *n; d; d = n) {
        n = d->next;
        free(d->name);
        free(d);
    }
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->live_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void shv_set_identity(shv_t *s, const char *shard_name, const char *config_url) {
    pthread_mutex_lock(&s->mu);
    snprintf(s->shard_name, sizeof s->shard_name, "%s", shard_name ? shard_name : "");
    snprintf(s->config_url, sizeof s->config_url, "%s", config_url ? config_url : "");
    /* Owned chunks depend on who we are: forget everything computed under another name. */
    for (shv_entry_t *e = s->entries; e; e = e->next) {
        snap_unref(e->snap);
        e->snap = NULL;
        e->state = SHV_UNKNOWN;
        e->invalidations++;
    }
    for (shv_db_t *d = s->dbs; d; d = d->next) {
        d->state = SHV_DB_UNKNOWN;
        d->invalidations++;
    }
    pthread_mutex_unlock(&s->mu);
    log_info("sharding identity set shard=%s configdb=%s", log_str(shard_name ? shard_name : ""),
             log_str(config_url ? config_url : ""));
}

void shv_identity(shv_t *s, char *name, size_t name_cap, char *url, size_t url_cap) {
    /* _addShard may set the identity while any worker reads it: copy under the lock. */
    pthread_mutex_lock(&s->mu);
    if (name) snprintf(name, name_cap, "%s", s->shard_name);
    if (url) snprintf(url, url_cap, "%s", s->config_url);
    pthread_mutex_unlock(&s->mu);
}

/* Caller holds s->mu. */
static shv_entry_t *entry_get(shv_t *s, const char *ns) {
    for (shv_entry_t *e = s->entries; e; e = e->next)
        if (strcmp(e->ns, ns) == 0) return e;
    shv_entry_t *e = calloc(1, sizeof *e);
    ASSERT(e);
    e->ns = strdup(ns);
    ASSERT(e->ns);
    e->next = s->entries;
    s->entries = e;
    return e;
}

/* Caller holds s->mu. */
static shv_db_t *db_get(shv_t *s, const char *db, size_t len) {
    for (shv_db_t *d = s->dbs; d; d = d->next)
        if (strlen(d->name) == len && strncmp(d->name, db, len) == 0) return d;
    shv_db_t *d = calloc(1, sizeof *d);
    ASSERT(d);
    d->name = strndup(db, len);
    ASSERT(d->name);
    d->next = s->dbs;
    s->dbs = d;
    return d;
}

/* "db.coll" forgets the collection's metadata only; "db" forgets the database entry
 * (dropDatabase, movePrimary's _flushDatabaseCacheUpdates: the database may come back
 * with another version and primary). A collection's drop, rename or shardCollection
 * changes neither the database's version nor its primary (MongoDB clears only the
 * collection's CollectionShardingRuntime then): forgetting the entry there too made
 * every write to the database's unsharded collections depend on reaching the config
 * server again, so a shard cut off from it refused them all. */
void shv_invalidate(shv_t *s, const char *ns) {
    const char *dot = strchr(ns, '.');
    pthread_mutex_lock(&s->mu);
    if (dot) {
        shv_entry_t *e = entry_get(s, ns);
        snap_unref(e->snap);
        e->snap = NULL;
        e->state = SHV_UNKNOWN;
        e->invalidations++;
    } else {
        shv_db_t *d = db_get(s, ns, strlen(ns));
        d->state = SHV_DB_UNKNOWN;
        d->invalidations++;
    }
    pthread_mutex_unlock(&s->mu);
    log_info("filtering metadata invalidated ns=%s", log_str(ns));
}

/* ---- refresh (MongoDB's onShardVersionMismatch → forceShardFilteringMetadataRefresh) ---- */

/* What one refresh's page calls share (rtable_fetch's call): the config server, and the
 * collection's UUID as the pages tell it. */
typedef struct page_call {
    rpc_client_t *cli;
    uint8_t uuid[16];
    bool has_uuid;
} page_call_t;

/* One getRoutingTable page. rpc_call_op, not rpc_command: the reply is ours whenever the
 * call succeeds, so NamespaceNotSharded and other {ok: 0} answers are read without
 * ambiguity. The request's maxTimeMS bounds it when shorter (MaxTimeMSExpired). */
static int call_page(void *arg, const bson_t *cmd, bson_t *reply, ms_error_t *err) {
    page_call_t *pc = arg;
    bson_iter_t it;
    int rc = rpc_call_op(pc->cli, cmd, SHV_REFRESH_TIMEOUT_MS, reply, err);
    if (rc) return rc;
    if (!bson_iter_init_find(&it, reply, "ok") || !bsonx_truthy(&it)) {
        int code = MS_ERR_UNKNOWN_ERROR;
        const char *msg = "";
        if (bson_iter_init_find(&it, reply, "code") && BSON_ITER_HOLDS_INT32(&it))
            code = bson_iter_int32(&it);
        if (bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
            msg = bson_iter_utf8(&it, NULL);
        rc = err_set(err, code ? code : MS_ERR_UNKNOWN_ERROR, "%s", msg);
        bson_destroy(reply);
        return rc;
    }
    if (rtable_reply_uuid(reply, pc->uuid)) pc->has_uuid = true;
    return 0;
}

/* Asks the config server, page by page (common/rtable.h rtable_fetch), merging into base
 * when it can. *unsharded set for NamespaceNotSharded; else *out a snapshot. */
static int fetch_table(shv_t *s, const char *ns, shv_filter_t *base, shv_filter_t **out,
                       bool *unsharded, ms_error_t *err) {
    char url[MS_URL_BYTES_MAX], me[128];
    page_call_t pc = {0};
    int rc;
    *unsharded = false;
    *out = NULL;
    pthread_mutex_lock(&s->mu);
    memcpy(url, s->config_url, sizeof url);
    memcpy(me, s->shard_name, sizeof me);
    pthread_mutex_unlock(&s->mu);
    rc = rpc_peer(url, &pc.cli, err);
    if (rc) return rc;
    shv_filter_t *f = mem_calloc_aligned(1, sizeof *f);   /* holds a bson_t (common/mem.h) */
    ASSERT(f);
    atomic_init(&f->refs, 1);
    rc = rtable_fetch(ns, base ? &base->rt : NULL, call_page, &pc, &f->rt, err);
    if (rc) {
        snap_free(f);
        if (rc == MS_ERR_NAMESPACE_NOT_SHARDED) {
            memset(err, 0, sizeof *err);
            *unsharded = true;
            return 0;
        }
        err_prefix(err, "refreshing filtering metadata of %s from %s", ns, url);
        return rc;
    }
    snap_finish(f, me);
    if (pc.has_uuid) {
        memcpy(f->uuid, pc.uuid, 16);
        f->has_uuid = true;
    } else if (base && base->has_uuid) {
        memcpy(f->uuid, base->uuid, 16);
        f->has_uuid = true;
    }
    *out = f;
    return 0;
}

/* One refresh of ns at a time: a second caller waits for the running one (bounded) and
 * uses its result. */
static int refresh_ns(shv_t *s, const char *ns, ms_error_t *err) {
    shv_entry_t *e;
    shv_filter_t *base = NULL, *fresh = NULL;
    bool unsharded = false;
    uint64_t inval, seq;
    int rc;
    long long t0 = time_mono_ms();

    pthread_mutex_lock(&s->mu);
    e = entry_get(s, ns);
    if (e->refreshing) {
        seq = e->refresh_seq;
        long long now = time_mono_ms(), give_up = now + op_time_left_ms(MS_ROUTING_REFRESH_WAIT_MS);
        while (e->refreshing && e->refresh_seq == seq && (now = time_mono_ms()) < give_up)   /* bounded */
            time_cond_wait_ms(&s->cv, &s->mu, give_up - now);
        bool done = e->refresh_seq != seq;
        pthread_mutex_unlock(&s->mu);
        if (!done)
            return err_set(err, MS_ERR_NETWORK_TIMEOUT,
                           "timed out waiting for the refresh of %s", ns);
        return 0;
    }
    e->refreshing = true;
    inval = e->invalidations;
    if (e->state == SHV_SHARDED) base = snap_ref(e->snap);
    pthread_mutex_unlock(&s->mu);

    rc = fetch_table(s, ns, base, &fresh, &unsharded, err);
    if (rc == 0) fp_eval(SHV_FP_HANG_REFRESH_BEFORE_INSTALL, NULL);

    pthread_mutex_lock(&s->mu);
    if (rc == 0 && e->invalidations == inval) {
        snap_unref(e->snap);
        e->snap = fresh;
        e->state = unsharded ? SHV_UNSHARDED : SHV_SHARDED;
        fresh = NULL;
        s->refreshes++;
    }
    e->refreshing = false;
    e->refresh_seq++;
    pthread_cond_broadcast(&s->cv);
    if (rc == 0 && e->state == SHV_SHARDED && e->snap)
        log_info("filtering metadata refreshed ns=%s shardVersion=%u|%u collectionVersion=%u|%u "
                 "owned=%d chunks=%d ms=%lld",
                 ns, e->snap->shard_major, e->snap->shard_minor, e->snap->rt.coll_major,
                 e->snap->rt.coll_minor, e->snap->nowned, e->snap->rt.nchunks,
                 time_mono_ms() - t0);
    else if (rc == 0 && e->state == SHV_UNSHARDED)
        log_info("filtering metadata refreshed ns=%s sharded=false", log_str(ns));
    pthread_mutex_unlock(&s->mu);
    if (rc) log_warn("filtering metadata refresh failed ns=%s code=%d err=%s", log_str(ns), rc,
                     log_str(err ? err->msg : ""));
    snap_unref(fresh);
    snap_unref(base);
    return rc;
}

int shv_refresh(shv_t *s, const char *ns, ms_error_t *err) {
    char url[MS_URL_BYTES_MAX];
    shv_identity(s, NULL, 0, url, sizeof url);
    if (!url[0])
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "cannot refresh %s: sharding state is not initialized", ns);
    return refresh_ns(s, ns, err);
}

/* ---- the per-request check (notes §2.3) ---------------------------------------------- */

/* Whether what we know is older than (or unknown relative to) what the request says. */
static bool needs_refresh(const shv_entry_t *e, const shv_recv_t *r) {
    if (e->state == SHV_UNKNOWN) return true;
    if (e->state == SHV_UNSHARDED) return !r->unsharded;
    const shv_filter_t *f = e->snap;
    /* A router that believes the collection unsharded may know of a drop we missed. */
    if (r->unsharded) return true;
    /* Newer generation (timestamps order generations; epochs are not comparable) or a
     * higher major than our collection version: the request knows more than we do. */
    rtable_version_t ours;
    bool comparable;
    rtable_coll_version(&f->rt, &ours);
    int c = rtable_version_cmp(&ours, &r->v, &comparable);
    if (!rtable_same_generation(&ours, &r->v)) return comparable && c < 0;
    return r->v.major > ours.major;
}

/* ---- database versions (notes §2.3: databaseVersion, StaleDbVersion 249) ---------------- */

/* Reads config.databases {_id: db} from the config server (find on the config
 * database, as a shard's DatabaseShardingState refresh reads it). *found false when
 * the database does not exist. */
static int fetch_db(shv_t *s, const char *db, bool *found, shv_dbv_t *v, char *primary,
                    size_t cap, ms_error_t *err) {
    char url[MS_URL_BYTES_MAX];
    rpc_client_t *cli = NULL;
    bson_t cmd, reply, doc;
    bson_iter_t it;
    int rc;
    *found = false;
    pthread_mutex_lock(&s->mu);
    memcpy(url, s->config_url, sizeof url);
    pthread_mutex_unlock(&s->mu);
    if ((rc = rpc_peer(url, &cli, err)) != 0) return rc;
    rtable_db_find_cmd(&cmd, db);
    rc = rpc_call_op(cli, &cmd, SHV_REFRESH_TIMEOUT_MS, &reply, err);
    bson_destroy(&cmd);
    if (rc) {
        err_prefix(err, "refreshing database %s from %s", db, url);
        return rc;
    }
    if (!bson_iter_init_find(&it, &reply, "ok") || !bsonx_truthy(&it)) {
        const char *msg = "";
        if (bson_iter_init_find(&it, &reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
            msg = bson_iter_utf8(&it, NULL);
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "refreshing database %s from %s: %s", db,
                     url, msg);
        goto out;
    }
    if (!bson_iter_init(&it, &reply) ||
        !bson_iter_find_descendant(&it, "cursor.firstBatch.0", &it))
        goto out;   /* no such database */
    uint32_t len;
    const uint8_t *data;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "config.databases entry is not a document");
        goto out;
    }
    bson_iter_document(&it, &len, &data);
    if (!bson_init_static(&doc, data, len)) {
        rc = err_set(err, MS_ERR_INVALID_BSON, "config.databases entry is not valid BSON");
        goto out;
    }
    if ((rc = rtable_db_entry_parse(&doc, primary, cap, v, err)) != 0) {
        err_prefix(err, "database %s", db);
        goto out;
    }
    *found = true;
out:
    bson_destroy(&reply);
    return rc;
}

static int refresh_db(shv_t *s, const char *db, ms_error_t *err) {
    shv_dbv_t v;
    char primary[128] = "";
    bool found = false;
    pthread_mutex_lock(&s->mu);
    uint64_t inval = db_get(s, db, strlen(db))->invalidations;
    pthread_mutex_unlock(&s->mu);
    int rc = fetch_db(s, db, &found, &v, primary, sizeof primary, err);
    if (rc) {
        log_warn("database version refresh failed db=%s code=%d err=%s", log_str(db), rc,
                 log_str(err ? err->msg : ""));
        return rc;
    }
    pthread_mutex_lock(&s->mu);
    shv_db_t *d = db_get(s, db, strlen(db));
    if (d->invalidations == inval) {
        d->state = found ? SHV_DB_KNOWN : SHV_DB_ABSENT;
        if (found) {
            d->v = v;
            memcpy(d->primary, primary, sizeof d->primary);
            d->fetched = true;
        }
    }
    s->db_refreshes++;
    pthread_mutex_unlock(&s->mu);
    log_info("database version refreshed db=%s found=%d primary=%s lastMod=%d", log_str(db), found,
             log_str(primary), found ? v.last_mod : 0);
    return 0;
}

/* MongoDB's checkDbVersion: unknown, or older than the request → refresh; then the
 * versions must be equal and this shard the database's primary, else StaleDbVersion. */
static int check_db_version(shv_t *s, const char *ns, const bson_iter_t *it, bson_t *err_info,
                            ms_error_t *err) {
    char db[MS_NS_BYTES_MAX + 1];
    const char *dot = strchr(ns, '.');
    size_t n = dot ? (size_t)(dot - ns) : strlen(ns);
    shv_dbv_t recv, ours;
    const char *why = NULL;
    int rc;
    if (n == 0 || n >= sizeof db)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "invalid namespace %s", ns);
    memcpy(db, ns, n);
    db[n] = '\0';
    if ((rc = rtable_dbv_parse(it, &recv, err)) != 0) return rc;

    pthread_mutex_lock(&s->mu);
    shv_db_t *d = db_get(s, db, n);
    bool need = d->state == SHV_DB_UNKNOWN ||
                (d->state == SHV_DB_KNOWN && rtable_dbv_newer(&recv, &d->v));
    /* A database we saw absent may have been created since: the request says so. */
    if (d->state == SHV_DB_ABSENT) need = true;
    pthread_mutex_unlock(&s->mu);
    if (need && (rc = refresh_db(s, db, err)) != 0) return rc;

    pthread_mutex_lock(&s->mu);
    d = db_get(s, db, n);
    enum shv_db_state state = d->state;
    ours = d->v;
    bool primary = strcmp(d->primary, s->shard_name) == 0;
    char me[sizeof s->shard_name];
    memcpy(me, s->shard_name, sizeof me);
    pthread_mutex_unlock(&s->mu);
    if (state == SHV_DB_UNKNOWN) why = "database version is not currently known";
    else if (state == SHV_DB_ABSENT) why = "the database does not exist";
    else if (!rtable_dbv_equal(&recv, &ours)) why = "database version mismatch";
    else if (!primary) why = "this shard is not the primary shard of the database";
    else return 0;

    if (err_info) {
        BSON_APPEND_UTF8(err_info, "db", db);
        rtable_dbv_append(err_info, "vReceived", &recv);
        if (state == SHV_DB_KNOWN) rtable_dbv_append(err_info, "vWanted", &ours);
        BSON_APPEND_UTF8(err_info, "shardId", me);
    }
    pthread_mutex_lock(&s->mu);
    s->stale_db_replies++;
    pthread_mutex_unlock(&s->mu);
    log_info("stale db version db=%s received=%d wanted=%d reason=%s", log_str(db), recv.last_mod,
             state == SHV_DB_KNOWN ? ours.last_mod : 0, log_str(why));
    return err_set(err, MS_ERR_STALE_DB_VERSION, "database version mismatch for %s: %s", db, why);
}

int shv_db_refresh_now(shv_t *s, const char *db, ms_error_t *err) {
    /* An invalidation racing the refresh discards its result: try again, bounded. */
    for (int i = 0; i < 3; i++) {
        int rc = refresh_db(s, db, err);
        if (rc) return rc;
        pthread_mutex_lock(&s->mu);
        enum shv_db_state st = db_get(s, db, strlen(db))->state;
        pthread_mutex_unlock(&s->mu);
        if (st != SHV_DB_UNKNOWN) return 0;
    }
    return err_set(err, MS_ERR_CONFLICTING_OPERATION,
                   "database %s: invalidated during every refresh", db);
}

int shv_db_recheck(shv_t *s, const char *ns, const bson_t *req, bson_t *err_info,
                   ms_error_t *err) {
    bson_iter_t it;
    shv_dbv_t recv, ours;
    const char *dot = strchr(ns, '.');
    size_t n = dot ? (size_t)(dot - ns) : strlen(ns);
    if (!bson_iter_init_find(&it, req, "databaseVersion")) return 0;
    if (rtable_dbv_parse(&it, &recv, NULL) != 0) return 0;   /* shv_check refused it already */
    pthread_mutex_lock(&s->mu);
    shv_db_t *d = db_get(s, ns, n);
    bool fetched = d->fetched;
    bool primary = strcmp(d->primary, s->shard_name) == 0;
    ours = d->v;
    char me[sizeof s->shard_name];
    memcpy(me, s->shard_name, sizeof me);
    pthread_mutex_unlock(&s->mu);
    /* Nothing fetched, or a request newer than what we fetched: the check before the lock
     * decided (it refreshes for a newer request). Refused: a request older than our last
     * refresh, or as recent while we are not the primary — the database moved after the
     * request passed shv_check (movePrimary's exit refreshed us before leaving). */
    if (!fetched || rtable_dbv_newer(&recv, &ours)) return 0;
    if (rtable_dbv_equal(&recv, &ours) && primary) return 0;
    if (err_info) {
        char db[MS_NS_BYTES_MAX + 1];
        snprintf(db, sizeof db, "%.*s", (int)n, ns);
        BSON_APPEND_UTF8(err_info, "db", db);
        rtable_dbv_append(err_info, "vReceived", &recv);
        rtable_dbv_append(err_info, "vWanted", &ours);
        BSON_APPEND_UTF8(err_info, "shardId", me);
    }
    pthread_mutex_lock(&s->mu);
    s->stale_db_replies++;
    pthread_mutex_unlock(&s->mu);
    log_info("write refused by the database version recheck ns=%s received=%d wanted=%d primary=%d",
             log_str(ns), recv.last_mod, ours.last_mod, primary);
    return err_set(err, MS_ERR_STALE_DB_VERSION,
                   "database version mismatch for %.*s: the database moved while the write "
                   "waited", (int)n, ns);
}

int shv_recheck(shv_t *s, const char *ns, const bson_t *req, bson_t *err_info,
                ms_error_t *err) {
    bson_iter_t it;
    shv_recv_t r;
    const char *why = NULL;
    char me[128];
    if (!bson_iter_init_find(&it, req, "shardVersion")) return 0;
    if (parse_version(&it, &r, NULL) != 0 || r.unsharded) return 0;  /* shv_check decided */
    shv_identity(s, me, sizeof me, NULL, 0);
    pthread_mutex_lock(&s->mu);
    shv_entry_t *e = entry_get(s, ns);
    shv_filter_t *snap = e->state == SHV_SHARDED ? snap_ref(e->snap) : NULL;
    enum shv_state state = e->state;
    pthread_mutex_unlock(&s->mu);
    /* What shv_check accepted may have moved while the write waited for the writer lock
     * (a migration committed, the donor refreshed and left its critical section): the
     * cached metadata, read again under the lock, must still accept it. No network here. */
    if (state == SHV_UNKNOWN)
        why = "the metadata was cleared while the write waited";
    else if (state == SHV_SHARDED && !snap_same_generation(snap, &r.v))
        why = "timestamp mismatch while the write waited";
    else if (state == SHV_SHARDED && r.v.major != snap->shard_major)
        why = "placement version changed while the write waited";
    if (!why) {
        snap_unref(snap);
        return 0;
    }
    if (err_info) {
        BSON_APPEND_UTF8(err_info, "ns", ns);
        rtable_version_append(err_info, "vReceived", &r.v);
        if (snap) append_snap_version(err_info, "vWanted", snap, false);
        BSON_APPEND_UTF8(err_info, "shardId", me);
    }
    pthread_mutex_lock(&s->mu);
    s->stale_replies++;
    pthread_mutex_unlock(&s->mu);
    log_info("write refused by the shard version recheck ns=%s received=%u|%u reason=%s",
             log_str(ns), r.v.major, r.v.minor, log_str(why));
    snap_unref(snap);
    return err_set(err, MS_ERR_STALE_CONFIG, "version mismatch detected for %s: %s", ns, why);
}

int shv_check(shv_t *s, const char *ns, const bson_t *req, shv_filter_t **filter,
              bson_t *err_info, ms_error_t *err) {
    bson_iter_t it;
    shv_recv_t r;
    shv_filter_t *snap = NULL;
    enum shv_state state;
    const char *why = NULL;
    char me[128], url[MS_URL_BYTES_MAX];
    int rc;

    *filter = NULL;
    shv_identity(s, me, sizeof me, url, sizeof url);
    /* An unsharded collection's request carries its database's version: the primary
     * shard checks it first (this shard may no longer be the primary). */
    if (bson_iter_init_find(&it, req, "databaseVersion")) {
        if (!url[0] || !me[0])
            return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                           "cannot accept a databaseVersion for %s: sharding state has not been "
                           "initialized with a shard identity (addShard)", ns);
        if ((rc = check_db_version(s, ns, &it, err_info, err)) != 0) return rc;
    }
    if (!bson_iter_init_find(&it, req, "shardVersion")) return 0;
    rc = parse_version(&it, &r, err);
    if (rc) return rc;
    if (!url[0] || !me[0])
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "cannot accept a shardVersion for %s: sharding state has not been "
                       "initialized with a shard identity (addShard)", ns);

    pthread_mutex_lock(&s->mu);
    bool need = needs_refresh(entry_get(s, ns), &r);
    pthread_mutex_unlock(&s->mu);
    if (need) {
        rc = refresh_ns(s, ns, err);
        if (rc) return rc;
    }

    pthread_mutex_lock(&s->mu);
    shv_entry_t *e = entry_get(s, ns);
    state = e->state;
    if (state == SHV_SHARDED) snap = snap_ref(e->snap);
    pthread_mutex_unlock(&s->mu);

    if (state == SHV_UNKNOWN) {
        /* Invalidated again while we refreshed: the router retries and we refresh anew. */
        why = "sharding status of the collection is not currently known";
    } else if (state == SHV_UNSHARDED) {
        if (r.unsharded) return 0;
        why = "the collection is not sharded on this shard";
    } else if (r.unsharded) {
        why = "request treats the collection as unsharded but it is sharded";
    } else if (!snap_same_generation(snap, &r.v)) {
        why = "timestamp mismatch (the collection was dropped, recreated or resharded)";
    } else if (r.v.major != snap->shard_major) {
        why = snap->shard_major == 0 && snap->shard_minor == 0
                  ? "shard no longer contains chunks"
                  : "placement version major mismatch";
    } else {
        /* Handed out: live until released (the range deleter waits for it). */
        pthread_mutex_lock(&s->mu);
        live_add(s, entry_get(s, ns), snap);
        pthread_mutex_unlock(&s->mu);
        *filter = snap;
        return 0;
    }

    if (err_info) {
        BSON_APPEND_UTF8(err_info, "ns", ns);
        rtable_version_append(err_info, "vReceived", &r.v);
        if (state == SHV_SHARDED) append_snap_version(err_info, "vWanted", snap, false);
        else if (state == SHV_UNSHARDED)
            append_unsharded(err_info, "vWanted");
        BSON_APPEND_UTF8(err_info, "shardId", me);
    }
    pthread_mutex_lock(&s->mu);
    s->stale_replies++;
    pthread_mutex_unlock(&s->mu);
    log_info("stale config ns=%s received=%u|%u wanted=%u|%u reason=%s", log_str(ns), r.v.major,
             r.v.minor, snap ? snap->shard_major : 0, snap ? snap->shard_minor : 0, log_str(why));
    rc = err_set(err, MS_ERR_STALE_CONFIG, "version mismatch detected for %s: %s", ns, why);
    snap_unref(snap);
    return rc;
}

void shv_append_status(shv_t *s, bson_t *reply) {
    pthread_mutex_lock(&s->mu);
    for (shv_entry_t *e = s->entries; e; e = e->next) {
        bson_t d;
        if (e->state == SHV_UNKNOWN) continue;
        bson_append_document_begin(reply, e->ns, -1, &d);
        if (e->state == SHV_SHARDED) {
            const shv_filter_t *f = e->snap;
            BSON_APPEND_BOOL(&d, "sharded", true);
            append_snap_version(&d, "shardVersion", f, false);
            append_snap_version(&d, "collectionVersion", f, true);
            BSON_APPEND_INT32(&d, "chunksOwned", f->nowned);
            BSON_APPEND_INT32(&d, "chunksKnown", f->rt.nchunks);
        } else {
            BSON_APPEND_BOOL(&d, "sharded", false);
        }
        bson_append_document_end(reply, &d);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- live snapshots and owned chunks (the range deleter, migrations) ------------------- */

/* Whether f owns any key of [min, max) (encoded): an owned chunk overlapping it. */
static bool snap_owns_any(const shv_filter_t *f, const buf_t *min, const buf_t *max) {
    if (f->me < 0) return false;
    /* From the first chunk ending past min to the last that starts before max. */
    int first = rtable_first_ending_after(&f->rt, min->data, min->len);
    for (int i = first; i < f->rt.nchunks; i++) {
        const rtable_chunk_t *c = rtable_chunk(&f->rt, i);
        if (rtable_bytes_cmp(c->min.data, c->min.len, max->data, max->len) >= 0) break;
        if (c->shard == f->me) return true;
    }
    return false;
}

/* Caller holds s->mu: live snapshots of ns that own part of [min, max). */
static int live_blocking(shv_t *s, const char *ns, const buf_t *min, const buf_t *max,
                         int *holders) {
    int n = 0;
    *holders = 0;
    for (shv_entry_t *e = s->entries; e; e = e->next) {
        if (strcmp(e->ns, ns) != 0) continue;
        for (shv_filter_t *f = e->live; f; f = f->lnext)
            if (snap_owns_any(f, min, max)) {
                n++;
                *holders += f->live;
            }
    }
    return n;
}

int shv_wait_snapshots(shv_t *s, const char *ns, const buf_t *min, const buf_t *max,
                       long long deadline_ms, ms_error_t *err) {
    int n, holders, logged = -1;
    long long t0 = time_mono_ms();
    pthread_mutex_lock(&s->mu);
    while ((n = live_blocking(s, ns, min, max, &holders)) > 0) {
        long long now = time_mono_ms();
        if (deadline_ms <= 0 || now >= deadline_ms) {
            pthread_mutex_unlock(&s->mu);
            return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT,
                           "%d ownership snapshot(s) of %s held by %d reader(s) still own the "
                           "range after %lld ms", n, ns, holders, now - t0);
        }
        if (holders != logged) {   /* once per change, not per wake-up */
            log_info("waiting for ownership snapshots ns=%s snapshots=%d holders=%d", log_str(ns),
                     n, holders);
            logged = holders;
        }
        struct timespec dl;
        long long left = deadline_ms - now;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += left / 1000;
        dl.tv_nsec += (left % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->live_cv, &s->mu, &dl);
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int shv_live_snapshots(shv_t *s, const char *ns) {
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (shv_entry_t *e = s->entries; e; e = e->next)
        if (strcmp(e->ns, ns) == 0)
            for (shv_filter_t *f = e->live; f; f = f->lnext) n += f->live;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int shv_owned_chunk(shv_t *s, const char *ns, const buf_t *key, bson_t *min_out, bson_t *max_out,
                    bson_t *chunk_version_out, bson_t *shard_version_out,
                    keys_pattern_t *pattern_out, uint8_t uuid_out[16], ms_error_t *err) {
    shv_filter_t *f = NULL;
    enum shv_state state;
    char me[128];
    int rc;
    pthread_mutex_lock(&s->mu);
    state = entry_get(s, ns)->state;
    pthread_mutex_unlock(&s->mu);
    if (state == SHV_UNKNOWN && (rc = shv_refresh(s, ns, err)) != 0) return rc;
    pthread_mutex_lock(&s->mu);
    shv_entry_t *e = entry_get(s, ns);
    state = e->state;
    if (state == SHV_SHARDED) f = snap_ref(e->snap);
    memcpy(me, s->shard_name, sizeof me);
    pthread_mutex_unlock(&s->mu);
    if (state == SHV_UNSHARDED)
        return err_set(err, MS_ERR_NAMESPACE_NOT_SHARDED, "%s is not sharded", ns);
    if (!f)
        return err_set(err, MS_ERR_STALE_CONFIG,
                       "sharding status of %s is not currently known on shard %s", ns, me);
    const rtable_chunk_t *c = rtable_find_chunk(&f->rt, key->data, key->len);
    if (!c || f->me < 0 || c->shard != f->me) {
        snap_unref(f);
        return err_set(err, MS_ERR_STALE_CONFIG, "shard %s owns no chunk of %s containing the key",
                       me, ns);
    }
    if (min_out) store_key_decode(&f->rt.pattern, c->min.data, c->min.len, min_out);
    if (max_out) store_key_decode(&f->rt.pattern, c->max.data, c->max.len, max_out);
    if (chunk_version_out) {
        bson_init(chunk_version_out);
        BSON_APPEND_OID(chunk_version_out, "e", &f->rt.epoch);
        BSON_APPEND_TIMESTAMP(chunk_version_out, "t", f->rt.ts_t, f->rt.ts_i);
        BSON_APPEND_TIMESTAMP(chunk_version_out, "v", c->major, c->minor);
    }
    if (shard_version_out) {
        rtable_version_t v;
        rtable_shard_version(&f->rt, f->me, &v);
        bson_init(shard_version_out);
        BSON_APPEND_OID(shard_version_out, "e", &v.epoch);
        BSON_APPEND_TIMESTAMP(shard_version_out, "t", v.ts_t, v.ts_i);
        BSON_APPEND_TIMESTAMP(shard_version_out, "v", v.major, v.minor);
    }
    rc = 0;
    if (pattern_out) rc = keys_pattern_parse(&f->rt.pattern.spec, pattern_out, err);
    if (uuid_out) memcpy(uuid_out, f->uuid, 16);   /* zero when the reply had none */
    snap_unref(f);
    return rc;
}

/* ---- the range deleter's last guard (rdel.c) ------------------------------------------ */

int shv_range_owned(shv_t *s, const char *ns, const bson_t *pattern, const buf_t *min,
                    const buf_t *max, bool refresh, bool *owned, char *why, size_t why_cap,
                    ms_error_t *err) {
    shv_filter_t *f = NULL;
    enum shv_state state;
    int rc;
    *owned = true;   /* until the metadata proves otherwise */
    snprintf(why, why_cap, "unknown");
    pthread_mutex_lock(&s->mu);
    state = entry_get(s, ns)->state;
    pthread_mutex_unlock(&s->mu);
    if ((refresh || state == SHV_UNKNOWN) && (rc = shv_refresh(s, ns, err)) != 0) return rc;
    pthread_mutex_lock(&s->mu);
    shv_entry_t *e = entry_get(s, ns);
    state = e->state;
    if (state == SHV_SHARDED) f = snap_ref(e->snap);
    pthread_mutex_unlock(&s->mu);
    if (state == SHV_UNSHARDED) {
        snprintf(why, why_cap, "the cluster's metadata says %s is not sharded", ns);
        return 0;
    }
    if (!f)
        return err_set(err, MS_ERR_STALE_CONFIG, "sharding status of %s is not currently known",
                       ns);
    if (pattern && !bson_equal(pattern, &f->rt.pattern.spec)) {
        snprintf(why, why_cap, "the shard key of %s is not the task's keyPattern", ns);
    } else if (snap_owns_any(f, min, max)) {
        rtable_version_t v;
        rtable_shard_version(&f->rt, f->me, &v);
        snprintf(why, why_cap, "this shard owns chunks of the range at shard version %u|%u",
                 v.major, v.minor);
    } else {
        *owned = false;
        why[0] = '\0';
    }
    snap_unref(f);
    return 0;
}
