/*
 * cmd_jumbo.c — clearJumboFlag on the config server (bin/configsvr; the router forwards
 * it): {clearJumboFlag: ns, find: doc} clears the jumbo flag of the chunk holding that
 * shard key, {clearJumboFlag: ns, bounds: [min, max]} of the chunk exactly [min, max).
 * MongoDB 7.0's rules (cluster_clear_jumbo_flag_cmd.cpp on mongos, clearJumboFlag in
 * sharding_catalog_manager_chunk_operations.cpp on the config server), in one place here
 * because the config server holds the chunks: InvalidOptions for bounds of other than two
 * elements, for both find and bounds, for neither; Location51260 when find has no shard
 * key; Location51261 when bounds are not exactly one chunk; Location51262 when the chunk
 * is gone by the time the flag is cleared. A chunk that is not jumbo is left alone (ok);
 * a jumbo one loses the flag and takes the collection's next major version, so routers
 * and its owner refresh (the owner is told to at once). No changelog entry, as MongoDB.
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "configsvr/configsvr.h"

int cfg_cmd_clear_jumbo_flag(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = cfg_arg_str(ctx);
    bson_t find, arr, bmin, bmax, key, cmin, cmax;
    bson_iter_t it;
    bool has_find = cfg_field_doc(ctx, "find", &find), has_bounds = cfg_field_doc(ctx, "bounds", &arr);
    bool have_chunk = false, have_coll = false, changed = false;
    char shard[CAT_SHARD_NAME_BYTES_MAX] = "", owner[CAT_SHARD_NAME_BYTES_MAX] = "";
    cat_coll_t coll;
    keys_pattern_t p;
    cfg_ddl_guard_t g = {0};
    int rc, nb = 0;
    (void)reply;
    memset(&p, 0, sizeof p);
    if (has_bounds && bson_iter_init(&it, &arr)) {
        while (bson_iter_next(&it)) {
            uint32_t len;
            const uint8_t *data;
            if (nb < 2 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
                bson_iter_document(&it, &len, &data);
                if (!bson_init_static(nb == 0 ? &bmin : &bmax, data, len))
                    return err_set(err, MS_ERR_INVALID_BSON, "bounds: malformed document");
            } else if (nb < 2) {
                return err_set(err, MS_ERR_TYPE_MISMATCH, "bounds must hold two documents [min, max]");
            }
            nb++;
        }
    }
    if (has_bounds && nb != 2)
        return err_set(err, MS_ERR_INVALID_OPTIONS, "bounds can only have exactly 2 elements");
    if (has_find && has_bounds)
        return err_set(err, MS_ERR_INVALID_OPTIONS, "cannot specify bounds and find at the same time");
    if (!has_find && !has_bounds)
        return err_set(err, MS_ERR_INVALID_OPTIONS, "need to specify find or bounds");
    rc = cfg_ddl_lock_coll(cfg, ns, "clearJumboFlag", &g, err);
    if (rc) goto out;
    rc = cat_coll_get(cfg->cat, ns, &coll, err);
    if (rc) goto out;
    have_coll = true;
    rc = keys_pattern_parse(&coll.key, &p, err);
    if (rc) goto out;
    if (has_find) {
        ms_error_t e = {0};
        if (cfg_key_of_query(&p, &find, &key, &e) != 0) {
            char *q = bson_as_relaxed_extended_json(&find, NULL);
            rc = err_set(err, MS_ERR_LOC_NO_SHARD_KEY_IN_QUERY, "no shard key found in chunk query %s (%s)",
                         q ? q : "?", e.msg);
            bson_free(q);
            goto out;
        }
        rc = cat_chunk_containing(cfg->cat, ns, &key, &cmin, &cmax, shard, sizeof shard, err);
        bson_destroy(&key);
        if (rc) goto out;
        have_chunk = true;
    } else {
        ms_error_t e = {0};
        if (cat_chunk_exact(cfg->cat, ns, &bmin, &bmax, shard, sizeof shard, &e) != 0) {
            char *a = bson_as_relaxed_extended_json(&bmin, NULL), *b = bson_as_relaxed_extended_json(&bmax, NULL);
            rc = err_set(err, MS_ERR_LOC_NO_CHUNK_WITH_BOUNDS, "no chunk found with the shard key bounds "
                         "[%s, %s)", a ? a : "?", b ? b : "?");
            bson_free(a);
            bson_free(b);
            goto out;
        }
        bson_copy_to(&bmin, &cmin);
        bson_copy_to(&bmax, &cmax);
        have_chunk = true;
    }
    rc = cat_chunk_jumbo(cfg->cat, ns, &cmin, &cmax, false, &changed, owner, sizeof owner, err);
out:
    cfg_ddl_unlock(&g);
    if (rc == 0 && changed) {
        log_info("clearJumboFlag ns=%s shard=%s", log_str(ns), log_str(owner));
        cfg_flush_shard(cfg, owner, ns);
    }
    if (have_chunk) {
        bson_destroy(&cmin);
        bson_destroy(&cmax);
    }
    keys_pattern_free(&p);
    if (have_coll) cat_coll_free(&coll);
    return rc;
}
