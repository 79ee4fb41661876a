/*
 * rt_info.c — what a router tells about the cluster as it sees it (bin/router), the
 * commands behind mongosh's db.c.getShardVersion() and db.adminCommand({getShardMap: 1}),
 * and serverStatus.sharding:
 *
 *   getShardVersion {getShardVersion: "db.coll", fullMetadata?}: the version of the
 *     router's cached routing table of a sharded collection (MongoDB's mongos command:
 *     version, versionEpoch, versionTimestamp; with fullMetadata the chunks' [min, max]);
 *     of a database name, its primary shard and database version;
 *   getShardMap: the shard registry — map {shard: connection string, config: ...}, hosts
 *     {host:port: shard} and connStrings {connection string: shard};
 *   serverStatus.sharding: configsvrConnectionString and maxChunkSizeInBytes, the cluster
 *     chunk size the router last read from config.settings (refreshed by the pinger,
 *     as mongos refreshes its balancer configuration).
 */
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/keys.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/validate.h"
#include "router/router.h"

/* MongoDB's adminOnly commands answer this from another database. */
static int admin_only(const cmd_ctx_t *ctx, ms_error_t *err) {
    if (strcmp(ctx->db, "admin") != 0)
        return err_set(err, MS_ERR_UNAUTHORIZED, "%s may only be run against the admin database.",
                       ctx->name);
    return 0;
}

/* ---- getShardVersion ----------------------------------------------------------------- */

/* One encoded chunk bound back to {field: value, ...} (shard key fields are ascending or
 * hashed, whose values are encoded ascending too). */
static int decode_bound(const keys_pattern_t *kp, const buf_t *b, bson_t *out, ms_error_t *err) {
    size_t pos = 0;
    for (int f = 0; f < kp->nfields; f++) {
        int rc = keys_decode_value(b->data, b->len, &pos, out, kp->fields[f], err);
        if (rc) return rc;
    }
    return 0;
}

/* chunks: [[min, max], ...] in key order, stopping with exceededSize: true where the reply
 * would pass the 16 MB user limit (as mongos does). */
static int append_chunks(const rtable_t *t, bson_t *reply, ms_error_t *err) {
    bson_t arr;
    bool exceeded = false;
    int rc = 0;
    BSON_APPEND_ARRAY_BEGIN(reply, "chunks", &arr);
    for (int i = 0; i < t->nchunks && rc == 0; i++) {
        bson_t pair, min = BSON_INITIALIZER, max = BSON_INITIALIZER;
        char key[16];
        const rtable_chunk_t *c = rtable_chunk(t, i);
        if ((rc = decode_bound(&t->pattern, &c->min, &min, err)) == 0 &&
            (rc = decode_bound(&t->pattern, &c->max, &max, err)) == 0) {
            if (reply->len + arr.len + min.len + max.len + 64 > MS_DOC_BYTES_MAX) {
                exceeded = true;
            } else {
                snprintf(key, sizeof key, "%d", i);
                BSON_APPEND_ARRAY_BEGIN(&arr, key, &pair);
                BSON_APPEND_DOCUMENT(&pair, "0", &min);
                BSON_APPEND_DOCUMENT(&pair, "1", &max);
                bson_append_array_end(&arr, &pair);
            }
        }
        bson_destroy(&min);
        bson_destroy(&max);
        if (exceeded) break;
    }
    bson_append_array_end(reply, &arr);
    if (exceeded) BSON_APPEND_BOOL(reply, "exceededSize", true);
    return rc;
}

int rt_cmd_get_shard_version(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    uint32_t len = 0;
    const char *ns = bson_iter_utf8(&ctx->arg, &len);   /* a string: the row's arg_types */
    char primary[RT_NAME_BYTES_MAX];
    rt_db_version_t dbv;
    rt_table_t *t = NULL;
    rtable_version_t v;
    int rc;
    if ((rc = admin_only(ctx, err)) != 0) return rc;
    bool db_only = memchr(ns, '.', len) == NULL;
    if ((rc = db_only ? val_db_name(ns, len, err) : val_full_ns(ns, len, false, err)) != 0) return rc;
    if (db_only) {   /* a database: its primary and version */
        if ((rc = rt_db_get(r, ns, false, primary, sizeof primary, &dbv, err)) != 0) return rc;
        BSON_APPEND_UTF8(reply, "primaryShard", primary);
        rtable_dbv_append(reply, "version", &dbv);
        return 0;
    }
    if ((rc = rt_table_get(r, ns, &t, err)) != 0) return rc;
    if (!t->sharded) {
        rt_table_release(t);
        return err_set(err, MS_ERR_NAMESPACE_NOT_SHARDED, "Collection %s is not sharded.", ns);
    }
    rtable_coll_version(&t->rt, &v);
    BSON_APPEND_TIMESTAMP(reply, "version", v.major, v.minor);
    BSON_APPEND_OID(reply, "versionEpoch", &v.epoch);
    BSON_APPEND_TIMESTAMP(reply, "versionTimestamp", v.ts_t, v.ts_i);
    if (cmd_flag(ctx, "fullMetadata", false)) {
        log_info("routing info requested by getShardVersion ns=%s chunks=%d", log_str(ns),
                 t->rt.nchunks);
        rc = append_chunks(&t->rt, reply, err);
    }
    rt_table_release(t);
    return rc;
}

/* ---- getShardMap --------------------------------------------------------------------- */

typedef struct shard_ent {
    char name[RT_NAME_BYTES_MAX];
    char url[MS_URL_BYTES_MAX];
} shard_ent_t;

static int by_name(const void *a, const void *b) {
    return strcmp(((const shard_ent_t *)a)->name, ((const shard_ent_t *)b)->name);
}

/* "tcp://host:port" → "host:port": MongoDB's hosts are host:port. */
static const char *host_of(const char *url) {
    const char *p = strstr(url, "://");
    return p ? p + 3 : url;
}

int rt_cmd_get_shard_map(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    char names[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
    shard_ent_t *ents;
    bson_t map, hosts, conns;
    int n, rc;
    if ((rc = admin_only(ctx, err)) != 0) return rc;
    if ((n = rt_all_shards(r, names, MS_SHARDS_MAX, err)) < 0) return -n;   /* refreshes */
    ents = calloc((size_t)MS_SHARDS_MAX + 1, sizeof *ents);
    if (!ents) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "getShardMap: out of memory");
    pthread_mutex_lock(&r->mu);
    n = 0;
    for (int i = 0; i < r->nshards && n < MS_SHARDS_MAX; i++, n++) {
        snprintf(ents[n].name, sizeof ents[n].name, "%s", r->shard_names[i]);
        snprintf(ents[n].url, sizeof ents[n].url, "%s", r->shard_hosts[i]);
    }
    pthread_mutex_unlock(&r->mu);
    snprintf(ents[n].name, sizeof ents[n].name, "config");   /* the registry holds it too */
    snprintf(ents[n].url, sizeof ents[n].url, "%s", r->configdb);
    n++;
    qsort(ents, (size_t)n, sizeof *ents, by_name);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "map", &map);
    for (int i = 0; i < n; i++) BSON_APPEND_UTF8(&map, ents[i].name, ents[i].url);
    bson_append_document_end(reply, &map);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "hosts", &hosts);
    for (int i = 0; i < n; i++) BSON_APPEND_UTF8(&hosts, host_of(ents[i].url), ents[i].name);
    bson_append_document_end(reply, &hosts);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "connStrings", &conns);
    for (int i = 0; i < n; i++) BSON_APPEND_UTF8(&conns, ents[i].url, ents[i].name);
    bson_append_document_end(reply, &conns);
    free(ents);
    return 0;
}

/* ---- serverStatus.sharding ----------------------------------------------------------- */

void rt_refresh_chunk_size(router_t *r) {
    bson_t cmd = BSON_INITIALIZER, filter, rep;
    bson_iter_t it;
    ms_error_t e;
    int64_t bytes = (int64_t)MS_CHUNK_SIZE_MB_DEFAULT * 1024 * 1024;
    BSON_APPEND_UTF8(&cmd, "find", "settings");
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "filter", &filter);
    BSON_APPEND_UTF8(&filter, "_id", "chunksize");
    bson_append_document_end(&cmd, &filter);
    BSON_APPEND_UTF8(&cmd, "$db", "config");
    if (rt_config_call(r, &cmd, &rep, &e) != 0) {
        bson_destroy(&cmd);
        return;   /* keep the last value: the pinger logs the config server's absence */
    }
    if (rt_reply_status(&rep, &e) == 0) {
        /* value in MB; the test-only valueBytes, when set, is the size itself */
        if (bson_iter_init(&it, &rep) &&
            bson_iter_find_descendant(&it, "cursor.firstBatch.0.valueBytes", &it) && bsonx_is_number(&it))
            bytes = bson_iter_as_int64(&it);
        else if (bson_iter_init(&it, &rep) &&
                 bson_iter_find_descendant(&it, "cursor.firstBatch.0.value", &it) && bsonx_is_number(&it))
            bytes = bson_iter_as_int64(&it) * 1024 * 1024;
        atomic_store(&r->max_chunk_bytes, bytes);
    }
    bson_destroy(&rep);
    bson_destroy(&cmd);
}

void rt_status_sharding(router_t *r, bson_t *reply) {
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "sharding", &d);
    BSON_APPEND_UTF8(&d, "configsvrConnectionString", r->configdb);
    BSON_APPEND_INT64(&d, "maxChunkSizeInBytes", (int64_t)atomic_load(&r->max_chunk_bytes));
    bson_append_document_end(reply, &d);
}
