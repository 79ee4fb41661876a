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

/* Default deadline of a call by an outer client (shardctl --timeout, rpc_call with no
 * deadline). Calls between daemons use the shorter MS_RPC_PEER_TIMEOUT_MS_DEFAULT (below),
 * so an outer client hears the daemon's error rather than its own timeout. Commands that
 * legitimately wait longer (a migration step, waitForFailPoint) pass their own. */
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

/* ---- RPC client: calls to peers (issue 10 item 3: a dead or hung peer fails fast) ---- */

/* Deadline of a call from a daemon to another daemon (router -> shard or config
 * server, shard -> config server and shard) when the request has no maxTimeMS. Shorter
 * than MS_RPC_TIMEOUT_MS_DEFAULT, the deadline of shardctl and of any client that takes
 * our default, so that behind a router a hung shard shows the user the router's
 * NetworkTimeout naming the shard, not the client's own timeout; 10 s of margin covers
 * a config-server hop in between (MS_RPC_CONFIG_TIMEOUT_MS_DEFAULT). */
#define MS_RPC_PEER_TIMEOUT_MS_DEFAULT 20000

/* Deadline of a call from the config server to a shard when the request has no
 * maxTimeMS: below the router's deadline toward the config server, for the same reason. */
#define MS_RPC_CONFIG_TIMEOUT_MS_DEFAULT 15000

/* How long a call waits for a connection to its peer when it has none (the peer is
 * down, restarting, or the first dial is still under way) before it fails with
 * HostUnreachable. A daemon restarting on loopback is back within tens of ms, and the
 * client redials every half of this wait; mongos likewise answers HostUnreachable at
 * once for a shard that refuses connections instead of waiting the operation's deadline. */
#define MS_RPC_CONNECT_WAIT_MS 1000

/* Share of a process's request workers that calls to one peer may hold at once, in
 * percent. A hung peer (alive, connected, never answering) then holds at most this share
 * of the workers until the deadline; the rest keep serving ping and operations on other
 * peers. 75 % of the default 16 workers is 12. */
#define MS_RPC_PEER_SHARE_PCT 75

/* How long a call over that share waits for a slot before it fails with
 * ExceededTimeLimit. Enough for a burst to a healthy peer (its calls take milliseconds),
 * short enough that the workers left free keep answering within a second. */
#define MS_RPC_PEER_SLOT_WAIT_MS 250

#endif
