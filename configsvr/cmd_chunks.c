/*
 * cmd_chunks.c — the config server's chunk boundary commands (bin/configsvr): split
 * (middle / find / bounds) and mergeChunks. The config server commits the new chunk
 * table in one catalog transaction (versions per notes §2.2) — MongoDB's shard-side
 * splitChunk + _configsvrCommitChunkSplit collapsed into one step here — then asks the
 * owning shard to refresh its routing cache (best effort).
 */
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/lclock.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* The two documents of a `bounds: [min, max]` field as views. */
static int two_bounds(const cmd_ctx_t *ctx, bson_t *min, bson_t *max, ms_error_t *err) {
    bson_t arr;
    bson_iter_t it;
    int n = 0;
    if (!cfg_field_doc(ctx, "bounds", &arr) || !bson_iter_init(&it, &arr))
        return err_set(err, MS_ERR_BAD_VALUE, "bounds must be an array [min, max]");
    while (bson_iter_next(&it)) {
        uint32_t len;
        const uint8_t *data;
        if (n >= 2 || !BSON_ITER_HOLDS_DOCUMENT(&it)) {
            n = 3;
            break;
        }
        bson_iter_document(&it, &len, &data);
        if (!bson_init_static(n == 0 ? min : max, data, len)) break;
        n++;
    }
    if (n != 2) return err_set(err, MS_ERR_BAD_VALUE, "bounds must be an array of two documents [min, max]");
    return 0;
}

/* The median of [min, max) from its owner's splitVector (force: true) into *point. */
static int median(cfg_t *cfg, const char *shard, const char *ns, const bson_t *key,
                  const bson_t *min, const bson_t *max, bson_t *point, ms_error_t *err) {
    bson_t keys;
    bson_iter_t it;
    int rc = cfg_split_vector(cfg, shard, ns, key, min, max, true, 0, &keys, err);
    if (rc) return rc;
    if (bson_iter_init(&it, &keys) && bson_iter_next(&it) && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_t v;
        bson_iter_document(&it, &len, &data);
        if (bson_init_static(&v, data, len)) bson_copy_to(&v, point);
        else rc = err_set(err, MS_ERR_INVALID_BSON, "splitVector: malformed split key");
    } else {
        rc = err_set(err, MS_ERR_CANNOT_SPLIT,
                     "chunk of %s cannot be split: its owner found no split point (too few "
                     "distinct shard key values)", ns);
    }
    bson_destroy(&keys);
    return rc;
}

/* The shard-key document of a `find` query: every key field must be given as a value
 * (MongoDB: "no shard key found in chunk query"); hashed fields are hashed. */
int cfg_key_of_query(const keys_pattern_t *p, const bson_t *find, bson_t *key, ms_error_t *err) {
    buf_t enc = {0};
    for (int i = 0; i < p->nfields; i++) {
        bson_iter_t it;
        if (!bsonx_find_path(find, p->fields[i], &it))
            return err_set(err, MS_ERR_SHARD_KEY_NOT_FOUND, "no shard key found in chunk query: missing %s",
                           p->fields[i]);
        if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t sub;
            if (bson_iter_recurse(&it, &sub) && bson_iter_next(&sub) && bson_iter_key(&sub)[0] == '$')
                return err_set(err, MS_ERR_SHARD_KEY_NOT_FOUND,
                               "no shard key found in chunk query: %s must be an equality value",
                               p->fields[i]);
        }
    }
    bson_init(key);
    int rc = keys_extract(p, find, key, &enc, err);
    buf_free(&enc);
    if (rc) bson_destroy(key);
    return rc;
}

int cfg_cmd_split(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = cfg_arg_str(ctx);
    bson_t middle, find, bmin, bmax, key, cmin, cmax;
    bson_t point = BSON_INITIALIZER, info = BSON_INITIALIZER;
    bool has_middle = cfg_field_doc(ctx, "middle", &middle), has_find = cfg_field_doc(ctx, "find", &find);
    bson_iter_t it;
    bool has_bounds = cmd_field(ctx, "bounds", &it);
    char shard[CAT_SHARD_NAME_BYTES_MAX] = "";
    cat_coll_t coll;
    keys_pattern_t p;
    bool have_coll = false, have_chunk = false;
    cfg_ddl_guard_t g = {0};
    int rc;
    (void)reply;
    memset(&p, 0, sizeof p);
    if ((int)has_middle + (int)has_find + (int)has_bounds != 1) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "need to specify exactly one of 'find', 'bounds', or 'middle'");
        goto out;
    }
    /* Only this collection waits while its owner computes the split point. */
    rc = cfg_ddl_lock_coll(cfg, ns, "split", &g, err);
    if (rc) goto out;
    rc = cat_coll_get(cfg->cat, ns, &coll, err);
    if (rc) goto out;
    have_coll = true;
    rc = keys_pattern_parse(&coll.key, &p, err);
    if (rc) goto out;
    /* The chunk to split (its bounds and owner). */
    if (has_middle) {
        rc = cat_chunk_containing(cfg->cat, ns, &middle, &cmin, &cmax, shard, sizeof shard, err);
        if (rc) goto out;
        bson_concat(&point, &middle);
    } else if (has_find) {
        rc = cfg_key_of_query(&p, &find, &key, err);
        if (rc) goto out;
        rc = cat_chunk_containing(cfg->cat, ns, &key, &cmin, &cmax, shard, sizeof shard, err);
        bson_destroy(&key);
        if (rc) goto out;
    } else {
        rc = two_bounds(ctx, &bmin, &bmax, err);
        if (rc == 0) rc = cat_chunk_exact(cfg->cat, ns, &bmin, &bmax, shard, sizeof shard, err);
        if (rc) goto out;
        bson_copy_to(&bmin, &cmin);
        bson_copy_to(&bmax, &cmax);
    }
    have_chunk = true;
    /* find / bounds: split at the chunk's median, as the owner computes it. */
    if (!has_middle) {
        bson_t m;
        rc = median(cfg, shard, ns, &coll.key, &cmin, &cmax, &m, err);
        if (rc) goto out;
        bson_concat(&point, &m);
        bson_destroy(&m);
    }
    {
        const bson_t *pts[] = {&point};
        lclock_ts_t ct;
        if ((rc = lclock_write_begin(&ct, err)) != 0) goto out;
        rc = cat_chunk_split(cfg->cat, ns, &cmin, &cmax, pts, 1, &info, err);
        lclock_write_end(ct, rc == 0);
    }
    if (rc) goto out;
    /* Committed; the owner has not been told to refresh (it would on its next stale
     * request anyway). */
    rc = fp_eval(CFG_FP_SPLIT_AFTER_COMMIT, err);
    if (rc) goto out;
    cfg_ddl_unlock(&g);
    cfg_flush_shard(cfg, shard, ns);
out:
    cfg_ddl_unlock(&g);
    if (have_coll) cat_coll_free(&coll);
    if (have_chunk) {
        bson_destroy(&cmin);
        bson_destroy(&cmax);
    }
    keys_pattern_free(&p);
    bson_destroy(&point);
    bson_destroy(&info);
    return rc;
}

int cfg_cmd_merge_chunks(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = cfg_arg_str(ctx);
    bson_t bmin, bmax, info = BSON_INITIALIZER;
    bson_iter_t it;
    char shard[CAT_SHARD_NAME_BYTES_MAX] = "";
    cfg_ddl_guard_t g = {0};
    int rc = two_bounds(ctx, &bmin, &bmax, err);
    (void)reply;
    if (rc) goto out;
    rc = cfg_ddl_lock_coll(cfg, ns, "mergeChunks", &g, err);
    if (rc) goto out;
    {
        lclock_ts_t ct;
        if ((rc = lclock_write_begin(&ct, err)) == 0) {
            rc = cat_chunk_merge(cfg->cat, ns, &bmin, &bmax, &info, err);
            lclock_write_end(ct, rc == 0);
        }
    }
    /* Committed; the owner not yet told to refresh. */
    if (rc == 0) rc = fp_eval(CFG_FP_MERGE_AFTER_COMMIT, err);
    cfg_ddl_unlock(&g);
    if (rc) goto out;
    if (bson_iter_init_find(&it, &info, "shard") && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(shard, sizeof shard, "%s", bson_iter_utf8(&it, NULL));
    if (shard[0]) cfg_flush_shard(cfg, shard, ns);
out:
    bson_destroy(&info);
    return rc;
}
