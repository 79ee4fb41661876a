/*
 * shardd_cmd.c — the shard daemon's command table (bin/shardd): one row per command with
 * its flags and field types, checked by common/cmd.c before the handler runs. A new
 * command is one row here plus its handler (cmd_crud.c, cmd_admin.c, split.c). Also the
 * list of the daemon's failpoints, registered at start-up.
 */
#include "shardd/shardd.h"
#include "shardd/mig.h"

#include "common/failpoint.h"
#include "common/validate.h"

/* A row on a collection of $db: its name is checked by dispatch (CMD_NS_ARG). */
#define NS CT_STR
#define NSF CMD_NS_ARG
#define F(name, types) {name, types, false, VAL_NONE}
#define FN(name, check) {name, CT_NUM, false, check}   /* a number checked by common/validate.h */
#define REQ(name, types) {name, types, true}

const cmd_spec_t shardd_cmd_table[] = {
    /* CRUD */
    {.name = "insert", .handler = cmd_insert, .flags = CMD_STRICT_FIELDS | CMD_WRITE | NSF,
     .arg_types = NS,
     .fields = {REQ("documents", CT_ARR), F("ordered", CT_FLAG), CMD_INSERT_MORE_FIELDS},
     .help = "insert documents: {insert, documents, ordered}"},
    {.name = "find", .handler = cmd_find, .flags = CMD_STRICT_FIELDS | NSF, .arg_types = NS,
     .fields = {F("filter", CT_DOC), F("projection", CT_DOC), F("sort", CT_DOC),
                FN("skip", VAL_I64_NONNEG), FN("limit", VAL_I64_NONNEG),
                FN("batchSize", VAL_I64_NONNEG), FN("ntoreturn", VAL_I64_NONNEG),
                F("singleBatch", CT_FLAG), F("hint", CT_DOC | CT_STR), CMD_FIND_MORE_FIELDS},
     .help = "query: {find, filter, projection, sort, skip, limit, batchSize, singleBatch}"},
    {.name = "getMore", .handler = cmd_get_more, .flags = CMD_NS_FIELD | CMD_STRICT_FIELDS,
     .arg_types = CT_INT64 | CT_INT32,
     .fields = {REQ("collection", CT_STR), FN("batchSize", VAL_GETMORE_BATCH),
                CMD_GETMORE_MORE_FIELDS},
     .help = "next batch of a cursor: {getMore: id, collection, batchSize}"},
    {.name = "killCursors", .handler = cmd_kill_cursors, .flags = CMD_STRICT_FIELDS | NSF, .arg_types = NS,
     .fields = {REQ("cursors", CT_ARR)}, .help = "kill cursors: {killCursors, cursors: [ids]}"},
    {.name = "update", .handler = cmd_update, .flags = CMD_STRICT_FIELDS | CMD_WRITE | NSF,
     .arg_types = NS,
     .fields = {REQ("updates", CT_ARR), F("ordered", CT_FLAG), CMD_UPDATE_MORE_FIELDS},
     .stmts = "updates", .stmt_fields = cmd_update_stmt_fields,
     .help = "update: {update, updates: [{q, u, upsert, multi}], ordered}"},
    {.name = "delete", .handler = cmd_delete, .flags = CMD_STRICT_FIELDS | CMD_WRITE | NSF,
     .arg_types = NS,
     .fields = {REQ("deletes", CT_ARR), F("ordered", CT_FLAG), CMD_DELETE_MORE_FIELDS},
     .stmts = "deletes", .stmt_fields = cmd_delete_stmt_fields,
     .help = "delete: {delete, deletes: [{q, limit}], ordered}"},
    {.name = "count", .handler = cmd_count, .flags = CMD_STRICT_FIELDS | NSF, .arg_types = NS,
     .fields = {F("query", CT_DOC | CT_NULL), FN("skip", VAL_I64_NONNEG), FN("limit", VAL_I64),
                F("hint", CT_DOC | CT_STR), CMD_COUNT_MORE_FIELDS},
     .help = "count: {count, query, skip, limit}"},
    {.name = "distinct", .handler = cmd_distinct, .flags = CMD_STRICT_FIELDS | NSF, .arg_types = NS,
     .fields = {REQ("key", CT_STR), F("query", CT_DOC | CT_NULL), CMD_DISTINCT_MORE_FIELDS},
     .help = "distinct values: {distinct, key, query}"},
    {.name = "findAndModify", .handler = cmd_find_and_modify, .flags = CMD_STRICT_FIELDS | CMD_WRITE | NSF,
     .arg_types = NS,
     .fields = {F("query", CT_DOC | CT_NULL), F("sort", CT_DOC), F("update", CT_DOC | CT_ARR),
                F("remove", CT_FLAG), F("new", CT_FLAG), F("upsert", CT_FLAG),
                F("fields", CT_DOC), CMD_FAM_MORE_FIELDS},
     .help = "findAndModify: {findAndModify, query, sort, update | remove, new, upsert, fields}"},
    {.name = "findandmodify", .handler = cmd_find_and_modify, .flags = CMD_STRICT_FIELDS | CMD_WRITE | NSF,
     .arg_types = NS,
     .fields = {F("query", CT_DOC | CT_NULL), F("sort", CT_DOC), F("update", CT_DOC | CT_ARR),
                F("remove", CT_FLAG), F("new", CT_FLAG), F("upsert", CT_FLAG),
                F("fields", CT_DOC), CMD_FAM_MORE_FIELDS},
     .help = "legacy spelling of findAndModify"},
    {.name = "aggregate", .handler = cmd_aggregate, .flags = CMD_STRICT_FIELDS,
     .arg_types = CT_STR | CT_NUM,
     .fields = {REQ("pipeline", CT_ARR), F("cursor", CT_DOC), F("explain", CT_FLAG),
                F("allowDiskUse", CT_FLAG), F("let", CT_DOC), F("collation", CT_DOC),
                F("hint", CT_DOC | CT_STR), CMD_ANY_FIELD("bypassDocumentValidation"),
                CMD_ANY_FIELD("fromMongos"), CMD_ANY_FIELD("fromRouter"),
                CMD_ANY_FIELD("needsMerge"), CMD_ANY_FIELD("collectionUUID"),
                CMD_ANY_FIELD("encryptionInformation"), CMD_ANY_FIELD("$_isMapReduceCommand")},
     .help = "aggregation pipeline: {aggregate, pipeline, cursor: {batchSize}, explain, "
             "allowDiskUse, let, hint} (docs/aggregation.md)"},
    {.name = "explain", .handler = cmd_explain, .flags = CMD_STRICT_FIELDS, .arg_types = CT_DOC,
     .fields = {F("verbosity", CT_STR)},
     .help = "explain a find: {explain: {find...}, verbosity}"},
    /* catalog */
    {.name = "create", .handler = cmd_create, .flags = CMD_STRICT_FIELDS | CMD_WRITE | NSF,
     .arg_types = NS, .fields = {CMD_CREATE_MORE_FIELDS},
     .help = "create a collection"},
    {.name = "createIndexes", .handler = cmd_create_indexes,
     .flags = CMD_STRICT_FIELDS | CMD_WRITE | NSF, .arg_types = NS,
     .fields = {REQ("indexes", CT_ARR), CMD_CREATE_INDEXES_MORE_FIELDS},
     .help = "build indexes: {createIndexes, indexes: [{key, name, unique}]}"},
    {.name = "listIndexes", .handler = cmd_list_indexes, .flags = CMD_STRICT_FIELDS | NSF,
     .arg_types = NS, .fields = {CMD_LIST_INDEXES_FIELDS},
     .help = "index specs (cursor form, _id_ first)"},
    {.name = "dropIndexes", .handler = cmd_drop_indexes,
     .flags = CMD_STRICT_FIELDS | CMD_WRITE | NSF, .arg_types = NS,
     .fields = {REQ("index", CT_STR | CT_DOC | CT_ARR), CMD_DROP_INDEXES_MORE_FIELDS},
     .help = "drop indexes: {dropIndexes, index: \"*\" | name | key | [names]}"},
    {.name = "drop", .handler = cmd_drop, .flags = CMD_STRICT_FIELDS | CMD_WRITE | NSF,
     .arg_types = NS, .fields = {CMD_DROP_MORE_FIELDS},
     .help = "drop a collection"},
    {.name = "dropDatabase", .handler = cmd_drop_database, .flags = CMD_STRICT_FIELDS | CMD_WRITE,
     .help = "drop every collection of $db"},
    {.name = "listCollections", .handler = cmd_list_collections, .flags = CMD_STRICT_FIELDS,
     .fields = {F("filter", CT_DOC), F("nameOnly", CT_FLAG), CMD_LIST_COLLECTIONS_MORE_FIELDS},
     .help = "collections of $db (cursor form, with info.uuid)"},
    {.name = "listDatabases", .handler = cmd_list_databases, .flags = CMD_STRICT_FIELDS,
     .fields = {F("nameOnly", CT_FLAG), F("filter", CT_DOC), CMD_LIST_DATABASES_MORE_FIELDS},
     .help = "databases with sizeOnDisk and empty (nameOnly: names; filter on the entries)"},
    {.name = "collStats", .handler = cmd_coll_stats, .flags = NSF, .arg_types = NS,
     .fields = {F("scale", CT_NUM)},
     .help = "count, size, avgObjSize, storageSize, nindexes, totalIndexSize"},
    {.name = "dataSize", .handler = cmd_data_size, .flags = CMD_FULL_NS_ARG,
     .arg_types = CT_STR,
     .fields = {F("keyPattern", CT_DOC), F("min", CT_DOC), F("max", CT_DOC), F("estimate", CT_FLAG)},
     .help = "bytes and documents of a key range: {dataSize: ns, keyPattern, min, max}"},
    {.name = "splitVector", .handler = cmd_split_vector, .flags = CMD_FULL_NS_ARG,
     .arg_types = CT_STR,
     .fields = {REQ("keyPattern", CT_DOC), F("min", CT_DOC), F("max", CT_DOC),
                F("maxChunkSize", CT_NUM), F("maxChunkSizeBytes", CT_NUM),
                F("maxSplitPoints", CT_NUM), F("maxChunkObjects", CT_NUM), F("force", CT_FLAG)},
     .help = "split points of a range (legacy rules)"},
    {.name = "autoSplitVector", .handler = cmd_auto_split_vector, .flags = NSF,
     .arg_types = CT_STR,
     .fields = {REQ("keyPattern", CT_DOC), F("min", CT_DOC), F("max", CT_DOC),
                REQ("maxChunkSizeBytes", CT_NUM), F("limit", CT_NUM)},
     .help = "split points of a range (5.0+ rules)"},
    /* cluster hooks (peers only) */
    {.name = "_addShard", .handler = cmd_add_shard,
     .flags = CMD_STRICT_FIELDS | CMD_WRITE | CMD_INTERNAL,
     .fields = {REQ("shardIdentity", CT_DOC)},
     .help = "become a shard: {_addShard: 1, shardIdentity: {shardName, clusterId, "
             "configsvrConnectionString}}"},
    {.name = "_shardsvrShardCollection", .handler = cmd_shardsvr_shard_collection,
     .flags = CMD_WRITE | CMD_INTERNAL | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .fields = {REQ("key", CT_DOC), F("unique", CT_FLAG), F("uuid", CT_BIN)},
     .help = "shard a collection here: shard-key index, pattern, sk column"},
    /* range deleter (rdel.c) */
    {.name = "cleanupOrphaned", .handler = cmd_cleanup_orphaned, .flags = CMD_FULL_NS_ARG,
     .arg_types = CT_STR,
     .help = "wait until no range deletion task of the namespace is left: "
             "{cleanupOrphaned: \"db.coll\"} (bounded by maxTimeMS, default 60 s)"},
    {.name = "_testInsertRangeDeletion", .handler = cmd_test_insert_range_deletion,
     .flags = CMD_TEST | CMD_WRITE | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .fields = {REQ("min", CT_DOC), REQ("max", CT_DOC), F("pending", CT_FLAG),
                F("whenToClean", CT_STR)},
     .help = "test only: persist a range deletion task {_testInsertRangeDeletion: ns, min, max, "
             "pending, whenToClean} → {id}"},
    {.name = "_testSetRangeDeletionReady", .handler = cmd_test_set_range_deletion_ready,
     .flags = CMD_TEST | CMD_WRITE | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .fields = {REQ("id", CT_STR)},
     .help = "test only: unset pending of a range deletion task {_testSetRangeDeletionReady: ns, id}"},
    {.name = "_flushRoutingTableCacheUpdates", .handler = cmd_flush_routing,
     .flags = CMD_STRICT_FIELDS | CMD_INTERNAL, .arg_types = CT_STR,
     .fields = {F("syncFromConfig", CT_BOOL)},
     .help = "refresh this shard's filtering metadata of a namespace"},
    {.name = "_flushDatabaseCacheUpdates", .handler = cmd_flush_db_cache,
     .flags = CMD_STRICT_FIELDS | CMD_INTERNAL, .arg_types = CT_STR,
     .fields = {F("syncFromConfig", CT_BOOL)},
     .help = "forget this shard's cached version and primary of a database (movePrimary)"},

    {.name = "_shardsvrMovePrimaryEnterCriticalSection", .handler = cmd_move_primary_crit,
     .flags = CMD_STRICT_FIELDS | CMD_WRITE | CMD_INTERNAL, .arg_types = CT_STR,
     .help = "movePrimary: refuse writes to the database's unsharded collections "
             "(StaleDbVersion after a bounded wait) until the exit; persisted"},
    {.name = "_shardsvrMovePrimaryExitCriticalSection", .handler = cmd_move_primary_crit,
     .flags = CMD_STRICT_FIELDS | CMD_WRITE | CMD_INTERNAL, .arg_types = CT_STR,
     .help = "movePrimary: refresh the database's entry, then let writes go on"},

    /* chunk migration (mig_donor.c, mig_recipient.c; docs/how-a-migration-works.md) */
    {.name = "_shardsvrMoveRange", .handler = cmd_shardsvr_move_range,
     .flags = CMD_WRITE | CMD_INTERNAL | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .fields = {REQ("fromShard", CT_STR), REQ("toShard", CT_STR), F("min", CT_DOC), F("max", CT_DOC),
                F("maxChunkSizeBytes", CT_NUM), F("waitForDelete", CT_FLAG),
                F("forceJumbo", CT_NUM | CT_BOOL), F("secondaryThrottle", CT_FLAG),
                F("epoch", CT_OID), F("timestamp", CT_TS)},
     .help = "donate [min, max) to toShard (config server -> donor); waits for the end"},
    {.name = "_migrateClone", .handler = cmd_migrate_clone, .flags = CMD_INTERNAL | CMD_NO_LOG,
     .arg_types = CT_STR, .fields = {REQ("sessionId", CT_STR)},
     .help = "recipient -> donor: next batch of the range's documents (empty = done)"},
    {.name = "_transferMods", .handler = cmd_transfer_mods, .flags = CMD_INTERNAL | CMD_NO_LOG,
     .arg_types = CT_STR, .fields = {REQ("sessionId", CT_STR)},
     .help = "recipient -> donor: captured writes {deleted, reload, size}"},
    {.name = "_recvChunkStart", .handler = cmd_recv_chunk_start,
     .flags = CMD_WRITE | CMD_INTERNAL | CMD_FULL_NS_ARG, .arg_types = CT_STR,
     .fields = {REQ("sessionId", CT_STR), REQ("from", CT_STR), REQ("migrationId", CT_BIN),
                F("fromShardName", CT_STR), F("toShardName", CT_STR), REQ("min", CT_DOC),
                REQ("max", CT_DOC), REQ("shardKeyPattern", CT_DOC), REQ("collectionUUID", CT_BIN),
                F("lsid", CT_DOC), F("txnNumber", CT_NUM)},
     .help = "donor -> recipient: start receiving [min, max)"},
    {.name = "_recvChunkStatus", .handler = cmd_recv_chunk_status, .flags = CMD_INTERNAL | CMD_NO_LOG,
     .arg_types = CT_STR, .fields = {REQ("sessionId", CT_STR), F("waitForSteadyOrDone", CT_FLAG)},
     .help = "donor -> recipient: state and counts of the receive"},
    {.name = "_recvChunkCommit", .handler = cmd_recv_chunk_commit, .flags = CMD_INTERNAL,
     .arg_types = CT_STR, .fields = {REQ("sessionId", CT_STR)},
     .help = "donor -> recipient: final drain, then count and checksum of the range"},
    {.name = "_recvChunkAbort", .handler = cmd_recv_chunk_abort, .flags = CMD_INTERNAL,
     .arg_types = CT_STR, .fields = {F("sessionId", CT_STR), F("migrationId", CT_BIN)},
     .help = "donor -> recipient: abort; the copied range is deleted"},
    {.name = "_recvChunkReleaseCritSec", .handler = cmd_recv_chunk_release, .flags = CMD_INTERNAL,
     .arg_types = CT_STR, .fields = {F("sessionId", CT_STR), REQ("migrationId", CT_BIN)},
     .help = "donor -> recipient: committed; the range is the recipient's now"},
    {.name = "currentOp", .handler = cmd_current_op,
     .help = "operations in progress: the migration this shard takes part in"},
    /* test-only (--enable-test-commands) */
    {.name = "_testCriticalSection", .handler = cmd_test_critical_section,
     .flags = CMD_TEST | CMD_FULL_NS_ARG, .arg_types = CT_STR, .fields = {REQ("action", CT_STR)},
     .help = "drive a migration critical section: {_testCriticalSection: \"db.coll\", "
             "action: \"enter\" | \"blockReads\" | \"leave\"}"},
};

const int shardd_cmd_table_len = (int)(sizeof shardd_cmd_table / sizeof shardd_cmd_table[0]);

void shardd_register_failpoints(void) {
    static const char *const points[] = {
        FP_BEFORE_WRITE_OBSERVER,  /* first: evaluated once per document written */
        FP_BEFORE_WRITE_COMMIT,
        FP_AFTER_WRITE_COMMIT,
        FP_GETMORE_AFTER_PIN,
        FP_BEFORE_INDEX_BUILD_COMMIT,
        FP_AFTER_INDEX_BUILD_COMMIT,
        FP_INDEX_BUILD_AFTER_BATCH,
        FP_BEFORE_DROP_INDEXES_COMMIT,
        FP_BEFORE_SHARD_COLLECTION_COMMIT,
        FP_AFTER_SHARD_COLLECTION_COMMIT,
        FP_BEFORE_DROP_COMMIT,
        FP_SUSPEND_RANGE_DELETION,
    };
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) fp_register(points[i]);
    mig_register_failpoints();
}
