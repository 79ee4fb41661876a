/*
 * limits.h — every size and count limit of minishard in one place, each with its
 * unit and the reason for its value. Used by every process.
 */
#ifndef MS_LIMITS_H
#define MS_LIMITS_H

/* Largest BSON document a user may store: MongoDB's BSONObjMaxUserSize (16 MiB). */
#define MS_DOC_BYTES_MAX (16 * 1024 * 1024)

/* Largest internal document (a reply that carries a full 16 MiB user doc plus the
 * command envelope): MongoDB's BSONObjMaxInternalSize = user max + 16 KiB. */
#define MS_DOC_INTERNAL_BYTES_MAX (MS_DOC_BYTES_MAX + 16 * 1024)

/* Largest request or reply message: MongoDB's maxMessageSizeBytes (48,000,000). A
 * message over this gets a BSONObjectTooLarge error reply. */
#define MS_MSG_BYTES_MAX 48000000

/* What NNG itself accepts (NNG_OPT_RECVMAXSZ). Twice MS_MSG_BYTES_MAX so that a message
 * somewhat over the limit still arrives and can be answered with a clear error; a larger
 * one makes NNG drop the connection (the caller sees a timeout), which bounds memory. */
#define MS_TRANSPORT_BYTES_MAX (2 * MS_MSG_BYTES_MAX)

/* Nesting depth of a stored document: MongoDB's BSONDepth::kDefaultMaxAllowableDepth. */
#define MS_DOC_DEPTH_MAX 100

/* Operations in one insert/update/delete command: MongoDB's maxWriteBatchSize. */
#define MS_WRITE_BATCH_OPS_MAX 100000

/* Bytes of documents in one _migrateClone / _transferMods / find batch: the 16 MiB user
 * limit less 1 KiB for the reply envelope, as MongoDB's cloner does. */
#define MS_BATCH_BYTES_MAX (MS_DOC_BYTES_MAX - 1024)

/* Default documents in a find's first batch (MongoDB: 101) and bytes in any batch. */
#define MS_FIRST_BATCH_DOCS_DEFAULT 101

/* A cursor idle this long is killed: MongoDB's cursorTimeoutMillis default (10 min). */
#define MS_CURSOR_IDLE_MS_MAX (10 * 60 * 1000)

/* Open cursors per process: bounds memory held for idle clients. */
#define MS_CURSORS_MAX 10000

/* Shard-key value size: MongoDB <= 4.2 limited it to 512 bytes and 4.4+ has no limit;
 * we bound it at 16 KiB so the shard-key index stays compact and a bad key is refused early. */
#define MS_SHARD_KEY_BYTES_MAX (16 * 1024)

/* Encoded key (index or shard key) size: bounds memcmp work and SQLite index pages. */
#define MS_KEY_BYTES_MAX (64 * 1024)

/* Fields in a shard key or index key pattern: MongoDB's limit of 32 fields per index. */
#define MS_KEY_FIELDS_MAX 32

/* Indexes per collection: MongoDB's limit of 64. */
#define MS_INDEXES_MAX 64

/* Namespace ("db.collection") length: MongoDB's 255-byte limit. */
#define MS_NS_BYTES_MAX 255

/* Worker threads per daemon serving requests (one nng_ctx each). Enough that a few
 * hung failpoints or blocked critical-section writes do not starve everyone else. */
#define MS_RPC_WORKERS_DEFAULT 16
#define MS_RPC_WORKERS_MAX 256

/* Default deadline of an RPC between processes. Commands that legitimately wait longer
 * (a migration step, waitForFailPoint) pass their own. */
#define MS_RPC_TIMEOUT_MS_DEFAULT 30000

/* Failpoints known to one process. */
#define MS_FAILPOINTS_MAX 256

/* Peer URL length ("tcp://127.0.0.1:27017" and ipc paths). */
#define MS_URL_BYTES_MAX 256

/* Chunks in one collection: bounds the routing table copy each router keeps. */
#define MS_CHUNKS_PER_COLLECTION_MAX 1000000

/* Shards in one cluster: bounds scatter/gather fan-out arrays. */
#define MS_SHARDS_MAX 64

/* Stale-version retries of one command at the router (MongoDB's kMaxNumStaleVersionRetries). */
#define MS_STALE_RETRIES_MAX 10

/* Documents per chunk estimate cap (MongoDB's kMaxObjectPerChunk). */
#define MS_CHUNK_OBJECTS_MAX 250000

/* Index builds beside reads and writes (shardd/store.c, docs/storage.md "Index builds"). */
/* Documents scanned per build transaction: the writer lock is released between batches,
 * so a write to any collection waits at most one batch (~30 ms at 5,000 documents). */
#define SHARDD_INDEX_BUILD_BATCH_ROWS 5000
/* Longest a build waits between two batches for the writers already queued on the
 * writer lock to pass (they would otherwise lose the unfair mutex to the build again). */
#define SHARDD_INDEX_BUILD_YIELD_MS 50
/* Unique-key conflicts that writes during a build may leave for the commit to re-check
 * (MongoDB's constraint-violation side table); more fail the build at once (memory bound). */
#define SHARDD_INDEX_BUILD_CONFLICTS_MAX 10000
/* How often a createIndexes that joins an identical build in progress looks again. */
#define SHARDD_INDEX_BUILD_JOIN_POLL_MS 10

#endif
