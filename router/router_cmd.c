/*
 * router_cmd.c — the router's command table (bin/router): one row per command, each
 * with its flags and field types (checked by common/cmd.c before the handler runs). A
 * new command is one row here plus its handler in an rt_*.c file. Rows named like a
 * common command (hello, isMaster) replace it for this daemon.
 */
#include <string.h>
#include <unistd.h>

#include "router/router.h"

#include "common/validate.h"

/* hello as mongos answers it: the common reply plus msg: "isdbgrid", the field by which
 * drivers recognise a router (notes §8.4). */
static int rt_hello(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    for (int i = 0; i < cmd_common_table_len; i++) {
        if (strcmp(cmd_common_table[i].name, ctx->name) == 0) {
            int rc = cmd_common_table[i].handler(ctx, reply, err);
            if (rc == 0) BSON_APPEND_UTF8(reply, "msg", "isdbgrid");
            return rc;
        }
    }
    return err_set(err, MS_ERR_INTERNAL, "no common row for %s", ctx->name);
}

/* The legacy isdbgrid command: {isdbgrid: 1, hostname}. */
static int rt_isdbgrid(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    char host[256];
    (void)ctx, (void)err;
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    BSON_APPEND_INT32(reply, "isdbgrid", 1);
    BSON_APPEND_UTF8(reply, "hostname", host);
    return 0;
}


#define NS_ARG CT_STR
#define CRUD(nm, fn, fl, ...) {.name = nm, .handler = fn, .flags = (fl) | CMD_NS_ARG, .arg_types = NS_ARG, \
                              .fields = {__VA_ARGS__}, .help = "routed by shard key"}
/* A strict write whose statements (the `arr` array) may hold only the names in `list`. */
#define CRUD_STMTS(nm, fn, arr, list, ...)                                                   \
    {.name = nm, .handler = fn, .flags = CMD_WRITE | CMD_STRICT_FIELDS | CMD_NS_ARG,          \
     .arg_types = NS_ARG, .fields = {__VA_ARGS__}, .help = "routed by shard key",             \
     .stmts = arr, .stmt_fields = list}
#define CFG(nm) {.name = nm, .handler = rt_cmd_to_config, .flags = CMD_WRITE, \
                 .help = "forwarded to the config server"}
#define CFG_RO(nm) {.name = nm, .handler = rt_cmd_to_config, \
                    .help = "forwarded to the config server"}
/* Forwarded commands whose value is a name: checked here as on the config server. */
#define CFG_NAMED(nm, fl) {.name = nm, .handler = rt_cmd_to_config, .flags = CMD_WRITE | (fl), \
                           .help = "forwarded to the config server"}

/* findAndModify's fields: the checked ones, then those the router passes to the shard. */
#define RT_FAM_FIELDS                                                                      \
    {"query", CT_DOC | CT_NULL, false}, {"update", CT_DOC | CT_ARR, false},                \
        {"remove", CT_FLAG, false}, {"sort", CT_DOC, false}, {"new", CT_FLAG, false},      \
        {"upsert", CT_FLAG, false}, {"fields", CT_DOC, false}, CMD_FAM_MORE_FIELDS

#define RT_HELLO_FIELDS CMD_HELLO_FIELDS

const cmd_spec_t router_table[] = {
    {.name = "hello", .handler = rt_hello, .flags = CMD_NO_LOG, .fields = RT_HELLO_FIELDS,
     .help = "handshake; msg: \"isdbgrid\" marks a router"},
    {.name = "isMaster", .handler = rt_hello, .flags = CMD_NO_LOG, .fields = RT_HELLO_FIELDS,
     .help = "legacy name of hello"},
    {.name = "ismaster", .handler = rt_hello, .flags = CMD_NO_LOG, .fields = RT_HELLO_FIELDS,
     .help = "legacy name of hello"},
    {.name = "listDatabases", .handler = rt_cmd_list_databases, .flags = CMD_STRICT_FIELDS,
     .fields = {{"nameOnly", CT_FLAG, false}, {"filter", CT_DOC, false},
                CMD_LIST_DATABASES_MORE_FIELDS},
     .help = "every shard's databases merged: sizeOnDisk summed, shards: {name: bytes}"},
    {.name = "renameCollection", .handler = rt_cmd_rename_collection,
     .flags = CMD_STRICT_FIELDS | CMD_WRITE | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .fields = {{"to", CT_STR, true}, {"dropTarget", CT_FLAG, false}, {"stayTemp", CT_FLAG, false}},
     .help = "rename an unsharded collection on its database's primary shard"},
    {.name = "dbStats", .handler = rt_cmd_db_stats, .flags = CMD_STRICT_FIELDS,
     .fields = {{"scale", CT_NUM, false}, {"freeStorage", CT_FLAG, false}},
     .help = "every shard's dbStats under raw.<shard>, objects and sizes summed"},
    {.name = "isdbgrid", .handler = rt_isdbgrid, .flags = CMD_NO_LOG,
     .help = "legacy router check: {isdbgrid: 1, hostname}"},
    CRUD("find", rt_cmd_find, CMD_STRICT_FIELDS, {"filter", CT_DOC, false},
         {"sort", CT_DOC, false}, {"projection", CT_DOC, false},
         {"skip", CT_NUM, false, VAL_I64_NONNEG}, {"limit", CT_NUM, false, VAL_I64_NONNEG},
         {"batchSize", CT_NUM, false, VAL_I64_NONNEG},
         {"ntoreturn", CT_NUM, false, VAL_I64_NONNEG}, {"singleBatch", CT_FLAG, false},
         {"hint", CT_DOC | CT_STR, false}, CMD_FIND_MORE_FIELDS),
    {.name = "aggregate", .handler = rt_cmd_aggregate, .flags = CMD_STRICT_FIELDS | CMD_NS_ARG,
     .arg_types = CT_STR | CT_NUM,
     .fields = {{"pipeline", CT_ARR, true}, {"cursor", CT_DOC, false},
                {"explain", CT_FLAG, false}, {"allowDiskUse", CT_FLAG, false},
                {"let", CT_DOC, false}, {"collation", CT_DOC, false},
                {"hint", CT_DOC | CT_STR, false}, CMD_ANY_FIELD("bypassDocumentValidation")},
     .help = "split between the shards and the router (docs/aggregation.md)"},
    {.name = "explain", .handler = rt_cmd_explain, .flags = CMD_STRICT_FIELDS, .arg_types = CT_DOC,
     .fields = {{"verbosity", CT_STR, false}},
     .help = "explain a find / count / distinct on the shards it targets, as mongos does"},
    {.name = "getMore", .handler = rt_cmd_get_more, .flags = CMD_NS_FIELD | CMD_STRICT_FIELDS,
     .arg_types = CT_NUM,
     .fields = {{"collection", CT_STR, true}, {"batchSize", CT_NUM, false, VAL_GETMORE_BATCH},
                CMD_GETMORE_MORE_FIELDS},
     .help = "next batch of a router cursor"},
    CRUD("killCursors", rt_cmd_kill_cursors, CMD_STRICT_FIELDS, {"cursors", CT_ARR, true}),
    CRUD("count", rt_cmd_count, CMD_STRICT_FIELDS, {"query", CT_DOC, false},
         {"skip", CT_NUM, false, VAL_I64_NONNEG}, {"limit", CT_NUM, false, VAL_I64},
         {"hint", CT_DOC | CT_STR, false}, CMD_COUNT_MORE_FIELDS),
    CRUD("distinct", rt_cmd_distinct, CMD_STRICT_FIELDS, {"key", CT_STR, true},
         {"query", CT_DOC, false}, CMD_DISTINCT_MORE_FIELDS),
    CRUD("insert", rt_cmd_insert, CMD_WRITE | CMD_STRICT_FIELDS, {"documents", CT_ARR, true},
         {"ordered", CT_FLAG, false}, CMD_INSERT_MORE_FIELDS),
    CRUD_STMTS("update", rt_cmd_update, "updates", cmd_update_stmt_fields,
               {"updates", CT_ARR, true}, {"ordered", CT_FLAG, false}, CMD_UPDATE_MORE_FIELDS),
    CRUD_STMTS("delete", rt_cmd_delete, "deletes", cmd_delete_stmt_fields,
               {"deletes", CT_ARR, true}, {"ordered", CT_FLAG, false}, CMD_DELETE_MORE_FIELDS),
    CRUD("findAndModify", rt_cmd_find_and_modify, CMD_WRITE | CMD_STRICT_FIELDS, RT_FAM_FIELDS),
    CRUD("findandmodify", rt_cmd_find_and_modify, CMD_WRITE | CMD_STRICT_FIELDS, RT_FAM_FIELDS),
    CRUD("drop", rt_cmd_drop, CMD_WRITE | CMD_STRICT_FIELDS, CMD_DROP_MORE_FIELDS),
    {.name = "dropDatabase", .handler = rt_cmd_drop_database,
     .flags = CMD_WRITE | CMD_STRICT_FIELDS,
     .help = "drop the $db database: every collection on every shard, then its metadata"},
    CRUD("createIndexes", rt_cmd_create_indexes, CMD_WRITE | CMD_STRICT_FIELDS,
         {"indexes", CT_ARR, true}, CMD_CREATE_INDEXES_MORE_FIELDS),
    CRUD("dropIndexes", rt_cmd_drop_indexes, CMD_WRITE | CMD_STRICT_FIELDS,
         {"index", CT_ANY, false}, CMD_DROP_INDEXES_MORE_FIELDS),
    CRUD("listIndexes", rt_cmd_to_primary, CMD_STRICT_FIELDS, CMD_LIST_INDEXES_FIELDS),
    CRUD("collStats", rt_cmd_to_primary, 0, {NULL, 0, false}),
    {.name = "listCollections", .handler = rt_cmd_to_primary, .flags = CMD_STRICT_FIELDS,
     .fields = {{"filter", CT_DOC, false}, {"nameOnly", CT_FLAG, false},
                CMD_LIST_COLLECTIONS_MORE_FIELDS},
     .help = "the database's primary shard"},
    {.name = "create", .handler = rt_cmd_to_primary,
     .flags = CMD_WRITE | CMD_NS_ARG | CMD_STRICT_FIELDS, .arg_types = CT_STR,
     .fields = {CMD_CREATE_MORE_FIELDS},
     .help = "created on the database's primary shard"},
    {.name = "checkMetadataConsistency", .handler = rt_cmd_check_metadata_consistency,
     .flags = CMD_STRICT_FIELDS, .arg_types = CT_NUM | CT_STR,
     .fields = {{"checkIndexes", CT_FLAG, false}, {"cursor", CT_DOC, false},
                {"dbMetadataLockMaxTimeMS", CT_NUM, false}},
     .help = "sharding metadata inconsistencies of the cluster ($db admin), a database or a "
             "collection, as a cursor (MongoDB 7.0)"},
    {.name = "flushRouterConfig", .handler = rt_cmd_flush_router_config,
     .help = "forget cached routing (a namespace, a database, or everything)"},
    /* Only what the config server serves today: configureCollectionBalancing and the
     * zone commands get their rows with their stage, so a client never sees a command that
     * cannot work. */
    {.name = "moveChunk", .handler = rt_cmd_move,
     .flags = CMD_WRITE | CMD_FULL_NS_ARG | CMD_STRICT_FIELDS, .arg_types = CT_STR,
     .fields = {{"to", CT_STR, true}, {"find", CT_DOC, false}, {"bounds", CT_ARR, false},
                {"_waitForDelete", CT_FLAG, false}, {"forceJumbo", CT_FLAG, false},
                {"_secondaryThrottle", CT_FLAG, false}, {"writeConcern", CT_DOC, false}},
     .help = "move the chunk holding find (or exactly bounds) to shard `to`; waits for the end"},
    {.name = "moveRange", .handler = rt_cmd_move,
     .flags = CMD_WRITE | CMD_FULL_NS_ARG | CMD_STRICT_FIELDS, .arg_types = CT_STR,
     .fields = {{"toShard", CT_STR, true}, {"min", CT_DOC | CT_NULL, false},
                {"max", CT_DOC | CT_NULL, false},
                {"forceJumbo", CT_FLAG, false}, {"waitForDelete", CT_FLAG, false},
                {"_waitForDelete", CT_FLAG, false}, {"secondaryThrottle", CT_FLAG, false},
                {"writeConcern", CT_DOC, false}},
     .help = "move the range [min, max) of one chunk to toShard; waits for the end"},
    CFG("addShard"), CFG("removeShard"), CFG_RO("listShards"),
    CFG_NAMED("enableSharding", CMD_DB_ARG), CFG_NAMED("shardCollection", CMD_FULL_NS_ARG),
    CFG_NAMED("split", CMD_FULL_NS_ARG), CFG_NAMED("mergeChunks", CMD_FULL_NS_ARG),
    CFG_NAMED("clearJumboFlag", CMD_FULL_NS_ARG),
    {.name = "currentOp", .handler = rt_cmd_current_op,
     .help = "every shard's operations in progress (migrations), tagged with the shard"},
    {.name = "getShardVersion", .handler = rt_cmd_get_shard_version, .flags = CMD_STRICT_FIELDS,
     .arg_types = CT_STR, .fields = {{"fullMetadata", CT_FLAG, false}},
     .help = "version of the router's cached routing of a collection (fullMetadata: its "
             "chunks), or a database's primary and version"},
    {.name = "getShardMap", .handler = rt_cmd_get_shard_map, .flags = CMD_STRICT_FIELDS,
     .help = "the shard registry: map {shard: connection string}, hosts, connStrings"},
    CFG_RO("balancerStatus"),
    {.name = "balancerCollectionStatus", .handler = rt_cmd_to_config, .flags = CMD_FULL_NS_ARG,
     .arg_types = CT_STR, .help = "forwarded to the config server"},
    {.name = "balancerExplain", .handler = rt_cmd_to_config, .flags = CMD_FULL_NS_ARG,
     .arg_types = CT_STR, .help = "forwarded to the config server"},
    CFG("balancerStart"), CFG("balancerStop"),
    CFG_RO("getRoutingTable"),
    CFG("addShardToZone"), CFG("removeShardFromZone"),
    CFG_NAMED("updateZoneKeyRange", CMD_FULL_NS_ARG), CFG_NAMED("movePrimary", CMD_DB_ARG),
    CFG_NAMED("configureCollectionBalancing", CMD_FULL_NS_ARG),
    CFG_NAMED("mergeAllChunksOnShard", CMD_FULL_NS_ARG),
};
const int router_table_len = (int)(sizeof router_table / sizeof router_table[0]);
