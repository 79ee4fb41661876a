/*
 * rt_cache.c — the router's caches (MongoDB's CatalogCache in miniature), run by
 * bin/router: per collection an immutable, reference-counted routing table (chunks
 * sorted by encoded min, found by binary search) fetched with getRoutingTable and
 * refreshed incrementally (sinceVersion = our collection version: only changed chunks
 * come back and replace the ones they overlap); per database its primary shard; and the
 * shard registry (listShards). One refresh per collection runs at a time; other
 * threads wait for it (bounded by the call deadline).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/bsonx.h"
#include "common/log.h"
#include "common/rpc.h"
#include "router/router.h"

struct rt_coll_entry {
    char ns[MS_NS_BYTES_MAX + 1];
    rt_table_t *table;            /* NULL = unknown */
    bool refreshing;
    uint64_t seq;                 /* completed refreshes */
    uint64_t invalidations;
    rt_coll_entry_t *next;
};

struct rt_db_entry {
    char name[RT_NAME_BYTES_MAX];
    char primary[RT_NAME_BYTES_MAX];
    rt_db_entry_t *next;
};

/* ---- tables --------------------------------------------------------------------------- */

static void table_free(rt_table_t *t) {
    if (!t) return;
    for (int i = 0; i < t->nchunks; i++) {
        buf_free(&t->chunks[i].min);
        buf_free(&t->chunks[i].max);
    }
    free(t->chunks);
    if (t->sharded) keys_pattern_free(&t->pattern);
    free(t);
}

void rt_table_release(rt_table_t *t) {
    if (t && atomic_fetch_sub(&t->refs, 1) == 1) table_free(t);
}

static rt_table_t *table_ref(rt_table_t *t) {
    if (t) atomic_fetch_add(&t->refs, 1);
    return t;
}

static rt_table_t *table_new(const char *ns) {
    rt_table_t *t = calloc(1, sizeof *t);
    ASSERT(t);
    atomic_init(&t->refs, 1);
    snprintf(t->ns, sizeof t->ns, "%s", ns);
    return t;
}

int rt_table_shard_index(const rt_table_t *t, const char *name) {
    for (int i = 0; i < t->nshards; i++)
        if (strcmp(t->shards[i], name) == 0) return i;
    return -1;
}

static int shard_slot(rt_table_t *t, const char *name, ms_error_t *err) {
    int i = rt_table_shard_index(t, name);
    if (i >= 0) return i;
    if (t->nshards >= MS_SHARDS_MAX)
        return -err_set(err, MS_ERR_INTERNAL, "more than %d shards own chunks", MS_SHARDS_MAX);
    snprintf(t->shards[t->nshards], RT_NAME_BYTES_MAX, "%s", name);
    return t->nshards++;
}

static int chunk_cmp_min(const void *a, const void *b) {
    const rt_chunk_t *x = a, *y = b;
    return rt_bytes_cmp(x->min.data, x->min.len, y->min.data, y->min.len);
}

static bool vless(uint32_t am, uint32_t an, uint32_t bm, uint32_t bn) {
    return am < bm || (am == bm && an < bn);
}

/* Per-shard versions, collection version, and the tiling check. */
static bool table_finish(rt_table_t *t) {
    bson_t bmin, bmax;
    buf_t gmin = {0}, gmax = {0};
    bool ok = t->nchunks > 0;
    bson_init(&bmin);
    bson_init(&bmax);
    keys_global_min(&t->pattern, &bmin);
    keys_global_max(&t->pattern, &bmax);
    if (keys_encode_bound(&t->pattern, &bmin, &gmin, NULL) ||
        keys_encode_bound(&t->pattern, &bmax, &gmax, NULL))
        ok = false;
    if (ok) {
        const rt_chunk_t *a = &t->chunks[0], *z = &t->chunks[t->nchunks - 1];
        if (rt_bytes_cmp(a->min.data, a->min.len, gmin.data, gmin.len) != 0 ||
            rt_bytes_cmp(z->max.data, z->max.len, gmax.data, gmax.len) != 0)
            ok = false;
        for (int i = 0; ok && i + 1 < t->nchunks; i++)
            if (rt_bytes_cmp(t->chunks[i].max.data, t->chunks[i].max.len,
                             t->chunks[i + 1].min.data, t->chunks[i + 1].min.len) != 0)
                ok = false;
    }
    memset(t->shard_major, 0, sizeof t->shard_major);
    memset(t->shard_minor, 0, sizeof t->shard_minor);
    for (int i = 0; i < t->nchunks; i++) {
        const rt_chunk_t *c = &t->chunks[i];
        if (vless(t->coll_major, t->coll_minor, c->major, c->minor)) {
            t->coll_major = c->major;
            t->coll_minor = c->minor;
        }
        if (vless(t->shard_major[c->shard], t->shard_minor[c->shard], c->major, c->minor)) {
            t->shard_major[c->shard] = c->major;
            t->shard_minor[c->shard] = c->minor;
        }
    }
    bson_destroy(&bmin);
    bson_destroy(&bmax);
    buf_free(&gmin);
    buf_free(&gmax);
    return ok;
}

static int parse_chunk(bson_iter_t *it, rt_table_t *t, rt_chunk_t *c, ms_error_t *err) {
    bson_iter_t d;
    int have = 0;
    memset(c, 0, sizeof *c);
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &d))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: chunk is not a document");
    while (bson_iter_next(&d)) {
        const char *k = bson_iter_key(&d);
        if ((!strcmp(k, "min") || !strcmp(k, "max")) && BSON_ITER_HOLDS_DOCUMENT(&d)) {
            uint32_t len;
            const uint8_t *data;
            bson_t b;
            bson_iter_document(&d, &len, &data);
            if (!bson_init_static(&b, data, len))
                return err_set(err, MS_ERR_INVALID_BSON, "getRoutingTable: bad bound");
            int rc = keys_encode_bound(&t->pattern, &b, k[1] == 'i' ? &c->min : &c->max, err);
            if (rc) return rc;
            have |= k[1] == 'i' ? 1 : 2;
        } else if (!strcmp(k, "shard") && BSON_ITER_HOLDS_UTF8(&d)) {
            int s = shard_slot(t, bson_iter_utf8(&d, NULL), err);
            if (s < 0) return -s;
            c->shard = s;
            have |= 4;
        } else if (!strcmp(k, "lastmod") && BSON_ITER_HOLDS_TIMESTAMP(&d)) {
            bson_iter_timestamp(&d, &c->major, &c->minor);
            have |= 8;
        }
    }
    if (have != 15)
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "getRoutingTable: chunk needs min, max, shard and lastmod");
    return 0;
}

/* Builds a table from a getRoutingTable reply, merged into base when incremental.
 * *retry_full when the incremental answer could not be applied. */
static int table_from_reply(const char *ns, const bson_t *reply, const rt_table_t *base,
                            rt_table_t **out, bool *retry_full, ms_error_t *err) {
    bson_iter_t it, arr;
    rt_table_t *t = table_new(ns);
    rt_chunk_t *fresh = NULL;
    int nfresh = 0, cap = 0, rc = 0, have = 0;
    bool full = true;
    *retry_full = false;
    t->sharded = true;
    if (bson_iter_init_find(&it, reply, "key") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_t k;
        bson_iter_document(&it, &len, &data);
        if (bson_init_static(&k, data, len)) {
            if ((rc = keys_pattern_parse(&k, &t->pattern, err)) != 0) {
                t->sharded = false;
                goto out;
            }
            have |= 1;
        }
    }
    if (!(have & 1)) {
        t->sharded = false;
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: reply lacks key");
        goto out;
    }
    if (bson_iter_init_find(&it, reply, "epoch") && BSON_ITER_HOLDS_OID(&it)) {
        bson_oid_copy(bson_iter_oid(&it), &t->epoch);
        have |= 2;
    }
    if (bson_iter_init_find(&it, reply, "timestamp") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &t->ts_t, &t->ts_i);
        have |= 4;
    }
    if (bson_iter_init_find(&it, reply, "unique")) t->unique = bsonx_truthy(&it);
    if (bson_iter_init_find(&it, reply, "full") && BSON_ITER_HOLDS_BOOL(&it))
        full = bson_iter_bool(&it);
    if (bson_iter_init_find(&it, reply, "chunks") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &arr))
        have |= 8;
    if (have != 15) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE,
                     "getRoutingTable: reply lacks epoch, timestamp or chunks");
        goto out;
    }
    bool incremental = !full && base && base->sharded && bson_oid_equal(&base->epoch, &t->epoch) &&
                       base->ts_t == t->ts_t && base->ts_i == t->ts_i;
    if (!full && !incremental) {
        *retry_full = true;
        goto out;
    }
    if (incremental) {
        /* Keep the base's shard numbering so old chunks copy over as they are. */
        t->nshards = base->nshards;
        memcpy(t->shards, base->shards, sizeof t->shards);
    }
    while (bson_iter_next(&arr)) {
        if (nfresh >= MS_CHUNKS_PER_COLLECTION_MAX) {
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: too many chunks");
            goto out;
        }
        if (nfresh == cap) {
            cap = cap ? 2 * cap : 16;
            fresh = xrealloc(fresh, (size_t)cap * sizeof *fresh);
        }
        rc = parse_chunk(&arr, t, &fresh[nfresh], err);
        nfresh++;
        if (rc) goto out;
    }
    if (nfresh > 1) qsort(fresh, (size_t)nfresh, sizeof *fresh, chunk_cmp_min);
    if (!incremental) {
        t->chunks = fresh;
        t->nchunks = nfresh;
        fresh = NULL;
        nfresh = 0;
    } else {
        t->chunks = calloc((size_t)(base->nchunks + nfresh + 1), sizeof *t->chunks);
        ASSERT(t->chunks);
        int j = 0;
        for (int i = 0; i < base->nchunks; i++) {
            const rt_chunk_t *oc = &base->chunks[i];
            int lo = 0, hi = nfresh - 1, cand = -1;
            while (lo <= hi) {   /* last fresh chunk with min < oc.max */
                int mid = lo + (hi - lo) / 2;
                if (rt_bytes_cmp(fresh[mid].min.data, fresh[mid].min.len, oc->max.data,
                                 oc->max.len) < 0) {
                    cand = mid;
                    lo = mid + 1;
                } else {
                    hi = mid - 1;
                }
            }
            if (cand >= 0 && rt_bytes_cmp(fresh[cand].max.data, fresh[cand].max.len,
                                          oc->min.data, oc->min.len) > 0)
                continue;   /* replaced by a changed chunk */
            rt_chunk_t *nc = &t->chunks[j++];
            buf_put(&nc->min, oc->min.data, oc->min.len);
            buf_put(&nc->max, oc->max.data, oc->max.len);
            nc->shard = oc->shard;
            nc->major = oc->major;
            nc->minor = oc->minor;
        }
        for (int i = 0; i < nfresh; i++) t->chunks[j++] = fresh[i];
        free(fresh);
        fresh = NULL;
        nfresh = 0;
        t->nchunks = j;
        qsort(t->chunks, (size_t)t->nchunks, sizeof *t->chunks, chunk_cmp_min);
    }
    if (!table_finish(t)) {
        if (incremental) *retry_full = true;
        else rc = err_set(err, MS_ERR_FAILED_TO_PARSE,
                          "getRoutingTable: chunks of %s do not tile the key space", ns);
        goto out;
    }
    *out = t;
    t = NULL;
out:
    for (int i = 0; i < nfresh; i++) {
        buf_free(&fresh[i].min);
        buf_free(&fresh[i].max);
    }
    free(fresh);
    table_free(t);
    return rc;
}

int rt_config_call(router_t *r, const bson_t *cmd, bson_t *reply, ms_error_t *err) {
    rpc_client_t *c;
    int rc = rpc_peer(r->configdb, &c, err);
    if (rc) return rc;
    return rpc_call(c, cmd, RT_CALL_TIMEOUT_MS, reply, err);
}

static int fetch_table(router_t *r, const char *ns, const rt_table_t *base, rt_table_t **out,
                       ms_error_t *err) {
    for (int round = 0; round < 2; round++) {
        bson_t cmd, reply;
        bool retry_full = false;
        int rc;
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "getRoutingTable", ns);
        BSON_APPEND_UTF8(&cmd, "$db", "admin");
        if (round == 0 && base && base->sharded) {
            bson_t v;
            BSON_APPEND_DOCUMENT_BEGIN(&cmd, "sinceVersion", &v);
            BSON_APPEND_OID(&v, "e", &base->epoch);
            BSON_APPEND_TIMESTAMP(&v, "t", base->ts_t, base->ts_i);
            BSON_APPEND_TIMESTAMP(&v, "v", base->coll_major, base->coll_minor);
            bson_append_document_end(&cmd, &v);
        }
        rc = rt_config_call(r, &cmd, &reply, err);
        bson_destroy(&cmd);
        if (rc) return rc;
        rc = rt_reply_status(&reply, err);
        if (rc == MS_ERR_NAMESPACE_NOT_SHARDED) {
            bson_destroy(&reply);
            *out = table_new(ns);
            return 0;
        }
        if (rc) {
            bson_destroy(&reply);
            err_prefix(err, "getRoutingTable %s", ns);
            return rc;
        }
        rc = table_from_reply(ns, &reply, round == 0 ? base : NULL, out, &retry_full, err);
        bson_destroy(&reply);
        if (rc || !retry_full) return rc;
    }
    return err_set(err, MS_ERR_INTERNAL, "routing table of %s could not be applied", ns);
}

/* Caller holds r->mu. */
static rt_coll_entry_t *coll_entry(router_t *r, const char *ns) {
    for (rt_coll_entry_t *e = r->colls; e; e = e->next)
        if (strcmp(e->ns, ns) == 0) return e;
    rt_coll_entry_t *e = calloc(1, sizeof *e);
    ASSERT(e);
    snprintf(e->ns, sizeof e->ns, "%s", ns);
    e->next = r->colls;
    r->colls = e;
    return e;
}

/* One refresh per namespace at a time. force: refresh even when a table is cached. */
static int refresh(router_t *r, const char *ns, const rt_table_t *seen, ms_error_t *err) {
    rt_table_t *base = NULL, *fresh = NULL;
    uint64_t inval;
    pthread_mutex_lock(&r->mu);
    rt_coll_entry_t *e = coll_entry(r, ns);
    if (e->table && seen && e->table != seen) {   /* someone refreshed already */
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    if (e->refreshing) {
        uint64_t seq = e->seq;
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += RT_CALL_TIMEOUT_MS / 1000;
        while (e->refreshing && e->seq == seq)
            if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) != 0) break;
        bool done = e->seq != seq;
        pthread_mutex_unlock(&r->mu);
        return done ? 0 : err_set(err, MS_ERR_NETWORK_TIMEOUT,
                                  "timed out waiting for the routing table of %s", ns);
    }
    e->refreshing = true;
    inval = e->invalidations;
    base = table_ref(e->table);
    pthread_mutex_unlock(&r->mu);

    long long t0 = time_mono_ms();
    int rc = fetch_table(r, ns, base, &fresh, err);

    /* Sharded → unsharded (dropped, maybe with its database): the cached primary may be
     * gone too, and without database versions no shard would tell us. */
    if (rc == 0 && base && base->sharded && !fresh->sharded) {
        char db[RT_NAME_BYTES_MAX];
        const char *dot = strchr(ns, '.');
        size_t n = dot ? (size_t)(dot - ns) : strlen(ns);
        if (n < sizeof db) {
            memcpy(db, ns, n);
            db[n] = '\0';
            rt_db_invalidate(r, db);
        }
    }
    pthread_mutex_lock(&r->mu);
    if (rc == 0 && e->invalidations == inval) {
        rt_table_release(e->table);
        e->table = fresh;
        fresh = NULL;
    }
    e->refreshing = false;
    e->seq++;
    pthread_cond_broadcast(&r->cv);
    if (rc == 0 && e->table)
        log_info("routing table refreshed ns=%s sharded=%d version=%u|%u chunks=%d ms=%lld", ns,
                 e->table->sharded, e->table->coll_major, e->table->coll_minor,
                 e->table->nchunks, time_mono_ms() - t0);
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->refreshes, 1);
    rt_table_release(fresh);
    rt_table_release(base);
    return rc;
}

int rt_table_get(router_t *r, const char *ns, rt_table_t **out, ms_error_t *err) {
    for (int tries = 0; tries < 3; tries++) {
        pthread_mutex_lock(&r->mu);
        rt_coll_entry_t *e = coll_entry(r, ns);
        rt_table_t *t = table_ref(e->table);
        pthread_mutex_unlock(&r->mu);
        if (t) {
            *out = t;
            return 0;
        }
        int rc = refresh(r, ns, NULL, err);
        if (rc) return rc;
    }
    return err_set(err, MS_ERR_INTERNAL, "routing table of %s keeps being invalidated", ns);
}

int rt_table_refresh(router_t *r, const char *ns, const rt_table_t *seen, ms_error_t *err) {
    return refresh(r, ns, seen, err);
}

void rt_table_invalidate(router_t *r, const char *ns) {
    pthread_mutex_lock(&r->mu);
    rt_coll_entry_t *e = coll_entry(r, ns);
    rt_table_release(e->table);
    e->table = NULL;
    e->invalidations++;
    pthread_mutex_unlock(&r->mu);
}

/* ---- databases and shards --------------------------------------------------------------- */

static int lookup_db(router_t *r, const char *db, char *primary, size_t cap, ms_error_t *err) {
    bson_t cmd, reply, f;
    bson_iter_t it;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "find", "databases");
    BSON_APPEND_UTF8(&cmd, "$db", "config");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &f);
    BSON_APPEND_UTF8(&f, "_id", db);
    bson_append_document_end(&cmd, &f);
    rc = rt_config_call(r, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if ((rc = rt_reply_status(&reply, err)) == 0) {
        if (bson_iter_init(&it, &reply) &&
            bson_iter_find_descendant(&it, "cursor.firstBatch.0.primary", &it) &&
            BSON_ITER_HOLDS_UTF8(&it))
            snprintf(primary, cap, "%s", bson_iter_utf8(&it, NULL));
        else
            rc = err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "database %s not found", db);
    }
    bson_destroy(&reply);
    return rc;
}

static int create_db(router_t *r, const char *db, char *primary, size_t cap, ms_error_t *err) {
    bson_t cmd, reply;
    bson_iter_t it;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "_configsvrCreateDatabase", db);
    BSON_APPEND_UTF8(&cmd, "name", db);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    rc = rt_config_call(r, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if ((rc = rt_reply_status(&reply, err)) == 0) {
        if (bson_iter_init_find(&it, &reply, "primary") && BSON_ITER_HOLDS_UTF8(&it))
            snprintf(primary, cap, "%s", bson_iter_utf8(&it, NULL));
        else
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "_configsvrCreateDatabase: no primary");
    }
    bson_destroy(&reply);
    if (rc == 0) log_info("database created db=%s primary=%s", db, primary);
    return rc;
}

int rt_db_primary(router_t *r, const char *db, bool create, char *primary, size_t cap,
                  ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&r->mu);
    for (rt_db_entry_t *d = r->dbs; d; d = d->next)
        if (strcmp(d->name, db) == 0) {
            snprintf(primary, cap, "%s", d->primary);
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
    pthread_mutex_unlock(&r->mu);
    rc = lookup_db(r, db, primary, cap, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND && create) rc = create_db(r, db, primary, cap, err);
    if (rc) return rc;
    pthread_mutex_lock(&r->mu);
    rt_db_entry_t *d = calloc(1, sizeof *d);
    ASSERT(d);
    snprintf(d->name, sizeof d->name, "%s", db);
    snprintf(d->primary, sizeof d->primary, "%s", primary);
    d->next = r->dbs;
    r->dbs = d;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

void rt_db_invalidate(router_t *r, const char *db) {
    pthread_mutex_lock(&r->mu);
    for (rt_db_entry_t **pp = &r->dbs; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->name, db) == 0) {
            rt_db_entry_t *d = *pp;
            *pp = d->next;
            free(d);
            break;
        }
    pthread_mutex_unlock(&r->mu);
}

void rt_cache_flush_db(router_t *r, const char *db) {
    size_t dl = strlen(db);
    rt_db_invalidate(r, db);
    pthread_mutex_lock(&r->mu);
    for (rt_coll_entry_t *e = r->colls; e; e = e->next)
        if (!strncmp(e->ns, db, dl) && e->ns[dl] == '.') {
            rt_table_release(e->table);
            e->table = NULL;
            e->invalidations++;
        }
    pthread_mutex_unlock(&r->mu);
}

void rt_cache_flush_all(router_t *r) {
    pthread_mutex_lock(&r->mu);
    for (rt_coll_entry_t *e = r->colls; e; e = e->next) {
        rt_table_release(e->table);
        e->table = NULL;
        e->invalidations++;
    }
    for (rt_db_entry_t *d = r->dbs, *n; d; d = n) {
        n = d->next;
        free(d);
    }
    r->dbs = NULL;
    pthread_mutex_unlock(&r->mu);
}

static int load_shards(router_t *r, ms_error_t *err) {
    bson_t cmd, reply;
    bson_iter_t it, arr;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "listShards", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    rc = rt_config_call(r, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if ((rc = rt_reply_status(&reply, err)) != 0) goto out;
    if (!bson_iter_init_find(&it, &reply, "shards") || !bson_iter_recurse(&it, &arr)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "listShards: no shards array");
        goto out;
    }
    pthread_mutex_lock(&r->mu);
    r->nshards = 0;
    while (bson_iter_next(&arr) && r->nshards < MS_SHARDS_MAX) {
        bson_iter_t d;
        const char *id = NULL, *host = NULL;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &d)) continue;
        while (bson_iter_next(&d)) {
            if (!strcmp(bson_iter_key(&d), "_id") && BSON_ITER_HOLDS_UTF8(&d))
                id = bson_iter_utf8(&d, NULL);
            else if (!strcmp(bson_iter_key(&d), "host") && BSON_ITER_HOLDS_UTF8(&d))
                host = bson_iter_utf8(&d, NULL);
        }
        if (!id || !host) continue;
        snprintf(r->shard_names[r->nshards], RT_NAME_BYTES_MAX, "%s", id);
        snprintf(r->shard_hosts[r->nshards], MS_URL_BYTES_MAX, "%s", host);
        r->nshards++;
    }
    pthread_mutex_unlock(&r->mu);
out:
    bson_destroy(&reply);
    return rc;
}

int rt_shard_url(router_t *r, const char *shard, char *url, size_t cap, ms_error_t *err) {
    for (int round = 0; round < 2; round++) {
        pthread_mutex_lock(&r->mu);
        for (int i = 0; i < r->nshards; i++)
            if (strcmp(r->shard_names[i], shard) == 0) {
                snprintf(url, cap, "%s", r->shard_hosts[i]);
                pthread_mutex_unlock(&r->mu);
                return 0;
            }
        pthread_mutex_unlock(&r->mu);
        if (round == 0) {
            int rc = load_shards(r, err);
            if (rc) return rc;
        }
    }
    return err_set(err, MS_ERR_SHARD_NOT_FOUND, "shard %s not found", shard);
}

int rt_all_shards(router_t *r, char names[][RT_NAME_BYTES_MAX], int cap, ms_error_t *err) {
    int rc = load_shards(r, err), n = 0;
    if (rc) return -rc;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->nshards && n < cap; i++)
        snprintf(names[n++], RT_NAME_BYTES_MAX, "%s", r->shard_names[i]);
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* ---- life cycle ------------------------------------------------------------------------- */

int rt_open(const char *configdb, const char *url, router_t **out, ms_error_t *err) {
    router_t *r = calloc(1, sizeof *r);
    if (!r) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "router: out of memory");
    snprintf(r->configdb, sizeof r->configdb, "%s", configdb);
    snprintf(r->url, sizeof r->url, "%s", url ? url : "");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    pthread_mutex_init(&r->ping_mu, NULL);
    pthread_cond_init(&r->ping_cv, NULL);
    r->start_ms = time_now_ms();
    int rc = rt_cursors_open(&r->cursors);
    if (rc) {
        free(r);
        return err_set(err, rc, "router: cannot create the cursor table");
    }
    *out = r;
    return 0;
}

void rt_close(router_t *r) {
    if (!r) return;
    atomic_store(&r->stopping, true);
    if (r->pinger_running) {
        pthread_mutex_lock(&r->ping_mu);
        pthread_cond_broadcast(&r->ping_cv);
        pthread_mutex_unlock(&r->ping_mu);
        pthread_join(r->pinger, NULL);
    }
    rt_cursors_close(r, r->cursors);
    for (rt_coll_entry_t *e = r->colls, *n; e; e = n) {
        n = e->next;
        rt_table_release(e->table);
        free(e);
    }
    for (rt_db_entry_t *d = r->dbs, *n; d; d = n) {
        n = d->next;
        free(d);
    }
    pthread_cond_destroy(&r->ping_cv);
    pthread_mutex_destroy(&r->ping_mu);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
