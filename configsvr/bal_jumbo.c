/*
 * bal_jumbo.c — the balancer's chunk surgery around zones and too-big chunks (bin/configsvr,
 * the balancer thread of balancer.c; notes §4.3 and §4.6):
 *   - zone-boundary splits, first thing in a round for each collection: a chunk that a
 *     zone range's min or max cuts strictly inside is split there, so that every chunk
 *     lies in one zone (or none) and the policy can move it to its zone's shards;
 *   - splitOrMarkJumbo, after a balancer migration failed with ChunkTooBig or
 *     ExceededMemoryLimit: one split point from the owner's autoSplitVector (limit 1,
 *     the collection's chunk size) and the chunk is split there; with no point (one
 *     shard-key value fills it) the chunk is flagged jumbo:true without a version bump
 *     and the policy skips it from then on.
 * Like auto-split, a split commits under the collection's DDL lock with no network call
 * inside (cat_chunk_split re-checks that [min, max) is still one chunk), then the owner
 * is told to refresh (cfg_flush_shard).
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/rtable.h"
#include "configsvr/configsvr.h"

/* Is the encoded key k strictly inside the chunk (min < k < max)? */
static bool inside(const bal_chunk_t *ch, const uint8_t *k, size_t klen) {
    return rtable_bytes_cmp(ch->min_enc, ch->min_len, k, klen) < 0 &&
           rtable_bytes_cmp(k, klen, ch->max_enc, ch->max_len) < 0;
}

int bal_zone_cuts(const bal_chunk_t *ch, const bal_zone_range_t *zones, int nzones, int *cuts,
                  int cap) {
    int n = 0;
    const uint8_t *last = NULL;
    size_t last_len = 0;
    for (int z = 0; z < nzones; z++) {
        for (int side = 0; side < 2; side++) {
            const uint8_t *k = side ? zones[z].max_enc : zones[z].min_enc;
            size_t klen = side ? zones[z].max_len : zones[z].min_len;
            if (!inside(ch, k, klen)) continue;
            /* One zone's max is often the next one's min: one cut. Ranges come in key
             * order and do not overlap, so equal bounds are neighbours here. */
            if (last && rtable_bytes_cmp(last, last_len, k, klen) == 0) continue;
            if (n >= cap) return n;
            cuts[n++] = 2 * z + side;
            last = k;
            last_len = klen;
        }
    }
    return n;
}

void bal_split_entry(bson_t *splits, int *nsplits, const char *ns, const bson_t *min,
                     const bson_t *max, const char *shard, const bson_t *const *pts, int np,
                     const char *reason) {
    bson_t s, arr;
    char k[16];
    const char *key;
    bson_uint32_to_string((uint32_t)(*nsplits)++, &key, k, sizeof k);
    BSON_APPEND_DOCUMENT_BEGIN(splits, key, &s);
    BSON_APPEND_UTF8(&s, "ns", ns);
    BSON_APPEND_DOCUMENT(&s, "min", min);
    BSON_APPEND_DOCUMENT(&s, "max", max);
    BSON_APPEND_UTF8(&s, "shard", shard);
    BSON_APPEND_ARRAY_BEGIN(&s, "points", &arr);
    for (int p = 0; p < np; p++) {
        bson_uint32_to_string((uint32_t)p, &key, k, sizeof k);
        BSON_APPEND_DOCUMENT(&arr, key, pts[p]);
    }
    bson_append_array_end(&s, &arr);
    if (reason) BSON_APPEND_UTF8(&s, "reason", reason);
    bson_append_document_end(splits, &s);
}

int bal_split_commit(cfg_t *cfg, const char *ns, const bson_t *min, const bson_t *max,
                     const char *owner, const bson_t *const *pts, int np, const char *why,
                     ms_error_t *err) {
    cfg_ddl_guard_t g = {0};
    bson_t info = BSON_INITIALIZER;
    int rc = cfg_ddl_lock_coll(cfg, ns, why, &g, err);
    if (rc == 0) rc = cat_chunk_split(cfg->cat, ns, min, max, pts, np, &info, err);
    cfg_ddl_unlock(&g);
    bson_destroy(&info);
    if (rc == 0) cfg_flush_shard(cfg, owner, ns);
    return rc;
}

int bal_zone_split_coll(cfg_t *cfg, const char *ns, bson_t *splits, int *nsplits) {
    cat_bal_data_t d;
    ms_error_t e = {0};
    int done = 0;
    /* The summary holds the chunk around each zone bound: all a zone split needs. */
    if (cat_bal_load_summary(cfg->cat, ns, &d, &e) != 0) {
        log_warn("balancer zone split load failed ns=%s err=%s", log_str(ns), log_str(e.msg));
        return 0;
    }
    if (d.nzones == 0) {
        cat_bal_free(&d);
        return 0;
    }
    int cuts[2 * d.nzones];
    for (int i = 0; i < d.nchunks; i++) {
        const bal_chunk_t *ch = &d.chunks[i];
        int n = bal_zone_cuts(ch, d.zones, d.nzones, cuts, 2 * d.nzones);
        if (n == 0) continue;
        const bson_t *pts[n];
        bool ok = true;
        for (int k = 0; k < n; k++) {
            const bal_zone_range_t *z = &d.zones[cuts[k] / 2];
            pts[k] = cuts[k] % 2 ? z->max : z->min;
            ok &= pts[k] != NULL;
        }
        if (!ok) continue;
        memset(&e, 0, sizeof e);
        if (bal_split_commit(cfg, ns, ch->min, ch->max, d.owners[i], pts, n, "balancer zone split", &e) != 0) {
            log_warn("balancer zone split failed ns=%s err=%s", log_str(ns), log_str(e.msg));
            continue;
        }
        bal_split_entry(splits, nsplits, ns, ch->min, ch->max, d.owners[i], pts, n, "zoneBoundary");
        log_info("balancer zone split ns=%s shard=%s points=%d", log_str(ns), log_str(d.owners[i]), n);
        done++;
    }
    cat_bal_free(&d);
    return done;
}

/* One split point of [min, max) from the owner's autoSplitVector (limit 1): 1 with the
 * point copied into *point, 0 when the owner found none, an error code otherwise. */
static int one_split_point(cfg_t *cfg, const cat_coll_t *coll, const char *owner,
                           const bson_t *min, const bson_t *max, int64_t chunk_size,
                           bson_t *point, ms_error_t *err) {
    char db[CAT_DB_NAME_BYTES_MAX];
    const char *cname = NULL;
    bson_t cmd = BSON_INITIALIZER, r;
    bson_iter_t it, a;
    int found = 0;
    if (cfg_ns_split(coll->ns, db, sizeof db, &cname, NULL) != 0)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "bad namespace %s", coll->ns);
    BSON_APPEND_UTF8(&cmd, "autoSplitVector", cname);
    BSON_APPEND_DOCUMENT(&cmd, "keyPattern", &coll->key);
    BSON_APPEND_DOCUMENT(&cmd, "min", min);
    BSON_APPEND_DOCUMENT(&cmd, "max", max);
    BSON_APPEND_INT64(&cmd, "maxChunkSizeBytes", chunk_size);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    int rc = cfg_shard_command(cfg, owner, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &r, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if (bson_iter_init_find(&it, &r, "splitKeys") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &a) && bson_iter_next(&a) && BSON_ITER_HOLDS_DOCUMENT(&a)) {
        uint32_t len;
        const uint8_t *data;
        bson_t v;
        bson_iter_document(&a, &len, &data);
        if (bson_init_static(&v, data, len)) {
            bson_copy_to(&v, point);
            found = 1;
        }
    }
    bson_destroy(&r);
    return found;
}

void bal_split_or_mark_jumbo(cfg_t *cfg, const char *ns, const bson_t *min, const bson_t *max,
                             const char *owner, bson_t *entry) {
    cat_coll_t coll;
    ms_error_t e = {0};
    bson_t cmin, cmax, point;
    char shard[CAT_SHARD_NAME_BYTES_MAX];
    bool have_bounds = false;
    if (cat_coll_get(cfg->cat, ns, &coll, &e) != 0) return;  /* dropped meanwhile */
    int64_t csize = coll.max_chunk_size_bytes > 0 ? coll.max_chunk_size_bytes
                                                  : cat_chunk_size_bytes(cfg->cat);
    /* A moveRange with only min (dataSize policy) names the chunk starting there. */
    if (max) {
        bson_copy_to(min, &cmin);
        bson_copy_to(max, &cmax);
        have_bounds = true;
    } else if (cat_chunk_containing(cfg->cat, ns, min, &cmin, &cmax, shard, sizeof shard, &e) == 0) {
        have_bounds = true;
    }
    if (!have_bounds) goto out;
    int found = one_split_point(cfg, &coll, owner, &cmin, &cmax, csize, &point, &e);
    if (found == 1) {
        const bson_t *pts[1] = {&point};
        memset(&e, 0, sizeof e);
        if (bal_split_commit(cfg, ns, &cmin, &cmax, owner, pts, 1, "balancer splitOrMarkJumbo", &e) == 0) {
            BSON_APPEND_DOCUMENT(entry, "splitAfterTooBig", &point);
            log_info("balancer split after ChunkTooBig ns=%s shard=%s", log_str(ns), log_str(owner));
        } else {
            log_warn("balancer split after ChunkTooBig failed ns=%s err=%s", log_str(ns), log_str(e.msg));
        }
        bson_destroy(&point);
    } else if (found == 0) {
        bool changed = false;
        memset(&e, 0, sizeof e);
        if (cat_chunk_jumbo(cfg->cat, ns, &cmin, &cmax, true, &changed, NULL, 0, &e) == 0) {
            BSON_APPEND_BOOL(entry, "markedJumbo", true);
            log_info("balancer marked jumbo ns=%s shard=%s changed=%d", log_str(ns), log_str(owner),
                     (int)changed);
        } else {
            log_warn("balancer mark jumbo failed ns=%s err=%s", log_str(ns), log_str(e.msg));
        }
    } else {
        log_warn("balancer autoSplitVector after ChunkTooBig failed ns=%s shard=%s err=%s", log_str(ns),
                 log_str(owner), log_str(e.msg));
    }
    bson_destroy(&cmin);
    bson_destroy(&cmax);
out:
    cat_coll_free(&coll);
}
