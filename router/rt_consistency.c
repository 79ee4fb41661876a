/*
 * rt_consistency.c — checkMetadataConsistency as the router serves it (bin/router;
 * MongoDB 7.0's cluster command). The level comes from the request, as in MongoDB:
 *   {checkMetadataConsistency: 1, $db: "admin"}  cluster: every database, and sharded
 *                                                collections of databases that do not exist
 *   {checkMetadataConsistency: 1, $db: "db"}     one database
 *   {checkMetadataConsistency: "c", $db: "db"}   one collection
 * The config server does the check (_configsvrCheckMetadataConsistency: its catalog, then
 * every shard under the database's DDL lock); the router answers MongoDB's cursor shape,
 * {cursor: {id: 0, ns: "<db>.$cmd.aggregate", firstBatch: [{type, description,
 * details}, ...]}, ok: 1}, every inconsistency in the first batch (their count is bounded
 * by MS_CHECK_METADATA_FOUND_MAX; beyond, the reply carries truncated: <count>).
 */
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "router/router.h"

int rt_cmd_check_metadata_consistency(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    bool cluster = strcmp(ctx->db, "admin") == 0;
    bool coll_level = BSON_ITER_HOLDS_UTF8(&ctx->arg);
    bson_t cmd = BSON_INITIALIZER, rep, cur, empty = BSON_INITIALIZER;
    bson_iter_t it;
    char ns[MS_NS_BYTES_MAX + 32];
    int rc;
    if (coll_level && cluster) {
        rc = err_set(err, MS_ERR_INVALID_NAMESPACE,
                     "checkMetadataConsistency on the admin database runs at cluster level only: "
                     "{checkMetadataConsistency: 1, $db: \"admin\"}");
        goto out;
    }
    if (!coll_level && !bsonx_is_number(&ctx->arg)) {
        rc = err_set(err, MS_ERR_TYPE_MISMATCH,
                     "checkMetadataConsistency takes 1 or a collection name");
        goto out;
    }
    if (strcmp(ctx->db, "config") == 0 || strcmp(ctx->db, "local") == 0) {
        rc = err_set(err, MS_ERR_INVALID_NAMESPACE,
                     "checkMetadataConsistency is not supported on the %s database", ctx->db);
        goto out;
    }
    BSON_APPEND_INT32(&cmd, "_configsvrCheckMetadataConsistency", 1);
    if (coll_level) {
        uint32_t len = 0;
        const char *c = bson_iter_utf8(&ctx->arg, &len);
        if (len == 0 || strlen(c) != len || c[0] == '$' ||
            (size_t)snprintf(ns, sizeof ns, "%s.%s", ctx->db, c) >= sizeof ns ||
            strlen(ns) > MS_NS_BYTES_MAX) {
            rc = err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s.%s'",
                         ctx->db, c);
            goto out;
        }
        BSON_APPEND_UTF8(&cmd, "collection", ns);
    } else if (!cluster) {
        BSON_APPEND_UTF8(&cmd, "db", ctx->db);
    }
    BSON_APPEND_BOOL(&cmd, "checkIndexes", cmd_flag(ctx, "checkIndexes", false));
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if ((rc = rt_config_call(r, &cmd, &rep, err)) != 0) goto out;
    if ((rc = rt_reply_status(&rep, err)) != 0) {
        bson_destroy(&rep);
        goto out;
    }
    snprintf(ns, sizeof ns, "%s.$cmd.aggregate", ctx->db);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    if (bson_iter_init_find(&it, &rep, "inconsistencies") && BSON_ITER_HOLDS_ARRAY(&it))
        bson_append_iter(&cur, "firstBatch", -1, &it);
    else
        BSON_APPEND_ARRAY(&cur, "firstBatch", &empty);
    bson_append_document_end(reply, &cur);
    if (bson_iter_init_find(&it, &rep, "truncated")) bson_append_iter(reply, "truncated", -1, &it);
    bson_destroy(&rep);
out:
    bson_destroy(&cmd);
    bson_destroy(&empty);
    return rc;
}
