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

/* Nesting depth of a stored document, counted as MongoDB counts it (the document itself
 * is level 1; each non-empty embedded document or array adds one; empty ones add none).
 * 100 is MongoDB's documented limit (its server lets a user document reach its
 * getMaxDepthForUserStorage()). */
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

/* Worker threads per daemon serving requests (common/rpc_server.c). Enough that a few
 * hung failpoints or blocked critical-section writes do not starve everyone else. */
#define MS_RPC_WORKERS_DEFAULT 16
#define MS_RPC_WORKERS_MAX 256
/* Workers of every SP server reserved for the control commands (rpc_control_by_name:
 * ping, configureFailPoint, serverStatus, currentOp, hello), so a daemon whose ordinary
 * workers all wait behind a hung operation still answers them and can be released.
 * Each connection holds at most one of them at a time. */
#define MS_RPC_CONTROL_WORKERS 2

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

/* One page of getRoutingTable: at most this many bytes of chunks (one chunk past it
 * ends the page), so no reply of any table nears MS_MSG_BYTES_MAX and the config
 * server never builds a whole table in memory. At ~90 bytes a chunk: ~46,000 a page. */
#define MS_ROUTING_PAGE_BYTES (4 * 1024 * 1024)
/* A routing-table fetch that sees the collection change generation (dropped, resharded)
 * between its pages starts over, at most this many times in all; then it fails. */
#define MS_ROUTING_FETCH_TRIES 4
/* How long a request waits for a routing-table refresh another thread runs (router and
 * shard): a refresh is many page calls, each with its own timeout, so the waiter follows
 * it until it ends, the request's own maxTimeMS passes, or this. */
#define MS_ROUTING_REFRESH_WAIT_MS 120000

/* Shards in one cluster: bounds scatter/gather fan-out arrays. */
#define MS_SHARDS_MAX 64

/* Stale-version retries of one command at the router (MongoDB's kMaxNumStaleVersionRetries). */
#define MS_STALE_RETRIES_MAX 10

/* Documents per chunk estimate cap (MongoDB's kMaxObjectPerChunk). */
#define MS_CHUNK_OBJECTS_MAX 250000

/* ---- cursors: per-connection fairness and bounded memory ----
 * A router multiplexes all its clients' finds over one connection to each shard, and each
 * router cursor holds at most one cursor on each shard. So the numbers nest:
 *   router, per client connection  1,000  (MS_ROUTER_CURSORS_PER_CONN_MAX)
 *   router, per client address     2,000  (MS_ROUTER_CURSORS_PER_CLIENT_MAX)
 *   router, all clients            4,000  (MS_ROUTER_CURSORS_MAX)
 *   shard, per connection          5,000  (MS_CURSORS_PER_CONN_MAX) >= the router total plus a
 *                                         margin for shard cursors whose killCursors is still
 *                                         on its way, so a router's connection never meets it
 *   shard, all connections        10,000  (MS_CURSORS_MAX) = 2 x per connection: one
 *                                         connection can take at most half
 * The router meets its own caps first and answers its client; a direct client of a shard
 * (as of a mongod) can pin at most half the shard's cursors from one connection. */

/* Open cursors on a shard from one connection (NNG pipe): half of MS_CURSORS_MAX. */
#define MS_CURSORS_PER_CONN_MAX 5000

/* Open router cursors in one router, and from one client connection of it. */
#define MS_ROUTER_CURSORS_MAX 4000
#define MS_ROUTER_CURSORS_PER_CONN_MAX 1000
/* Open router cursors from one client address (its IP, whatever the port): half of the
 * router's, so a client that opens many connections (a driver's pool) still leaves the
 * other half to everyone else. Clients on one host share it. */
#define MS_ROUTER_CURSORS_PER_CLIENT_MAX 2000
/* A client address as the cursor registry keys it ("127.0.0.1", "[0:0:...:1]": an IPv6
 * one is at most 41 bytes). */
#define MS_CLIENT_KEY_BYTES 48

/* Bytes of shard batches buffered in all router cursors of one router. A router cursor asks
 * each shard for about one client batch (batchSize forwarded), so it holds at most one shard
 * batch (<= MS_BATCH_BYTES_MAX) per shard; this caps the sum. While it is reached new finds
 * are refused and a getMore returns the documents it already has (or fails when it has
 * none) rather than fetch more. 512 MiB: about 1,700 cursors of 101 1-KB documents over 3
 * shards (~300 KB each), or 10 cursors of full 16 MB batches over 3 shards. */
#define MS_ROUTER_CURSOR_BYTES_MAX (512LL * 1024 * 1024)

/* Config-database cursors (find on config.* through a router, or direct). The config server
 * keeps at most MS_CFG_CURSORS_MAX (1,000) in all; one connection may hold half.
 * A router relays every client's config reads over its one connection to the config server,
 * so it caps its clients first: 100 per client connection, 400 for the whole router (below
 * the config server's 500 per connection, so the router's connection never meets it). */
#define MS_CFG_CURSORS_PER_CONN_MAX 500
#define MS_ROUTER_CFG_CURSORS_MAX 400
#define MS_ROUTER_CFG_CURSORS_PER_CONN_MAX 100
#define MS_ROUTER_CFG_CURSORS_PER_CLIENT_MAX 200   /* half of MS_ROUTER_CFG_CURSORS_MAX */
/* The config server's cursors in all, and the bytes of materialised results they hold
 * (config readers are tools and routers, not applications; the caps bound the memory idle
 * clients can pin). */
#define MS_CFG_CURSORS_MAX 1000
#define MS_CFG_CURSOR_BYTES_MAX (512LL * 1024 * 1024)

/* ---- names, numbers, depth and logs (common/validate.c, log.c) ---- */

/* Nesting depth of any message (request or reply): the stored-document limit plus the
 * envelope that carries such a document ({cursor: {firstBatch: [doc]}}, {updates: [{u:
 * {$set: {a: doc}}}]}, ...). 20 is MongoDB's BSONDepth::kExtraSystemDepthLevels, the margin
 * its hard limit keeps above the storage limit, so what was stored can always be read back. */
#define MS_MSG_DEPTH_MAX (MS_DOC_DEPTH_MAX + 20)

/* Top-level fields of one command document. Dispatch refuses a repeated key (common/cmd.c)
 * by sorting the keys, which needs one slot per field; a command has a few dozen options,
 * so 10,000 is far beyond any real one and bounds that work at ~160 KB per request. */
#define MS_CMD_TOP_FIELDS_MAX 10000

/* log_str(): per-thread buffers (values in one log call) and bytes of one logged value;
 * a longer value is cut, the line stays one line. */
#define MS_LOG_STR_SLOTS 8
#define MS_LOG_VALUE_BYTES_MAX 1024

/* ---- regular expressions (common/regex.c) ---- */

/* Pattern length in bytes: MongoDB's own cap on a regex pattern (32,764). */
#define MS_REGEX_PATTERN_BYTES_MAX 32764

/* Instructions in one compiled regex. Counted repetition is expanded ({2,5} copies its
 * operand five times), so this is what bounds compile memory (12 bytes an instruction,
 * 600 KB) and match cost: time is O(subject bytes x instructions), memory 16 bytes an
 * instruction per match. 50,000 admits any pattern of MongoDB's maximum length without
 * counted repetition; (a{1,700}){1,700} (about a million) is refused before expanding. */
#define MS_REGEX_INSTS_MAX 50000

/* Nesting depth of groups: the parser and code generator recurse once per level, so
 * this bounds their stack use; real patterns rarely exceed a handful. */
#define MS_REGEX_NEST_MAX 100

/* Largest count in {n,m}: PCRE's syntax limit (65,535). The instruction cap is what
 * really bounds a repetition. */
#define MS_REGEX_REPEAT_MAX 65535

/* Matching steps between two maxTimeMS checks (op_check = one clock read). */
#define MS_REGEX_STEPS_PER_CHECK 4096

/* ---- maxTimeMS (common/opctx.h) ---- */

/* Documents (or rows, or statements) a long loop handles between two interrupt checks
 * (op_check, one clock read): small enough that a scan of small documents overruns its
 * deadline by well under a millisecond, large enough that the check costs nothing. */
#define MS_INTERRUPT_CHECK_DOCS 256

/* ---- index builds beside reads and writes (shardd/store_index.c, docs/storage.md) ---- */

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

/* ---- RPC server: connections, memory and time (common/rpc_server.c) ---- */

/* Bytes held for received requests across ALL connections of one server, from the first
 * byte of a message until its handler returns. Two largest messages (2 x 96 MB) fit, so a
 * legitimate oversized message can still be answered; past it the connection holding the
 * largest partial message is closed. Bounds the memory any number of clients can pin. */
#define MS_RPC_RECV_BUDGET_BYTES (256 * 1024 * 1024)

/* First allocation for a message body; it doubles as bytes arrive, so an announced
 * length costs nothing until the bytes are really sent. */
#define MS_RPC_RECV_CHUNK_BYTES (64 * 1024)

/* Open connections per server. Below the usual 1024-descriptor soft limit, leaving room
 * for SQLite files and the daemon's own outgoing peer connections. */
#define MS_RPC_CONNS_MAX 800

/* Requests in flight on one connection (queued, being handled, or answered but not yet
 * sent). A router multiplexes all its workers' calls to one peer over ONE connection
 * (up to MS_RPC_WORKERS_MAX plus background calls), so twice that. Past it the server
 * stops reading from the connection until replies drain (back-pressure, not an error). */
#define MS_RPC_CONN_INFLIGHT_MAX (2 * MS_RPC_WORKERS_MAX)

/* Reply bytes queued on one connection past which the server stops reading its new
 * requests: a client that does not read its replies cannot make us buffer unbounded
 * replies. One maximal reply plus room for pipelined small ones. */
#define MS_RPC_CONN_REPLY_BYTES_MAX (64 * 1024 * 1024)

/* Share of the worker pool one connection may occupy at once, in percent (at least 1
 * worker): one client's slow or numerous requests always leave workers to the others.
 * Not half: a router multiplexes all its calls to a shard over one connection, and some
 * of them may legitimately wait (a migration's critical section, a failpoint) while its
 * others must still run; 3/4 of 16 leaves 4 for the config server and other clients. */
#define MS_RPC_CONN_WORKERS_PCT 75

/* A send that makes no progress for this long closes the connection: the peer stopped
 * reading. Long enough for a loaded machine, short enough that a stuck client is gone
 * before the next one's deadline (MS_RPC_TIMEOUT_MS_DEFAULT). */
#define MS_RPC_SEND_STALL_MS 10000

/* A connection half-way through a message (or through the handshake) that sends nothing
 * for this long is closed (slowloris), as NNG's own 10 s handshake timeout. */
#define MS_RPC_RECV_STALL_MS 10000

/* The whole of one message must arrive within this: a client trickling one byte per
 * stall period cannot hold a connection and budget forever. 96 MB on loopback takes < 1 s. */
#define MS_RPC_RECV_MSG_MS 60000

/* ---- RPC client: calls to peers (a dead or hung peer fails fast; common/rpc.c) ---- */

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

/* A tcp:// peer's idle connections kept for later calls (common/rpc.c; each call takes one
 * of its own): more than the calls a process can have in flight to one peer (the share
 * cap, 12 of 16 workers, plus background threads), so a busy peer's calls never dial. */
#define MS_RPC_IDLE_CONNS_MAX 64
/* Pause between two dials of a peer that refuses connections, within the connection wait:
 * a daemon restarting on loopback is back within tens of ms (NNG's RECONNMINT was 20 too). */
#define MS_RPC_REDIAL_MS 20

/* ---- migration entry points (configsvr/cmd_migrate.c, router, shardctl) ---- */
/* Deadline of a whole migration when the request has no maxTimeMS: the config server's
 * wait on the donor's _shardsvrMoveRange. A migration copies a whole chunk (up to 1 GB)
 * and catches up with writes; MongoDB's moveChunk has no deadline at all, 30 minutes
 * bounds a stuck one while covering a large chunk on a slow machine. */
#define MS_MOVE_CHUNK_TIMEOUT_MS (30 * 60 * 1000)
/* Each hop nearer the client waits this much longer than the hop behind it (router
 * over config server, shardctl over router), so the innermost timeout is the one the
 * user sees, naming the peer that did not answer. */
#define MS_MOVE_CHUNK_HOP_MARGIN_MS 10000

/* ---- chunk migration (shardd/mig_*.c; notes §1.9) ---- */

/* Default chunk size when the request names none: MongoDB's 128 MB. */
#define MS_CHUNK_BYTES_DEFAULT (128LL * 1024 * 1024)
/* The write pause the donor aims for: it enters the critical section once the captured
 * writes left would take the recipient no longer than this at its measured rate
 * (--migration-write-pause-budget-ms). MongoDB waits for < 10 % of the chunk size. */
#define MS_MIG_WRITE_PAUSE_BUDGET_MS_DEFAULT 20
/* Catch-up that does not converge within this long aborts (writes outpace the recipient;
 * --migration-catchup-timeout-ms). MongoDB allows 6 hours. */
#define MS_MIG_CATCHUP_MS_DEFAULT 60000
/* The clone of one chunk (bounded so a stuck recipient cannot hold the donor forever). */
#define MS_MIG_CLONE_TIMEOUT_MS (60 * 60 * 1000)
/* The donor waits this long for overlapping range deletions of its own before a move
 * (MongoDB's drainOverlappingRangeDeletionsOnStartTimeoutMS). */
#define MS_MIG_OVERLAP_WAIT_MS 10000
/* The recipient waits this long for overlapping range deletions
 * (receiveChunkWaitForRangeDeleterTimeoutMS). */
#define MS_MIG_RECV_OVERLAP_WAIT_MS 10000
/* _recvChunkCommit waits this long for catch-up and again for the final drain
 * (1.25 x the 30 s config-command timeout, MongoDB's number). */
#define MS_MIG_RECV_COMMIT_MS 37500
/* A recipient whose donor never sends the decision gives up waiting after this long
 * (its task stays pending: the donor's recovery sends the decision later). */
#define MS_MIG_RECV_DECISION_WAIT_MS (10 * 60 * 1000)
/* _waitForDelete waits this long for the donor's range deletion. */
#define MS_MIG_WAIT_FOR_DELETE_MS (10 * 60 * 1000)
/* Shutdown waits this long for migration threads to notice. */
#define MS_MIG_STOP_WAIT_MS 3000
/* A recipient remembers this many migrations whose abort came before their start (a start
 * held up in the network past the donor's deadline), to refuse that start when it comes:
 * one shard receives one migration at a time, so a few dozen cover any backlog of late
 * starts; each costs 16 bytes. */
#define MS_MIG_ABORTS_REMEMBERED 64
/* _recvChunkAbort waits this long for the receive to stop writing before it makes the
 * task ready and answers; past it the donor is told to ask again (it retries). Its own
 * peer deadline (MS_RPC_PEER_TIMEOUT_MS_DEFAULT) must leave room for it. */
#define MS_MIG_RECV_ABORT_WAIT_MS 5000
/* Index DDL (createIndexes, dropIndexes) of a collection waits this long (or the op's
 * maxTimeMS when shorter) for a migration of it on this shard to let it through: the
 * donor from just before its critical section to the end, the recipient for the whole
 * receive. Shorter than the router's call to the shard, so the user gets our answer
 * (ConflictingOperationInProgress: retry). */
#define MS_MIG_INDEX_DDL_WAIT_MS 15000
/* At most this many index DDL commands run on a shard at once (the registry that lets a
 * migration wait for them is a fixed table). */
#define MS_MIG_INDEX_DDL_MAX 64
/* One `_getNextSessionMods` batch (session migration, shardd/mig_session.c) holds at most
 * this many retryable-write records and about this many bytes: a reply stays far below
 * the 16 MB message limit and one recipient transaction persists it (MongoDB bounds its
 * batch by BSONObjMaxUserSize only). */
#define MS_MIG_SESSION_BATCH_RECORDS_MAX 10000
#define MS_MIG_SESSION_BATCH_BYTES_MAX (4 * 1024 * 1024)
/* The recipient asks again this soon after a pull found nothing new. */
#define MS_MIG_SESSION_POLL_MS 10
/* ---- migration base: write capture, critical section, internal workers ---- */

/* Bytes of captured _id documents a migration's write capture (shardd/xfer.c) may hold
 * before it gives up with ExceededMemoryLimit and the migration aborts: MongoDB's limit on
 * the ids a donor queues for _transferMods (500 MiB, MigrationChunkClonerSource). The user
 * writes that would have been captured still succeed. */
#define MS_MIG_CAPTURE_BYTES_MAX (500LL * 1024 * 1024)

/* Longest a versioned write (or, during the config commit, a read) refused by a
 * migration's critical section waits on the shard for the section to be left before it
 * answers StaleConfig (less when its maxTimeMS leaves less). A commit normally holds the
 * section for tens of ms; the bound keeps a stuck migration from pinning request workers,
 * and the router's StaleConfig retries (MS_STALE_RETRIES_MAX) carry the write on. */
#define MS_CRITSEC_WAIT_MS 5000

/* Workers of a shard's command server reserved for internal commands (names starting
 * with '_': _migrateClone, _transferMods, _recvChunk*, _shardsvrMoveRange...), on top of
 * --workers. User requests never occupy them, so writes parked on a critical section
 * cannot starve the calls that end it. One migration per shard needs at most three at
 * once (its own long-running _shardsvrMoveRange, a clone or mods pull, a status poll). */
#define MS_RPC_INTERNAL_WORKERS 4

/* ---- range deleter (shardd/rdel.c) ---- */
/* Documents one range-deleter batch deletes in its own write transaction (default:
 * MongoDB's rangeDeleterBatchSize before 5.2, 128); the maximum keeps one batch — and the
 * writer lock it holds — well under a second on this hardware. */
#define MS_RDEL_BATCH_DOCS_DEFAULT 128
#define MS_RDEL_BATCH_DOCS_MAX 10000
/* Pause between batches so user writes get the writer lock (MongoDB's
 * rangeDeleterBatchDelayMS, 20); at most a minute, or a task would never end. */
#define MS_RDEL_BATCH_DELAY_MS_DEFAULT 20
#define MS_RDEL_BATCH_DELAY_MS_MAX 60000
/* How long a "delayed" task waits before it starts (MongoDB's orphanCleanupDelaySecs is
 * 900 s so secondaries' queries finish; 2 s here so demos show it); at most a day. */
#define MS_RDEL_CLEANUP_DELAY_MS_DEFAULT 2000
#define MS_RDEL_CLEANUP_DELAY_MS_MAX 86400000
/* One wait for the ownership snapshots of a range before the deleter logs the open
 * cursors and checks whether it must stop or the task went away; it retries forever. */
#define MS_RDEL_SNAPSHOT_WAIT_SLICE_MS 1000
/* A task whose range is still owned by readers' snapshots is set aside and re-checked
 * this often, so tasks of other collections and ranges run meanwhile. */
#define MS_RDEL_READERS_POLL_MS 100
/* A task the deleter refused (the shard owns part of its range) is re-checked, with a
 * metadata refresh, this often: a refresh is a config server round trip. */
#define MS_RDEL_REFUSED_RECHECK_MS 10000
/* Refused tasks listed in serverStatus.rangeDeleter.refused (the count is exact). */
#define MS_RDEL_REFUSED_LIST_MAX 16
/* After a failed batch (an error failpoint, a disk error) the task is retried this much
 * later instead of spinning. */
#define MS_RDEL_RETRY_MS 1000
/* cleanupOrphaned waits for the range deletions of its namespace this long when the
 * command has no maxTimeMS (MongoDB's cleanupOrphaned waits without bound; a minute keeps
 * a worker from being held forever behind a pending task). */
#define MS_CLEANUP_ORPHANED_WAIT_MS 60000

/* ---- migration progress (router currentOp, shardctl status) ---- */
/* How long the router's currentOp waits for each shard when the client gave no maxTimeMS:
 * a status view must come back while a shard is dead or hung (it is then listed in
 * shardErrors), well before the 20 s peer timeout; a live shard answers in milliseconds. */
#define MS_CURRENT_OP_SHARD_WAIT_MS 5000
/* $currentOp's `command` of an operation: with truncateOps: true a command larger than
 * this many bytes is shown as {$truncated: "<its start as JSON>"} (MongoDB's 1000-byte
 * truncation of curop reports); without it, a command larger than the second bound (a
 * 16 MB insert) is truncated the same way, so a listing of every worker's operation
 * stays a few MB however large the requests in flight. */
#define MS_CUROP_TRUNCATE_BYTES 1000
#define MS_CUROP_COMMAND_BYTES_MAX (1024 * 1024)

/* ---- zones, removeShard, movePrimary (configsvr/cat_zones.c, cmd_zones.c, cmd_moveprimary.c) ---- */
/* Zone names (config.shards tags, config.tags tag): MongoDB sets no length of its own;
 * a bound keeps every config document holding one small and log lines readable. */
#define MS_ZONE_NAME_BYTES_MAX 256
/* movePrimary copies a collection in find batches of at most this many documents (each
 * batch also capped at MS_BATCH_BYTES_MAX by the shard), one insert per batch: the
 * insert then stays below MS_MSG_BYTES_MAX and the copy costs one round trip per batch. */
#define MS_MOVE_PRIMARY_BATCH_DOCS 1000
/* Unsharded collections one movePrimary copies (listCollections of the old primary is
 * read in one reply; more is refused rather than half-moved). */
#define MS_MOVE_PRIMARY_COLLS_MAX 10000

/* ---- balancer (configsvr/balancer.c) ---- */
/* Pause between rounds that moved nothing or while balancing is off (MongoDB's
 * kBalanceRoundDefaultInterval, 10 s) and between rounds that moved chunks (MongoDB's
 * balancerMigrationsThrottlingMs, 1 s); tests lower both. At most an hour: a balancer
 * that never wakes is one that is off, and that is what balancerStop is for. */
#define MS_BALANCER_IDLE_MS_DEFAULT 10000
#define MS_BALANCER_THROTTLE_MS_DEFAULT 1000
#define MS_BALANCER_INTERVAL_MS_MAX 3600000
/* Collections and shards one round looks at: the round's arrays are sized by them (a
 * larger cluster is balanced over several rounds: the rest waits for the next one). */
#define MS_BALANCER_COLLS_MAX 4096
#define MS_BALANCER_SHARDS_MAX 256
/* Chunks whose size one round checks for auto-split (each is one autoSplitVector on its
 * owner, a scan of the chunk's range there); the rest is checked in later rounds. */
#define MS_BALANCER_AUTOSPLIT_CHUNKS_MAX 1024
/* How long balancerStop waits for the current round (and its migrations) to end when
 * the request has no maxTimeMS: below the router's deadline toward the config server
 * (MS_RPC_CONFIG_TIMEOUT_MS_DEFAULT) so the client gets our answer (ok, or
 * ExceededTimeLimit with the setting written) rather than a router timeout. */
#define MS_BALANCER_STOP_WAIT_MS 10000
/* The cluster chunk size when config.settings has no chunksize document: MongoDB 6.0+'s
 * 128 MB (the config server's default, and what a router reports until it has read one). */
#define MS_CHUNK_SIZE_MB_DEFAULT 128
/* chunksize valueBytes (test only, --enable-test-commands): at least 1 KB so a chunk
 * holds some documents; at most the 1024 MB of `value`. */
#define MS_CHUNKSIZE_VALUE_BYTES_MIN 1024
#define MS_CHUNKSIZE_VALUE_BYTES_MAX (1024LL * 1024 * 1024)

/* ---- defragmentation and the auto-merger (configsvr/defrag.c, bal_merge.c) ---- */
/* configureCollectionBalancing chunkSize (MB): MongoDB's [1 MB, 1 GB]; 0 = unset. */
#define MS_COLL_CHUNK_SIZE_MB_MAX 1024
/* Failed actions one defragmentation step lists in its balancer.round entry (the rest
 * only counted): keeps an actionlog entry small when a shard is down. */
#define MS_DEFRAG_LOGGED_ERRORS_MAX 8
/* The auto-merger's pass interval (MongoDB's autoMergerIntervalSecs, 3600 s) and its
 * pause between two merges of one collection (autoMergerThrottlingMS, 15 s); tests lower
 * both. At most a day: an auto-merger that never runs is one turned off (settings
 * automerge). */
#define MS_AUTOMERGER_INTERVAL_MS_DEFAULT 3600000
#define MS_AUTOMERGER_THROTTLE_MS_DEFAULT 15000
#define MS_AUTOMERGER_MS_MAX 86400000
/* Chunks that arrived on their shard less than this long ago are not merged by the
 * auto-merger or mergeAllChunksOnShard: minishard's stand-in for MongoDB's
 * minSnapshotHistoryWindowInSeconds / transactionLifetimeLimitSeconds horizon (a chunk
 * just moved may still be read at an older placement). minishard keeps no snapshot
 * history, so one transaction lifetime (60 s) is enough. */
#define MS_AUTOMERGER_HORIZON_MS_DEFAULT 60000
/* mergeAllChunksOnShard without maxNumberOfChunksToMerge: what MongoDB's auto-merger
 * asks for (1000); the command accepts at most MS_MERGE_ALL_CHUNKS_MAX. */
#define MS_MERGE_ALL_CHUNKS_DEFAULT 1000
#define MS_MERGE_ALL_CHUNKS_MAX 1000000

/* balancer secondary thread: the pause between two defragmentation
 * steps of one collection (MongoDB's chunkDefragmentationThrottlingMS, 1000 ms in 6.x;
 * tests lower it). At most MS_AUTOMERGER_MS_MAX, like the auto-merger's pauses. */
#define MS_DEFRAG_THROTTLE_MS_DEFAULT 1000

/* ---- aggregation (common/expr.c, common/agg.c, shardd/cmd_agg.c) ---- */
/* One component of a field path in an expression ("$a.b": each of a, b) and a whole
 * path: longer ones are refused at parse time (a stored field name is far shorter). */
#define MS_EXPR_FIELD_BYTES_MAX 1024
/* Operands of one operator ($add: [...], $concat: [...]): evaluated into a stack array. */
#define MS_EXPR_ARGS_MAX 64
/* Nesting of an expression or a projection: bounds the parser's and evaluator's
 * recursion (the message's own nesting is already capped by MS_MSG_DEPTH_MAX). */
#define MS_EXPR_DEPTH_MAX 100
/* A string an expression builds ($concat): MongoDB's BSONObjMaxUserSize. */
#define MS_EXPR_STRING_BYTES_MAX (16 * 1024 * 1024)
/* Stages of one pipeline: MongoDB's internalPipelineLengthLimit (1000). */
#define MS_AGG_STAGES_MAX 1000
/* Accumulators of one $group: each group holds one state per accumulator. */
#define MS_AGG_ACCUMULATORS_MAX 256
/* Memory of one $sort or $group before MongoDB's 292 QueryExceededMemoryLimitNoDiskUseAllowed
 * (its internalQueryMaxBlockingSortMemoryUsageBytes and $group's 100 MB). */
#define MS_AGG_BLOCKING_BYTES_MAX (100 * 1024 * 1024)
/* The same with allowDiskUse: minishard does not spill to disk; it sorts and groups in
 * memory up to this hard cap instead (then 292 as well), sized for the small machines it
 * runs on. */
#define MS_AGG_DISK_USE_BYTES_MAX (400 * 1024 * 1024)
/* A pipeline's whole result, held by the shard's aggregate cursor between getMores (the
 * pipeline runs to completion in the aggregate command): ExceededMemoryLimit beyond it. */
#define MS_AGG_RESULT_BYTES_MAX (100 * 1024 * 1024)

/* ---- aggregate on the router (router/rt_agg.c) ---- */
/* What the router gathers from the shards for one aggregate before merging (the shards'
 * partial results, then the merger's input): the shard side holds at most
 * MS_AGG_RESULT_BYTES_MAX each, the router's merge as much in all: ExceededMemoryLimit. */
#define MS_ROUTER_AGG_GATHER_BYTES_MAX (100LL * 1024 * 1024)

/* ---- MongoDB wire protocol (common/wire.c, rpc_server.c's wire framing) ---- */
/* A whole wire message, header included: MongoDB's maxMessageSizeBytes (48,000,000), the
 * figure drivers read from hello and never exceed. A longer announced length closes the
 * connection before anything is allocated. */
#define MS_WIRE_MSG_BYTES_MAX 48000000
/* OP_MSG kind-1 sections (document sequences) in one message: MongoDB accepts 2 (drivers
 * send 1) and closes the connection past that; its merge is quadratic in them. */
#define MS_WIRE_DOC_SEQUENCES_MAX 2
/* A wire connection idle between messages this long is closed (--wire-idle-ms). MongoDB
 * has no bound; drivers keep pooled connections open and notice a closed one when they
 * check it out (pymongo, the Node driver), so 10 minutes frees abandoned connections
 * without costing a live pool anything but a reconnect. Tests lower it. */
#define MS_WIRE_IDLE_MS_DEFAULT 600000
#define MS_WIRE_IDLE_MS_MIN 100
#define MS_WIRE_IDLE_MS_MAX 86400000
/* An awaitable hello (topologyVersion + maxAwaitTimeMS) waits at most this long, whatever
 * maxAwaitTimeMS says (MongoDB has no bound): answering earlier is always allowed by the
 * monitoring protocol, and a parked request must have a deadline. Drivers ask for their
 * heartbeat interval (10 s by default). */
#define MS_HELLO_AWAIT_MS_MAX 600000
/* At shutdown (SIGTERM) waiting hellos are answered ShutdownInProgress first, as mongos
 * does in quiesce mode; the stop waits this long at most for those answers to be sent
 * (mongos then waits out its whole quiesce period, 15 s by default; here the answers are
 * all there is to wait for). */
#define MS_QUIESCE_FLUSH_MS 2000


/* ---- the config server's web view (configsvr/http.c, http_api.c) ---- */
/* A request target (path and query) longer than this is refused with 400: the page asks
 * for short fixed paths; a cap keeps a hostile client from making us parse megabytes. */
#define MS_HTTP_URI_BYTES_MAX 1024
/* Query parameters in one request target (more: 400); the endpoints take at most two. */
#define MS_HTTP_QUERY_PARAMS_MAX 8
/* How long an assembled cluster state is served before it is rebuilt: N open pages polling
 * every second cost one build per this interval, like one page. A request finding an
 * older state waits for the next build (parked in its connection's queue, never blocking),
 * and nothing is built while nobody asks: an idle web port costs no shard call at all. */
#define MS_HTTP_STATE_TTL_MS 400
/* Deadline of each shard call of a build (listDatabases, collStats, currentOp): short, so
 * a silent shard is shown as unreachable within about a second instead of freezing the page. */
#define MS_HTTP_SHARD_CALL_MS 700
/* Requests waiting for a build at once (more: 503): bounds the memory slow clients pin. */
#define MS_HTTP_PENDING_MAX 256
/* Chunks listed over all collections in one state (the rest are counted, with truncated:
 * true): a page of 2000 blocks is already more than a screen can show. */
#define MS_HTTP_CHUNKS_MAX 2000
/* Sharded collections shown (and asked about: a collStats per shard and a balancerExplain
 * each per build); the rest are counted, with truncated: true. */
#define MS_HTTP_COLLS_MAX 32
/* Changelog entries in the feed (newest first) and balancer rounds from config.actionlog:
 * ?n= may ask for fewer, never more. */
#define MS_HTTP_CHANGELOG_MAX 100
#define MS_HTTP_ROUNDS_MAX 20
/* Connections of the web port (configsvr/http.c, its own HTTP/1.1 server). One with no
 * request waiting and no answer for MS_HTTP_IDLE_MS_DEFAULT (--http-idle-ms) is closed: a
 * page polls every second and is answered within one, so only an abandoned keep-alive, a
 * client that never finishes its request or one trickling it byte by byte gets there; the
 * same time bounds answers left unsent (a client that does not read them). Beyond
 * MS_HTTP_CONNS_MAX open connections the longest silent is closed for each new one (a
 * browser opens at most 6 per host; 64 is ten open pages with room to spare). The loop
 * looks at its deadlines at least every MS_HTTP_TICK_MS * 10 ms. */
#define MS_HTTP_TICK_MS 100
#define MS_HTTP_IDLE_MS_DEFAULT 10000
#define MS_HTTP_IDLE_MS_MIN 1000
#define MS_HTTP_IDLE_MS_MAX 3600000
#define MS_HTTP_CONNS_MAX 64
/* A request head (request line and header fields; no request here has a body) must fit
 * the connection's read buffer, MS_HTTP_HEAD_BYTES_MAX, with lines of at most
 * MS_HTTP_LINE_BYTES_MAX and at most MS_HTTP_HEADERS_MAX fields: a browser sends about 1 KB
 * in 15 fields. Over: 400 (the request line) or 431, and the connection closed. */
#define MS_HTTP_HEAD_BYTES_MAX 16384
#define MS_HTTP_LINE_BYTES_MAX 8192
#define MS_HTTP_HEADERS_MAX 100
/* Pipelined requests of one connection waiting for their answers (behind one that waits
 * for a build; answers leave in request order). The one past it is not answered: the queued
 * ones are answered, then the connection is closed. Browsers do not pipeline. */
#define MS_HTTP_PIPELINE_MAX 32
/* Answers of one connection handed to us and not yet taken by its socket: past it no
 * further request is read until they drain (one answer may pass it; the state is capped). */
#define MS_HTTP_OUT_BYTES_MAX (256 * 1024)
/* After a connection's last answer (Connection: close, a refused request) our side is shut
 * and what the client still sends is read and dropped for at most this long and this many
 * bytes before the close, so that the close does not reset the answer away. */
#define MS_HTTP_LINGER_MS 1000
#define MS_HTTP_LINGER_BYTES_MAX (256 * 1024)

/* checkMetadataConsistency (docs/protocol.md): the sharded collections of one database a
 * check covers (the participant's request and its reply of index specs, up to
 * MS_INDEXES_MAX per collection, must fit one message: 1,000 x 64 specs of ~100 bytes is
 * ~6 MB), and the inconsistencies one reply lists (each well under 1 KB; more are counted
 * and the reply says truncated). */
#define MS_CHECK_METADATA_COLLS_MAX 1000
#define MS_CHECK_METADATA_FOUND_MAX 10000

/* Key ranges a router keeps for the multi-writes (updateMany, deleteMany) of one command
 * that a migration met half-way (applied on some shards, StaleConfig on others: the part
 * still to write, router/rt_write.c), and so the most one statement's $_shardKeyRanges may
 * name (common/krange.h; the shard refuses more). About 150 bytes each at the router: 15 MB
 * at most per command. Past it the rest of those ops fails (ExceededMemoryLimit) rather
 * than be written twice or not at all; reached only with a batch of many multi-writes over
 * thousands of chunks each, caught by a migration. */
#define MS_MULTIWRITE_RANGES_MAX 100000

/* Retryable-write statements one session keeps of its current txnNumber on one shard: a
 * whole batch (MS_WRITE_BATCH_OPS_MAX) fits; beyond it, only a client that sends more
 * stmtIds under one txnNumber than a batch holds, the oldest record goes and the history is
 * marked incomplete (its retry answers IncompleteTransactionHistory, never runs twice). */
#define MS_SESSION_STMTS_MAX MS_WRITE_BATCH_OPS_MAX

/* A session not used for this long expires, with its retryable-write records: MongoDB's
 * localLogicalSessionTimeoutMinutes default, reported by hello as
 * logicalSessionTimeoutMinutes; --session-timeout-ms shortens it for tests. */
#define MS_SESSION_TIMEOUT_MINUTES 30
#define MS_SESSION_TIMEOUT_MS (MS_SESSION_TIMEOUT_MINUTES * 60 * 1000)

/* Sessions one process's session cache holds (startSession, refreshSessions): MongoDB's
 * maxSessions default; past it startSession answers TooManyLogicalSessions. */
#define MS_LOGICAL_SESSIONS_MAX 1000000

/* Session ids in one refreshSessions / endSessions / killSessions command: MongoDB's
 * limit on the lsids of one such command (10,000 each). */
#define MS_SESSIONS_PER_CMD_MAX 10000

/* Sessions the shard's session reaper removes per write transaction, and transactions
 * per pass (it runs again a second later): expiry never holds the writer for long. */
#define MS_SESSION_REAP_BATCH 1000
#define MS_SESSION_REAP_BATCHES_MAX 10

/* A router's own retries of a retryable write's statements after a shard's network error
 * or retryable error (mongos retries them too: the shard's record makes a resend safe):
 * at most this many resends, backing off from MS_ROUTER_WRITE_RETRY_BACKOFF_MS doubling,
 * within the operation's maxTimeMS — about 6 s in all, the time a restarted shard needs;
 * then the error goes to the driver, which retries once itself. */
#define MS_ROUTER_WRITE_RETRIES_MAX 7
#define MS_ROUTER_WRITE_RETRY_BACKOFF_MS 50
/* Cluster time (common/lclock.h, docs/cluster-time.md). A gossiped $clusterTime more than
 * MS_CLOCK_DRIFT_SECS_MAX ahead of this node's wall clock is refused: MongoDB's
 * maxAcceptableLogicalClockDriftSecs default (one year), which bounds how far one bad
 * clock can drag the cluster's. The clock's high-water mark is persisted this many
 * seconds ahead of the clock (one fsync'd file write per MS_CLOCK_RESERVE_SECS of clock
 * advance, not per tick). A read with readConcern.afterClusterTime and no maxTimeMS waits
 * at most MS_CLOCK_WAIT_MS_DEFAULT for the writes before that time to commit (MongoDB
 * waits unbounded): 15 s, under a router's 20 s peer timeout, so that the router's client
 * gets the shard's own error rather than the router's NetworkTimeout.
 * Writes awaiting commit with a time: the shard has one (its writer lock), the config
 * server one per metadata commit in flight (split, merge, migration commit); past 16 a
 * write waits for a slot. */
#define MS_CLOCK_DRIFT_SECS_MAX (365u * 24u * 60u * 60u)
#define MS_CLOCK_RESERVE_SECS 60u
#define MS_CLOCK_WAIT_MS_DEFAULT 15000
#define MS_CLOCK_PENDING_MAX 16

#endif
