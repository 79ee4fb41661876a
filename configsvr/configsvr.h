/*
 * configsvr.h — the config server (bin/configsvr): the whole shape of the daemon in one
 * header. The sharding catalog lives in one SQLite file (WAL) whose tables mirror
 * MongoDB's config database (catalog.c and cat_*.c, one file per subject, prefix cat_;
 * their shared internals in cat_priv.h); the metadata commands
 * (cmd_*.c, prefix cfg_) parse requests, talk to shards over RPC and commit each
 * metadata change as ONE catalog transaction. docs/catalog.md describes the tables,
 * the document shapes and the version rules; docs/protocol.md every command.
 *
 * Locking: the catalog serialises its own SQLite use with one mutex and never holds it
 * across an RPC (shards call getRoutingTable back while we wait on them). Commands that
 * read, ask shards, then commit (shardCollection, split, merge, addShard, drops) take
 * a DDL lock first (ddl_lock.c, our miniature of MongoDB's DDLLockManager: per database,
 * per collection, and the shard list) so that what they read is still true when they
 * commit, while operations on other collections go on beside them.
 */
#ifndef MS_CONFIGSVR_H
#define MS_CONFIGSVR_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cmd.h"
#include "common/cursor.h"
#include "common/errors.h"
#include "common/keys.h"
#include "common/limits.h"

/* ---- limits of the config server (each with its reason) -------------------------- */

/* Rows kept in config.changelog / config.actionlog. MongoDB caps them at 200 MB and
 * 20 MB; with entries of ~1 KB these row counts keep the same order of size and make
 * trimming an O(1) delete by sequence number. */
#define CAT_CHANGELOG_ROWS_MAX 200000
#define CAT_ACTIONLOG_ROWS_MAX 20000

/* Default max chunk size when config.settings has no chunksize document: MongoDB 6.0+. */
#define CAT_CHUNKSIZE_MB_DEFAULT MS_CHUNK_SIZE_MB_DEFAULT
/* Allowed chunksize values in MB (MongoDB: 1..1024). */
#define CAT_CHUNKSIZE_MB_MIN 1
#define CAT_CHUNKSIZE_MB_MAX 1024

/* numInitialChunks bound: 1,000,000 in all, with any number of shards (MongoDB also
 * refuses more than 8,192 per shard; minishard does not). */
#define CAT_INITIAL_CHUNKS_MAX 1000000

/* Split points accepted in one split (MongoDB's splitChunk reply cap is the 16 MB
 * document; a count bound keeps one transaction's work bounded). */
#define CAT_SPLIT_POINTS_MAX 8192

/* Chunk history entries kept after a migration (notes §2.2): MongoDB trims entries older
 * than max(minSnapshotHistoryWindowInSeconds 300, transactionLifetimeLimitSeconds 60,
 * 10) seconds, keeping at least the new one. */
#define CAT_HISTORY_WINDOW_S 300

/* Shard names and hosts. */
#define CAT_SHARD_NAME_BYTES_MAX 128
#define CAT_DB_NAME_BYTES_MAX 64   /* MongoDB: database names < 64 bytes */

/* DDL locks (ddl_lock.c). A lock name is a database or a namespace. Resources locked or
 * waited on at once: each worker holds at most two (database + collection), so twice the
 * most workers a daemon may run plus slack; a full table answers LockBusy, never blocks. */
#define CFG_DDL_NAME_BYTES_MAX (MS_NS_BYTES_MAX + 1)
#define CFG_DDL_RESOURCES_MAX (2 * MS_RPC_WORKERS_MAX + 64)
/* How long a metadata command waits for a DDL lock when it has no maxTimeMS: MongoDB's
 * default DDL lock timeout is 5 minutes; ours is longer than any one holder's shard call
 * (CFG_SHARD_CMD_TIMEOUT_MS), so a holder stuck on a dead shard makes waiters fail with
 * LockBusy rather than wait for ever, and a normal queue of operations gets through. */
#define CFG_DDL_LOCK_WAIT_MS_MAX (2 * MS_RPC_TIMEOUT_MS_DEFAULT)

/* Deadlines of the config server's calls to shards. hello at addShard is short: a host
 * that does not answer quickly is refused rather than added. */
#define CFG_HELLO_TIMEOUT_MS 5000
/* The default when the request has no maxTimeMS: below the router's deadline toward us. */
#define CFG_SHARD_CMD_TIMEOUT_MS MS_RPC_CONFIG_TIMEOUT_MS_DEFAULT
/* Cursors on config collections (cfg_query.c). A find in the catalog's order reads the
 * catalog a page at a time as batches are asked for (any size); a find with another sort
 * materialises its matches (bounded by MS_MSG_BYTES_MAX). Batches: the first of
 * MS_FIRST_BATCH_DOCS_DEFAULT documents unless batchSize says otherwise, each batch
 * capped at MS_BATCH_BYTES_MAX; idle cursors die after --cursor-timeout-ms (at most and
 * by default MS_CURSOR_IDLE_MS_MAX). At most
 * MS_CFG_CURSORS_MAX cursors holding MS_CFG_CURSOR_BYTES_MAX bytes in all stay open
 * (common/limits.h); the registry is common/cursor.c's. */

/* ---- the catalog (catalog.c, cat_*.c) ------------------------------------------------- */

typedef struct cat cat_t;

/* A BSON Timestamp (seconds-or-major, increment-or-minor). */
typedef struct cat_ts {
    uint32_t t;
    uint32_t i;
} cat_ts_t;

/* A collection generation + placement version: MongoDB's ChunkVersion {e, t, v}. */
typedef struct cat_version {
    bson_oid_t epoch;
    cat_ts_t ts;          /* collection timestamp */
    uint32_t major, minor;
} cat_version_t;

/* One config.collections row. key is initialised by cat_coll_get; release with
 * cat_coll_free. */
typedef struct cat_coll {
    char ns[MS_NS_BYTES_MAX + 1];
    bson_t key;                   /* the shard key pattern document */
    bool unique;
    bson_oid_t epoch;
    cat_ts_t ts;
    uint8_t uuid[16];
    int64_t created_ms;           /* `lastmod` Date */
    bool no_balance;
    int64_t max_chunk_size_bytes; /* 0 = cluster default */
    bool allow_migrations;
    bool enable_auto_merge;       /* absent = default true */
    bool defragment;
    char defrag_phase[32];        /* "" when none */
} cat_coll_t;

/* One planned chunk of a new collection (shardCollection). Borrows min/max. */
typedef struct cat_chunk_plan {
    const bson_t *min;
    const bson_t *max;
    const char *shard;
} cat_chunk_plan_t;

/* Opens (creating when absent) the catalog at path: WAL, schema, config.version with a
 * new clusterId on first open. *out set on success only. */
int cat_open(const char *path, cat_t **out, ms_error_t *err);
void cat_close(cat_t *c);  /* NULL-safe */
/* Sets the `server` field of changelog entries (this config server's URL; copied). */
void cat_set_server(cat_t *c, const char *server);
void cat_cluster_id(const cat_t *c, bson_oid_t *out);
/* A new cluster Timestamp, strictly greater than every one issued before (persisted). */
int cat_next_ts(cat_t *c, cat_ts_t *out, ms_error_t *err);

/* -- shards -- */
/* Checks that host and name (NULL = pick the next free "shardN") are not in use and
 * writes the name to use into name_out. The same host with the same (or no) name is
 * already a shard → 0 with *already = true (MongoDB: addShard is idempotent). Errors:
 * the host belongs to a shard of another name, or the name is taken by another host
 * (IllegalOperation). */
int cat_shard_prepare(cat_t *c, const char *name, const char *host, char *name_out,
                      size_t name_cap, bool *already, ms_error_t *err);
/* Inserts config.shards {_id: name, host, state: 1, topologyTime, maxSize (MB) when
 * max_size_mb > 0} and a changelog `addShard` entry, in one transaction (re-checking
 * duplicates). */
int cat_shard_insert(cat_t *c, const char *name, const char *host, int64_t max_size_mb,
                     ms_error_t *err);
/* Host of a shard into host_out; ShardNotFound when unknown. draining may be NULL. */
int cat_shard_host(cat_t *c, const char *name, char *host_out, size_t host_cap,
                   bool *draining, ms_error_t *err);
/* Appends [{_id, host, state, draining?, tags, topologyTime}] sorted by _id under key. */
int cat_shards_append(cat_t *c, bson_t *dst, const char *key, ms_error_t *err);
/* Names of the shards (not draining unless include_draining), sorted; caller frees
 * with cat_strv_free. */
int cat_shard_names(cat_t *c, bool include_draining, char ***names_out, int *n_out,
                    ms_error_t *err);
void cat_strv_free(char **v, int n);
/* One removeShard step (MongoDB's removeShard state machine) in one transaction: mark
 * draining ("started"), report what is left ("ongoing" with remaining {chunks, dbs,
 * jumboChunks}), or delete the shard when it owns nothing ("completed"). Appends
 * msg/state/shard/remaining/dbsToMove to reply. */
int cat_shard_remove_step(cat_t *c, const char *name, bson_t *reply, ms_error_t *err);

/* -- databases -- */
/* Creates config.databases {_id: db, primary, version} unless it exists. primary NULL =
 * the non-draining shard holding the fewest databases (ties by name). An existing
 * database with a different requested primary → NamespaceExists. Appends primary and
 * version {uuid, timestamp, lastMod} to out when non-NULL. *created says which. */
int cat_db_ensure(cat_t *c, const char *db, const char *primary, bool *created,
                  bson_t *out, ms_error_t *err);
/* Primary shard of db; NamespaceNotFound when db is not in the catalog. */
int cat_db_primary(cat_t *c, const char *db, char *primary_out, size_t cap, ms_error_t *err);
/* Sharded collections of db (caller frees with cat_strv_free). */
int cat_db_collections(cat_t *c, const char *db, char ***ns_out, int *n_out, ms_error_t *err);
/* Removes db, its collections, chunks and zones in one transaction; changelog
 * dropDatabase. Absent → 0 with *existed false. */
int cat_db_drop(cat_t *c, const char *db, bool *existed, ms_error_t *err);

/* movePrimary's commit: primary from -> to and lastMod + 1 in one transaction (changelog
 * movePrimary). ShardNotFound / IllegalOperation (to draining); ConflictingOperation
 * when db's primary is no longer from. */
int cat_db_set_primary(cat_t *c, const char *db, const char *from, const char *to,
                       ms_error_t *err);

/* -- collections -- */
/* Loads ns; NamespaceNotSharded when ns is not a sharded collection. */
int cat_coll_get(cat_t *c, const char *ns, cat_coll_t *out, ms_error_t *err);
void cat_coll_free(cat_coll_t *coll);  /* releases key; NULL-safe */
/* Creates the collection and its chunks in one transaction: chunks get versions (1,0),
 * (1,1), ... in plan order (which must be key order), onCurrentShardSince/history =
 * coll->ts. The tiling invariant is asserted before COMMIT; a plan that does not tile is
 * refused with InternalError before that (the caller built it wrong). Changelog
 * `shardCollection.end`. NamespaceExists when ns is already sharded. */
int cat_coll_create(cat_t *c, const cat_coll_t *coll, const cat_chunk_plan_t *plan, int n,
                    ms_error_t *err);
/* Removes ns with its chunks and zones in one transaction; changelog dropCollection.
 * Absent → 0 with *existed false. */
int cat_coll_drop(cat_t *c, const char *ns, bool *existed, ms_error_t *err);
/* The collection version (max chunk lastmod) with its generation. */
int cat_coll_version(cat_t *c, const char *ns, cat_version_t *out, ms_error_t *err);
/* Highest lastmod among the chunks of ns on shard ((0,0) when it owns none). */
int cat_shard_version(cat_t *c, const char *ns, const char *shard, cat_version_t *out,
                      ms_error_t *err);

/* -- chunks -- */
/* The chunk of ns containing the key document (in pattern order, hashed fields already
 * hashed): its bounds into min_out/max_out (initialised) and owner into shard_out. */
int cat_chunk_containing(cat_t *c, const char *ns, const bson_t *key, bson_t *min_out,
                         bson_t *max_out, char *shard_out, size_t cap, ms_error_t *err);
/* Owner of the chunk exactly [min, max); BadValue when no such chunk. */
int cat_chunk_exact(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                    char *shard_out, size_t cap, ms_error_t *err);
/* Splits the chunk exactly [min, max) at points[0..n) (key order, strictly inside) in one
 * transaction (notes §2.2): pieces get (collM, collm+1), (collM, collm+2), ...; the first
 * keeps the chunk's _id; jumbo and estimatedDataSizeBytes are cleared. Changelog `split`
 * (2 pieces) or `multi-split` (one per piece). Appends shard and shardVersion {e,t,v}
 * (the new collection version) to info when non-NULL. */
int cat_chunk_split(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                    const bson_t *const *points, int n, bson_t *info, ms_error_t *err);
/* Merges the contiguous chunks exactly covering [min, max) on one shard into one chunk
 * at (collM, collm+1) in one transaction; already one chunk → 0 (MongoDB: idempotent).
 * Changelog `merge`. Appends shard and shardVersion to info when non-NULL. */
int cat_chunk_merge(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                    bson_t *info, ms_error_t *err);

/* ---- migration (cat_migrate.c) ---- */
/* One _configsvrCommitChunkMigration request (everything borrowed). */
typedef struct cat_mig_commit {
    const char *ns, *from, *to;
    const bson_t *min, *max;        /* the migrated range */
    uint32_t chunk_major, chunk_minor; /* migratedChunk.lastmod: the chunk at the start */
    bson_oid_t epoch;               /* fromShardCollectionVersion's generation */
    cat_ts_t ts;
    cat_ts_t valid_after;           /* {0,0}: a new cluster Timestamp is taken */
} cat_mig_commit_t;
/* Commits a migration in one transaction (notes §2.2): with collection version (M, m),
 * the moved range -> (M+1, 0) on m->to with history {validAfter, to} first; a strict
 * sub-range leaves remainders on the donor at (M+1, 1) (left) and (M+1, 2) (right) with
 * the chunk's history; the donor's lowest other chunk (the control chunk) -> the next
 * minor. Idempotent: the range already exactly on m->to -> 0, nothing written. Errors:
 * StaleEpoch (unknown ns or other generation), ShardNotFound (to unknown),
 * ConflictingOperationInProgress (to draining, migrations not allowed, range not inside
 * one chunk of from, or that chunk changed since migratedChunk.lastmod), BadValue (bounds
 * not of the key pattern, min >= max). *donor_out = the donor's new shard version ((0,0)
 * when it owns nothing). Failpoint hangBeforeCommitMigration fires before COMMIT. */
int cat_migration_commit(cat_t *c, const cat_mig_commit_t *m, cat_version_t *donor_out,
                         ms_error_t *err);
/* The recovery fence: when ns has uuid and generation v and config.chunks still holds
 * exactly [min, max) at a version not newer than v, it becomes (collM+1, 0) on the same
 * shard (*bumped = true). Anything else is a no-op returning 0. */
int cat_chunk_ensure_version_gt(cat_t *c, const char *ns, const uint8_t uuid[16],
                                const bson_t *min, const bson_t *max, const cat_version_t *v,
                                bool *bumped, ms_error_t *err);
/* The chunk of ns holding the range [min, max) (either may be NULL, not both): its
 * bounds (initialised), owner and version into *out. ConflictingOperationInProgress when
 * the range is not inside one chunk; BadValue for bounds not of the pattern. */
typedef struct cat_chunk_info {
    bson_t min, max;
    char shard[CAT_SHARD_NAME_BYTES_MAX];
    uint32_t major, minor;
} cat_chunk_info_t;
int cat_chunk_for_range(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                        cat_chunk_info_t *out, ms_error_t *err);
/* A changelog entry sent by a shard (_configsvrLogChange): server and shard = shard. */
int cat_changelog_from(cat_t *c, const char *shard, const char *what, const char *ns,
                       const bson_t *details, ms_error_t *err);
/* config.migrations: inserts doc (its _id a string). An entry of that _id already there
 * with the same toShard -> 0 with *joined = true; with another -> ConflictingOperation. */
int cat_migration_record(cat_t *c, const bson_t *doc, bool *joined, ms_error_t *err);
int cat_migration_forget(cat_t *c, const char *id, ms_error_t *err);  /* absent is fine */
/* Deletes every entry (start-up); *n = how many. */
int cat_migrations_clear(cat_t *c, int64_t *n, ms_error_t *err);

/* -- zones (cat_zones.c): config.shards tags and config.tags, read by the balancer -- */
/* One zone range of a collection: full shard-key bounds (owned, initialised). */
typedef struct cat_zone_range {
    bson_t min, max;
    char zone[MS_ZONE_NAME_BYTES_MAX];
} cat_zone_range_t;
/* addShardToZone: $addToSet zone on the shard's tags (already there: no-op).
 * ShardNotFound when the shard is unknown. */
int cat_zone_add_shard(cat_t *c, const char *shard, const char *zone, ms_error_t *err);
/* removeShardFromZone: $pull zone (absent: no-op). ShardNotFound; ZoneStillInUse when the
 * shard is the zone's only shard and a range still uses the zone. */
int cat_zone_remove_shard(cat_t *c, const char *shard, const char *zone, ms_error_t *err);
/* updateZoneKeyRange: zone non-NULL assigns [min, max) of ns to it, zone NULL removes
 * exactly that range (absent: no-op). Bounds may be a prefix of the shard key (extended
 * with MinKey; not a prefix: ShardKeyNotFound; hashed field not NumberLong/MinKey/MaxKey:
 * InvalidOptions); ns not sharded: stored as given. ZoneNotFound when no shard carries
 * zone; RangeOverlapConflict unless an identical range of the same zone exists (then a
 * no-op); BadValue when min >= max. *changed (may be NULL) says whether a row changed. */
int cat_zone_update_range(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                          const char *zone, bool *changed, ms_error_t *err);
/* The zone ranges of ns in key order (full-key bounds). Caller frees with
 * cat_zones_free. None → *out NULL, *n_out 0. */
int cat_zones_of(cat_t *c, const char *ns, cat_zone_range_t **out, int *n_out, ms_error_t *err);
void cat_zones_free(cat_zone_range_t *v, int n);  /* NULL-safe */
/* The zones shard carries (its tags), caller frees with cat_strv_free. ShardNotFound. */
int cat_shard_zones(cat_t *c, const char *shard, char ***zones_out, int *n_out, ms_error_t *err);

/* -- routing -- */
/* The first page of the getRoutingTable reply body (shardd/shardver.h) for ns into reply
 * (initialised by the caller). since NULL or of another generation → full table. */
int cat_routing_table(cat_t *c, const char *ns, const cat_version_t *since, bson_t *reply,
                      ms_error_t *err);
/* One page of it: the chunks with lastmod >= since (all when full) and, when after is
 * non-NULL, > *after (only its major and minor are read), in lastmod order, at most
 * MS_ROUTING_PAGE_BYTES of them and at most the page chunk cap; `more: true` when chunks
 * remain. The catalog lock is held for this page only. */
int cat_routing_page(cat_t *c, const char *ns, const cat_version_t *since,
                     const cat_version_t *after, bson_t *reply, ms_error_t *err);
/* Caps a page at n chunks (1..MS_CHUNKS_PER_COLLECTION_MAX; other values: no chunk cap,
 * only MS_ROUTING_PAGE_BYTES): --routing-table-page-chunks, a test flag. */
void cat_set_routing_page_chunks(int n);
/* Parses {e: ObjectId, t: Timestamp, v: Timestamp} into *out. BadValue when malformed. */
int cat_version_parse(const bson_t *doc, cat_version_t *out, ms_error_t *err);
void cat_version_append(bson_t *dst, const char *key, const cat_version_t *v);

/* -- config collections as documents (config.<name> in MongoDB's shapes, notes §9) -- */
/* Calls fn for every document of config.<coll> in _id order (chunks: by ns then min).
 * The documents are borrowed for the call; fn must not call the catalog. fn returning
 * non-zero stops the scan with that code. NamespaceNotFound for an unknown coll. */
typedef int (*cat_doc_fn)(void *arg, const bson_t *doc);
int cat_config_scan(cat_t *c, const char *coll, cat_doc_fn fn, void *arg, ms_error_t *err);
/* The newest n entries of config.changelog or config.actionlog (coll), newest first, to
 * fn as cat_config_scan does (the web view's feed). NamespaceNotFound for another coll. */
int cat_log_tail(cat_t *c, const char *coll, int n, cat_doc_fn fn, void *arg, ms_error_t *err);
/* Keyset paging over config.<coll> in the same order as cat_config_scan, for cursors
 * that hand out a collection of any size in batches. A position starts before the first
 * row; each cat_config_page call reads at most rows_max rows past it (one statement,
 * the catalog lock held for that page only) and moves it past every row fn took. fn
 * returns 0 (taken), CAT_PAGE_STOP (not taken: the page ends and the next one starts
 * with this row) or an error code, which stops the page and is returned. pin, when not
 * NULL, narrows config.chunks and config.tags to one collection (by ns, or chunks by
 * the collection's uuid); the caller still applies its whole filter. */
#define CAT_PAGE_STOP (-1)
typedef struct cat_pin {
    const char *ns;          /* or NULL */
    const uint8_t *uuid;     /* 16 bytes, or NULL */
} cat_pin_t;
typedef struct cat_page_pos cat_page_pos_t;
cat_page_pos_t *cat_page_pos_new(void);
void cat_page_pos_free(cat_page_pos_t *p);   /* NULL-safe */
bool cat_page_pos_done(const cat_page_pos_t *p);   /* a page came back short: no rows left */
int cat_config_page(cat_t *c, const char *coll, const cat_pin_t *pin, cat_page_pos_t *pos,
                    int rows_max, cat_doc_fn fn, void *arg, ms_error_t *err);
/* The number of rows of config.<coll> (narrowed by pin; chunks on shard only when shard
 * is not NULL, jumbo ones only when jumbo), counted on the indexes. */
int cat_config_count(cat_t *c, const char *coll, const cat_pin_t *pin, const char *shard,
                     bool jumbo, int64_t *n, ms_error_t *err);
/* Chunks per (ns, shard) of the pinned collection (pin NULL: of all), in (ns, shard)
 * order, counted on the (ns, shard, min) index. fn returning non-zero stops with it. */
typedef int (*cat_count_fn)(void *arg, const char *ns, const char *shard, int64_t n);
int cat_chunk_counts(cat_t *c, const cat_pin_t *pin, cat_count_fn fn, void *arg, ms_error_t *err);
/* True for the names cat_config_scan serves. */
bool cat_config_known(const char *coll);
/* The i-th of those names (0, 1, ...), NULL past the last: listCollections lists them. */
const char *cat_config_coll(int i);

/* -- settings (config.settings) -- */
/* The document with _id id into *out (initialised when found). */
int cat_settings_get(cat_t *c, const char *id, bson_t *out, bool *found, ms_error_t *err);
/* Checks a settings document as MongoDB does for the known _ids: balancer (mode
 * "full"|"off", stopped bool, activeWindow {start, stop} "HH:MM" with start != stop,
 * _secondaryThrottle, _waitForDelete, attemptToBalanceJumboChunks), chunksize (value
 * 1..1024 MB), autosplit / automerge (enabled bool). BadValue with the reason. */
int cat_settings_validate(const bson_t *doc, ms_error_t *err);
/* Max chunk size in bytes from the chunksize document (default 128 MB). */
int64_t cat_chunk_size_bytes(cat_t *c);
/* Applies one update statement of an `update` command on config.settings in one
 * transaction: q/u as in MongoDB's update (operators or replacement), upsert, multi.
 * Every resulting document is validated before COMMIT. *n = matched, *n_modified,
 * *upserted = true with upserted_id (initialised {"_id": v}) when inserted. */
int cat_settings_update(cat_t *c, const bson_t *q, const bson_t *u, bool upsert, bool multi,
                        int64_t *n, int64_t *n_modified, bool *upserted, bson_t *upserted_id,
                        ms_error_t *err);

/* -- routers, changelog, status -- */
/* Upserts config.mongos {_id: host, ping: now, up, waiting, mongoVersion}. */
int cat_router_ping(cat_t *c, const char *host, int64_t up_s, bool waiting,
                    const char *version, ms_error_t *err);
/* Writes one changelog entry in its own transaction (details borrowed, may be NULL). */
int cat_changelog(cat_t *c, const char *what, const char *ns, const bson_t *details,
                  ms_error_t *err);
/* Counts for serverStatus.sharding. */
int cat_counts(cat_t *c, int64_t *shards, int64_t *dbs, int64_t *colls, int64_t *chunks,
               ms_error_t *err);
/* Checks the tiling invariant of ns without asserting (tests, diagnostics): chunks tile
 * [MinKey, MaxKey) with no gap or overlap and min < max. InternalError with the reason. */
int cat_verify_tiling(cat_t *c, const char *ns, ms_error_t *err);

/* -- for cat_settings.c only: the raw connection, used under cat_lock -- */
struct sqlite3;
struct sqlite3 *cat_db_handle(cat_t *c);
void cat_lock(cat_t *c);
void cat_unlock(cat_t *c);

/* -- pure helpers (no catalog) -- */
/* MongoDB's initial hashed split points for n chunks (notes §7): n-1 values, ascending,
 * written to out (capacity >= n-1). n >= 1. */
void cat_hashed_split_points(int n, int64_t *out);
/* Bounds of the n initial chunks of an empty collection whose key starts with a hashed
 * field (MongoDB's pre-split): bounds[0] = global min, bounds[n] = global max, and
 * bounds[i] = {hashed: NumberLong(point i-1), later fields: MinKey}. bounds has n+1
 * slots; each is initialised here (caller destroys). */
void cat_hashed_initial_bounds(const keys_pattern_t *p, int n, bson_t *bounds);
/* A random version-4 UUID. */
void cat_uuid_new(uint8_t uuid[16]);

/* ---- balancer policy (bal_policy.c): pure functions over a snapshot, no I/O ---------- */
/* The balancer (balancer.c) reads the catalog and the shards into these structs, then asks
 * bal_choose what to move this round. Everything is borrowed from the caller; nothing here
 * allocates except bal_explain's BSON. Keys are compared as encoded bytes (keys.h: memcmp
 * order = MongoDB order, shorter prefix first), exactly as SQLite compares the BLOBs. */

typedef struct bal_chunk {
    const uint8_t *min_enc, *max_enc;
    size_t min_len, max_len;
    const bson_t *min, *max;   /* the bounds as documents (for the migration request) */
    int owner;                 /* index into the shard array */
    bool jumbo;
    int64_t est_bytes;         /* estimated data size, -1 when unknown */
} bal_chunk_t;

/* One config.tags range of the collection. */
typedef struct bal_zone_range {
    const uint8_t *min_enc, *max_enc;
    size_t min_len, max_len;
    const char *zone;
    const bson_t *min, *max;   /* the bounds as documents (zone-boundary splits); may be NULL */
} bal_zone_range_t;

typedef struct bal_shard {
    const char *name;
    bool draining;
    const char *const *zones;  /* config.shards.tags */
    int nzones;
    int64_t coll_bytes;        /* data of the collection being chosen for (dataSize policy) */
    int64_t total_bytes;       /* all its data (maxSize) */
    int64_t max_size_bytes;    /* 0 = no cap */
    bool busy;                 /* already donor or recipient this round (any collection) */
} bal_shard_t;

typedef struct bal_coll {
    const char *ns;
    const bal_chunk_t *chunks; /* in key order, tiling the key space */
    int nchunks;
    const bal_zone_range_t *zones;
    int nzones;
    bool no_balance;
    bool moved_last_round;     /* classic rule: threshold 2 while a collection is being balanced */
    int64_t chunk_size_bytes;
    /* The counts of a summary snapshot (cat_bal_load_summary), or NULL: then chunks[] is
     * the whole collection and the policy counts it. With them, chunks[] holds only the
     * candidates (every chunk the policy may pick or test) and these say how many exist. */
    const int *shard_chunks;   /* [nshards] chunks of the collection on each shard */
    const int *shard_jumbo;    /* [nshards] of which jumbo */
    const int *range_chunks;   /* [nzones × nshards] chunks wholly inside zone range z on s */
    int total_chunks;          /* chunks of the collection (all shards) */
} bal_coll_t;

typedef enum { BAL_POLICY_CHUNK_COUNT = 0, BAL_POLICY_DATA_SIZE = 1 } bal_policy_t;

/* One chosen migration. min_only: moveRange with only min (the donor carves a chunk-sized
 * piece; dataSize policy). reason: "draining", "zoneViolation", "chunksImbalance",
 * "dataSizeImbalance" (static strings). */
typedef struct bal_move {
    int chunk;
    int from, to;
    bool min_only;
    const char *reason;
} bal_move_t;

/* The classic imbalance threshold: 2 below 20 chunks, 4 for 20..79, 8 from 80. */
int bal_threshold(int nchunks);
/* Zone of chunk i ("" when no zone range contains it whole). Borrowed from c. */
const char *bal_chunk_zone(const bal_coll_t *c, int i);
/* This round's migrations of c in priority order (draining, zone violations, imbalance)
 * into out (capacity cap); returns how many. Marks the donor and recipient of each busy in
 * shards so that a shard is in at most one migration per round across collections. Never
 * a jumbo chunk, never to a draining shard, a shard at its maxSize or outside the chunk's
 * zone. noBalance → 0. */
int bal_choose(const bal_coll_t *c, bal_shard_t *shards, int nshards, bal_policy_t policy,
               bal_move_t *out, int cap);
/* Why the balancer would or would not move anything in c now (counts or sizes per shard,
 * threshold, jumbo chunks, maxSize, busy, noBalance, the next moves) appended to out.
 * shards is not changed. */
void bal_explain(const bal_coll_t *c, const bal_shard_t *shards, int nshards,
                 bal_policy_t policy, bson_t *out);

/* True when a zone bound falls strictly inside a chunk of c (a split is due there). */
bool bal_chunk_straddles_zone(const bal_coll_t *c);
/* balancerCollectionStatus's firstComplianceViolation of c: "zoneViolation" (a chunk
 * across a zone bound, or on a shard outside its zone), "draining", "chunksImbalance"
 * (also the dataSize rule's imbalance), or NULL when compliant. Ignores noBalance, busy
 * and moved_last_round; shards is not changed. */
const char *bal_compliance(const bal_coll_t *c, const bal_shard_t *shards, int nshards,
                           bal_policy_t policy);

/* The balancer's reads and writes of the catalog (cat_balancer.c). cat_bal_load: the
 * chunks of ns in key order (owner = -1; owners[i] names the shard) and its zone ranges,
 * all owned by *out until cat_bal_free (NULL-safe, safe on a zeroed struct). */
typedef struct cat_bal_count {
    char shard[CAT_SHARD_NAME_BYTES_MAX];
    int chunks, jumbo;
    int *in_range;             /* [nzones] chunks wholly inside each zone range */
} cat_bal_count_t;
typedef struct cat_bal_data {
    bal_chunk_t *chunks;
    char (*owners)[CAT_SHARD_NAME_BYTES_MAX];
    int nchunks;
    bal_zone_range_t *zones;
    int nzones;
    /* A summary (cat_bal_load_summary) only: the counts per shard name, and the same
     * mapped to a shard array by bal_snap_coll (NULL for a full load). */
    bool summary;
    cat_bal_count_t *counts;
    int ncounts, total;
    int *shard_chunks, *shard_jumbo, *range_chunks;
} cat_bal_data_t;
int cat_bal_load(cat_t *c, const char *ns, cat_bal_data_t *out, ms_error_t *err);
/* What the policy needs of ns without reading every chunk (cat_balancer.c): the zone
 * ranges, the maintained chunk counts per shard (config chunk_counts), the chunks of each
 * shard wholly inside each zone range (an index range count per range), and only the
 * candidate chunks, in key order — per shard its first movable (non-jumbo) chunk overall,
 * in each zone range and in each gap between ranges, and the chunks holding each zone
 * bound. The policy's choice over them equals its choice over the whole collection. */
int cat_bal_load_summary(cat_t *c, const char *ns, cat_bal_data_t *out, ms_error_t *err);
/* The chunks of ns on shard in key order (the (ns, shard, min) index; neighbours in the
 * array meet only where their bounds do) with the zone ranges, and into *since_out
 * (malloc'ed, caller frees; NULL when none) each chunk's onCurrentShardSince seconds. */
int cat_bal_load_shard(cat_t *c, const char *ns, const char *shard, cat_bal_data_t *out, int64_t **since_out,
                       ms_error_t *err);
/* Up to limit non-jumbo chunks of ns whose min (encoded) is above after (NULL: from the
 * start), in key order: one window of the auto-split's walk over the collection. */
int cat_bal_chunks_after(cat_t *c, const char *ns, const uint8_t *after, size_t after_len, int limit,
                         cat_bal_data_t *out, ms_error_t *err);
void cat_bal_free(cat_bal_data_t *d);
/* The jumbo flag of the chunk exactly [min, max) of ns (cat_balancer.c). set: the
 * balancer's markJumbo, no version change; a chunk no longer there → 0, *changed false.
 * !set: clearJumboFlag (MongoDB 7.0): not jumbo → 0, nothing written; jumbo → flag
 * cleared and the chunk at (collM+1, 0); no such chunk → Location51262. *changed says
 * whether a row was written; its owner into shard_out when non-NULL. */
int cat_chunk_jumbo(cat_t *c, const char *ns, const bson_t *min, const bson_t *max, bool set,
                    bool *changed, char *shard_out, size_t shard_cap, ms_error_t *err);
/* The config.collections fields a client may write: one value per slot, CAT_FLAG_KEEP
 * (leave it), CAT_FLAG_UNSET ($unset: noBalance false, enableAutoMerge absent = enabled),
 * 0 or 1 ($set). */
enum { CAT_FLAG_NO_BALANCE, CAT_FLAG_AUTO_MERGE, CAT_COLL_FLAGS };
#define CAT_FLAG_KEEP (-2)
#define CAT_FLAG_UNSET (-1)
typedef struct cat_coll_flags {
    int v[CAT_COLL_FLAGS];
} cat_coll_flags_t;
/* Writes the flags of ns in one locked step: *n = 1 when ns is a sharded collection,
 * *nmod = 1 when a flag changed. */
int cat_coll_set_flags(cat_t *c, const char *ns, const cat_coll_flags_t *f, int64_t *n,
                       int64_t *nmod, ms_error_t *err);
/* One config.actionlog entry (MongoDB's changelog shape) in its own transaction. */
int cat_actionlog(cat_t *c, const char *what, const char *ns, const bson_t *details,
                  ms_error_t *err);
/* Writes config.locks {_id: id, ...doc} (doc must carry the same _id). */
int cat_lock_doc_put(cat_t *c, const char *id, const bson_t *doc, ms_error_t *err);
/* chunksize's test-only field valueBytes is accepted (validation) and used
 * (cat_chunk_size_bytes) only after this was called with true: --enable-test-commands. */
void cat_settings_allow_test_fields(bool on);

/* ---- defragmentation and the auto-merger (bal_defrag.c: pure; cat_defrag.c: catalog;
 * defrag.c: the round's and the secondary thread's parts and configureCollectionBalancing;
 * bal_merge.c: the secondary thread, the auto-merger and mergeAllChunksOnShard) ------------------------------------- */

/* config.collections defragmentationPhase (notes §5.1). NONE = "" (not defragmenting). */
typedef enum {
    BAL_DEFRAG_NONE = 0,
    BAL_DEFRAG_MERGE_MEASURE,  /* "mergeAndMeasureChunks" */
    BAL_DEFRAG_MOVE_MERGE,     /* "moveAndMergeChunks" */
    BAL_DEFRAG_MERGE,          /* "mergeChunks" */
    BAL_DEFRAG_FINISHED,       /* "finished" */
} bal_defrag_phase_t;
const char *bal_defrag_phase_name(bal_defrag_phase_t p);  /* static string */
/* "" / NULL → NONE; an unknown name (6.0's splitChunks) → MERGE_MEASURE (start over). */
bal_defrag_phase_t bal_defrag_phase_parse(const char *s);
/* The phase after one step of p that left `pending` actions undone (retriable errors,
 * work waiting for a free shard) and hit a non-retriable error (restart): the same phase
 * while work is pending, the phase itself again on restart except phase 2, which restarts
 * from phase 1; else the next phase. */
bal_defrag_phase_t bal_defrag_next(bal_defrag_phase_t p, int pending, bool restart);
/* Errors after which a defragmentation action is simply reissued (network, locks,
 * conflicting operations, stale routing, and a merge's precondition failing because the
 * chunks changed since the snapshot: a lost race with a migration). */
bool bal_defrag_retriable(int code);
/* Chunks [first, last] (last > first) to merge into one. */
typedef struct bal_run {
    int first, last;
} bal_run_t;
/* The maximal runs of >= 2 contiguous chunks of c on one shard and in one zone, none
 * jumbo, all eligible[i] (eligible NULL = all; chunks with owner < 0 never are), into out
 * (capacity cap) in key order; returns how many. */
int bal_merge_runs(const bal_coll_t *c, const bool *eligible, bal_run_t *out, int cap);
/* Small = measured below small_bytes (25 % of the chunk size) and not jumbo. */
bool bal_defrag_is_small(const bal_chunk_t *ch, int64_t small_bytes);
/* Estimated bytes of c per shard (sum of the known chunk estimates) into out[nshards]. */
void bal_defrag_shard_bytes(const bal_coll_t *c, int nshards, int64_t *out);
/* The neighbour (i-1 or i+1, same zone, not jumbo, not on another draining shard) that
 * small chunk i should be merged into, by MongoDB's score in decreasing weight: on i's own
 * shard; i smaller than it; the merged chunk no longer small; its shard holding less data
 * (shard_bytes); ties → the smaller shard name. -1 when none. */
int bal_defrag_pick(const bal_coll_t *c, const bal_shard_t *shards, int nshards,
                    const int64_t *shard_bytes, int i, int64_t small_bytes);
/* Phase 2's work left in c: the small chunks that have a neighbour to be merged into
 * (bal_defrag_pick >= 0). 0 = phase 2 is done. */
int bal_defrag_small_left(const bal_coll_t *c, const bal_shard_t *shards, int nshards,
                          int64_t small_bytes);
/* One phase-2 action: merge chunk into its neighbour `into`, after migrating it from
 * shard `from` to `to` when move. */
typedef struct bal_defrag_act {
    int chunk, into;
    bool move;
    int from, to;
} bal_defrag_act_t;
/* Phase 2's actions this round, smallest chunk first, each chunk in one action at most;
 * a move marks both shards busy and is skipped when either already is (one migration per
 * shard per round). *waiting = small chunks left for a later round (busy shard, neighbour
 * taken, cap reached). */
int bal_defrag_moves(const bal_coll_t *c, bal_shard_t *shards, int nshards, int64_t small_bytes,
                     bal_defrag_act_t *out, int cap, int *waiting);

/* configureCollectionBalancing's write (one transaction, changelog
 * configureCollectionBalancing {chunkSizeMB, defragmentCollection}): chunk_mb -1 = absent,
 * 0 = unset maxChunkSizeBytes, else MB; defrag / auto_merge -1 = absent, 0/1. defrag 1
 * starts defragmentation (phase mergeAndMeasureChunks) unless it runs; 0 ends it (flag,
 * phase and chunk estimates cleared). NamespaceNotSharded when ns is not sharded. */
int cat_coll_configure_balancing(cat_t *c, const char *ns, int chunk_mb, int defrag,
                                 int auto_merge, ms_error_t *err);
/* Stores defragmentationPhase of a collection still defragmenting; NULL ends
 * defragmentation: defragmentCollection and the phase removed, estimates cleared. */
int cat_coll_set_defrag_phase(cat_t *c, const char *ns, const char *phase, ms_error_t *err);
/* config.chunks estimatedDataSizeBytes of the chunk exactly [min_enc, max_enc) of ns
 * (absent: no-op). */
int cat_chunk_set_est(cat_t *c, const char *ns, const uint8_t *min_enc, size_t min_len,
                      const uint8_t *max_enc, size_t max_len, int64_t bytes, ms_error_t *err);
/* onCurrentShardSince (seconds) of chunks[0..n) of ns into since_s[]; a chunk no longer
 * in the catalog as it is in the array gets INT64_MAX (never old enough to merge). */
int cat_chunks_since(cat_t *c, const char *ns, const bal_chunk_t *chunks, int n,
                     int64_t *since_s, ms_error_t *err);

/* ---- checkMetadataConsistency, the catalog's half (cat_consistency.c) ------------- */
/* One sharded collection of the catalog as the shards' check needs it. */
typedef struct cat_cm_coll {
    char ns[MS_NS_BYTES_MAX + 1];
    uint8_t uuid[16];
    bson_t key;
    char **owners;                /* shards that own chunks (cat_strv_free) */
    int nowners;
} cat_cm_coll_t;
/* Appends {type, description, details} to the array found (counter *nfound); beyond
 * MS_CHECK_METADATA_FOUND_MAX it only counts. Logs the type. */
void cat_cm_add(bson_t *found, int *nfound, const char *type, const char *description,
                const bson_t *details);
void cat_cm_colls_free(cat_cm_coll_t *v, int n);   /* NULL-safe */
/* Names of every database in config.databases (cat_strv_free). */
int cat_cm_databases(cat_t *c, char ***names, int *n, ms_error_t *err);
/* db NULL: the cluster-level catalog checks (HiddenShardedCollection). Else the sharded
 * collections of db (only_ns: that one only): routing-table and zone checks appended to
 * found, and the collections with their owners into *colls_out (caller frees; may be
 * NULL). */
int cat_cm_check(cat_t *c, const char *db, const char *only_ns, bson_t *found, int *nfound,
                 cat_cm_coll_t **colls_out, int *ncolls_out, ms_error_t *err);
/* _configsvrCheckMetadataConsistency (cmd_consistency.c). */
int cfg_cmd_check_metadata(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* ---- failpoints (registered by cfg_register_failpoints, configsvr_cmd.c) ---------- */
/* One named point at each step of a multi-step metadata operation where a crash or an
 * error must leave the catalog either without the change or with all of it, and a retry
 * must succeed. docs/protocol.md ("Config server: failpoints") says what each proves;
 * tests/integration/test_configsvr_crash.py proves it. The *BeforeCommit points of the
 * catalog act inside the transaction for "error" and "crash"; their "hang" waits before
 * the catalog mutex is taken (fp_eval_early / fp_late), so no hang stalls other requests. */
#define CFG_FP_ADD_SHARD_BEFORE_INSERT "addShardBeforeCatalogInsert"
#define CFG_FP_SHARD_COLL_BEFORE_COMMIT "shardCollectionBeforeCatalogCommit"
#define CFG_FP_SHARD_COLL_AFTER_COMMIT "shardCollectionAfterCatalogCommit"
#define CFG_FP_SPLIT_BEFORE_COMMIT "splitChunkBeforeCommit"
#define CFG_FP_SPLIT_AFTER_COMMIT "splitChunkAfterCommit"
#define CFG_FP_MERGE_BEFORE_COMMIT "mergeChunksBeforeCommit"
#define CFG_FP_MERGE_AFTER_COMMIT "mergeChunksAfterCommit"
#define CFG_FP_DROP_COLL_BEFORE_DELETE "dropCollectionBeforeCatalogDelete"
#define CFG_FP_DROP_DB_BEFORE_DELETE "dropDatabaseBeforeCatalogDelete"
#define CFG_FP_REMOVE_SHARD_BEFORE_COMMIT "removeShardBeforeCommit"
#define CFG_FP_SETTINGS_BEFORE_COMMIT "settingsUpdateBeforeCommit"
/* Inside the migration commit's transaction, before COMMIT (cat_migrate.c). */
#define CFG_FP_HANG_BEFORE_COMMIT_MIGRATION "hangBeforeCommitMigration"
/* movePrimary, after the clone and before the primary switch, the old primary's database
 * critical section held (cmd_moveprimary.c). */
#define CFG_FP_HANG_BEFORE_MOVE_PRIMARY_SWITCH "hangBeforeMovePrimarySwitch"
/* getMore on a config cursor: the cursor pinned, before its batch (cfg_query.c; the
 * shard's point of the same name, MongoDB's). */
#define CFG_FP_GETMORE_AFTER_PIN "waitAfterPinningCursorBeforeGetMoreBatch"

/* Declares every point above (fp_register); main calls it before serving. */
void cfg_register_failpoints(void);

/* ---- the daemon (main.c, configsvr_cmd.c, cmd_*.c) ------------------------------- */

typedef struct cfg_ddl cfg_ddl_t;
typedef struct cfg_balancer cfg_balancer_t;
typedef struct cfg_merger cfg_merger_t;

typedef struct cfg {
    cat_t *cat;
    curs_reg_t *cursors;          /* open cursors on config collections (cfg_query.c) */
    char url[MS_URL_BYTES_MAX];   /* this server's URL: the shards' configsvrConnectionString */
    cfg_ddl_t *ddl;               /* DDL locks of read-ask-commit metadata commands */
    long long started_ms;
    cfg_balancer_t *bal;          /* the balancer thread (balancer.c); NULL until started */
    cfg_merger_t *merger;         /* the balancer's secondary thread (bal_merge.c); NULL until started */
    int dbpath_lock_fd;           /* flock'ed dbpath/mongod.lock: one config server per dbpath */
} cfg_t;

/* ---- DDL locks (ddl_lock.c) ------------------------------------------------------ */

/* What one command holds: released with cfg_ddl_unlock (safe on a zeroed guard). */
typedef struct cfg_ddl_guard {
    cfg_t *cfg;
    int n;
    char names[2][CFG_DDL_NAME_BYTES_MAX];
    bool exclusive[2];
} cfg_ddl_guard_t;

int cfg_ddl_open(cfg_ddl_t **out);
void cfg_ddl_close(cfg_ddl_t *d);  /* NULL-safe */
/* Database db exclusively (enableSharding, create, dropDatabase). reason names the
 * command for errors and logs. LockBusy (46) when the wait runs out. */
int cfg_ddl_lock_db(cfg_t *cfg, const char *db, const char *reason, cfg_ddl_guard_t *g,
                    ms_error_t *err);
/* Collection ns exclusively, and its database shared (shardCollection, split, merge,
 * drop). */
int cfg_ddl_lock_coll(cfg_t *cfg, const char *ns, const char *reason, cfg_ddl_guard_t *g,
                      ms_error_t *err);
/* The shard list exclusively (addShard, removeShard). */
int cfg_ddl_lock_shards(cfg_t *cfg, const char *reason, cfg_ddl_guard_t *g, ms_error_t *err);
void cfg_ddl_unlock(cfg_ddl_guard_t *g);

/* ---- the web view (http.c, http_api.c; --http-port) ---------------------------------- */
typedef struct cfg_http cfg_http_t;
/* Serves the page and the JSON endpoints on http://bind_addr:port/ (our own HTTP/1.1
 * server: a loop thread for every connection, and the collector thread) and bounds the
 * port's connections (idle_ms: one with nothing waiting and no answer for this long is
 * closed, and so is one whose answers stay unsent this long). *out set on success only;
 * SocketException when the port cannot be bound. */
int cfg_http_start(cfg_t *cfg, const char *bind_addr, int port, int idle_ms, cfg_http_t **out,
                   ms_error_t *err);
/* Closes every connection, stops the loop and the collector; NULL-safe. Call before
 * the catalog is closed. */
void cfg_http_stop(cfg_http_t *h);
const char *cfg_http_url(const cfg_http_t *h);  /* "http://bind:port/" */
/* One build of the whole state the web view serves (http_api.c): sections cluster,
 * collections, migrations, balancer, changelog, plus builtAt and buildMS, into out
 * (initialised by the caller). Reads only; shard calls have MS_HTTP_SHARD_CALL_MS each. */
void cfg_web_state_build(cfg_t *cfg, bson_t *out);

/* The command table (configsvr_cmd.c). */
extern const cmd_spec_t cfg_cmd_table[];
extern const int cfg_cmd_table_len;
/* serverStatus section `sharding` (counts of shards, databases, collections, chunks). */
void cfg_status(void *app, bson_t *reply);
void cfg_metrics(void *app, bson_t *metrics);   /* serverStatus metrics: cursors */

/* Sends cmd to a shard by name (host looked up in the catalog) with a deadline. On
 * success *reply is initialised (caller owns it); on any failure — transport or an
 * {ok: 0} answer, whose code and errmsg become *err — nothing is left to destroy. */
int cfg_shard_command(cfg_t *cfg, const char *shard, const bson_t *cmd, int timeout_ms,
                      bson_t *reply, ms_error_t *err);
/* Best effort `_flushRoutingTableCacheUpdates: ns` to shard; failures are logged. */
void cfg_flush_shard(cfg_t *cfg, const char *shard, const char *ns);
/* cfg_flush_shard to shards[0, n) at once (one thread each), returning when all answered
 * or timed out. */
void cfg_flush_shards(cfg_t *cfg, const char *const *shards, int n, const char *ns);

/* Splits "db.coll" into db (cap >= CAT_DB_NAME_BYTES_MAX) and checks both parts are
 * non-empty and the whole fits MS_NS_BYTES_MAX (InvalidNamespace otherwise). */
int cfg_ns_split(const char *ns, char *db, size_t db_cap, const char **coll, ms_error_t *err);
/* A command's string value (ctx->arg) or the named string field; "" when absent. */
const char *cfg_arg_str(const cmd_ctx_t *ctx);
/* Copies the document field name of the request into *out as a read-only view (false
 * when absent or not a document/array). */
bool cfg_field_doc(const cmd_ctx_t *ctx, const char *name, bson_t *out);

/* splitVector on a shard over [min, max) of ns (cmd_coll.c): the split keys array copied
 * into *keys (initialised on success; caller destroys). force → the median only
 * (MongoDB's splitVector force: true), else points every max_bytes / 2 of data. */
int cfg_split_vector(cfg_t *cfg, const char *shard, const char *ns, const bson_t *key,
                     const bson_t *min, const bson_t *max, bool force, int64_t max_bytes,
                     bson_t *keys, ms_error_t *err);

/* cmd_shards.c */
int cfg_cmd_add_shard(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_list_shards(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_remove_shard(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* cmd_db.c */
/* zones (cmd_zones.c) */
int cfg_cmd_shard_zone(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_update_zone_key_range(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* movePrimary (cmd_moveprimary.c) */
int cfg_cmd_move_primary(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_enable_sharding(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_create_database(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_drop_database(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_drop_collection(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* cmd_coll.c */
int cfg_cmd_shard_collection(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_get_routing_table(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* cmd_chunks.c */
int cfg_cmd_split(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_merge_chunks(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* cfg_query.c: reads and settings writes on the config database */
/* The config server's cursor registry (common/cursor.h; curs_reg_free closes it). */
int cfg_query_cursors_new(int idle_ms, curs_reg_t **out, ms_error_t *err);
int cfg_cmd_find(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_list_collections(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_aggregate(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_get_more(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_kill_cursors(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_count(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_update(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* ---- migration (cmd_migrate.c) ---- */
int cfg_cmd_move_range(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* One _configsvrMoveRange request, from the command or the balancer (all borrowed; NULL
 * = absent). bounds: min and max must name a chunk exactly (moveChunk's bounds). */
typedef struct cfg_move_req {
    const char *ns, *to;
    const bson_t *min, *max, *find, *wc;
    bool bounds;
    int force_jumbo;          /* 0 doNotForce, 1 forceManual, 2 forceBalancer */
    bool wait_delete, throttle;
} cfg_move_req_t;
/* The body of _configsvrMoveRange: checks, config.migrations, _shardsvrMoveRange to the
 * donor, waits for its end. The donor's {ok: 0} fields other than code/errmsg go to
 * err_info (may be NULL). Deadline: the calling thread's op deadline, else the migration
 * default. */
int cfg_move_range(cfg_t *cfg, const cfg_move_req_t *r, bson_t *err_info, ms_error_t *err);
int cfg_cmd_commit_chunk_migration(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_ensure_chunk_version_gt(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_log_change(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* Start-up: removes config.migrations entries a crash left (see cmd_migrate.c). */
void cfg_migrations_recover(cfg_t *cfg);
/* The shard-key document of a `find` query (every key field an equality value; hashed
 * fields hashed) into *key (initialised on success). cmd_chunks.c. */
int cfg_key_of_query(const keys_pattern_t *p, const bson_t *find, bson_t *key, ms_error_t *err);
/* ---- the balancer's snapshot (bal_snapshot.c) ---- */
/* What a balancer round, balancerExplain and balancerCollectionStatus read before they
 * ask the policy: one code path, so that the explain shows what a round would see. */
typedef struct bal_settings {
    bool enabled;              /* false: stopped, mode off or outside the activeWindow */
    char off_reason[64];       /* "stopped", "mode off", "outside activeWindow" */
    bool wait_delete, throttle, autosplit;
    bal_policy_t policy;
    int64_t chunk_size;        /* cluster default (config.settings chunksize) */
    bool has_window, in_window; /* activeWindow set (valid HH:MM both ends); now inside it */
    char window_start[16], window_stop[16];  /* "HH:MM" */
} bal_settings_t;
/* config.settings balancer / autosplit / chunksize as the balancer reads them. */
void bal_settings_read(cfg_t *cfg, bal_settings_t *s);

/* One config.shards row, owning what shards[i] borrows. */
typedef struct bal_snap_shard {
    char name[CAT_SHARD_NAME_BYTES_MAX];
    bool draining;
    char **zones;
    int nzones;
    int64_t max_size_mb;       /* config.shards maxSize (MB), 0 = none */
} bal_snap_shard_t;
/* The shards in name order: rows[i] owns, shards[i] (the policy's view) borrows from it. */
typedef struct bal_snap {
    bal_snap_shard_t *rows;
    bal_shard_t *shards;
    int nshards;
} bal_snap_t;
/* Reads config.shards (at most MS_BALANCER_SHARDS_MAX) and, for a shard with a maxSize,
 * its total data size (listDatabases; 0 when the shard does not answer). *sn is set even on
 * error (release with bal_snap_free). */
int bal_snap_shards(cfg_t *cfg, bal_snap_t *sn, ms_error_t *err);
void bal_snap_free(bal_snap_t *sn);  /* NULL-safe */
/* Index of the shard called name, or -1. */
int bal_snap_index(const bal_snap_t *sn, const char *name);
/* One collection: cat_bal_load_summary into *d (release with cat_bal_free) with chunk
 * owners and counts mapped to sn's indexes, and each shard's coll_bytes set (the
 * collection's data size there from dataSize under the dataSize policy, else 0). */
int bal_snap_coll(cfg_t *cfg, bal_snap_t *sn, const char *ns, bal_policy_t policy,
                  cat_bal_data_t *d, ms_error_t *err);
/* d's chunk owners, and a summary's counts per shard name, mapped to sn's shard indexes
 * (a shard not in sn — removed meanwhile — is left out, as a chunk owned by it is). */
void bal_snap_map(const bal_snap_t *sn, cat_bal_data_t *d);
/* Points bc's chunks, zones and counts at d (a full load: no counts, chunks counted). */
void bal_coll_view(const cat_bal_data_t *d, bal_coll_t *bc);
/* Marks busy the shards donor or recipient of a config.migrations entry (a migration
 * running now); appends {ns, fromShard, toShard} per entry to list (may be NULL) and
 * their number to *n (may be NULL). */
int bal_snap_busy(cfg_t *cfg, bal_snap_t *sn, bson_t *list, int *n, ms_error_t *err);

/* cmd_bal.c: balancerCollectionStatus, balancerExplain, and the update of
 * config.collections noBalance / enableAutoMerge (one statement of cfg_cmd_update: q
 * {_id: ns}, u $set of a boolean or $unset of those two only; n / nModified as MongoDB
 * counts them) — mongosh's sh.disableBalancing / sh.disableAutoMerger and their enable forms. */
int cfg_cmd_balancer_collection_status(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_balancer_explain(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_coll_update_flags(cfg_t *cfg, const bson_t *q, const bson_t *u, bool upsert, int64_t *n,
                          int64_t *nmod, ms_error_t *err);
/* ---- the balancer thread (balancer.c) ---- */
/* Starts the thread: takes config.locks {_id: "balancer"} and runs rounds every idle_ms
 * (after a round that moved chunks, the next at once; its batch waits until throttle_ms
 * after the previous batch ended). */
int cfg_balancer_start(cfg_t *cfg, int idle_ms, int throttle_ms, ms_error_t *err);
/* Ends the thread (waits for its round, whose migrations end on their own); the state
 * stays for handlers still serving (balancerStart / Stop / Status, wakes) until
 * cfg_balancer_free, after serving stopped. Both NULL-safe. */
void cfg_balancer_shutdown(cfg_t *cfg);
void cfg_balancer_free(cfg_t *cfg);
/* Wakes the thread for a round now (balancerStart, settings changes). */
void cfg_balancer_wake(cfg_t *cfg);
/* inBalancerRound / numBalancerRounds for balancerStatus. */
void cfg_balancer_counters(cfg_t *cfg, bool *in_round, int64_t *rounds);
int cfg_cmd_balancer_start(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_balancer_stop(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* cmd_status.c */
int cfg_cmd_router_ping(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cfg_cmd_balancer_status(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* bal_jumbo.c: the balancer's zone-boundary splits and splitOrMarkJumbo (notes §4.3, §4.6). */
/* The zone bounds strictly inside chunk ch (pure): cuts[k] = 2 * zone index + (0 for
 * its min, 1 for its max), in key order, a bound shared by two neighbouring ranges once;
 * returns how many (at most cap). zones in key order, not overlapping. */
int bal_zone_cuts(const bal_chunk_t *ch, const bal_zone_range_t *zones, int nzones, int *cuts,
                  int cap);
/* Splits every chunk of ns that a zone range bound cuts strictly inside, at those bounds;
 * appends a splits[] entry {ns, min, max, shard, points, reason: "zoneBoundary"} per
 * split to the round's splits array; returns how many chunks were split. */
int bal_zone_split_coll(cfg_t *cfg, const char *ns, bson_t *splits, int *nsplits);
/* Splits [min, max) of ns at pts under the collection's DDL lock (the catalog
 * transaction re-checks the chunk; why names the lock's holder), then has the owner
 * refresh (bal_jumbo.c). */
int bal_split_commit(cfg_t *cfg, const char *ns, const bson_t *min, const bson_t *max,
                     const char *owner, const bson_t *const *pts, int np, const char *why,
                     ms_error_t *err);
/* Appends one splits[] entry {ns, min, max, shard, points, reason} of a round (reason
 * NULL: none, an auto-split). */
void bal_split_entry(bson_t *splits, int *nsplits, const char *ns, const bson_t *min,
                     const bson_t *max, const char *shard, const bson_t *const *pts, int np,
                     const char *reason);
/* After a balancer migration of [min, max) (max NULL: the chunk starting at min) from
 * owner failed with ChunkTooBig / ExceededMemoryLimit: one autoSplitVector point (limit
 * 1, the collection's chunk size) → split there, `splitAfterTooBig: point` appended to
 * entry (the round's migration document being built); none → jumbo:true with no version
 * bump, `markedJumbo: true` appended. Failures are logged, entry left as it is. */
void bal_split_or_mark_jumbo(cfg_t *cfg, const char *ns, const bson_t *min, const bson_t *max,
                             const char *owner, bson_t *entry);
/* cmd_jumbo.c: clearJumboFlag {clearJumboFlag: ns, find | bounds} (MongoDB 7.0). */
int cfg_cmd_clear_jumbo_flag(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* ---- defragmentation and the auto-merger (defrag.c, bal_merge.c) ---- */
/* May the balancer act now (mode full, not stopped, inside the activeWindow)? why gets
 * the reason when not (balancer.c). */
bool cfg_balancer_may_act(cfg_t *cfg, char *why, size_t cap);
/* defrag.c, the balancer round's part: for coll (defragmentCollection set), in phase
 * moveAndMergeChunks, the migrations this round owes (chosen by bal_defrag_moves with the
 * round's busy flags in shards; at most cap) into out (min / max: caller owns, bson_destroy
 * them); wakes the secondary thread in every phase. Appends {ns, phase, migrations,
 * waiting} to arr at index *n. Returns how many moves. */
typedef struct cfg_defrag_move {
    int from, to;       /* indexes into shards */
    bson_t *min, *max;  /* the chunk; caller owns */
} cfg_defrag_move_t;
int cfg_defrag_round_moves(cfg_t *cfg, const cat_coll_t *coll, bal_shard_t *shards, int nshards,
                           int64_t chunk_size, cfg_defrag_move_t *out, int cap, bson_t *arr,
                           int *n);
/* The outcome of one of those moves (rc 0 = moved): a non-retriable error restarts the
 * phase (cfg_secondary_defrag_restart); either way the secondary thread is woken. */
void cfg_defrag_move_done(cfg_t *cfg, const char *ns, int rc, const ms_error_t *err);
/* defrag.c, the secondary thread's part: one step of coll — phase 1's merges and
 * measures, phase 2's merges after the round's moves, phase 3's merges — then the phase
 * transition stored (restart: a phase-2 migration failed for good, the phase restarts
 * without other work). Logs `balancer.defragmentation` in config.actionlog when it did
 * something or hit errors. Returns true when the collection wants another step soon (it
 * did something or has retriable errors, and is not finished). */
bool cfg_defrag_secondary_step(cfg_t *cfg, const cat_coll_t *coll, const bal_shard_t *shards,
                               int nshards, int64_t chunk_size, bool restart);
int cfg_cmd_configure_collection_balancing(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* Merges every run of contiguous chunks of ns on shard that are not jumbo and arrived
 * there more than horizon_ms ago (at most max_chunks chunks in all), one `merge`
 * changelog entry per run; *runs / *chunks = merges done and chunks they joined. */
int cfg_merge_all_on_shard(cfg_t *cfg, const char *ns, const char *shard, int max_chunks,
                           int64_t horizon_ms, int *runs, int *chunks, ms_error_t *err);
int cfg_cmd_merge_all_chunks_on_shard(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* The balancer's secondary thread (bal_merge.c): while the balancer may act, one
 * defragmentation step per defragmenting collection per wake, then defrag_throttle_ms or
 * until woken; and the auto-merger pass every interval_ms (throttle_ms between two merges
 * of one collection) unless settings automerge is disabled. */
int cfg_merger_start(cfg_t *cfg, int interval_ms, int throttle_ms, int horizon_ms,
                     int defrag_throttle_ms, ms_error_t *err);
/* Stops and joins the thread (NULL-safe); its struct stays until cfg_merger_free, so that
 * the balancer's round may still wake it (a no-op then) until the balancer is stopped. */
void cfg_merger_shutdown(cfg_t *cfg);
void cfg_merger_free(cfg_t *cfg);  /* after cfg_balancer_shutdown; NULL-safe */
/* Wakes the secondary thread for a defragmentation step now (NULL-safe). */
void cfg_secondary_wake(cfg_t *cfg);
/* A phase-2 migration of ns failed with a non-retriable error: the secondary thread's next
 * step of ns restarts the phase (phase 2 → phase 1). */
void cfg_secondary_defrag_restart(cfg_t *cfg, const char *ns);

#endif
