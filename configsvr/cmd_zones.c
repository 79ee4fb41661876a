/*
 * cmd_zones.c — the config server's zone commands (bin/configsvr): addShardToZone,
 * removeShardFromZone and updateZoneKeyRange with MongoDB's fields, errors and empty
 * replies, also under the names mongos sends (_configsvrAddShardToZone, ...). The rules
 * live in cat_zones.c; the balancer moves chunks to the shards of their zone.
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "configsvr/configsvr.h"

static int zone_field(cmd_ctx_t *ctx, const char **zone, ms_error_t *err) {
    bson_iter_t it;
    if (!cmd_field(ctx, "zone", &it) || !BSON_ITER_HOLDS_UTF8(&it))
        return err_set(err, MS_ERR_BAD_VALUE, "%s needs zone: string", ctx->name);
    *zone = bson_iter_utf8(&it, NULL);
    return 0;
}

/* {addShardToZone: shard, zone} and {removeShardFromZone: shard, zone}. */
int cfg_cmd_shard_zone(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *shard = cfg_arg_str(ctx), *zone = NULL;
    bool add = !strcmp(ctx->name, "addShardToZone") || !strcmp(ctx->name, "_configsvrAddShardToZone");
    int rc;
    (void)reply;
    if (!*shard) return err_set(err, MS_ERR_BAD_VALUE, "%s needs a shard name", ctx->name);
    if ((rc = zone_field(ctx, &zone, err)) != 0) return rc;
    rc = add ? cat_zone_add_shard(cfg->cat, shard, zone, err)
             : cat_zone_remove_shard(cfg->cat, shard, zone, err);
    if (rc == 0) log_info("zone %s shard=%s zone=%s", add ? "added" : "removed", log_str(shard),
                          log_str(zone));
    return rc;
}

/* {updateZoneKeyRange: ns, min, max, zone: string | null}. */
int cfg_cmd_update_zone_key_range(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *ns = cfg_arg_str(ctx), *zone = NULL;
    char db[CAT_DB_NAME_BYTES_MAX];
    bson_t min, max;
    bson_iter_t it;
    bool changed = false;
    int rc;
    (void)reply;
    if ((rc = cfg_ns_split(ns, db, sizeof db, NULL, err)) != 0) return rc;
    if (!cfg_field_doc(ctx, "min", &min) || !cfg_field_doc(ctx, "max", &max))
        return err_set(err, MS_ERR_BAD_VALUE, "updateZoneKeyRange needs min and max documents");
    if (!cmd_field(ctx, "zone", &it))
        return err_set(err, MS_ERR_BAD_VALUE, "updateZoneKeyRange needs zone: string or null");
    if (BSON_ITER_HOLDS_UTF8(&it)) zone = bson_iter_utf8(&it, NULL);
    else if (!BSON_ITER_HOLDS_NULL(&it))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "zone must be a string or null");
    rc = cat_zone_update_range(cfg->cat, ns, &min, &max, zone, &changed, err);
    if (rc == 0 && changed) log_info("zone range %s ns=%s zone=%s", zone ? "assigned" : "removed",
                                     log_str(ns), log_str(zone ? zone : ""));
    return rc;
}
