/*
 * shardver.h — shard versioning and the ownership filter, in the shard daemon
 * (DESIGN §6; notes §2.3 "shard-side version check", §2.4 "orphan filtering").
 *
 * Per sharded collection the shard keeps filtering metadata fetched from the config
 * server with getRoutingTable: the generation (epoch, timestamp), the key pattern,
 * and the chunks this shard owns. A routed request carries
 *   shardVersion: {e: ObjectId epoch, t: Timestamp, v: Timestamp(major, minor)}
 * (UNSHARDED = zero epoch, Timestamp(0,0), Timestamp(0,0)). The check follows MongoDB:
 * metadata unknown or older than the request → refresh from the config server first;
 * then a different generation, or a different major, → StaleConfig (13388) with
 * {ns, vReceived, vWanted, shardId} in the error reply. Reads then filter through a
 * pinned snapshot of the owned ranges, so orphans are never returned.
 *
 * getRoutingTable (served by the config server; the same reply feeds routers):
 *   {getRoutingTable: "db.coll", sinceVersion?: {e, t, v}, after?: Timestamp}
 *   → {ok: 1, ns, key, unique, uuid, epoch, timestamp, full: bool,
 *      collectionVersion: {e, t, v},
 *      chunks: [{min, max, shard, lastmod: Timestamp(M, m), jumbo?}, ...],  (sorted by min)
 *      more: bool}
 *   One page: the next chunks in lastmod order (after `after`), at most 4 MiB; `more`
 *   while some remain (common/rtable.h rtable_fetch reads them all and builds one table).
 *   full = false means only chunks with lastmod >= sinceVersion.v of the same
 *   generation are listed and must be merged into the cached table.
 *   An unknown or unsharded namespace → {ok: 0, code: 118 NamespaceNotSharded}.
 */
#ifndef MS_SHARDVER_H
#define MS_SHARDVER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"
#include "common/buf.h"
#include "common/keys.h"

typedef struct shv shv_t;                 /* one per shardd process */
typedef struct shv_filter shv_filter_t;   /* a pinned, reference-counted snapshot */

int shv_open(shv_t **out, ms_error_t *err);
void shv_close(shv_t *s);  /* NULL-safe */

/* Sets who this shard is and where the config server is (from _addShard; shardd
 * persists them and sets them again at start-up). Before this, every request that
 * carries a shardVersion fails with ShardingStateNotInitialized-like IllegalOperation. */
void shv_set_identity(shv_t *s, const char *shard_name, const char *config_url);
/* Copies this shard's name and its config server's URL ("" when not part of a cluster)
 * under the lock _addShard sets them with. Either buffer may be NULL. */
void shv_identity(shv_t *s, char *name, size_t name_cap, char *url, size_t url_cap);

/* The per-request check, called by every command handler on a namespace.
 *   no shardVersion field → 0 and *filter = NULL (an unversioned request, as straight
 *     to a mongod: no filtering);
 *   shardVersion UNSHARDED and the collection unsharded here → 0, *filter = NULL;
 *   shardVersion matches (same generation and major) → 0 and *filter = a snapshot to
 *     release with shv_filter_release;
 *   otherwise → MS_ERR_STALE_CONFIG, with ns/vReceived/vWanted/shardId appended to
 *     err_info (the handler's ctx->err_info).
 * The snapshot stays valid however the metadata changes later (cursors keep theirs). */
int shv_check(shv_t *s, const char *ns, const bson_t *req, shv_filter_t **filter,
              bson_t *err_info, ms_error_t *err);

/* Under the writer lock, for a write shv_check accepted: StaleConfig when the cached
 * metadata no longer accepts its shardVersion (cleared, another generation or another
 * major: a migration committed while the write waited for the lock). No network. */
int shv_recheck(shv_t *s, const char *ns, const bson_t *req, bson_t *err_info,
                ms_error_t *err);

/* True when the encoded shard key (keys_extract's output) lies in an owned chunk. */
bool shv_filter_owns(const shv_filter_t *f, const uint8_t *key, size_t len);
/* The collection's shard-key pattern (borrowed from the snapshot). */
const keys_pattern_t *shv_filter_pattern(const shv_filter_t *f);
shv_filter_t *shv_filter_ref(shv_filter_t *f);   /* another reference (cursors) */
void shv_filter_release(shv_filter_t *f);        /* NULL-safe */

/* Drops the cached metadata of ns ("db.coll": after a drop, rename or shardCollection;
 * the database entry stays) or of a database ("db": dropDatabase,
 * _flushDatabaseCacheUpdates); the next versioned request refreshes it. */
void shv_invalidate(shv_t *s, const char *ns);
/* Refreshes ns from the config server now (_flushRoutingTableCacheUpdates). A caller
 * that finds a refresh of ns already in flight waits for it and gets its result, which
 * may have been fetched before anything the caller did first: a decision that must see
 * the chunk table as of a moment (a migration recovery after its fence) fetches its own. */
int shv_refresh(shv_t *s, const char *ns, ms_error_t *err);
/* Failpoint (tests): a refresh waits between fetching the table and installing it. */
#define SHV_FP_HANG_REFRESH_BEFORE_INSTALL "hangRefreshBeforeInstall"

/* Appends {ns: {version, chunks owned}} for serverStatus.sharding. */
void shv_append_status(shv_t *s, bson_t *reply);

/* Refreshes the database entry of db from the config server now, until a refresh is
 * not discarded by a racing invalidation (bounded): movePrimary's exit of the database
 * critical section, so the shard knows it is no longer the primary before writes go on. */
int shv_db_refresh_now(shv_t *s, const char *db, ms_error_t *err);
/* Under the writer lock (no network): a request with databaseVersion is compared with
 * what this shard's last database refresh found. StaleDbVersion (249) when the request is
 * older, or as recent and this shard is not the primary; 0 otherwise (also without
 * databaseVersion, or when nothing was fetched yet). */
int shv_db_recheck(shv_t *s, const char *ns, const bson_t *req, bson_t *err_info,
                   ms_error_t *err);

/* ---- critical section (critsec.c) ---- */

typedef struct store store_t;

/* Enters the critical section of ns (MongoDB's ShardingMigrationCriticalSection): from now
 * every versioned write to ns (the whole collection) is refused under the writer lock;
 * fences writes already past the version check by setting the flag and then taking and
 * releasing the store's writer lock once, so it returns only after every such write
 * committed. Entering a held section again is a no-op. */
int shv_crit_enter(shv_t *s, store_t *st, const char *ns, ms_error_t *err);
/* The same with an owner (a migration's id): the section belongs to whoever entered it.
 * Entering one another owner holds is ConflictingOperationInProgress; leaving one held by
 * another owner leaves it held (logged). shv_crit_enter / shv_crit_leave are the owner ""
 * (_testCriticalSection). */
int shv_crit_enter_as(shv_t *s, store_t *st, const char *ns, const char *owner, ms_error_t *err);
void shv_crit_leave_as(shv_t *s, const char *ns, const char *owner);
void shv_crit_block_reads(shv_t *s, const char *ns);  /* commit phase: versioned reads wait too */
void shv_crit_leave(shv_t *s, const char *ns);        /* wakes every waiter; not held: no-op */
bool shv_crit_held(shv_t *s, const char *ns);
/* Appends criticalSections: [{ns | db, blockReads, owner, heldMs}] (serverStatus). */
void shv_crit_append_status(shv_t *s, bson_t *reply);
/* Called by every write inside its store_write callback (under the writer lock): 0 (also
 * for a request without shardVersion), or StaleConfig (13388) with err_info {ns,
 * vReceived, shardId, criticalSection: true} (vWanted absent, as MongoDB while the section
 * is held). The caller rolls back, then waits with shv_crit_wait outside every lock. A
 * request with databaseVersion is checked against its database's section first
 * (StaleDbVersion 249, criticalSection: true; wait with shv_dbcrit_wait) and then by
 * shv_db_recheck. */
int shv_crit_check_write(shv_t *s, const char *ns, const bson_t *req, bson_t *err_info,
                         ms_error_t *err);
/* For a versioned read before its version check (no lock held): while reads are blocked,
 * waits up to shv_crit_wait_bound_ms(); 0 once they are not, else StaleConfig as above. */
int shv_crit_check_read(shv_t *s, const char *ns, const bson_t *req, bson_t *err_info,
                        ms_error_t *err);
/* Waits up to wait_ms until the section of ns is left (reads: until reads are no longer
 * blocked); true when it is. Holds no lock of the caller's. */
bool shv_crit_wait(shv_t *s, const char *ns, bool reads, long long wait_ms);
/* How long a refused operation waits: the op's remaining maxTimeMS, at most
 * MS_CRITSEC_WAIT_MS. */
long long shv_crit_wait_bound_ms(void);

/* ---- movePrimary's database critical section (critsec.c) ---- */
/* Enters the section of database db: from now every write that carries databaseVersion
 * (the router's writes and DDL to the database's unsharded collections) to a collection
 * of db is refused under the writer lock with StaleDbVersion (errInfo criticalSection:
 * true) after waiting for the exit (bounded). The held set is persisted in the meta table
 * by a write that is also the fence: it returns once every write past its checks has
 * committed. Entering a held section again is a no-op (0). */
int shv_dbcrit_enter(shv_t *s, store_t *st, const char *db, ms_error_t *err);
/* Leaves it: refreshes the database entry from the config server first (so writes that
 * passed the check against the old entry are refused by shv_db_recheck), then clears and
 * persists. Not held: 0. On an error the section stays held. */
int shv_dbcrit_exit(shv_t *s, store_t *st, const char *db, ms_error_t *err);
/* At start-up: the sections held when the process stopped are held again. */
int shv_dbcrit_load(shv_t *s, store_t *st, ms_error_t *err);
/* Waits up to wait_ms until the section of ns's database is left; true when it is. */
bool shv_dbcrit_wait(shv_t *s, const char *ns, long long wait_ms);

/* ---- live ownership snapshots (shardver.c) ---- */
/* A snapshot is live from shv_check handing it out until its last holder releases it
 * (shv_filter_ref adds a holder: cursors). Waits until no live ownership snapshot of ns
 * (held by a running find, count, distinct, multi-update, or an open cursor) owns any key in
 * [min, max) (encoded keys), up to deadline_ms (ms clock of opctx, time_mono_ms; 0 = check
 * once): 0, or ExceededTimeLimit naming how many. Logs what it waits for. */
int shv_wait_snapshots(shv_t *s, const char *ns, const buf_t *min, const buf_t *max,
                       long long deadline_ms, ms_error_t *err);
/* The range deleter's last guard: *owned = whether this shard owns any key of [min, max)
 * (encoded under pattern, the task's keyPattern; NULL = the collection's) of ns by its
 * filtering metadata, refreshed first when refresh is set or the metadata is unknown. Errs
 * on the safe side: *owned stays true, with the reason in why, when ns is unsharded in the
 * cluster's metadata or its shard key is not pattern. 0, or the refresh's error. */
int shv_range_owned(shv_t *s, const char *ns, const bson_t *pattern, const buf_t *min,
                    const buf_t *max, bool refresh, bool *owned, char *why, size_t why_cap,
                    ms_error_t *err);
/* Holders of live snapshots of ns (tests, logs). */
int shv_live_snapshots(shv_t *s, const char *ns);
/* The chunk this shard owns that contains key (encoded): its bounds as documents, its
 * version {e, t, v}, the shard's version {e, t, v}, the pattern (caller frees with
 * keys_pattern_free) and the collection's UUID (zero when unknown). Every non-NULL out is
 * initialised on success (caller destroys). NamespaceNotSharded when ns is unsharded,
 * StaleConfig when this shard owns no chunk containing key or the metadata stays unknown.
 * Refreshes first when the metadata is unknown. */
int shv_owned_chunk(shv_t *s, const char *ns, const buf_t *key, bson_t *min_out, bson_t *max_out,
                    bson_t *chunk_version_out /* {e,t,v} */, bson_t *shard_version_out,
                    keys_pattern_t *pattern_out, uint8_t uuid_out[16], ms_error_t *err);

#endif
