/*
 * rt_cache.c — the router's caches (MongoDB's CatalogCache in miniature), run by
 * bin/router: per collection an immutable, reference-counted routing table (chunks
 * sorted by encoded min, found by binary search) fetched with getRoutingTable, in pages
 * (rtable_fetch), and refreshed incrementally (sinceVersion = our collection version:
 * only changed chunks come back and replace the ones they overlap); per database its primary shard; and the
 * shard registry (listShards). One refresh per collection runs at a time; other
 * threads wait for it (bounded by the call deadline).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/opctx.h"
#include "common/rpc.h"
#include "router/router.h"

struct rt_coll_entry {
    char ns[MS_NS_BYTES_MAX + 1];
    rt_table_t *table;            /* NULL = unknown */
    /* The table an invalidation set aside (a split, merge or move through this router):
     * not routed with, but the base of the next refresh, so that it reads only what
     * changed — at a million chunks a full load is seconds, an incremental one a page. */
    rt_table_t *stale;
    bool refreshing;
    uint64_t seq;                 /* completed refreshes */
    uint64_t invalidations;
    rt_coll_entry_t *next;
};

struct rt_db_entry {
    char name[RT_NAME_BYTES_MAX];
    char primary[RT_NAME_BYTES_MAX];
    rt_db_version_t version;
    rt_db_entry_t *next;
};

/* ---- tables --------------------------------------------------------------------------- */

static void table_free(rt_table_t *t) {
    if (!t) return;
    rtable_clear(&t->rt);
    free(t);
}

void rt_table_release(rt_table_t *t) {
    if (t && atomic_fetch_sub(&t->refs, 1) == 1) table_free(t);
}

static rt_table_t *table_ref(rt_table_t *t) {
    if (t) atomic_fetch_add(&t->refs, 1);
    return t;
}

rt_table_t *rt_table_hold(const rt_table_t *t) {
    return table_ref((rt_table_t *)t);   /* only refs changes: atomic, owned by no one */
}

static rt_table_t *table_new(const char *ns) {
    rt_table_t *t = mem_calloc_aligned(1, sizeof *t);   /* holds a bson_t (common/mem.h) */
    ASSERT(t);
    atomic_init(&t->refs, 1);
    snprintf(t->ns, sizeof t->ns, "%s", ns);
    return t;
}

int rt_config_call(router_t *r, const bson_t *cmd, bson_t *reply, ms_error_t *err) {
    return rt_config_call_ms(r, cmd, r->peer_timeout_ms, reply, err);
}

int rt_config_call_ms(router_t *r, const bson_t *cmd, int dflt_ms, bson_t *reply, ms_error_t *err) {
    rpc_client_t *c;
    int rc = rpc_peer(r->configdb, &c, err);
    if (rc) return rc;
    /* The operation's maxTimeMS bounds the call when it has one. */
    rc = rpc_call_op(c, cmd, dflt_ms, reply, err);
    if (rc) err_prefix(err, "config server");
    return rc;
}

/* One getRoutingTable page from the config server (rtable_fetch's call). */
static int call_page(void *arg, const bson_t *cmd, bson_t *reply, ms_error_t *err) {
    int rc = rt_config_call(arg, cmd, reply, err);
    if (rc) return rc;
    if ((rc = rt_reply_status(reply, err)) != 0) bson_destroy(reply);
    return rc;
}

static int fetch_table(router_t *r, const char *ns, const rt_table_t *base, rt_table_t **out,
                       ms_error_t *err) {
    /* RT_FP_FORCE_FULL_REFRESH: a refresh of a cached table asks in full (no
     * sinceVersion), as after flushRouterConfig; data {rotateShards: true} renumbers. */
    bson_t fpdata;
    bool force_full = false, rotate = false;
    if (base && base->sharded && fp_active(RT_FP_FORCE_FULL_REFRESH) &&
        fp_check(RT_FP_FORCE_FULL_REFRESH, NULL, NULL, &fpdata)) {
        bson_iter_t fi;
        force_full = true;
        rotate = bson_iter_init_find(&fi, &fpdata, "rotateShards") && bsonx_truthy(&fi);
        bson_destroy(&fpdata);
    }
    rt_table_t *t = table_new(ns);
    const rtable_t *since = base && base->sharded && !force_full ? &base->rt : NULL;
    int rc = rtable_fetch(ns, since, call_page, r, &t->rt, err);
    if (rc == MS_ERR_NAMESPACE_NOT_SHARDED) {
        memset(err, 0, sizeof *err);
        *out = t;   /* unsharded: an empty entry */
        return 0;
    }
    if (rc) {
        err_prefix(err, "getRoutingTable %s", ns);
        table_free(t);
        return rc;
    }
    t->sharded = true;
    /* Test hook: a full refresh may number shards differently from the table it
     * replaces (in the order the chunks mention them); nothing may rely on a shard
     * keeping its index, and rotateShards makes that visible. */
    if (rotate) rtable_rotate_shards(&t->rt);
    *out = t;
    return 0;
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

/* One refresh per namespace at a time. seen: the table a stale answer was built from
 * (NULL: refresh whatever is cached). got (may be NULL): on success, a reference to a
 * table this caller may route with (caller releases; NULL when none), which is the table
 * installed, or — when an invalidation (a split, merge or move run through this router)
 * discarded our result while we fetched — the table we fetched anyway: it is as recent as
 * the config server was when we asked, and any shard it is too old for answers
 * StaleConfig, which the caller retries. Without that, a router whose own metadata
 * commands keep invalidating the table could never hand one out. */
static int refresh(router_t *r, const char *ns, const rt_table_t *seen, rt_table_t **got,
                   ms_error_t *err) {
    rt_table_t *base = NULL, *fresh = NULL;
    uint64_t inval;
    if (got) *got = NULL;
    pthread_mutex_lock(&r->mu);
    rt_coll_entry_t *e = coll_entry(r, ns);
    if (e->table && seen && e->table != seen) {   /* someone refreshed already */
        if (got) *got = table_ref(e->table);
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    if (e->refreshing) {
        uint64_t seq = e->seq;
        long long now = time_mono_ms(), give_up = now + op_time_left_ms(MS_ROUTING_REFRESH_WAIT_MS);
        while (e->refreshing && e->seq == seq && (now = time_mono_ms()) < give_up)   /* bounded */
            time_cond_wait_ms(&r->cv, &r->mu, give_up - now);
        bool done = e->seq != seq;
        /* Installed by that refresh (NULL when an invalidation discarded its result). */
        if (done && got) *got = table_ref(e->table);
        pthread_mutex_unlock(&r->mu);
        return done ? 0 : err_set(err, MS_ERR_NETWORK_TIMEOUT,
                                  "timed out waiting for the routing table of %s", ns);
    }
    e->refreshing = true;
    inval = e->invalidations;
    base = table_ref(e->table ? e->table : e->stale);
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
    bool discarded = rc == 0 && e->invalidations != inval;
    if (rc == 0 && !discarded) {
        rt_table_release(e->table);
        rt_table_release(e->stale);
        e->table = fresh;
        e->stale = NULL;
        fresh = NULL;
    }
    if (rc == 0 && got) *got = table_ref(discarded ? fresh : e->table);
    if (discarded) atomic_fetch_add(&r->refreshes_discarded, 1);
    e->refreshing = false;
    e->seq++;
    pthread_cond_broadcast(&r->cv);
    if (rc == 0 && e->table)
        log_info("routing table refreshed ns=%s sharded=%d version=%u|%u chunks=%d ms=%lld", log_str(ns),
                 e->table->sharded, e->table->rt.coll_major, e->table->rt.coll_minor,
                 e->table->rt.nchunks, time_mono_ms() - t0);
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&r->refreshes, 1);
    rt_table_release(fresh);
    rt_table_release(base);
    return rc;
}

int rt_table_get(router_t *r, const char *ns, rt_table_t **out, ms_error_t *err) {
    /* A refresh of our own always hands us a table; only waiting for another thread's
     * refresh that an invalidation discarded comes back empty, so a few rounds suffice.
     * The operation's deadline bounds them too (op_check). */
    for (int tries = 0; tries < RT_TABLE_GET_ROUNDS_MAX; tries++) {
        rt_table_t *t = NULL;
        int rc;
        if (tries > 0 && (rc = op_check(err)) != 0) return rc;
        pthread_mutex_lock(&r->mu);
        t = table_ref(coll_entry(r, ns)->table);
        pthread_mutex_unlock(&r->mu);
        if (!t && (rc = refresh(r, ns, NULL, &t, err)) != 0) return rc;
        if (t) {
            *out = t;
            return 0;
        }
    }
    /* The StaleConfig family, as mongos when its retries run out: the client may retry. */
    return err_set(err, MS_ERR_STALE_CONFIG,
                   "routing table of %s was invalidated during each of %d refreshes", ns,
                   RT_TABLE_GET_ROUNDS_MAX);
}

int rt_table_refresh(router_t *r, const char *ns, const rt_table_t *seen, ms_error_t *err) {
    return refresh(r, ns, seen, NULL, err);
}

void rt_table_invalidate(router_t *r, const char *ns) {
    pthread_mutex_lock(&r->mu);
    rt_coll_entry_t *e = coll_entry(r, ns);
    if (e->table) {
        rt_table_release(e->stale);
        e->stale = e->table;
        e->table = NULL;
    }
    e->invalidations++;
    pthread_mutex_unlock(&r->mu);
}

/* Forgets e's table and any set-aside one: the next refresh reads in full. Caller holds
 * r->mu. */
static void entry_forget(rt_coll_entry_t *e) {
    rt_table_release(e->table);
    rt_table_release(e->stale);
    e->table = e->stale = NULL;
    e->invalidations++;
}

/* ---- databases and shards --------------------------------------------------------------- */

static int lookup_db(router_t *r, const char *db, char *primary, size_t cap, rt_db_version_t *v,
                     ms_error_t *err) {
    bson_t cmd, reply;
    bson_iter_t it;
    int rc;
    rtable_db_find_cmd(&cmd, db);
    rc = rt_config_call(r, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if ((rc = rt_reply_status(&reply, err)) == 0) {
        if (bson_iter_init(&it, &reply) &&
            bson_iter_find_descendant(&it, "cursor.firstBatch.0", &it) &&
            BSON_ITER_HOLDS_DOCUMENT(&it)) {
            uint32_t len;
            const uint8_t *data;
            bson_t doc;
            bson_iter_document(&it, &len, &data);
            if (bson_init_static(&doc, data, len)) rc = rtable_db_entry_parse(&doc, primary, cap, v, err);
            else rc = err_set(err, MS_ERR_INVALID_BSON, "config.databases: bad document");
        } else {
            rc = err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "database %s not found", db);
        }
    }
    bson_destroy(&reply);
    return rc;
}

static int create_db(router_t *r, const char *db, char *primary, size_t cap, rt_db_version_t *v,
                     ms_error_t *err) {
    bson_t cmd, reply;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "_configsvrCreateDatabase", db);
    BSON_APPEND_UTF8(&cmd, "name", db);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    rc = rt_config_call(r, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if ((rc = rt_reply_status(&reply, err)) == 0) {
        rc = rtable_db_entry_parse(&reply, primary, cap, v, err);
        if (rc) err_prefix(err, "_configsvrCreateDatabase");
    }
    bson_destroy(&reply);
    if (rc == 0) log_info("database created db=%s primary=%s", log_str(db), log_str(primary));
    return rc;
}

int rt_db_get(router_t *r, const char *db, bool create, char *primary, size_t cap,
              rt_db_version_t *version, ms_error_t *err) {
    rt_db_version_t v;
    int rc;
    pthread_mutex_lock(&r->mu);
    for (rt_db_entry_t *d = r->dbs; d; d = d->next)
        if (strcmp(d->name, db) == 0) {
            snprintf(primary, cap, "%s", d->primary);
            if (version) *version = d->version;
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
    pthread_mutex_unlock(&r->mu);
    rc = lookup_db(r, db, primary, cap, &v, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND && create) rc = create_db(r, db, primary, cap, &v, err);
    if (rc) return rc;
    atomic_fetch_add(&r->db_refreshes, 1);
    pthread_mutex_lock(&r->mu);
    rt_db_entry_t *d = NULL;
    for (rt_db_entry_t *o = r->dbs; o && !d; o = o->next)   /* another thread's, replaced */
        if (strcmp(o->name, db) == 0) d = o;
    if (!d) {
        d = calloc(1, sizeof *d);
        ASSERT(d);
        snprintf(d->name, sizeof d->name, "%s", db);
        d->next = r->dbs;
        r->dbs = d;
    }
    snprintf(d->primary, sizeof d->primary, "%s", primary);
    d->version = v;
    pthread_mutex_unlock(&r->mu);
    if (version) *version = v;
    return 0;
}

int rt_db_primary(router_t *r, const char *db, bool create, char *primary, size_t cap,
                  ms_error_t *err) {
    return rt_db_get(r, db, create, primary, cap, NULL, err);
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
        if (!strncmp(e->ns, db, dl) && e->ns[dl] == '.') entry_forget(e);
    pthread_mutex_unlock(&r->mu);
}

void rt_cache_flush_all(router_t *r) {
    pthread_mutex_lock(&r->mu);
    for (rt_coll_entry_t *e = r->colls; e; e = e->next) entry_forget(e);
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
    r->peer_timeout_ms = RT_CALL_TIMEOUT_MS;
    atomic_init(&r->max_chunk_bytes, (int_fast64_t)MS_CHUNK_SIZE_MB_DEFAULT * 1024 * 1024);
    fp_register(RT_FP_FORCE_FULL_REFRESH);   /* before anything can evaluate it */
    fp_register(RTABLE_FP_HANG_BETWEEN_PAGES);
    fp_register(RT_FP_HANG_INDEX_DDL_RETRY);
    int rc = rt_cursors_open(r, &r->cursors);
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
        rt_table_release(e->stale);
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
