/*
 * configsvr_cmd.c — the config server's command table: one row per command, each with
 * its flags and field types (checked by common/cmd.c before the handler runs). A new
 * command is one row here plus its handler in a cmd_*.c file. Rows named like a common
 * command (hello, isMaster) replace it for this daemon.
 */
#include <string.h>

#include "common/failpoint.h"
#include "common/validate.h"
#include "configsvr/configsvr.h"

void cfg_register_failpoints(void) {
    static const char *const names[] = {
        CFG_FP_ADD_SHARD_BEFORE_INSERT, CFG_FP_SHARD_COLL_BEFORE_COMMIT,
        CFG_FP_SHARD_COLL_AFTER_COMMIT, CFG_FP_SPLIT_BEFORE_COMMIT,
        CFG_FP_SPLIT_AFTER_COMMIT,      CFG_FP_MERGE_BEFORE_COMMIT,
        CFG_FP_MERGE_AFTER_COMMIT,      CFG_FP_DROP_COLL_BEFORE_DELETE,
        CFG_FP_DROP_DB_BEFORE_DELETE,   CFG_FP_REMOVE_SHARD_BEFORE_COMMIT,
        CFG_FP_SETTINGS_BEFORE_COMMIT,  CFG_FP_HANG_BEFORE_COMMIT_MIGRATION,
        CFG_FP_HANG_BEFORE_MOVE_PRIMARY_SWITCH, CFG_FP_GETMORE_AFTER_PIN,
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) fp_register(names[i]);
}

/* hello as a config server answers it: the common reply plus `configsvr: 2`, the field
 * by which mongos and drivers recognise a config server (mongod --configsvr). */
static int cfg_hello(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    for (int i = 0; i < cmd_common_table_len; i++) {
        if (strcmp(cmd_common_table[i].name, ctx->name) == 0) {
            int rc = cmd_common_table[i].handler(ctx, reply, err);
            if (rc == 0) BSON_APPEND_INT32(reply, "configsvr", 2);
            return rc;
        }
    }
    return err_set(err, MS_ERR_INTERNAL, "no common row for %s", ctx->name);
}

#define CFG_HELLO_FIELDS CMD_HELLO_FIELDS

const cmd_spec_t cfg_cmd_table[] = {
    {.name = "hello", .handler = cfg_hello, .flags = CMD_NO_LOG, .fields = CFG_HELLO_FIELDS,
     .help = "handshake; configsvr: 2 marks a config server"},
    {.name = "isMaster", .handler = cfg_hello, .flags = CMD_NO_LOG, .fields = CFG_HELLO_FIELDS,
     .help = "legacy name of hello"},
    {.name = "ismaster", .handler = cfg_hello, .flags = CMD_NO_LOG, .fields = CFG_HELLO_FIELDS,
     .help = "legacy name of hello"},

    /* shard membership (cmd_shards.c) */
    {.name = "addShard", .handler = cfg_cmd_add_shard, .flags = CMD_WRITE, .arg_types = CT_STR,
     .fields = {{"name", CT_STR, false}, {"maxSize", CT_NUM, false}},
     .help = "add a shard daemon by URL (or host:port); optional name; reply shardAdded"},
    {.name = "listShards", .handler = cfg_cmd_list_shards,
     .help = "the shards: [{_id, host, state, draining?, tags, topologyTime}]"},
    {.name = "removeShard", .handler = cfg_cmd_remove_shard, .flags = CMD_WRITE, .arg_types = CT_STR,
     .help = "drain then remove a shard: state started / ongoing (remaining) / completed"},
#define CFG_SHARD_ZONE(nm)                                                                  \
    {.name = nm, .handler = cfg_cmd_shard_zone, .flags = CMD_WRITE, .arg_types = CT_STR,     \
     .fields = {{"zone", CT_STR, true}, {"writeConcern", CT_DOC, false}},                   \
     .help = "add a shard to a zone / remove it from one: {<cmd>: shard, zone}"}
#define CFG_ZONE_RANGE(nm)                                                                  \
    {.name = nm, .handler = cfg_cmd_update_zone_key_range,                                  \
     .flags = CMD_WRITE | CMD_FULL_NS_ARG, .arg_types = CT_STR,                             \
     .fields = {{"min", CT_DOC, true}, {"max", CT_DOC, true},                               \
                {"zone", CT_STR | CT_NULL, true}, {"writeConcern", CT_DOC, false}},         \
     .help = "assign [min, max) of a collection to a zone (zone null removes the range)"}
    CFG_SHARD_ZONE("addShardToZone"), CFG_SHARD_ZONE("_configsvrAddShardToZone"),
    CFG_SHARD_ZONE("removeShardFromZone"), CFG_SHARD_ZONE("_configsvrRemoveShardFromZone"),
    CFG_ZONE_RANGE("updateZoneKeyRange"), CFG_ZONE_RANGE("_configsvrUpdateZoneKeyRange"),
    {.name = "movePrimary", .handler = cfg_cmd_move_primary, .flags = CMD_WRITE | CMD_DB_ARG,
     .arg_types = CT_STR, .fields = {{"to", CT_STR, true}, {"writeConcern", CT_DOC, false}},
     .help = "move a database's unsharded collections and primary to shard `to`"},
    {.name = "_configsvrMovePrimary", .handler = cfg_cmd_move_primary,
     .flags = CMD_WRITE | CMD_DB_ARG, .arg_types = CT_STR,
     .fields = {{"to", CT_STR, true}, {"writeConcern", CT_DOC, false}},
     .help = "mongos' name of movePrimary"},

    /* databases and collections (cmd_db.c, cmd_coll.c) */
    {.name = "enableSharding", .handler = cfg_cmd_enable_sharding, .flags = CMD_WRITE | CMD_DB_ARG,
     .arg_types = CT_STR, .fields = {{"primaryShard", CT_STR, false}},
     .help = "create a database entry with a primary shard (optional primaryShard)"},
    {.name = "_configsvrCreateDatabase", .handler = cfg_cmd_create_database,
     .flags = CMD_WRITE | CMD_INTERNAL | CMD_DB_ARG, .arg_types = CT_STR,
     .fields = {{"name", CT_STR, false}, {"primaryShard", CT_STR, false}},
     .help = "router: create a database on first write; reply {primary, version}"},
    {.name = "_configsvrDropDatabase", .handler = cfg_cmd_drop_database,
     .flags = CMD_WRITE | CMD_INTERNAL, .arg_types = CT_STR,
     .help = "router: drop a database on every shard and from the catalog"},
    {.name = "_configsvrCheckMetadataConsistency", .handler = cfg_cmd_check_metadata,
     .flags = CMD_INTERNAL | CMD_STRICT_FIELDS, .arg_types = CT_NUM,
     .fields = {{"db", CT_STR, false}, {"collection", CT_STR, false}, {"checkIndexes", CT_FLAG, false}},
     .help = "router: checkMetadataConsistency of the cluster, a database or a collection "
             "(cmd_consistency.c)"},
    {.name = "_configsvrDropCollection", .handler = cfg_cmd_drop_collection,
     .flags = CMD_WRITE | CMD_INTERNAL | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .help = "router: drop a collection on every shard, then its metadata"},
    {.name = "shardCollection", .handler = cfg_cmd_shard_collection,
     .flags = CMD_WRITE | CMD_FULL_NS_ARG,
     .arg_types = CT_STR,
     .fields = {{"key", CT_DOC, true}, {"unique", CT_FLAG, false}, {"numInitialChunks", CT_NUM, false},
                {"collation", CT_DOC, false}},
     .help = "shard a collection by a ranged, hashed or compound key"},
    {.name = "getRoutingTable", .handler = cfg_cmd_get_routing_table,
     .flags = CMD_NO_LOG | CMD_FULL_NS_ARG,
     .arg_types = CT_STR, .fields = {{"sinceVersion", CT_DOC, false}},
     .help = "chunk table of a collection, full or since a version (shardd/shardver.h)"},

    /* chunks (cmd_chunks.c) */
    {.name = "split", .handler = cfg_cmd_split, .flags = CMD_WRITE | CMD_FULL_NS_ARG,
     .arg_types = CT_STR,
     .fields = {{"middle", CT_DOC, false}, {"find", CT_DOC, false}, {"bounds", CT_ARR, false}},
     .help = "split a chunk at middle, or at the median of the chunk holding find / bounds"},
    {.name = "mergeChunks", .handler = cfg_cmd_merge_chunks, .flags = CMD_WRITE | CMD_FULL_NS_ARG,
     .arg_types = CT_STR,
     .fields = {{"bounds", CT_ARR, true}},
     .help = "merge contiguous chunks of one shard exactly covering bounds [min, max]"},
    {.name = "clearJumboFlag", .handler = cfg_cmd_clear_jumbo_flag, .flags = CMD_WRITE | CMD_FULL_NS_ARG,
     .arg_types = CT_STR,
     .fields = {{"find", CT_DOC, false}, {"bounds", CT_ARR, false}, {"writeConcern", CT_DOC, false}},
     .help = "clear the jumbo flag of the chunk holding find (or exactly bounds); bumps its version"},

    /* migration (cmd_migrate.c) */
    {.name = "_configsvrMoveRange", .handler = cfg_cmd_move_range,
     .flags = CMD_WRITE | CMD_INTERNAL | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .fields = {{"toShard", CT_STR, true}, {"min", CT_DOC, false}, {"max", CT_DOC, false},
                {"find", CT_DOC, false}, {"bounds", CT_ARR, false},
                {"waitForDelete", CT_FLAG, false},
                {"forceJumbo", CT_NUM, false}, {"secondaryThrottle", CT_FLAG, false},
                {"writeConcern", CT_DOC, false}},
     .help = "router: check a move, record it in config.migrations, run it on the donor"},
    {.name = "_configsvrCommitChunkMigration", .handler = cfg_cmd_commit_chunk_migration,
     .flags = CMD_WRITE | CMD_INTERNAL | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .fields = {{"fromShard", CT_STR, true}, {"toShard", CT_STR, true},
                {"migratedChunk", CT_DOC, true}, {"fromShardCollectionVersion", CT_DOC, true},
                {"validAfter", CT_TS, false}, {"writeConcern", CT_DOC, false}},
     .help = "donor: commit a migration in one transaction; reply shardVersion"},
    {.name = "_configsvrEnsureChunkVersionIsGreaterThan", .handler = cfg_cmd_ensure_chunk_version_gt,
     .flags = CMD_WRITE | CMD_INTERNAL,
     .fields = {{"nss", CT_STR, true}, {"collectionUUID", CT_BIN, true}, {"minKey", CT_DOC, true},
                {"maxKey", CT_DOC, true}, {"version", CT_DOC, true},
                {"writeConcern", CT_DOC, false}},
     .help = "donor recovery: bump a chunk still at an old version (the commit fence)"},
    {.name = "_configsvrLogChange", .handler = cfg_cmd_log_change,
     .flags = CMD_WRITE | CMD_INTERNAL,
     .fields = {{"what", CT_STR, true}, {"ns", CT_STR, false}, {"details", CT_DOC, false},
                {"shard", CT_STR, true}},
     .help = "shard: append an entry to config.changelog (server = shard)"},

    /* the config database (cfg_query.c) */
    {.name = "find", .handler = cfg_cmd_find, .flags = CMD_NS_ARG | CMD_STRICT_FIELDS,
     .arg_types = CT_STR,
     .fields = {{"filter", CT_DOC, false}, {"projection", CT_DOC, false}, {"sort", CT_DOC, false},
                {"skip", CT_NUM, false, VAL_I64_NONNEG}, {"limit", CT_NUM, false, VAL_I64_NONNEG},
                {"batchSize", CT_NUM, false, VAL_I64_NONNEG},
                {"ntoreturn", CT_NUM, false, VAL_I64_NONNEG}, {"singleBatch", CT_FLAG, false},
                CMD_ANY_FIELD("hint"), CMD_FIND_MORE_FIELDS},
     .help = "read config.<collection> (chunks, shards, collections, databases, settings, ...); "
             "batches of 101 docs / batchSize, then getMore"},
    {.name = "aggregate", .handler = cfg_cmd_aggregate, .flags = CMD_NS_ARG | CMD_STRICT_FIELDS,
     .arg_types = CT_STR,
     .fields = {{"pipeline", CT_ARR, true}, {"cursor", CT_DOC, false}, {"explain", CT_FLAG, false},
                {"allowDiskUse", CT_FLAG, false}, {"let", CT_DOC, false},
                {"collation", CT_DOC, false}, CMD_ANY_FIELD("hint"),
                CMD_ANY_FIELD("bypassDocumentValidation")},
     .help = "aggregation pipeline over config.<collection> (docs/aggregation.md); a cursor "
             "as find's"},
    {.name = "listCollections", .handler = cfg_cmd_list_collections, .flags = CMD_STRICT_FIELDS,
     .fields = {{"filter", CT_DOC, false}, {"nameOnly", CT_FLAG, false},
                CMD_LIST_COLLECTIONS_MORE_FIELDS},
     .help = "the config database's collections (those find serves); none in another"},
    {.name = "getMore", .handler = cfg_cmd_get_more, .flags = CMD_NS_FIELD | CMD_STRICT_FIELDS,
     .arg_types = CT_NUM,
     .fields = {{"collection", CT_STR, true}, {"batchSize", CT_NUM, false, VAL_GETMORE_BATCH},
                CMD_GETMORE_MORE_FIELDS},
     .help = "next batch of a cursor on a config collection"},
    {.name = "killCursors", .handler = cfg_cmd_kill_cursors,
     .flags = CMD_NS_ARG | CMD_STRICT_FIELDS,
     .arg_types = CT_STR,
     .fields = {{"cursors", CT_ARR, true}},
     .help = "close cursors on config collections"},
    {.name = "count", .handler = cfg_cmd_count, .flags = CMD_NS_ARG | CMD_STRICT_FIELDS,
     .arg_types = CT_STR,
     .fields = {{"query", CT_DOC, false}, {"skip", CT_NUM, false, VAL_I64_NONNEG},
                {"limit", CT_NUM, false, VAL_I64}, CMD_ANY_FIELD("hint"), CMD_COUNT_MORE_FIELDS},
     .help = "count documents of config.<collection>"},
    {.name = "update", .handler = cfg_cmd_update,
     .flags = CMD_WRITE | CMD_NS_ARG | CMD_STRICT_FIELDS, .arg_types = CT_STR,
     .fields = {{"updates", CT_ARR, true}, {"ordered", CT_FLAG, false}, CMD_UPDATE_MORE_FIELDS},
     .stmts = "updates", .stmt_fields = cmd_update_stmt_fields,
     .help = "update config.settings (balancer, chunksize, automerge) or config.collections "
             "noBalance; validated"},

    /* status (cmd_status.c) */
    {.name = "balancerStatus", .handler = cfg_cmd_balancer_status,
     .help = "balancer mode (config.settings), inBalancerRound, numBalancerRounds"},
    /* balancer questions (cmd_bal.c) */
    {.name = "balancerCollectionStatus", .handler = cfg_cmd_balancer_collection_status,
     .flags = CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .help = "is a collection's chunk distribution compliant (draining, zones, imbalance, defrag)"},
    {.name = "balancerExplain", .handler = cfg_cmd_balancer_explain,
     .flags = CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .help = "why the balancer would or would not move a collection's chunks now"},
    /* the balancer (balancer.c) */
    {.name = "balancerStart", .handler = cfg_cmd_balancer_start, .flags = CMD_WRITE,
     .help = "balancer on: config.settings {stopped: false, mode: full}; a round starts now"},
    {.name = "balancerStop", .handler = cfg_cmd_balancer_stop, .flags = CMD_WRITE,
     .help = "balancer off: config.settings {stopped: true, mode: off}; waits for the round"},
    /* defragmentation and the auto-merger (defrag.c, bal_merge.c) */
    {.name = "configureCollectionBalancing", .handler = cfg_cmd_configure_collection_balancing,
     .flags = CMD_WRITE | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .fields = {{"chunkSize", CT_NUM, false}, {"defragmentCollection", CT_FLAG, false},
                {"enableAutoMerger", CT_FLAG, false}, {"writeConcern", CT_DOC, false}},
     .help = "per-collection chunk size (MB, 0 = cluster default), defragmentation, auto-merger"},
    {.name = "mergeAllChunksOnShard", .handler = cfg_cmd_merge_all_chunks_on_shard,
     .flags = CMD_WRITE | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .fields = {{"shard", CT_STR, true}, {"maxNumberOfChunksToMerge", CT_NUM, false},
                {"writeConcern", CT_DOC, false}},
     .help = "merge every run of contiguous mergeable chunks of a collection on one shard"},
    {.name = "_configsvrRouterPing", .handler = cfg_cmd_router_ping,
     .flags = CMD_INTERNAL | CMD_NO_LOG,
     .fields = {{"host", CT_STR, true}, {"up", CT_NUM, false}, {"waiting", CT_FLAG, false},
                {"mongoVersion", CT_STR, false}},
     .help = "router liveness: upserts config.mongos"},
};
const int cfg_cmd_table_len = (int)(sizeof cfg_cmd_table / sizeof cfg_cmd_table[0]);
