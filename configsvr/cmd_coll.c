/*
 * cmd_coll.c — the config server's collection commands (bin/configsvr): shardCollection
 * (MongoDB's CreateCollectionCoordinator in miniature) and getRoutingTable (the chunk
 * table routers and shards load, full or incremental; contract in shardd/shardver.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* MongoDB's shard key rules: every value 1 or "hashed" (at most one hashed field, checked
 * by keys_pattern_parse); no empty or $-prefixed field names. */
static int key_check(const bson_t *key, keys_pattern_t *p, ms_error_t *err) {
    bson_iter_t it;
    int n = 0;
    if (!bson_iter_init(&it, key)) return err_set(err, MS_ERR_BAD_VALUE, "malformed shard key");
    while (bson_iter_next(&it)) {
        const char *f = bson_iter_key(&it);
        double d = 0;
        n++;
        if (!*f || f[0] == '$' || strstr(f, "..") || f[strlen(f) - 1] == '.')
            return err_set(err, MS_ERR_BAD_VALUE, "invalid shard key field name '%s'", f);
        if (BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), "hashed") == 0) continue;
        if (bsonx_as_double(&it, &d) && d == 1.0) continue;
        return err_set(err, MS_ERR_BAD_VALUE,
                       "Unsupported shard key pattern: field '%s' must be 1 or \"hashed\"", f);
    }
    if (n == 0) return err_set(err, MS_ERR_BAD_VALUE, "shard key must not be empty");
    return keys_pattern_parse(key, p, err);
}

/* Sends _shardsvrShardCollection to one shard: it creates the collection with our uuid
 * and the shard-key index, or refuses (no usable index on a non-empty collection, array
 * values in the key). A collection that already exists there keeps its own uuid (as in
 * MongoDB, sharding an existing collection does not change its UUID): the reply's
 * collectionUUID is written back to uuid. */
static int shardsvr_shard_collection(cfg_t *cfg, const char *shard, const char *ns,
                                     const bson_t *key, bool unique, uint8_t uuid[16],
                                     ms_error_t *err) {
    bson_t cmd = BSON_INITIALIZER, r;
    bson_iter_t it;
    BSON_APPEND_UTF8(&cmd, "_shardsvrShardCollection", ns);
    BSON_APPEND_DOCUMENT(&cmd, "key", key);
    BSON_APPEND_BOOL(&cmd, "unique", unique);
    bson_append_binary(&cmd, "uuid", -1, BSON_SUBTYPE_UUID, uuid, 16);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    int rc = cfg_shard_command(cfg, shard, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &r, err);
    if (rc == 0) {
        if (bson_iter_init_find(&it, &r, "collectionUUID") && BSON_ITER_HOLDS_BINARY(&it)) {
            bson_subtype_t st;
            uint32_t len;
            const uint8_t *data;
            bson_iter_binary(&it, &st, &len, &data);
            if (len == 16) memcpy(uuid, data, 16);
        }
        bson_destroy(&r);
    }
    bson_destroy(&cmd);
    return rc;
}

/* Documents in the collection on its primary shard (`count`, unversioned). */
static int primary_count(cfg_t *cfg, const char *primary, const char *db, const char *coll,
                         int64_t *n, ms_error_t *err) {
    bson_t cmd = BSON_INITIALIZER, r;
    bson_iter_t it;
    BSON_APPEND_UTF8(&cmd, "count", coll);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    int rc = cfg_shard_command(cfg, primary, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &r, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if (!bson_iter_init_find(&it, &r, "n") || !bsonx_as_int64(&it, n))
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "shard %s: count reply without n", primary);
    bson_destroy(&r);
    return rc;
}

int cfg_split_vector(cfg_t *cfg, const char *shard, const char *ns, const bson_t *key,
                     const bson_t *min, const bson_t *max, bool force, int64_t max_bytes,
                     bson_t *keys, ms_error_t *err) {
    bson_t cmd = BSON_INITIALIZER, r;
    bson_iter_t it;
    char db[CAT_DB_NAME_BYTES_MAX];
    int rc = cfg_ns_split(ns, db, sizeof db, NULL, err);
    if (rc) goto out;
    BSON_APPEND_UTF8(&cmd, "splitVector", ns);
    BSON_APPEND_DOCUMENT(&cmd, "keyPattern", key);
    BSON_APPEND_DOCUMENT(&cmd, "min", min);
    BSON_APPEND_DOCUMENT(&cmd, "max", max);
    if (force) BSON_APPEND_BOOL(&cmd, "force", true);
    else BSON_APPEND_INT64(&cmd, "maxChunkSizeBytes", max_bytes);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = cfg_shard_command(cfg, shard, &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &r, err);
    if (rc) goto out;
    if (bson_iter_init_find(&it, &r, "splitKeys") && BSON_ITER_HOLDS_ARRAY(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_t view;
        bson_iter_array(&it, &len, &data);
        if (bson_init_static(&view, data, len)) bson_copy_to(&view, keys);
        else rc = err_set(err, MS_ERR_INVALID_BSON, "shard %s: malformed splitKeys", shard);
    } else {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "shard %s: splitVector reply without splitKeys", shard);
    }
    bson_destroy(&r);
out:
    bson_destroy(&cmd);
    return rc;
}

int cfg_cmd_shard_collection(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = cfg_arg_str(ctx), *cname = NULL;
    char db[CAT_DB_NAME_BYTES_MAX], primary[CAT_SHARD_NAME_BYTES_MAX];
    bson_t key, split_keys = BSON_INITIALIZER, details = BSON_INITIALIZER, gmin = BSON_INITIALIZER,
                gmax = BSON_INITIALIZER;
    bson_t *bounds = NULL;
    const bson_t **bptr = NULL;
    cat_chunk_plan_t *plan = NULL;
    keys_pattern_t p;
    cat_coll_t coll, existing;
    char **shards = NULL;
    const char **owners = NULL;
    int nshards = 0, nowners = 0, nbounds = 0, nchunks = 0, rc;
    bool unique = cmd_flag(ctx, "unique", false);
    cfg_ddl_guard_t g = {0};
    int64_t nic = 0, ndocs = 0;
    bson_iter_t it;

    memset(&p, 0, sizeof p);
    memset(&coll, 0, sizeof coll);
    bson_init(&coll.key);
    rc = cfg_ns_split(ns, db, sizeof db, &cname, err);
    if (rc) goto out;
    if (strcmp(db, "config") == 0 || strcmp(db, "admin") == 0 || strcmp(db, "local") == 0) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "can't shard a collection of the %s database", db);
        goto out;
    }
    if (!cfg_field_doc(ctx, "key", &key)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "shardCollection needs a key document");
        goto out;
    }
    rc = key_check(&key, &p, err);
    if (rc) goto out;
    if (unique && p.hashed_field >= 0) {
        rc = err_set(err, MS_ERR_INVALID_OPTIONS, "hashed shard keys cannot be declared unique.");
        goto out;
    }
    if (cmd_field(ctx, "numInitialChunks", &it)) {
        if (!bsonx_as_int64_exact(&it, &nic) || nic < 0) {
            rc = err_set(err, MS_ERR_INVALID_OPTIONS, "numInitialChunks must be a non-negative integer");
            goto out;
        }
        if (nic > 0 && p.hashed_field != 0) {
            rc = err_set(err, MS_ERR_INVALID_OPTIONS,
                         "numInitialChunks is only supported when the collection is empty and the "
                         "shard key starts with a hashed field");
            goto out;
        }
    }

    rc = cfg_ddl_lock_coll(cfg, ns, "shardCollection", &g, err);
    if (rc) goto out;
    /* Already sharded: the same key and uniqueness is success (MongoDB: idempotent). */
    rc = cat_coll_get(cfg->cat, ns, &existing, err);
    if (rc == 0) {
        bool same = bsonx_compare_docs(&existing.key, &key) == 0 && existing.unique == unique;
        if (same) {
            BSON_APPEND_UTF8(reply, "collectionsharded", ns);
            bson_append_binary(reply, "collectionUUID", -1, BSON_SUBTYPE_UUID, existing.uuid, 16);
        } else {
            char *k = bsonx_to_json(&existing.key);
            rc = err_set(err, MS_ERR_ALREADY_INITIALIZED,
                         "sharding already enabled for collection %s with options { key: %s, "
                         "unique: %s }", ns, k, existing.unique ? "true" : "false");
            bson_free(k);
        }
        cat_coll_free(&existing);
        goto out;
    }
    if (rc != MS_ERR_NAMESPACE_NOT_SHARDED) goto out;
    rc = cat_db_ensure(cfg->cat, db, NULL, NULL, NULL, err);
    if (rc == 0) rc = cat_db_primary(cfg->cat, db, primary, sizeof primary, err);
    if (rc == 0) rc = cat_shard_names(cfg->cat, false, &shards, &nshards, err);
    if (rc) goto out;
    /* Owners in round-robin order, the primary first (it always gets chunk 0). */
    owners = calloc((size_t)nshards + 1, sizeof *owners);
    if (!owners) abort();
    owners[nowners++] = primary;
    for (int i = 0; i < nshards; i++)
        if (strcmp(shards[i], primary) != 0) owners[nowners++] = shards[i];

    rc = primary_count(cfg, primary, db, cname, &ndocs, err);
    if (rc) goto out;
    if (ndocs > 0 && nic > 0) {
        rc = err_set(err, MS_ERR_INVALID_OPTIONS,
                     "numInitialChunks is only supported when the collection is empty");
        goto out;
    }

    /* The new generation. */
    snprintf(coll.ns, sizeof coll.ns, "%s", ns);
    bson_destroy(&coll.key);
    bson_copy_to(&key, &coll.key);
    coll.unique = unique;
    bson_oid_init(&coll.epoch, NULL);
    cat_uuid_new(coll.uuid);
    coll.created_ms = time_now_ms();
    rc = cat_next_ts(cfg->cat, &coll.ts, err);
    if (rc) goto out;

    BSON_APPEND_DOCUMENT(&details, "shardKey", &key);
    BSON_APPEND_UTF8(&details, "collection", ns);
    bson_append_binary(&details, "uuid", -1, BSON_SUBTYPE_UUID, coll.uuid, 16);
    BSON_APPEND_BOOL(&details, "empty", ndocs == 0);
    BSON_APPEND_UTF8(&details, "primary", primary);
    rc = cat_changelog(cfg->cat, "shardCollection.start", ns, &details, err);
    if (rc) goto out;

    keys_global_min(&p, &gmin);
    keys_global_max(&p, &gmax);
    if (ndocs == 0 && p.hashed_field == 0) {
        /* Empty, hashed prefix: MongoDB's pre-split, numInitialChunks (default 2 per
         * shard) chunks round-robin over the shards. */
        int64_t n = nic > 0 ? nic : 2 * (int64_t)nowners;
        /* MongoDB also caps each shard at 8,192; minishard takes the whole million on any
         * number of shards (the routing table travels in pages, so nothing caps it). */
        if (n > CAT_INITIAL_CHUNKS_MAX) {
            rc = err_set(err, MS_ERR_INVALID_OPTIONS,
                         "numInitialChunks cannot be more than %d", CAT_INITIAL_CHUNKS_MAX);
            goto out;
        }
        nchunks = (int)n;
        nbounds = nchunks + 1;
        bounds = calloc((size_t)nbounds, sizeof *bounds);
        if (!bounds) abort();
        cat_hashed_initial_bounds(&p, nchunks, bounds);
    } else if (ndocs == 0) {
        nchunks = 1;
    } else {
        /* Non-empty: the primary must already have an index starting with the key (its
         * _shardsvrShardCollection checks), then split by size, all chunks on the primary. */
        rc = shardsvr_shard_collection(cfg, primary, ns, &key, unique, coll.uuid, err);
        if (rc) goto out;
        rc = cfg_split_vector(cfg, primary, ns, &key, &gmin, &gmax, false,
                              cat_chunk_size_bytes(cfg->cat), &split_keys, err);
        if (rc) goto out;
        nchunks = (int)bson_count_keys(&split_keys) + 1;
        if (nchunks > CAT_INITIAL_CHUNKS_MAX) {
            rc = err_set(err, MS_ERR_INVALID_OPTIONS, "splitVector returned %d points, over %d",
                         nchunks - 1, CAT_INITIAL_CHUNKS_MAX);
            goto out;
        }
        nowners = 1;  /* every chunk on the primary */
    }
    bptr = calloc((size_t)nchunks + 1, sizeof *bptr);
    plan = calloc((size_t)nchunks, sizeof *plan);
    if (!bptr || !plan) abort();
    if (bounds) {
        for (int i = 0; i <= nchunks; i++) bptr[i] = &bounds[i];
    } else {
        bptr[0] = &gmin;
        bptr[nchunks] = &gmax;
        if (nchunks > 1) {
            /* split keys from the shard: views into split_keys */
            bounds = calloc((size_t)nchunks - 1, sizeof *bounds);
            if (!bounds) abort();
            nbounds = 0;
            bson_iter_init(&it, &split_keys);
            while (bson_iter_next(&it) && nbounds < nchunks - 1) {
                uint32_t len;
                const uint8_t *data;
                if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
                    rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "splitVector: a split key is not a document");
                    goto out;
                }
                bson_iter_document(&it, &len, &data);
                bson_init_static(&bounds[nbounds], data, len);
                bptr[1 + nbounds] = &bounds[nbounds];
                nbounds++;
            }
        }
    }
    for (int i = 0; i < nchunks; i++)
        plan[i] = (cat_chunk_plan_t){bptr[i], bptr[i + 1], owners[i % nowners]};

    /* Every shard that gets chunks creates the collection and its shard-key index first
     * (the primary already did for a non-empty collection). */
    if (ndocs == 0) {
        /* The primary first: an existing (empty) collection there keeps its uuid, which
         * the other shards then receive. */
        int nrecv = nchunks < nowners ? nchunks : nowners;
        for (int i = 0; i < nrecv && rc == 0; i++) {
            uint8_t u[16];
            memcpy(u, coll.uuid, 16);
            rc = shardsvr_shard_collection(cfg, owners[i], ns, &key, unique, u, err);
            if (rc == 0 && i == 0) memcpy(coll.uuid, u, 16);
            else if (rc == 0 && memcmp(u, coll.uuid, 16) != 0)
                rc = err_set(err, MS_ERR_INVALID_UUID,
                             "shard %s already holds %s with another UUID; drop it there first",
                             owners[i], ns);
        }
        if (rc) goto out;
    }
    /* The shards hold the collection and its index; the catalog does not. A retry sends
     * _shardsvrShardCollection again (the shards keep the uuid they have) and commits. */
    rc = fp_eval(CFG_FP_SHARD_COLL_BEFORE_COMMIT, err);
    if (rc) goto out;
    rc = cat_coll_create(cfg->cat, &coll, plan, nchunks, err);
    if (rc) goto out;
    /* Committed, not yet answered nor flushed: a retry finds it sharded with the same key. */
    rc = fp_eval(CFG_FP_SHARD_COLL_AFTER_COMMIT, err);
    if (rc) goto out;
    log_info("shardCollection ns=%s key=%s chunks=%d docs=%lld", log_str(ns),
             log_str(p.fields[0]), nchunks, (long long)ndocs);
    BSON_APPEND_UTF8(reply, "collectionsharded", ns);
    bson_append_binary(reply, "collectionUUID", -1, BSON_SUBTYPE_UUID, coll.uuid, 16);
    cfg_ddl_unlock(&g);
    cfg_flush_shards(cfg, owners, nowners < nchunks ? nowners : nchunks, ns);
out:
    cfg_ddl_unlock(&g);
    /* bounds are either owned documents (hashed pre-split) or views (split keys) */
    if (bounds && p.hashed_field == 0 && ndocs == 0)
        for (int i = 0; i < nbounds; i++) bson_destroy(&bounds[i]);
    free(bounds);
    free(bptr);
    free(plan);
    free(owners);
    cat_strv_free(shards, nshards);
    cat_coll_free(&coll);
    keys_pattern_free(&p);
    bson_destroy(&split_keys);
    bson_destroy(&details);
    bson_destroy(&gmin);
    bson_destroy(&gmax);
    return rc;
}

/* One page of the routing table: {getRoutingTable: ns, sinceVersion?: {e, t, v},
 * after?: Timestamp} (docs/protocol.md; the paging in docs/versioning-and-routing.md). */
int cfg_cmd_get_routing_table(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    cat_version_t since, after;
    bson_t sv;
    bson_iter_t it;
    bool have = false, have_after = false;
    if (cfg_field_doc(ctx, "sinceVersion", &sv)) {
        int rc = cat_version_parse(&sv, &since, err);
        if (rc) return rc;
        have = true;
    }
    if (bson_iter_init_find(&it, ctx->req, "after")) {
        if (!BSON_ITER_HOLDS_TIMESTAMP(&it))
            return err_set(err, MS_ERR_TYPE_MISMATCH,
                           "getRoutingTable: after must be a Timestamp (the last lastmod read)");
        memset(&after, 0, sizeof after);
        bson_iter_timestamp(&it, &after.major, &after.minor);
        have_after = true;
    }
    return cat_routing_page(cfg->cat, cfg_arg_str(ctx), have ? &since : NULL,
                            have_after ? &after : NULL, reply, err);
}
