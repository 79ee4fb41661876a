/*
 * router.h — the router daemon (bin/router, MongoDB's mongos in miniature): the whole
 * shape of the process in one header (DESIGN §9; notes §8).
 *
 *   main.c        flags, start the command server, the config.mongos pinger, `ready`
 *   router_cmd.c  the command table: one row per command
 *   rt_cache.c    caches: routing tables per collection (sorted chunk arrays, refreshed
 *                 incrementally with getRoutingTable sinceVersion), database primaries,
 *                 the shard registry (listShards)
 *   rt_target.c   targeting: a document's owning shard, a filter's shards (bounds.h)
 *   rt_send.c     sending to shards: versioned command copies, parallel scatter/gather
 *   rt_retry.c    rt_dispatch: build → send → StaleConfig/StaleDbVersion → refresh → retry,
 *                 the one place that sends targeted requests and retries stale ones
 *                 (reads, findAndModify, primary commands, write batches)
 *   rt_find.c     find (k-way merge, skip/limit at the router), getMore, killCursors,
 *                 router cursors, count, distinct
 *   rt_agg.c      aggregate: MongoDB's split (shards part / merger part), gather, merge
 *   rt_write.c    insert / update / delete batches split per shard (rounds of
 *                 rt_dispatch; a retry re-sends only the ops not applied), findAndModify
 *   rt_admin.c    commands forwarded to the config server, drop, the internal-command
 *                 guard, config.mongos pings, serverStatus
 *   rt_indexes.c  createIndexes / dropIndexes, versioned so every owning shard gets them
 *   rt_consistency.c  checkMetadataConsistency
 *
 * Every request to a shard for a sharded collection carries shardVersion {e, t, v} =
 * the version of that shard's chunks in our cache; unsharded collections go to the
 * database's primary shard with the UNSHARDED version and the database's version
 * (databaseVersion). StaleConfig (13388) from a shard makes us refresh that collection
 * and retry, StaleDbVersion (249) that database's entry (MS_STALE_RETRIES_MAX); neither
 * reaches the client while retries remain.
 */
#ifndef MS_ROUTER_H
#define MS_ROUTER_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/cmd.h"
#include "common/errors.h"
#include "common/keys.h"
#include "common/limits.h"
#include "common/rtable.h"

/* Deadline of a call to a shard or to the config server when the request has no
 * maxTimeMS (--peer-timeout-ms overrides it): shorter than our clients' own default, so
 * that a hung shard shows them our error naming it, not their timeout. */
#define RT_CALL_TIMEOUT_MS MS_RPC_PEER_TIMEOUT_MS_DEFAULT
/* config.mongos liveness upsert period (MongoDB's sharding uptime reporter: 10 s). */
#define RT_PING_INTERVAL_MS 10000
/* Ranges asked of bounds_from_filter when targeting; more → coarser (superset) bounds. */
#define RT_TARGET_RANGES_MAX 1024
/* Documents in a getMore batch when the client sets no batchSize (MongoDB fills 16 MB). */
#define RT_GETMORE_DOCS_DEFAULT 10000
/* Test failpoint: every refresh of a cached routing table fetches it in full (no
 * sinceVersion), as after flushRouterConfig; with data {rotateShards: true} the fresh
 * table numbers its shards differently from the one it replaces (rt_cache.c). */
#define RT_FP_FORCE_FULL_REFRESH "forceFullRoutingRefresh"
/* Test failpoint: a createIndexes / dropIndexes about to send its next attempt after a
 * StaleConfig (rt_indexes.c) waits here, so a test can change a shard's indexes between
 * two attempts as a migration's index sync would. */
#define RT_FP_HANG_INDEX_DDL_RETRY "hangIndexDdlBeforeRetry"
/* Rounds of rt_table_get (look in the cache, else refresh): a refresh of its own always
 * yields a table, so more than one round is needed only when another thread's refresh it
 * waited for was discarded by an invalidation; past this it answers StaleConfig. */
#define RT_TABLE_GET_ROUNDS_MAX 8
/* Shard names and database names (config.shards _id, config.databases _id). */
#define RT_NAME_BYTES_MAX RTABLE_NAME_BYTES_MAX

/* ================================ rt_cache.c ========================================= */

/* An immutable, reference-counted routing table of one collection: the common table
 * (common/rtable.h: chunks sorted by encoded min, shard names, versions) when sharded. */
typedef struct rt_table {
    atomic_int refs;
    char ns[MS_NS_BYTES_MAX + 1];
    bool sharded;
    rtable_t rt;          /* zeroed when unsharded; built in place, never moved */
} rt_table_t;

typedef struct rt_coll_entry rt_coll_entry_t;
typedef struct rt_db_entry rt_db_entry_t;
typedef struct rt_cursors rt_cursors_t;

typedef struct router {
    char configdb[MS_URL_BYTES_MAX];
    char url[MS_URL_BYTES_MAX];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rt_coll_entry_t *colls;
    rt_db_entry_t *dbs;
    int nshards;
    char shard_names[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
    char shard_hosts[MS_SHARDS_MAX][MS_URL_BYTES_MAX];
    rt_cursors_t *cursors;
    long long start_ms;
    int peer_timeout_ms;  /* deadline of a call to a shard or the config server (no maxTimeMS) */
    /* serverStatus.router counters */
    atomic_uint_fast64_t stale_retries, refreshes, targeted_ops, scatter_ops;
    atomic_uint_fast64_t stale_db_retries, db_refreshes;
    /* refreshes whose table an invalidation kept out of the cache (handed to their caller
     * only: rt_cache.c) */
    atomic_uint_fast64_t refreshes_discarded;
    /* serverStatus.sharding.maxChunkSizeInBytes: config.settings chunksize as the pinger
     * last read it (rt_info.c) */
    atomic_int_fast64_t max_chunk_bytes;
    /* the config.mongos pinger */
    pthread_t pinger;
    bool pinger_running;
    atomic_bool stopping;
    pthread_mutex_t ping_mu;
    pthread_cond_t ping_cv;
} router_t;

int rt_open(const char *configdb, const char *url, router_t **out, ms_error_t *err);
void rt_close(router_t *r);   /* NULL-safe; stops the pinger */

/* Any command to the config server; *reply initialised on success whatever ok says. */
int rt_config_call(router_t *r, const bson_t *cmd, bson_t *reply, ms_error_t *err);
/* The same with dflt_ms as the deadline when the operation has no maxTimeMS (moveChunk and
 * moveRange wait for a whole migration, far beyond the usual peer timeout). */
int rt_config_call_ms(router_t *r, const bson_t *cmd, int dflt_ms, bson_t *reply, ms_error_t *err);

/* The routing table of ns (cached, else fetched). Caller releases. Unsharded namespaces
 * give a table with sharded = false. */
int rt_table_get(router_t *r, const char *ns, rt_table_t **out, ms_error_t *err);
/* Refreshes ns after a StaleConfig seen with `seen` (incremental when possible); when
 * another thread already replaced `seen` this returns at once. */
int rt_table_refresh(router_t *r, const char *ns, const rt_table_t *seen, ms_error_t *err);
void rt_table_invalidate(router_t *r, const char *ns);
void rt_table_release(rt_table_t *t);   /* NULL-safe */
/* Another reference to t (a table is immutable but for its count); caller releases. */
rt_table_t *rt_table_hold(const rt_table_t *t);

/* A database's version (common/rtable.h: config.databases version). */
typedef rtable_dbv_t rt_db_version_t;

/* The primary shard of db. create: make the database (_configsvrCreateDatabase) when it
 * does not exist; else NamespaceNotFound. */
int rt_db_primary(router_t *r, const char *db, bool create, char *primary, size_t cap,
                  ms_error_t *err);
/* rt_db_primary with the cached database version (version may be NULL). */
int rt_db_get(router_t *r, const char *db, bool create, char *primary, size_t cap,
              rt_db_version_t *version, ms_error_t *err);
void rt_db_invalidate(router_t *r, const char *db);
/* Forgets the cached primary of db and the cached tables of every db.* namespace
 * (after dropDatabase). */
void rt_cache_flush_db(router_t *r, const char *db);
/* Forgets every cached table and database (flushRouterConfig without a name). */
void rt_cache_flush_all(router_t *r);
/* The host URL of a shard (listShards on a miss). */
int rt_shard_url(router_t *r, const char *shard, char *url, size_t cap, ms_error_t *err);
/* Every shard name known (refreshed with listShards); returns the count. */
int rt_all_shards(router_t *r, char names[][RT_NAME_BYTES_MAX], int cap, ms_error_t *err);

/* ================================ rt_target.c ======================================== */

/* The shard of a document (insert; a replacement's key). Errors: array in the key. */
int rt_target_doc(const rt_table_t *t, const bson_t *doc, int *shard, ms_error_t *err);
/* The shards whose chunks a filter may touch (bit i = t->shards[i]); *point = the filter
 * fixes the whole shard key (equality on every field). Never empty for a sharded table. */
int rt_target_filter(const rt_table_t *t, const bson_t *filter, uint64_t *mask, bool *point,
                     ms_error_t *err);
/* The chunks a filter may touch, as rt_target_filter chooses them: visit(arg, i, chunk)
 * once for each, in key order (i: the index in t's table). Costs O(chunks chosen + log n). */
typedef void (*rt_chunk_visit_fn)(void *arg, int i, const rtable_chunk_t *c);
int rt_target_chunks(const rt_table_t *t, const bson_t *filter, rt_chunk_visit_fn visit,
                     void *arg, ms_error_t *err);
/* True when the filter has an exact equality on _id (not an operator document). */
bool rt_filter_has_exact_id(const bson_t *filter);

/* ================================ rt_send.c ========================================== */

/* One request to one shard (scatter/gather element). */
typedef struct rt_req {
    char shard[RT_NAME_BYTES_MAX];
    bson_t cmd;           /* initialised by the caller; rt_req_clear destroys it */
    bson_t reply;         /* initialised when rc == 0 */
    int rc;               /* transport/lookup error (the reply's own ok is not looked at) */
    ms_error_t err;
} rt_req_t;

/* Sends every request in parallel (one thread per extra request) and waits for all. */
void rt_send_all(router_t *r, rt_req_t *reqs, int n);
void rt_req_clear(rt_req_t *q);
/* The status of a reply: 0 for ok: 1, else its code with errmsg into err. */
int rt_reply_status(const bson_t *reply, ms_error_t *err);
/* Copies the client's command, leaving out the named fields (NULL-terminated list) and
 * shardVersion and databaseVersion (only the router attaches versions). */
void rt_copy_cmd(bson_t *dst, const bson_t *src, const char *const *skip);
/* Appends shardVersion for shard index i of t (UNSHARDED for unsharded tables). */
void rt_append_version(bson_t *cmd, const rt_table_t *t, int shard);
/* Appends databaseVersion {uuid, timestamp, lastMod}: sent with every command for an
 * unsharded collection to the database's primary shard. */
void rt_append_db_version(bson_t *cmd, const rt_db_version_t *v);
/* StaleDbVersion (249) from shard: logs, counts, and forgets the cached entry of db so
 * the retry reads it afresh. */
void rt_note_stale_db(router_t *r, const char *db, const char *shard, const bson_t *reply);
/* Logs one stale retry and counts it. */
void rt_note_stale(router_t *r, const char *ns, const char *shard, const bson_t *reply);
/* Sends one command to one named shard (no versioning); *reply initialised on 0. */
int rt_shard_call(router_t *r, const char *shard, const bson_t *cmd, bson_t *reply,
                  ms_error_t *err);

/* Kills the shard's cursor id (0: nothing) of db.coll, best effort; as every killCursors,
 * outside the operation's deadline (cleanup outlives maxTimeMS). */
void rt_kill_shard_cursor(router_t *r, const char *shard, const char *db, const char *coll,
                          int64_t id);

/* ================================ rt_retry.c ========================================= */

/* Sleeps before resend `attempt` (0-based) of a retryable write: doubling backoff, cut to
 * the operation's time left. false when no resend remains (count or deadline). */
bool rt_write_retry_wait(int attempt);

/* What absorb reports of a reply beyond its own status (bits). */
#define RT_ABSORB_STALE_CONFIG 1   /* a StaleConfig inside it (writeError): retry, refresh ns */
#define RT_ABSORB_STALE_DB     2   /* a StaleDbVersion inside it: retry, forget db's entry */
#define RT_ABSORB_END          4   /* no retry after this attempt (MaxTimeMSExpired) */

/* A dispatch with stale retries: what to route by and how to build the requests. */
typedef struct rt_dispatch {
    const char *db;       /* forgotten on StaleDbVersion */
    const char *ns;       /* db.coll: its table is passed to build and refreshed on
                           * StaleConfig; NULL: no table (build gets NULL) and a StaleConfig
                           * reply is a failure like any other */
    const char *what;     /* named in the error when retries run out (default ns, else db) */
    /* This attempt's requests from the current table t: fills reqs[0..*n) (shard, cmd
     * with versions); *n may be 0 (nothing to send: the dispatch ends). On an error
     * returns its code with none initialised. */
    int (*build)(void *arg, router_t *r, const rt_table_t *t, rt_req_t *reqs, int *n,
                 ms_error_t *err);
    /* An ok reply of an attempt that is retried (scatter: kill its cursor); may be NULL. */
    void (*discard)(void *arg, router_t *r, rt_req_t *q);
    /* Per-request mode (write batches), may be NULL: every request of every attempt that
     * is not stale as a whole is handed here once the attempt is in — code = its transport
     * error (q->rc), else its reply's status — also when the attempt is retried, so that
     * what a shard applied is recorded and never re-sent. Borrows q (rt_dispatch clears
     * it). Returns RT_ABSORB_* bits. A failed request is then the caller's to record,
     * not the dispatch's end. */
    int (*absorb)(void *arg, router_t *r, rt_req_t *q, int code);
    /* May be NULL: retries running out or a refresh failing is handed here and
     * rt_dispatch returns 0 (a write batch fails its pending ops with it); else it is
     * rt_dispatch's error. Borrows e. */
    void (*give_up)(void *arg, const ms_error_t *e);
    int *stale_rounds;    /* stale attempts so far, shared by the dispatches of one command
                           * (an ordered batch's rounds); NULL: this dispatch's own */
    void *arg;
} rt_dispatch_t;

/* Gets the table, builds, sends in parallel; StaleConfig (when ns) → rt_note_stale and
 * refresh ns, StaleDbVersion → rt_note_stale_db; rebuilds and resends until no reply is
 * stale, bounded by MS_STALE_RETRIES_MAX and op_check. On 0 reqs[0..*nreqs) hold the
 * final attempt (caller clears them; none with absorb) and *failed is the first one that
 * failed (transport error in rc, or a non-stale error reply), -1 when all are ok. */
int rt_dispatch(router_t *r, const rt_dispatch_t *d, rt_req_t *reqs, int *nreqs, int *failed,
                ms_error_t *err);
/* ================================ rt_find.c (shared) ================================= */

/* Builds the command for shard index `shard` of t (-1: the primary of an unsharded
 * collection); ntargets = how many shards this attempt sends to. */
typedef void (*rt_build_fn)(void *arg, const rt_table_t *t, int shard, int ntargets,
                            bson_t *cmd);
/* Targets filter (NULL = every owning shard; the primary when unsharded), sends what fn
 * builds with shard versions, retries stale ones (rt_dispatch). On 0 reqs[0..*nreqs) hold
 * ok replies (caller clears them); on an error the cursors the others opened are killed.
 * NamespaceNotFound = unsharded collection of a database that does not exist. */
int rt_scatter(router_t *r, const char *db, const char *coll, const bson_t *filter,
               rt_build_fn fn, void *arg, rt_req_t *reqs, int *nreqs, ms_error_t *err);
/* A read on the config database relayed to the config server, its cursor counted
 * against the client's connection (find, aggregate with $db: "config"). */
int rt_cfg_cursor_cmd(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* The reply {cursor: {firstBatch, id, ns}} over results the router holds (an array,
 * taken); a router cursor keeps the rest for getMore. batch < 0: the default first batch. */
int rt_cursor_from_results(router_t *r, const char *db, const char *coll, bson_t *results,
                           int64_t batch, bson_t *reply, ms_error_t *err);

/* ================================ command handlers ==================================== */

int rt_cmd_find(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);          /* rt_find.c */
int rt_cmd_get_more(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_kill_cursors(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_count(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_distinct(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_aggregate(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);    /* rt_agg.c */
int rt_cmd_explain(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);      /* rt_explain.c */
int rt_cursors_open(router_t *r, rt_cursors_t **out);   /* r: borrowed, for the shard kills */
void rt_cursors_close(router_t *r, rt_cursors_t *c);
void rt_cursors_reap(router_t *r);   /* kills cursors idle > MS_CURSOR_IDLE_MS_MAX */
int rt_cursors_count(router_t *r);
/* serverStatus metrics.cursor: open.total, bytesBuffered, refusals per cap, the caps. */
void rt_cursors_metrics(router_t *r, bson_t *metrics);
void rt_metrics(void *app, bson_t *metrics);

int rt_cmd_insert(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);        /* rt_write.c */
int rt_cmd_update(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_delete(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_find_and_modify(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

int rt_cmd_to_config(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);     /* rt_admin.c */
/* moveChunk / moveRange → _configsvrMoveRange with the migration deadline (rt_admin.c). */
int rt_cmd_move(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_drop(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_drop_database(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_to_primary(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* currentOp: every shard's, each entry tagged with its shard; silent shards in shardErrors. */
int rt_cmd_current_op(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_internal(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_flush_router_config(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_list_databases(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_db_stats(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_rename_collection(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* When the request names an internal command (leading '_'), fills reply with
 * Unauthorized and returns true. Called before dispatch. */
bool rt_refuse_internal(const uint8_t *data, size_t len, bson_t *reply);
void rt_status(void *app, bson_t *reply);
int rt_pinger_start(router_t *r, ms_error_t *err);

/* createIndexes / dropIndexes: versioned to every shard that owns chunks and the primary
 * (unsharded: the primary with UNSHARDED + databaseVersion), stale retries (rt_indexes.c). */
int rt_cmd_create_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_drop_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* checkMetadataConsistency: the config server's check, as a cursor (rt_consistency.c). */
int rt_cmd_check_metadata_consistency(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* getShardVersion, getShardMap, serverStatus.sharding (rt_info.c). */
int rt_cmd_get_shard_version(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int rt_cmd_get_shard_map(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* Reads config.settings chunksize into r->max_chunk_bytes (the pinger, every round). */
void rt_refresh_chunk_size(router_t *r);
void rt_status_sharding(router_t *r, bson_t *reply);

/* The table (router_cmd.c). */
extern const cmd_spec_t router_table[];
extern const int router_table_len;

#endif
