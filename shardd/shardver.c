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
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/buf.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/rpc.h"

/* Deadline of one getRoutingTable call and of waiting for another thread's refresh of
 * the same namespace: long enough for a large table, short enough that a request whose
 * config server is gone fails within the router's own retry budget. */
#define SHV_REFRESH_TIMEOUT_MS 10000

typedef struct shv_chunk {
    buf_t min, max;       /* encoded bounds (keys_encode_bound) */
    char *shard;
    uint32_t major, minor;
} shv_chunk_t;

struct shv_filter {
    atomic_int refs;
    bson_oid_t epoch;
    uint32_t ts_t, ts_i;          /* collection timestamp (generation) */
    keys_pattern_t pattern;
    uint32_t coll_major, coll_minor;
    uint32_t shard_major, shard_minor;
    int nchunks;
    shv_chunk_t *chunks;          /* the whole table, sorted by min, tiling the key space */
    int nowned;
    int *owned;                   /* indexes into chunks of the ones this shard owns */
};

enum shv_state { SHV_UNKNOWN = 0, SHV_SHARDED, SHV_UNSHARDED };

typedef struct shv_entry {
    char *ns;
    enum shv_state state;
    shv_filter_t *snap;           /* when SHARDED */
    bool refreshing;
    uint64_t refresh_seq;         /* completed refreshes (waiters look for a change) */
    uint64_t invalidations;       /* a refresh started before an invalidation is discarded */
    struct shv_entry *next;
} shv_entry_t;

struct shv {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char shard_name[128];
    char config_url[MS_URL_BYTES_MAX];
    shv_entry_t *entries;
    uint64_t refreshes, stale_replies;
};

/* What a request carried. */
typedef struct shv_recv {
    bool unsharded;
    bson_oid_t epoch;
    uint32_t ts_t, ts_i;
    uint32_t major, minor;
} shv_recv_t;

/* ---- snapshots ----------------------------------------------------------------------- */

static void chunk_free(shv_chunk_t *c) {
    buf_free(&c->min);
    buf_free(&c->max);
    free(c->shard);
    c->shard = NULL;
}

static void snap_free(shv_filter_t *f) {
    if (!f) return;
    for (int i = 0; i < f->nchunks; i++) chunk_free(&f->chunks[i]);
    free(f->chunks);
    free(f->owned);
    keys_pattern_free(&f->pattern);
    free(f);
}

shv_filter_t *shv_filter_ref(shv_filter_t *f) {
    if (f) atomic_fetch_add(&f->refs, 1);
    return f;
}

void shv_filter_release(shv_filter_t *f) {
    if (!f) return;
    if (atomic_fetch_sub(&f->refs, 1) == 1) snap_free(f);
}

const keys_pattern_t *shv_filter_pattern(const shv_filter_t *f) {
    return &f->pattern;
}

/* memcmp order of two byte strings; a proper prefix sorts first. */
static int bytes_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

static int buf_cmp(const buf_t *a, const buf_t *b) {
    return bytes_cmp(a->data, a->len, b->data, b->len);
}

bool shv_filter_owns(const shv_filter_t *f, const uint8_t *key, size_t len) {
    if (!f) return false;
    int lo = 0, hi = f->nowned - 1, found = -1;
    /* The last owned chunk whose min <= key. */
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const shv_chunk_t *c = &f->chunks[f->owned[mid]];
        if (bytes_cmp(c->min.data, c->min.len, key, len) <= 0) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if (found < 0) return false;
    const shv_chunk_t *c = &f->chunks[f->owned[found]];
    return bytes_cmp(key, len, c->max.data, c->max.len) < 0;
}

static int chunk_cmp_min(const void *a, const void *b) {
    return buf_cmp(&((const shv_chunk_t *)a)->min, &((const shv_chunk_t *)b)->min);
}

static bool version_less(uint32_t am, uint32_t an, uint32_t bm, uint32_t bn) {
    return am < bm || (am == bm && an < bn);
}

/* Derives owned list, shard version and (when not given) the collection version, and
 * checks the table tiles [MinKey, MaxKey) without gap or overlap. Returns false when it
 * does not (an incremental merge that missed something: the caller refetches in full). */
static bool snap_finish(shv_filter_t *f, const char *me) {
    buf_t gmin = {0}, gmax = {0};
    bson_t bmin, bmax;
    bool ok = true;
    bson_init(&bmin);
    bson_init(&bmax);
    keys_global_min(&f->pattern, &bmin);
    keys_global_max(&f->pattern, &bmax);
    if (keys_encode_bound(&f->pattern, &bmin, &gmin, NULL) ||
        keys_encode_bound(&f->pattern, &bmax, &gmax, NULL))
        ok = false;
    if (ok && f->nchunks > 0) {
        if (buf_cmp(&f->chunks[0].min, &gmin) != 0) ok = false;
        if (buf_cmp(&f->chunks[f->nchunks - 1].max, &gmax) != 0) ok = false;
        for (int i = 0; ok && i + 1 < f->nchunks; i++)
            if (buf_cmp(&f->chunks[i].max, &f->chunks[i + 1].min) != 0) ok = false;
    }
    if (f->nchunks == 0) ok = false;
    f->owned = calloc((size_t)(f->nchunks ? f->nchunks : 1), sizeof *f->owned);
    ASSERT(f->owned);
    f->nowned = 0;
    f->shard_major = f->shard_minor = 0;
    for (int i = 0; i < f->nchunks; i++) {
        shv_chunk_t *c = &f->chunks[i];
        if (version_less(f->coll_major, f->coll_minor, c->major, c->minor)) {
            f->coll_major = c->major;
            f->coll_minor = c->minor;
        }
        if (strcmp(c->shard, me) != 0) continue;
        f->owned[f->nowned++] = i;
        if (version_less(f->shard_major, f->shard_minor, c->major, c->minor)) {
            f->shard_major = c->major;
            f->shard_minor = c->minor;
        }
    }
    bson_destroy(&bmin);
    bson_destroy(&bmax);
    buf_free(&gmin);
    buf_free(&gmax);
    return ok;
}

/* ---- wire helpers ------------------------------------------------------------------- */

static void append_version(bson_t *dst, const char *key, const bson_oid_t *epoch, uint32_t ts_t,
                           uint32_t ts_i, uint32_t major, uint32_t minor) {
    bson_t v;
    bson_append_document_begin(dst, key, -1, &v);
    BSON_APPEND_OID(&v, "e", epoch);
    BSON_APPEND_TIMESTAMP(&v, "t", ts_t, ts_i);
    BSON_APPEND_TIMESTAMP(&v, "v", major, minor);
    bson_append_document_end(dst, &v);
}

static void append_unsharded(bson_t *dst, const char *key) {
    bson_oid_t zero;
    memset(&zero, 0, sizeof zero);
    append_version(dst, key, &zero, 0, 0, 0, 0);
}

/* Parses {e: ObjectId, t: Timestamp, v: Timestamp} at it. */
static int parse_version(const bson_iter_t *it, shv_recv_t *out, ms_error_t *err) {
    bson_iter_t c;
    bool he = false, ht = false, hv = false;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &c))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "shardVersion must be a document {e, t, v}");
    memset(out, 0, sizeof *out);
    while (bson_iter_next(&c)) {
        const char *k = bson_iter_key(&c);
        if (strcmp(k, "e") == 0 && BSON_ITER_HOLDS_OID(&c)) {
            bson_oid_copy(bson_iter_oid(&c), &out->epoch);
            he = true;
        } else if (strcmp(k, "t") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&c)) {
            bson_iter_timestamp(&c, &out->ts_t, &out->ts_i);
            ht = true;
        } else if (strcmp(k, "v") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&c)) {
            bson_iter_timestamp(&c, &out->major, &out->minor);
            hv = true;
        }
    }
    if (!he || !ht || !hv)
        return err_set(err, MS_ERR_TYPE_MISMATCH,
                       "shardVersion needs e (ObjectId), t (Timestamp) and v (Timestamp)");
    bson_oid_t zero;
    memset(&zero, 0, sizeof zero);
    out->unsharded = bson_oid_equal(&out->epoch, &zero) && out->ts_t == 0 && out->ts_i == 0 &&
                     out->major == 0 && out->minor == 0;
    return 0;
}

static void append_recv(bson_t *dst, const char *key, const shv_recv_t *r) {
    append_version(dst, key, &r->epoch, r->ts_t, r->ts_i, r->major, r->minor);
}

/* ---- the namespace list --------------------------------------------------------------- */

int shv_open(shv_t **out, ms_error_t *err) {
    shv_t *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "shv_open: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    *out = s;
    return 0;
}

void shv_close(shv_t *s) {
    if (!s) return;
    shv_entry_t *e = s->entries;
    while (e) {
        shv_entry_t *next = e->next;
        shv_filter_release(e->snap);
        free(e->ns);
        free(e);
        e = next;
    }
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void shv_set_identity(shv_t *s, const char *shard_name, const char *config_url) {
    pthread_mutex_lock(&s->mu);
    snprintf(s->shard_name, sizeof s->shard_name, "%s", shard_name ? shard_name : "");
    snprintf(s->config_url, sizeof s->config_url, "%s", config_url ? config_url : "");
    /* Owned chunks depend on who we are: forget everything computed under another name. */
    for (shv_entry_t *e = s->entries; e; e = e->next) {
        shv_filter_release(e->snap);
        e->snap = NULL;
        e->state = SHV_UNKNOWN;
        e->invalidations++;
    }
    pthread_mutex_unlock(&s->mu);
    log_info("sharding identity set shard=%s configdb=%s", s->shard_name, s->config_url);
}

const char *shv_shard_name(const shv_t *s) {
    return s->shard_name;
}

const char *shv_config_url(const shv_t *s) {
    return s->config_url;
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

void shv_invalidate(shv_t *s, const char *ns) {
    pthread_mutex_lock(&s->mu);
    shv_entry_t *e = entry_get(s, ns);
    shv_filter_release(e->snap);
    e->snap = NULL;
    e->state = SHV_UNKNOWN;
    e->invalidations++;
    pthread_mutex_unlock(&s->mu);
    log_info("filtering metadata invalidated ns=%s", ns);
}

/* ---- refresh (MongoDB's onShardVersionMismatch → forceShardFilteringMetadataRefresh) ---- */

static int parse_chunk(const bson_iter_t *it, const keys_pattern_t *p, shv_chunk_t *out,
                       ms_error_t *err) {
    bson_iter_t c;
    bool hmin = false, hmax = false, hshard = false, hlm = false;
    memset(out, 0, sizeof *out);
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &c))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: chunk is not a document");
    while (bson_iter_next(&c)) {
        const char *k = bson_iter_key(&c);
        if ((strcmp(k, "min") == 0 || strcmp(k, "max") == 0) && BSON_ITER_HOLDS_DOCUMENT(&c)) {
            uint32_t len;
            const uint8_t *data;
            bson_t b;
            bson_iter_document(&c, &len, &data);
            if (!bson_init_static(&b, data, len))
                return err_set(err, MS_ERR_INVALID_BSON, "getRoutingTable: bad chunk bound");
            bool is_min = k[1] == 'i';
            int rc = keys_encode_bound(p, &b, is_min ? &out->min : &out->max, err);
            if (rc) return rc;
            if (is_min) hmin = true;
            else hmax = true;
        } else if (strcmp(k, "shard") == 0 && BSON_ITER_HOLDS_UTF8(&c)) {
            free(out->shard);
            out->shard = strdup(bson_iter_utf8(&c, NULL));
            ASSERT(out->shard);
            hshard = true;
        } else if (strcmp(k, "lastmod") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&c)) {
            bson_iter_timestamp(&c, &out->major, &out->minor);
            hlm = true;
        }
    }
    if (!hmin || !hmax || !hshard || !hlm)
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "getRoutingTable: chunk needs min, max, shard and lastmod");
    if (buf_cmp(&out->min, &out->max) >= 0)
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: chunk with min >= max");
    return 0;
}

/* Builds a snapshot from a getRoutingTable reply, merging into base when the reply is
 * incremental. *merge_failed is set when the merged table does not tile the key space. */
static int snap_from_reply(const bson_t *reply, shv_filter_t *base, const char *me,
                           shv_filter_t **out, bool *merge_failed, ms_error_t *err) {
    bson_iter_t it, arr;
    shv_filter_t *f = NULL;
    shv_chunk_t *fresh = NULL;
    int nfresh = 0, cap = 0, rc = 0;
    bool full = true, have_key = false, have_epoch = false, have_ts = false, have_chunks = false;
    bson_t key;
    *merge_failed = false;

    f = calloc(1, sizeof *f);
    ASSERT(f);
    atomic_init(&f->refs, 1);
    if (!bson_iter_init(&it, reply)) {
        rc = err_set(err, MS_ERR_INVALID_BSON, "getRoutingTable: bad reply");
        goto out;
    }
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "key") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&it, &len, &data);
            if (have_key || !bson_init_static(&key, data, len)) continue;
            rc = keys_pattern_parse(&key, &f->pattern, err);
            if (rc) goto out;
            have_key = true;
        } else if (strcmp(k, "epoch") == 0 && BSON_ITER_HOLDS_OID(&it)) {
            bson_oid_copy(bson_iter_oid(&it), &f->epoch);
            have_epoch = true;
        } else if (strcmp(k, "timestamp") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &f->ts_t, &f->ts_i);
            have_ts = true;
        } else if (strcmp(k, "full") == 0 && BSON_ITER_HOLDS_BOOL(&it)) {
            full = bson_iter_bool(&it);
        } else if (strcmp(k, "chunks") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
            have_chunks = bson_iter_recurse(&it, &arr);
        }
    }
    if (!have_key || !have_epoch || !have_ts || !have_chunks) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE,
                     "getRoutingTable: reply lacks key, epoch, timestamp or chunks");
        goto out;
    }
    while (bson_iter_next(&arr)) {
        if (nfresh >= MS_CHUNKS_PER_COLLECTION_MAX) {
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: more than %d chunks",
                         MS_CHUNKS_PER_COLLECTION_MAX);
            goto out;
        }
        if (nfresh == cap) {
            cap = cap ? cap * 2 : 16;
            fresh = xrealloc(fresh, (size_t)cap * sizeof *fresh);
        }
        rc = parse_chunk(&arr, &f->pattern, &fresh[nfresh], err);
        if (rc) {
            chunk_free(&fresh[nfresh]);
            goto out;
        }
        nfresh++;
    }
    if (nfresh > 1) qsort(fresh, (size_t)nfresh, sizeof *fresh, chunk_cmp_min);

    bool incremental = !full && base && bson_oid_equal(&base->epoch, &f->epoch) &&
                       base->ts_t == f->ts_t && base->ts_i == f->ts_i;
    if (!full && !incremental) {
        *merge_failed = true;  /* an incremental answer we cannot apply: ask in full */
        goto out;
    }
    if (!incremental) {
        f->chunks = fresh;
        f->nchunks = nfresh;
        fresh = NULL;
        nfresh = 0;
    } else {
        /* Old chunks that no fresh chunk overlaps survive; fresh ones replace the rest
         * (a split or merge changes boundaries, a migration changes the owner). */
        f->chunks = calloc((size_t)(base->nchunks + nfresh + 1), sizeof *f->chunks);
        ASSERT(f->chunks);
        int j = 0;
        for (int i = 0; i < base->nchunks; i++) {
            const shv_chunk_t *oc = &base->chunks[i];
            /* fresh chunks are sorted and disjoint: the last one with min < oc.max decides. */
            int lo = 0, hi = nfresh - 1, cand = -1;
            while (lo <= hi) {
                int mid = lo + (hi - lo) / 2;
                if (buf_cmp(&fresh[mid].min, &oc->max) < 0) {
                    cand = mid;
                    lo = mid + 1;
                } else {
                    hi = mid - 1;
                }
            }
            if (cand >= 0 && buf_cmp(&fresh[cand].max, &oc->min) > 0) continue;
            shv_chunk_t *nc = &f->chunks[j++];
            buf_put(&nc->min, oc->min.data, oc->min.len);
            buf_put(&nc->max, oc->max.data, oc->max.len);
            nc->shard = strdup(oc->shard);
            ASSERT(nc->shard);
            nc->major = oc->major;
            nc->minor = oc->minor;
        }
        for (int i = 0; i < nfresh; i++) f->chunks[j++] = fresh[i];
        free(fresh);
        fresh = NULL;
        nfresh = 0;
        f->nchunks = j;
        if (f->nchunks > 1) qsort(f->chunks, (size_t)f->nchunks, sizeof *f->chunks, chunk_cmp_min);
    }
    if (bson_iter_init_find(&it, reply, "collectionVersion")) {
        shv_recv_t cv;
        if (parse_version(&it, &cv, NULL) == 0) {
            f->coll_major = cv.major;
            f->coll_minor = cv.minor;
        }
    }
    if (!snap_finish(f, me)) {
        *merge_failed = true;
        if (!incremental) {
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE,
                         "getRoutingTable: chunks do not tile the key space");
        }
        goto out;
    }
    *out = f;
    f = NULL;
out:
    for (int i = 0; i < nfresh; i++) chunk_free(&fresh[i]);
    free(fresh);
    snap_free(f);
    return rc;
}

/* Asks the config server. *unsharded set for NamespaceNotSharded; else *out a snapshot. */
static int fetch_table(shv_t *s, const char *ns, shv_filter_t *base, shv_filter_t **out,
                       bool *unsharded, ms_error_t *err) {
    char url[MS_URL_BYTES_MAX], me[128];
    rpc_client_t *cli = NULL;
    int rc;
    *unsharded = false;
    *out = NULL;
    pthread_mutex_lock(&s->mu);
    memcpy(url, s->config_url, sizeof url);
    memcpy(me, s->shard_name, sizeof me);
    pthread_mutex_unlock(&s->mu);
    rc = rpc_peer(url, &cli, err);
    if (rc) return rc;
    /* At most two rounds: incremental, then full if the merge did not tile. */
    for (int round = 0; round < 2; round++) {
        bson_t cmd, reply;
        bson_iter_t it;
        bool merge_failed = false;
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "getRoutingTable", ns);
        if (base && round == 0)
            append_version(&cmd, "sinceVersion", &base->epoch, base->ts_t, base->ts_i,
                           base->coll_major, base->coll_minor);
        /* rpc_call, not rpc_command: the reply is ours whenever the call succeeds, so
         * NamespaceNotSharded and other {ok: 0} answers are read without ambiguity. */
        rc = rpc_call(cli, &cmd, SHV_REFRESH_TIMEOUT_MS, &reply, err);
        bson_destroy(&cmd);
        if (rc) {
            err_prefix(err, "refreshing filtering metadata of %s from %s", ns, url);
            return rc;
        }
        if (!bson_iter_init_find(&it, &reply, "ok") || !bsonx_truthy(&it)) {
            int code = MS_ERR_UNKNOWN_ERROR;
            const char *msg = "";
            if (bson_iter_init_find(&it, &reply, "code") && BSON_ITER_HOLDS_INT32(&it))
                code = bson_iter_int32(&it);
            if (bson_iter_init_find(&it, &reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
                msg = bson_iter_utf8(&it, NULL);
            if (code == MS_ERR_NAMESPACE_NOT_SHARDED) {
                bson_destroy(&reply);
                *unsharded = true;
                return 0;
            }
            rc = err_set(err, code ? code : MS_ERR_UNKNOWN_ERROR,
                         "refreshing filtering metadata of %s from %s: %s", ns, url, msg);
            bson_destroy(&reply);
            return rc;
        }
        rc = snap_from_reply(&reply, round == 0 ? base : NULL, me, out, &merge_failed, err);
        bson_destroy(&reply);
        if (rc) return rc;
        if (!merge_failed) return 0;
        log_info("incremental routing table did not apply, fetching in full ns=%s", ns);
    }
    return err_set(err, MS_ERR_INTERNAL, "routing table of %s could not be applied", ns);
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
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += SHV_REFRESH_TIMEOUT_MS / 1000;
        while (e->refreshing && e->refresh_seq == seq) {
            if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != 0) break;
        }
        bool done = e->refresh_seq != seq;
        pthread_mutex_unlock(&s->mu);
        if (!done)
            return err_set(err, MS_ERR_NETWORK_TIMEOUT,
                           "timed out waiting for the refresh of %s", ns);
        return 0;
    }
    e->refreshing = true;
    inval = e->invalidations;
    if (e->state == SHV_SHARDED) base = shv_filter_ref(e->snap);
    pthread_mutex_unlock(&s->mu);

    rc = fetch_table(s, ns, base, &fresh, &unsharded, err);

    pthread_mutex_lock(&s->mu);
    if (rc == 0 && e->invalidations == inval) {
        shv_filter_release(e->snap);
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
                 ns, e->snap->shard_major, e->snap->shard_minor, e->snap->coll_major,
                 e->snap->coll_minor, e->snap->nowned, e->snap->nchunks, time_mono_ms() - t0);
    else if (rc == 0 && e->state == SHV_UNSHARDED)
        log_info("filtering metadata refreshed ns=%s sharded=false", ns);
    pthread_mutex_unlock(&s->mu);
    if (rc) log_warn("filtering metadata refresh failed ns=%s code=%d err=\"%s\"", ns, rc,
                     err ? err->msg : "");
    shv_filter_release(fresh);
    shv_filter_release(base);
    return rc;
}

int shv_refresh(shv_t *s, const char *ns, ms_error_t *err) {
    if (!s->config_url[0])
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
    bool same_gen = bson_oid_equal(&r->epoch, &f->epoch) && r->ts_t == f->ts_t &&
                    r->ts_i == f->ts_i;
    if (!same_gen)  /* timestamps order generations; epochs are not comparable */
        return version_less(f->ts_t, f->ts_i, r->ts_t, r->ts_i);
    return r->major > f->coll_major;
}

int shv_check(shv_t *s, const char *ns, const bson_t *req, shv_filter_t **filter,
              bson_t *err_info, ms_error_t *err) {
    bson_iter_t it;
    shv_recv_t r;
    shv_filter_t *snap = NULL;
    enum shv_state state;
    const char *why = NULL;
    int rc;

    *filter = NULL;
    if (!bson_iter_init_find(&it, req, "shardVersion")) return 0;
    rc = parse_version(&it, &r, err);
    if (rc) return rc;
    if (!s->config_url[0] || !s->shard_name[0])
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
    if (state == SHV_SHARDED) snap = shv_filter_ref(e->snap);
    pthread_mutex_unlock(&s->mu);

    if (state == SHV_UNKNOWN) {
        /* Invalidated again while we refreshed: the router retries and we refresh anew. */
        why = "sharding status of the collection is not currently known";
    } else if (state == SHV_UNSHARDED) {
        if (r.unsharded) return 0;
        why = "the collection is not sharded on this shard";
    } else if (r.unsharded) {
        why = "request treats the collection as unsharded but it is sharded";
    } else if (!bson_oid_equal(&r.epoch, &snap->epoch) || r.ts_t != snap->ts_t ||
               r.ts_i != snap->ts_i) {
        why = "timestamp mismatch (the collection was dropped, recreated or resharded)";
    } else if (r.major != snap->shard_major) {
        why = snap->shard_major == 0 && snap->shard_minor == 0
                  ? "shard no longer contains chunks"
                  : "placement version major mismatch";
    } else {
        *filter = snap;
        return 0;
    }

    if (err_info) {
        BSON_APPEND_UTF8(err_info, "ns", ns);
        append_recv(err_info, "vReceived", &r);
        if (state == SHV_SHARDED)
            append_version(err_info, "vWanted", &snap->epoch, snap->ts_t, snap->ts_i,
                           snap->shard_major, snap->shard_minor);
        else if (state == SHV_UNSHARDED)
            append_unsharded(err_info, "vWanted");
        BSON_APPEND_UTF8(err_info, "shardId", s->shard_name);
    }
    pthread_mutex_lock(&s->mu);
    s->stale_replies++;
    pthread_mutex_unlock(&s->mu);
    log_info("stale config ns=%s received=%u|%u wanted=%u|%u reason=\"%s\"", ns, r.major, r.minor,
             snap ? snap->shard_major : 0, snap ? snap->shard_minor : 0, why);
    rc = err_set(err, MS_ERR_STALE_CONFIG, "version mismatch detected for %s: %s", ns, why);
    shv_filter_release(snap);
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
            append_version(&d, "shardVersion", &f->epoch, f->ts_t, f->ts_i, f->shard_major,
                           f->shard_minor);
            append_version(&d, "collectionVersion", &f->epoch, f->ts_t, f->ts_i, f->coll_major,
                           f->coll_minor);
            BSON_APPEND_INT32(&d, "chunksOwned", f->nowned);
            BSON_APPEND_INT32(&d, "chunksKnown", f->nchunks);
        } else {
            BSON_APPEND_BOOL(&d, "sharded", false);
        }
        bson_append_document_end(reply, &d);
    }
    pthread_mutex_unlock(&s->mu);
}
