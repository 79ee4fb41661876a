/*
 * cat_priv.h — the catalog's internals shared by its files (configsvr/catalog.c and
 * cat_*.c, bin/configsvr); nothing outside the catalog includes it. The public API is
 * the cat_ section of configsvr.h.
 *
 * Conventions: a function named *_locked runs with the catalog mutex held and, when it
 * writes, inside the caller's transaction (the public function that took the mutex owns
 * BEGIN and COMMIT/ROLLBACK). Column helpers read the current row of a statement; their
 * views are valid until the next step.
 */
#ifndef MS_CAT_PRIV_H
#define MS_CAT_PRIV_H

#include <sqlite3.h>

#include "common/buf.h"
#include "configsvr/configsvr.h"

struct cat {
    sqlite3 *db;
    pthread_mutex_t mu;
    bson_oid_t cluster_id;
    cat_ts_t ts_last;                 /* last cluster Timestamp handed out (persisted) */
    char server[MS_URL_BYTES_MAX];    /* changelog `server` */
    /* The chunk INSERT, prepared once (under mu) and reused: shardCollection writes up to
     * a million rows in one transaction, and preparing per row was a third of that. */
    sqlite3_stmt *chunk_insert;
};

/* Column lists of the tables that are read as documents, and the index of each column
 * of CHUNK_COLS. */
#define SHARD_COLS "id, host, draining, state, topo_t, topo_i, tags, max_size"
#define COLL_COLS                                                                  \
    "ns, key, unique_key, epoch, ts_t, ts_i, uuid, created_ms, no_balance,"       \
    " max_chunk_size_bytes, allow_migrations, enable_auto_merge, defragment, defrag_phase"
#define CHUNK_COLS                                                                       \
    "id, min, max, shard, major, minor, jumbo, est_size, since_t, since_i, history, uuid," \
    " min_enc, max_enc"
enum { CC_ID, CC_MIN, CC_MAX, CC_SHARD, CC_MAJOR, CC_MINOR, CC_JUMBO, CC_EST, CC_SINCE_T,
       CC_SINCE_I, CC_HISTORY, CC_UUID, CC_MIN_ENC, CC_MAX_ENC };

/* The hot queries of config.chunks: every split, merge and migration commit runs them, so
 * each must be an index range read (O(log n) + rows read), never a scan or a sort of the
 * collection's chunks. Named here so test_configsvr_catalog can assert each one's query
 * plan (EXPLAIN QUERY PLAN) against the schema's indexes. Parameters: ?1 ns, then keys. */
#define CAT_SQL_TILING_BELOW                                                         \
    "SELECT min_enc, max_enc FROM chunks WHERE ns = ?1 AND min_enc < ?2"             \
    " ORDER BY min_enc DESC LIMIT 1"
#define CAT_SQL_TILING_ABOVE                                                         \
    "SELECT min_enc, max_enc FROM chunks WHERE ns = ?1 AND min_enc >= ?2"            \
    " ORDER BY min_enc LIMIT 1"
#define CAT_SQL_TILING_INSIDE                                                        \
    "SELECT min_enc, max_enc, major, minor FROM chunks WHERE ns = ?1 AND"           \
    " min_enc >= ?2 AND min_enc < ?3 ORDER BY min_enc"
#define CAT_SQL_COLL_VERSION                                                         \
    "SELECT major, minor FROM chunks WHERE ns = ?1 ORDER BY major DESC, minor DESC LIMIT 1"
#define CAT_SQL_SHARD_VERSION                                                        \
    "SELECT major, minor FROM chunks WHERE ns = ?1 AND shard = ?2"                   \
    " ORDER BY major DESC, minor DESC LIMIT 1"
#define CAT_SQL_CHUNK_AT                                                             \
    "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ?1 AND min_enc = ?2"
#define CAT_SQL_CHUNK_CONTAINING                                                     \
    "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ?1 AND min_enc <= ?2"              \
    " ORDER BY min_enc DESC LIMIT 1"
#define CAT_SQL_CHUNK_ENDING_AT                                                      \
    "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ?1 AND min_enc < ?2"               \
    " ORDER BY min_enc DESC LIMIT 1"
#define CAT_SQL_MERGE_PIECES                                                         \
    "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ?1 AND min_enc >= ?2 AND min_enc < ?3" \
    " ORDER BY min_enc"
#define CAT_SQL_MERGE_DELETE "DELETE FROM chunks WHERE ns = ?1 AND min_enc > ?2 AND min_enc < ?3"
/* The donor's lowest chunk not yet at the new major (the control chunk): pinned to
 * chunks_ns_shard_min, which the planner would otherwise trade for the lastmod index and
 * a sort of all the donor's chunks. */
#define CAT_SQL_CONTROL_CHUNK                                                        \
    "UPDATE chunks SET major = ?1, minor = ?2 WHERE id = (SELECT id FROM chunks"       \
    " INDEXED BY chunks_ns_shard_min WHERE ns = ?3 AND shard = ?4 AND major <= ?5"     \
    " ORDER BY min_enc LIMIT 1)"
/* One page of a routing table: the chunks from a lastmod on, in lastmod order, read along
 * the lastmod index (unique per collection, so (lastmod) alone orders the pages and says
 * where the next starts). A full table starts at (0,0); a refresh at its sinceVersion;
 * a later page just past the last lastmod of the page before. ?4: the page's chunk cap
 * plus one (the extra row only says there is more). */
#define CAT_SQL_ROUTING_PAGE                                                         \
    "SELECT " CHUNK_COLS " FROM chunks INDEXED BY chunks_ns_lastmod WHERE ns = ?1 AND" \
    " (major, minor) >= (?2, ?3) ORDER BY major, minor LIMIT ?4"
/* {query, the index its plan must search} */
#define CAT_HOT_CHUNK_SQL                                                            \
    {{CAT_SQL_TILING_BELOW, "chunks_ns_min"},                                        \
     {CAT_SQL_TILING_ABOVE, "chunks_ns_min"},                                        \
     {CAT_SQL_TILING_INSIDE, "chunks_ns_min"},                                       \
     {CAT_SQL_COLL_VERSION, "chunks_ns_lastmod"},                                    \
     {CAT_SQL_SHARD_VERSION, "chunks_ns_shard_lastmod"},                             \
     {CAT_SQL_CHUNK_AT, "chunks_ns_min"},                                            \
     {CAT_SQL_CHUNK_CONTAINING, "chunks_ns_min"},                                    \
     {CAT_SQL_CHUNK_ENDING_AT, "chunks_ns_min"},                                     \
     {CAT_SQL_MERGE_PIECES, "chunks_ns_min"},                                        \
     {CAT_SQL_MERGE_DELETE, "chunks_ns_min"},                                        \
     {CAT_SQL_CONTROL_CHUNK, "chunks_ns_shard_min"},                                 \
     {CAT_SQL_ROUTING_PAGE, "chunks_ns_lastmod"}}

/* ---- SQLite helpers (catalog.c); SQLite codes become ms_err codes here ---------------- */
int cat_sql_exec(cat_t *c, const char *sql, ms_error_t *err);
/* *st set (caller finalizes) on success, NULL on failure. */
int cat_sql_prep(cat_t *c, const char *sql, sqlite3_stmt **st, ms_error_t *err);
/* Steps a statement that returns no rows (INSERT/UPDATE/DELETE); what names the step. */
int cat_sql_done(cat_t *c, sqlite3_stmt *st, const char *what, ms_error_t *err);
void cat_bind_bson(sqlite3_stmt *st, int i, const bson_t *b);
void cat_bind_buf(sqlite3_stmt *st, int i, const buf_t *b);
void cat_bind_text(sqlite3_stmt *st, int i, const char *s);
/* A read-only BSON view of a blob column (asserts it is one of our well-formed rows). */
void cat_col_view(sqlite3_stmt *st, int i, bson_t *out);
void cat_col_oid(sqlite3_stmt *st, int i, bson_oid_t *out);
const char *cat_col_text(sqlite3_stmt *st, int i);  /* "" for NULL */
/* memcmp order then length: how SQLite compares BLOBs (and encoded keys compare). */
int cat_blob_cmp(const void *a, size_t alen, const void *b, size_t blen);
int cat_buf_cmp(const buf_t *a, const buf_t *b);
void cat_copy_str(char *dst, size_t cap, const char *src);
void cat_append_ts(bson_t *b, const char *key, cat_ts_t ts);
void cat_append_uuid(bson_t *b, const char *key, const uint8_t uuid[16]);

/* ---- shared steps, inside the caller's transaction -------------------------------------- */
/* catalog.c */
int cat_next_ts_locked(cat_t *c, cat_ts_t *out, ms_error_t *err);
/* One config.changelog (table "changelog") or actionlog entry; details borrowed, may be NULL. */
int cat_log_change_locked(cat_t *c, const char *table, const char *what, const char *ns,
                          const bson_t *details, ms_error_t *err);
/* The same with the entry's `server` and `shard` given (entries a shard sends). */
int cat_log_change_as_locked(cat_t *c, const char *table, const char *server, const char *shard,
                             const char *what, const char *ns, const bson_t *details,
                             ms_error_t *err);
/* `SELECT count(*) ...` with up to two text parameters. */
int cat_count_locked(cat_t *c, const char *sql, const char *p1, const char *p2, int64_t *out,
                     ms_error_t *err);
/* Column 0 of a query with up to one text parameter (caller frees with cat_strv_free). */
int cat_strv_locked(cat_t *c, const char *sql, const char *p1, char ***out, int *n_out,
                    ms_error_t *err);
/* cat_shards.c */
int cat_shard_host_locked(cat_t *c, const char *name, char *host_out, size_t cap,
                          bool *draining, ms_error_t *err);
/* cat_zones.c: ZoneStillInUse when shard is the only shard of a zone a range uses. */
int cat_zone_check_shard_removable_locked(cat_t *c, const char *shard, ms_error_t *err);
/* cat_collections.c */
void cat_coll_from_row(sqlite3_stmt *st, cat_coll_t *out);  /* COLL_COLS row; out->key initialised */
int cat_coll_get_locked(cat_t *c, const char *ns, cat_coll_t *out, ms_error_t *err);
/* The collection and its parsed key pattern (caller: cat_coll_free, keys_pattern_free). */
int cat_coll_pattern_locked(cat_t *c, const char *ns, cat_coll_t *coll, keys_pattern_t *p,
                            ms_error_t *err);
/* Highest chunk lastmod of ns (on shard, or overall when shard is NULL); (0,0) when none. */
int cat_coll_version_locked(cat_t *c, const char *ns, const char *shard, uint32_t *major,
                            uint32_t *minor, ms_error_t *err);
/* cat_databases.c: deletes a collection's rows (collection, chunks, zones). */
int cat_coll_delete_locked(cat_t *c, const char *ns, ms_error_t *err);
/* cat_chunks.c */
/* The whole tiling of ns: O(chunks), for shardCollection and the tests. */
int cat_tiling_check_locked(cat_t *c, const char *ns, ms_error_t *err);
void cat_tiling_assert_locked(cat_t *c, const char *ns);  /* our invariant: aborts when broken */
/* A chunk version (lastmod) within one collection generation. */
typedef struct cat_lastmod {
    uint32_t major, minor;
} cat_lastmod_t;
/* The tiling around one changed range [lo, hi) (encoded bounds): the chunks in it follow
 * one another from lo to hi, the chunk before ends at lo and the chunk after starts at hi
 * (MinKey and MaxKey at the ends); with above, every chunk in the range is newer than it.
 * O(log n + chunks in the range). InternalError named by MongoDB's inconsistency type. */
int cat_tiling_check_range_locked(cat_t *c, const char *ns, const keys_pattern_t *p,
                                  const buf_t *lo, const buf_t *hi, const cat_lastmod_t *above,
                                  ms_error_t *err);
/* Before a change: the stored chunks around [lo, hi) are corrupt → the change is refused
 * (logged; the error says to run checkMetadataConsistency). */
int cat_tiling_refuse_locked(cat_t *c, const char *ns, const keys_pattern_t *p, const buf_t *lo,
                             const buf_t *hi, ms_error_t *err);
/* After a change's writes, before COMMIT: a fault is ours (the range was sound before) —
 * aborts. */
void cat_tiling_assert_range_locked(cat_t *c, const char *ns, const keys_pattern_t *p,
                                    const buf_t *lo, const buf_t *hi, const cat_lastmod_t *above);
/* History array [{validAfter, shard}] into arr_out (initialised here). */
void cat_history_one(bson_t *arr_out, cat_ts_t valid_after, const char *shard);
int cat_chunk_insert_locked(cat_t *c, const char *ns, const uint8_t uuid[16], const bson_oid_t *id,
                            const bson_t *min, const bson_t *max, const buf_t *min_enc,
                            const buf_t *max_enc, const char *shard, uint32_t major,
                            uint32_t minor, cat_ts_t since, const bson_t *history,
                            ms_error_t *err);

/* ---- rows as config documents (cat_docs.c, cat_databases.c) ----------------------------- */
void cat_shard_doc(sqlite3_stmt *st, bson_t *doc);   /* SHARD_COLS row */
void cat_coll_doc(sqlite3_stmt *st, bson_t *doc);    /* COLL_COLS row */
void cat_chunk_doc(sqlite3_stmt *st, bson_t *doc);   /* CHUNK_COLS row */
/* primary and version {uuid, timestamp, lastMod} of a databases row
 * (primary_shard, uuid, ts_t, ts_i, last_mod). */
void cat_db_version_append(sqlite3_stmt *st, bson_t *out);

#endif
