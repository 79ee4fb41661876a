/*
 * shardd.h — the shard daemon's one header: its whole shape in one place.
 *
 * bin/shardd keeps BSON documents in one SQLite file (WAL) and serves MongoDB's CRUD
 * command set over NNG, standalone like a small mongod or as a shard of a cluster.
 *
 *   main.c        flags, open the store, start the command server, print `ready`
 *   shardd_cmd.c  the command table: one row per command
 *   store.c       SQLite storage: connections, catalog, collections, index keys, stats
 *   store_write.c THE single write path (store_write_doc): where migration's write capture
 *                 hooks in
 *   store_index.c index DDL and index builds beside reads and writes
 *   store_priv.h  the storage files' shared insides (nothing else includes it)
 *   plan.c        planner (index choice), scans, blocking sort, cursor batches (the
 *                 cursor registry itself is common/cursor.c)
 *   cmd_crud.c    insert, find, getMore, killCursors, update, delete, count, distinct,
 *                 findAndModify, explain
 *   cmd_admin.c   createIndexes, listIndexes, dropIndexes, drop, dropDatabase,
 *                 listCollections, listDatabases, collStats, and the cluster hooks
 *                 (_addShard, _shardsvrShardCollection, _flushRoutingTableCacheUpdates)
 *   split.c       dataSize, splitVector, autoSplitVector
 *   query.c update.c project.c   the query engine (filters, updates, projections)
 *   shardver.c    shard versioning and the ownership filter
 *   critsec.c     a migration's critical section (writes refused under the writer lock)
 *   xfer.c        a migration's write capture (committed _ids of the moving range)
 *   store_docs.c  the shard's own persisted documents (migration, range deletion)
 *   rdel.c        the range deleter: orphaned ranges deleted in batches
 *   sessions.c    retryable-write records (sessions.h: the API session migration shares)
 *   sess_write.c  a write command's lsid / txnNumber / stmtIds and its records' keys
 *
 * Concurrency: one writer SQLite connection behind a mutex (SQLite has one writer) and one
 * reader connection per thread (WAL lets readers run beside the writer). The in-memory
 * catalog is guarded by a read/write lock: reads and ordinary writes hold it shared for one
 * transaction; DDL (create/drop collection or index, shardCollection) holds it exclusively.
 * Lock order: writer mutex, then catalog lock.
 */
#ifndef MS_SHARDD_H
#define MS_SHARDD_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/bounds.h"
#include "common/buf.h"
#include "common/cmd.h"
#include "common/cursor.h"
#include "common/errors.h"
#include "common/keys.h"
#include "common/lclock.h"
#include "common/krange.h"
#include "common/limits.h"
#include "common/sortspec.h"
#include "common/project.h"
#include "common/query.h"
#include "shardd/shardver.h"
#include "common/update.h"

/* Blocking sorts hold at most this many bytes of documents: MongoDB's
 * internalQueryMaxBlockingSortMemoryUsageBytes (100 MiB). */
#define SHARDD_SORT_BYTES_MAX (100 * 1024 * 1024)

/* Ranges the planner asks bounds_from_filter for (a $in of more values scans coarser). */
#define SHARDD_PLAN_RANGES_MAX 256

/* Keys one document may produce in one index (a multikey array of this many elements). */
#define SHARDD_INDEX_KEYS_PER_DOC_MAX 100000

/* Split points one splitVector/autoSplitVector reply may carry besides the 16 MB cap. */
#define SHARDD_SPLIT_POINTS_MAX 8192
/* Ranges one _shardsvrAutoSplitVectorBatch may ask about (a balancer round's budget). */
#define SHARDD_AUTOSPLIT_BATCH_RANGES_MAX MS_BALANCER_AUTOSPLIT_CHUNKS_MAX

/* ========================== store.c, store_write.c, store_index.c ==================== */

typedef struct store store_t;
typedef struct store_txn store_txn_t;

typedef struct store_opts {
    bool sync_full;   /* PRAGMA synchronous=FULL (power-loss safe) instead of NORMAL */
} store_opts_t;

/* One index of a collection as the catalog knows it. ix[0] of every collection is _id_,
 * which lives in the collection table's `id` column rather than a side table. */
typedef struct store_index {
    int64_t id;              /* side table i<id>; 0 for _id_ */
    char name[128];
    keys_pattern_t pat;
    bson_t spec;             /* {v: 2, key: {...}, name: "...", unique?: true} */
    bool unique;
    bool is_id;
    bool building;           /* in coll->bix: being built, not yet usable */
    int multikey;            /* set (atomically) once any document produced several keys */
} store_index_t;

/* One collection. Valid while the caller holds the catalog lock (inside a transaction). */
typedef struct store_coll {
    char ns[MS_NS_BYTES_MAX + 1];
    int64_t id;              /* table c<id> */
    uint8_t uuid[16];
    bool sharded;
    keys_pattern_t sk;       /* shard-key pattern when sharded */
    bool sk_unique;
    bson_t options;
    int nindexes;
    store_index_t *ix[MS_INDEXES_MAX];
    /* Indexes being built (docs/storage.md "Index builds"): maintained by the write path,
     * invisible to the planner, listIndexes and collStats. nindexes + nbuilding <= MAX. */
    int nbuilding;
    store_index_t *bix[MS_INDEXES_MAX];
    uint64_t gen;            /* bumped by every DDL on it: cursors notice */
    /* Fast counts (MongoDB's numRecords / dataSize kept by the storage engine): documents
     * and their bytes as of the last commit, kept in table coll_counts in the same
     * transaction as the writes, so collStats, dataSize and autoSplitVector read them
     * instead of scanning. Read with __atomic loads: a reader gets the latest commit, not
     * its own snapshot's figure (as MongoDB's fast counts). delta_*: the open write
     * transaction's changes (writer only), folded in when it commits. */
    int64_t fast_n, fast_bytes;
    int64_t delta_n, delta_bytes;
    /* Bytes added by growing changes (inserts, updates that grew a document) since this
     * process opened the store: only goes up. The balancer's auto-split skips a shard
     * whose chunks did not grow since it last checked them (delta_grown: the open write
     * transaction's part). Not persisted. */
    int64_t grown_bytes, delta_grown;
    bool dirty;
} store_coll_t;

/* Called by store_write_doc for every document change, inside the writing transaction
 * (migration write capture hooks in here, DESIGN §6 "Write capture", notes §1.3).
 * old_doc NULL = insert; new_doc NULL = delete. old_sk/new_sk: the encoded shard keys
 * (NULL when the collection is unsharded). All arguments are borrowed for the call. */
typedef void (*store_write_observer_fn)(void *arg, const char *ns, const bson_t *old_doc,
                                        const bson_t *new_doc, const buf_t *old_sk,
                                        const buf_t *new_sk);
/* Called when a write transaction (store_write or store_ddl) ends, after its COMMIT
 * (committed) or ROLLBACK, while the writer lock is still held: no other write can begin
 * between the end and this call, so what the observer saw can be published exactly when
 * it became visible, and dropped when it never will. */
typedef void (*store_write_end_fn)(void *arg, bool committed);

/* Opens (creating when absent) DIR/shard.sqlite. *out set on success only. */
int store_open(const char *dbpath_dir, const store_opts_t *opts, store_t **out, ms_error_t *err);
void store_close(store_t *st);   /* NULL-safe; all transactions must have ended */
const char *store_path(const store_t *st);
/* Installs the write observer (fn, end may be NULL; arg borrowed until it is removed),
 * or removes it with fn = end = NULL. Takes the writer lock, so a transaction in progress
 * finishes with the observer it started with. One observer at a time: installing over
 * another fails with ConflictingOperationInProgress. */
int store_set_write_observer(store_t *st, store_write_observer_fn fn, store_write_end_fn end,
                             void *arg, ms_error_t *err);

/* Transactions run a callback: BEGIN, fn, COMMIT when fn returns 0, else ROLLBACK.
 * store_read: a reader connection of this thread, catalog shared.
 * store_write: the writer connection (mutex), catalog shared.
 * store_ddl: the writer connection, catalog exclusive (may change the catalog). */
typedef int (*store_txn_fn)(store_txn_t *t, void *arg, ms_error_t *err);
int store_read(store_t *st, store_txn_fn fn, void *arg, ms_error_t *err);
/* store_read whose snapshot is taken under the writer lock, with fence(farg) called there:
 * the snapshot holds exactly the writes committed before fence ran, and every later write
 * commits after it (a migration starts its running digest at the snapshot it scans). */
int store_read_fenced(store_t *st, void (*fence)(void *farg), void *farg, store_txn_fn fn,
                      void *arg, ms_error_t *err);
int store_write(store_t *st, store_txn_fn fn, void *arg, ms_error_t *err);
int store_ddl(store_t *st, store_txn_fn fn, void *arg, ms_error_t *err);

void *store_txn_db(store_txn_t *t);          /* the sqlite3* of the transaction */
store_t *store_txn_store(store_txn_t *t);
/* A write transaction's cluster time: the tick its reply carries as operationTime
 * (docs/cluster-time.md); {0, 0} in a read transaction. */
lclock_ts_t store_txn_time(const store_txn_t *t);

/* Catalog, inside a transaction. Borrowed results. */
store_coll_t *store_coll_get(store_txn_t *t, const char *ns);
int store_coll_count(store_txn_t *t);
store_coll_t *store_coll_at(store_txn_t *t, int i);
store_index_t *store_index_by_name(store_coll_t *c, const char *name);

/* DDL (inside store_ddl). */
/* Creates ns (empty, with _id_) when absent; *created tells. uuid may be NULL (random). */
int store_coll_create(store_txn_t *t, const char *ns, const uint8_t *uuid, store_coll_t **out,
                      bool *created, ms_error_t *err);
int store_coll_drop(store_txn_t *t, const char *ns, ms_error_t *err);
/* Renames collection from to to (same data, indexes, uuid and counts): NamespaceNotFound
 * when from is missing, NamespaceExists when to exists (the caller drops it first for
 * dropTarget). */
int store_coll_rename(store_txn_t *t, const char *from, const char *to, ms_error_t *err);
/* Builds an index over the existing documents. spec = the user's {key, name?, unique?};
 * already existing identical → *existed = true. IndexOptionsConflict / IndexKeySpecsConflict
 * / DuplicateKey / CannotIndexParallelArrays. */
int store_index_create(store_txn_t *t, store_coll_t *c, const bson_t *spec, bool *existed,
                       ms_error_t *err);
/* Drops a ready index, or aborts a build in progress of that name (its builder then
 * fails with IndexBuildAborted). */
int store_index_drop(store_txn_t *t, store_coll_t *c, const char *name, ms_error_t *err);

/* Index builds beside reads and writes (MongoDB's hybrid build in miniature,
 * docs/storage.md "Index builds"): register (short DDL), scan in batches (no lock held
 * between batches), commit (short DDL); on any failure abort.
 * register, inside store_ddl: checks spec as store_index_create does, creates the side
 * table and persists the index as building (ready = 0); *id_out = its table number. An
 * identical index already ready → *existed; one being built by another command →
 * IndexBuildAlreadyInProgress (the caller waits and asks again, as MongoDB joins the
 * build); mine/nmine are the ids this command registered already (the same spec twice in
 * one command is a no-op, not a wait). */
int store_index_build_register(store_txn_t *t, store_coll_t *c, const bson_t *spec,
                               const int64_t *mine, int nmine, bool *existed, int64_t *id_out,
                               ms_error_t *err);
/* Fills the building indexes ids[0..n) of ns from every document, in batches of
 * SHARDD_INDEX_BUILD_BATCH_ROWS, each its own write transaction, evaluating
 * FP_INDEX_BUILD_AFTER_BATCH after each. Runs outside any transaction. IndexBuildAborted
 * when the collection or an index was dropped meanwhile; DuplicateKey,
 * CannotIndexParallelArrays, CannotBuildIndexKeys from the documents. */
int store_index_build_scan(store_t *st, const char *ns, const int64_t *ids, int n,
                           ms_error_t *err);
/* Inside store_ddl: re-checks the unique conflicts writes left, marks the indexes ready
 * (visible to the planner and listIndexes). */
int store_index_build_commit(store_txn_t *t, const char *ns, const int64_t *ids, int n,
                             ms_error_t *err);
/* Own transaction: drops whatever is left of the building indexes ids (never fails; logs). */
void store_index_build_abort(store_t *st, const char *ns, const int64_t *ids, int n);
/* Records the shard key and fills `sk` of every document (one transaction). */
int store_coll_set_shard_key(store_txn_t *t, store_coll_t *c, const keys_pattern_t *p,
                             bool unique, ms_error_t *err);

/* Generated index name: {a: 1, b: -1} → "a_1_b_-1", {a: "hashed"} → "a_hashed". */
void store_index_name(const bson_t *key, char *out, size_t outsz);

/* THE single write path (inside store_write or store_ddl). Insert: old_doc NULL, rowid
 * ignored, *new_rowid set. Update: both docs, rowid of the row. Delete: new_doc NULL.
 * Maintains the _id column, `sk`, every index, then calls the observer. On error nothing of
 * this document is written. Errors: DuplicateKey (message in MongoDB's E11000 shape, and
 * err_info gets keyPattern/keyValue when non-NULL), ImmutableField, CannotIndexParallelArrays,
 * BadValue (array in shard key). */
int store_write_doc(store_txn_t *t, store_coll_t *c, int64_t rowid, const bson_t *old_doc,
                    const bson_t *new_doc, int64_t *new_rowid, bson_t *err_info,
                    ms_error_t *err);

/* Point reads by rowid / by encoded _id (inside a transaction). *doc initialised on
 * success with a copy (caller destroys); NoMatchingDocument when absent. */
int store_get_by_rowid(store_txn_t *t, store_coll_t *c, int64_t rowid, bson_t *doc,
                       ms_error_t *err);

/* count and total bytes of a collection's documents. */
/* c's grown_bytes as of the last commit. */
int64_t store_coll_grown(const store_coll_t *c);
int store_coll_stats(store_txn_t *t, store_coll_t *c, int64_t *count, int64_t *bytes,
                     int64_t *storage_bytes, int64_t *index_bytes, ms_error_t *err);
int64_t store_index_bytes(store_txn_t *t, store_coll_t *c, int i);  /* bytes of ix[i] */
int64_t store_file_bytes(store_t *st);

/* Shard identity and other small persisted values (meta table). get: *out initialised on
 * success; NoSuchKey when absent. */
int store_meta_get(store_t *st, const char *key, bson_t *out, ms_error_t *err);
int store_meta_put(store_t *st, const char *key, const bson_t *value, ms_error_t *err);

/* Index keys of one document under a pattern (index key generation, multikey rules):
 * appends each distinct encoded key to keys (caller frees each buf), *multikey when an
 * array was expanded. Exposed for tests and split.c. */
int store_index_keys(const keys_pattern_t *p, const bson_t *doc, buf_t **keys, int *nkeys,
                     bool *multikey, ms_error_t *err);
void store_keys_free(buf_t *keys, int nkeys);
/* Decodes an encoded key back to {field: value...} (descending fields re-inverted; stops
 * quietly at the first undecodable byte). *out initialised. */
void store_key_decode(const keys_pattern_t *p, const uint8_t *data, size_t len, bson_t *out);

/* The relaxed-JSON text of one value (`3`, `"x"`, `{ "$minKey" : 1 }`); bson_free it. */
char *store_value_json(const bson_iter_t *it);

/* Values at a dotted path with arrays unwound (distinct): calls fn for each value found. */
typedef void (*store_path_fn)(void *arg, const bson_iter_t *value);
void store_path_values(const bson_t *doc, const char *path, store_path_fn fn, void *arg);

/* Prepared-statement cache of the transaction's connection (borrowed; reset by caller). */
void *store_stmt(store_txn_t *t, const char *sql, ms_error_t *err);
/* "SELECT cols FROM <c's table> WHERE sk >= ?1 AND sk < ?2 tail" from the cache, with min
 * and max (encoded shard keys) bound without a copy: they must outlive the statement's
 * use. tail may add "ORDER BY sk", "LIMIT ?3"... The range reads of migration and the
 * range deleter. */
void *store_sk_range_stmt(store_txn_t *t, const store_coll_t *c, const char *cols,
                          const char *tail, const buf_t *min, const buf_t *max, ms_error_t *err);

/* ---- write capture (xfer.c) ---- */

/* A migration's write capture ("xfer mods", MongoDB's MigrationChunkClonerSource). */
typedef struct xfer xfer_t;
/* Starts capturing: every committed insert/update/delete of ns whose old or new encoded
 * shard key lies in [min, max) (encoded with keys_, as the store's `sk` column; borrowed,
 * copied) records the document's _id: insert / update with the new key in range → reload;
 * update moving the key out, or delete → deleted. Ids are published at COMMIT, dropped at
 * ROLLBACK. bytes_max (MS_MIG_CAPTURE_BYTES_MAX) bounds the id bytes held; past it the
 * capture fails (xfer_failed) and holds nothing more; the user write still succeeds.
 * One capture per store at a time: ConflictingOperationInProgress otherwise. */
int xfer_start(store_t *st, const char *ns, const buf_t *min, const buf_t *max,
               size_t bytes_max, xfer_t **out, ms_error_t *err);
void xfer_stop(store_t *st, xfer_t *x);   /* NULL-safe: stops capturing and frees */
/* Takes pending ids: deletes first (as many as fit in max_bytes, at least one), reloads
 * only when every delete fit (and in what is left of max_bytes). Each id is a buf_t holding
 * the BSON bytes of {_id: value}; de-duplicated by bytes within each list. Caller owns
 * the arrays (NULL when empty) and frees them with xfer_ids_free. */
void xfer_take(xfer_t *x, size_t max_bytes, buf_t **del, int *ndel, buf_t **reload,
               int *nreload);
void xfer_ids_free(buf_t *v, int n);   /* NULL-safe */
/* Puts back ids not sent, ahead of those captured since (takes ownership of the arrays;
 * an id captured again meanwhile is kept once). */
void xfer_putback(xfer_t *x, buf_t *del, int ndel, buf_t *reload, int nreload);
/* Committed ids waiting, and their bytes. */
void xfer_pending(xfer_t *x, int64_t *ndel, int64_t *nreload, int64_t *bytes);
/* 0, or the error that ended the capture (ExceededMemoryLimit 146, with why). */
int xfer_failed(xfer_t *x, ms_error_t *err);
/* The range's running digest (beyond MongoDB: the count and checksum compared before the
 * commit, kept up to date instead of recounted while writes are blocked): what committed
 * writes added to and removed from the range since xfer_digest_reset — the number of
 * documents and the sum (mod 2^64) of xfer_doc_hash of their bytes. reset takes the
 * xfer_t as void* so store_read_fenced can call it under the writer lock. */
void xfer_digest_reset(void *x);
void xfer_digest(xfer_t *x, int64_t *count, uint64_t *sum);
uint64_t xfer_doc_hash(const uint8_t *p, size_t n);   /* 64-bit hash of a document's bytes */

/* ---- shard-local documents (store_docs.c) ---- */
/* The shard's own persisted documents (notes §1.7), in table shard_docs of its SQLite file
 * and readable through find on config.<coll>. id = 32 lowercase hex of the migrationId. */
#define SDOC_COORDINATORS "migrationCoordinators"
#define SDOC_RANGE_DELETIONS "rangeDeletions"
#define SDOC_RECIPIENTS "migrationRecipients"
/* Not in shard_docs: the sessions of sessions.c, served by find like the others. */
#define SDOC_TRANSACTIONS "transactions"
/* Inside a write transaction: insert or replace. doc borrowed. */
int store_sdoc_put(store_txn_t *t, const char *coll, const char *id, const bson_t *doc,
                   ms_error_t *err);
/* Inside any transaction: *out initialised on success; NoSuchKey when absent. */
int store_sdoc_get(store_txn_t *t, const char *coll, const char *id, bson_t *out,
                   ms_error_t *err);
/* Inside a write transaction: absent is not an error. */
int store_sdoc_delete(store_txn_t *t, const char *coll, const char *id, ms_error_t *err);
/* Inside any transaction, in id order; fn returns non-zero to stop (that value is
 * returned). id and doc are borrowed for the call. */
int store_sdoc_scan(store_txn_t *t, const char *coll,
                    int (*fn)(void *arg, const char *id, const bson_t *doc), void *arg,
                    ms_error_t *err);
/* "config.<one of the three>" → its table name (static), else NULL. */
const char *store_sdoc_coll_of(const char *ns);
/* find on config.<coll> (cmd_find): the documents matching q (NULL = all), at most limit
 * (0 = none), in id order, as one batch {cursor: {firstBatch, id: 0, ns}} appended to reply
 * (sort, projection and skip are not applied; these tables hold a handful of documents). */
int store_sdoc_find(store_t *st, const char *ns, const query_t *q, int64_t limit, bson_t *reply,
                    ms_error_t *err);

/* ================================ plan.c ============================================== */

enum plan_kind { PLAN_COLLSCAN = 0, PLAN_IXSCAN = 1 };

/* What a query asks for (all borrowed). */
typedef struct plan_query {
    const bson_t *filter;       /* may be NULL = {} */
    const query_t *q;           /* compiled filter, NULL = everything */
    const sortspec_t *sort;     /* NULL = none */
    const bson_t *hint;         /* index name (string) or key pattern, NULL = planner */
    const char *hint_name;
    int64_t skip, limit;        /* limit 0 = none */
    shv_filter_t *own;          /* ownership filter, NULL = none */
    const krset_t *ranges;      /* with own: only keys in these ranges too ($_shardKeyRanges
                                 * of a multi-write statement), NULL = all owned */
    bool no_index;              /* test/diff aid: ignore secondary indexes (forces scans) */
} plan_query_t;

/* The chosen plan. */
typedef struct plan {
    enum plan_kind kind;
    int64_t coll_id;
    uint64_t coll_gen;
    int64_t ix_id;              /* 0 with is_id for _id_ */
    bool is_id;
    char ix_name[128];
    bson_t key_pattern;
    bounds_t bounds;            /* for IXSCAN; bounds.all = whole index */
    int dir;                    /* 1 forward, -1 backward */
    bool blocking_sort;         /* sort needed after the scan */
    bool multikey;              /* dedupe rowids */
    int ncandidates;
} plan_t;

int plan_choose(store_txn_t *t, store_coll_t *c, const plan_query_t *eq, plan_t *out,
              ms_error_t *err);
void plan_free(plan_t *p);   /* NULL-safe; zeroed plan ok */
/* Appends queryPlanner-style winningPlan to dst under key. */
void plan_append_explain(const plan_t *p, const store_coll_t *c, const plan_query_t *eq,
                         bson_t *dst, const char *key);

/* A resumable scan: candidates in plan order, filtered by q and the ownership filter.
 * fn returns 0 to go on, 1 to stop (position kept after this document), or an error. */
typedef struct scan_pos {
    int range;
    buf_t key;
    int64_t rid;
    bool started, done;
    /* multikey dedupe: rowids already returned (sorted array, binary search) */
    int64_t *seen;           /* multikey dedupe: hash set of record ids (plan.c) */
    size_t nseen, capseen;
    bool seen_zero;
    uint64_t *seen_bits;     /* ... and a bitmap of the small ones */
    size_t nseen_words;
    int64_t docs_examined, keys_examined;
} scan_pos_t;
typedef int (*scan_fn)(void *arg, int64_t rowid, const bson_t *doc, ms_error_t *err);
int plan_scan(store_txn_t *t, store_coll_t *c, const plan_t *p, const plan_query_t *eq,
              scan_pos_t *pos, scan_fn fn, void *arg, ms_error_t *err);
void scan_pos_free(scan_pos_t *pos);

/* A scan_fn that counts matches after skipping `skip` of them, stopping at `limit` (0 =
 * none): count's result and explain's nReturned. arg is an plan_count_t. */
typedef struct plan_count {
    int64_t n, skip, limit;
} plan_count_t;
int plan_count_cb(void *arg, int64_t rid, const bson_t *doc, ms_error_t *err);

/* Rowids of the documents matching eq (sorted by eq->sort when given, skip/limit
 * applied) — the read half of update/delete/findAndModify. Caller frees *rids. */
int plan_match_rowids(store_txn_t *t, store_coll_t *c, const plan_query_t *eq, int64_t **rids,
                      size_t *n, ms_error_t *err);

/* Cursors. The registry is common/cursor.c's (MongoDB's CursorManager): ids, caps per
 * connection and for the shard, pin / kill / reap, listing by namespace (the range
 * deleter). What a cursor runs (plan, scan position, sorted results) is plan.c's. */
typedef struct cursor cursor_t;
/* The shard's registry: caps MS_CURSORS_PER_CONN_MAX / MS_CURSORS_MAX, no byte cap (bytes
 * held are counted for serverStatus), idle cursors die after idle_ms (<= 0: 10 min). */
int plan_cursors_new(int idle_ms, curs_reg_t **out);

/* A find: plans and runs the first batch. ns, the compiled parts and own are taken over
 * by the cursor (on success and on failure). Appends the reply's `cursor` document. */
typedef struct find_args {
    const char *ns;
    bson_t *filter;             /* owned copies (heap: a bson_t may not be moved) */
    query_t *q;
    sortspec_t *sort;
    projection_t *proj;
    shv_filter_t *own;
    bson_t *hint;               /* NULL = none; {$hint: "name"} for a name */
    int64_t skip, limit;
    int64_t batch_size;         /* -1 = default */
    bool single_batch;
    bool no_index;
} find_args_t;
/* A batch holds at most MS_BATCH_BYTES_MAX bytes of results, except that a single result
 * always goes out; one that does not fit waits for the next batch. */
int plan_find(store_t *st, curs_reg_t *cs, find_args_t *fa, bson_t *reply, ms_error_t *err);
void find_args_free(find_args_t *fa);  /* NULL-safe; fields already taken are NULL */
/* aggregate's cursor (cmd_agg.c): takes over docs (n heap bson_t and the array) in every
 * case; batches as plan_find's; getMore continues it like a find's. */
int plan_agg_cursor(curs_reg_t *cs, const char *ns, bson_t **docs, size_t n, int64_t batch_size,
                    bson_t *reply, ms_error_t *err);
int plan_get_more(store_t *st, curs_reg_t *cs, int64_t id, const char *ns, int64_t batch_size,
                  bson_t *reply, ms_error_t *err);
/* Explain of a find: queryPlanner (+ executionStats when plan_stats). */
int plan_explain_find(store_t *st, find_args_t *fa, bool plan_stats, bson_t *reply,
                      ms_error_t *err);

/* ================================ failpoints ========================================= */

/* The shard's failpoints (common/failpoint.h), one at every step whose effect must
 * survive kill -9, named as MongoDB names its own. docs/protocol.md "Shard daemon:
 * failpoints" says where each one is and what a test proves with it. A "before commit"
 * point runs inside the transaction as its last step, so `error` rolls it back and `crash`
 * leaves an uncommitted WAL tail; its `hang` waits before the transaction takes the writer
 * lock (fp_eval_early / fp_late; data.holdLocks: true holds it open instead). Exception:
 * the per-document hangBeforeWriteObserver hangs inside, holding the writer lock. */
#define FP_BEFORE_WRITE_OBSERVER "hangBeforeWriteObserver"       /* per document (store_write.c) */
#define FP_BEFORE_WRITE_COMMIT "hangBeforeWriteCommit"           /* insert/update/delete/fAM */
#define FP_AFTER_WRITE_COMMIT "hangAfterWriteCommit"
#define FP_BEFORE_INDEX_BUILD_COMMIT "hangBeforeIndexBuildCommit"  /* createIndexes */
#define FP_AFTER_INDEX_BUILD_COMMIT "hangAfterIndexBuildCommit"
#define FP_INDEX_BUILD_AFTER_BATCH "hangIndexBuildAfterBatch"    /* between build batches */
#define FP_BEFORE_DROP_INDEXES_COMMIT "hangBeforeDropIndexesCommit"
#define FP_BEFORE_SHARD_COLLECTION_COMMIT "hangBeforeShardCollectionCommit"
#define FP_AFTER_SHARD_COLLECTION_COMMIT "hangAfterShardCollectionCommit"
#define FP_BEFORE_DROP_COMMIT "hangBeforeDropCommit"             /* drop, dropDatabase */
#define FP_GETMORE_AFTER_PIN "waitAfterPinningCursorBeforeGetMoreBatch"

/* Registers every point above (main.c, before serving; tests that evaluate them). The
 * per-document point goes first: fp_active finds a name by a scan of the table. */
void shardd_register_failpoints(void);

/* ================================ rdel.c ============================================== */
/* The range deleter (docs/range-deleter.md; notes §3): persisted tasks in shard_docs
 * rangeDeletions, one thread that deletes each ready task's range in batches. */
typedef struct rdel rdel_t;
typedef struct rdel_opts {
    int batch_docs;          /* --range-deleter-batch-size, default 128 (MongoDB before 5.2) */
    int batch_delay_ms;      /* --range-deleter-batch-delay-ms, default 20 (rangeDeleterBatchDelayMS) */
    int cleanup_delay_ms;    /* --orphan-cleanup-delay-ms, default 2000 for demos (MongoDB 900 s) */
} rdel_opts_t;
#define RDEL_ID_BYTES 33     /* 32 lowercase hex of the task's UUID + NUL */
#define FP_SUSPEND_RANGE_DELETION "suspendRangeDeletion"   /* before each batch (rdel.c) */
/* Starts the deleter thread; schedules every persisted non-pending task (processing ones
 * first). o NULL (or a negative / zero field) = the defaults of common/limits.h. */
int rdel_open(store_t *st, shv_t *shv, const rdel_opts_t *o, rdel_t **out, ms_error_t *err);
/* Optional: the cursor registry, to log the cursors open on a namespace while waiting. */
void rdel_set_cursors(rdel_t *r, curs_reg_t *cs);
void rdel_close(rdel_t *r);   /* NULL-safe; stops between batches */
/* Inside the caller's write transaction: persists a task (the shape in rdel.c; _id UUID). */
int rdel_task_insert(store_txn_t *t, const bson_t *task, ms_error_t *err);
/* Inside a write transaction: unset pending (ready; NoSuchKey when absent) / delete (absent
 * is fine). Call rdel_kick after the commit. */
int rdel_task_set_ready(store_txn_t *t, const char *id, ms_error_t *err);
int rdel_task_delete(store_txn_t *t, const char *id, ms_error_t *err);
void rdel_kick(rdel_t *r);    /* NULL-safe */
/* Waits until no task of ns overlapping [min, max) (shard-key documents; NULL, NULL = every
 * task of ns) exists, pending or not, up to deadline_ms (time_mono_ms clock; 0 = check
 * once): 0, or ExceededTimeLimit. */
int rdel_wait(rdel_t *r, const char *ns, const bson_t *min, const bson_t *max,
              long long deadline_ms, ms_error_t *err);
/* rdel_wait counting only the tasks of one incarnation of ns: uuid (16 bytes; NULL = all).
 * The overlap checks of a migration pass the collection's UUID, so a dropped
 * incarnation's task (a pending one is never run) cannot block the re-created namespace. */
int rdel_wait_coll(rdel_t *r, const char *ns, const uint8_t *uuid, const bson_t *min,
                   const bson_t *max, long long deadline_ms, ms_error_t *err);
/* Appends rangeDeleter: {state, currentTask, tasks..., batches, docsDeleted, ...}. */
void rdel_append_status(rdel_t *r, bson_t *out);
/* The task id of a UUID: 32 lowercase hex. */
void rdel_id_of(const uint8_t uuid[16], char out[RDEL_ID_BYTES]);
/* Commands: cleanupOrphaned; the test-only _testInsertRangeDeletion and
 * _testSetRangeDeletionReady (docs/protocol.md). */
int cmd_cleanup_orphaned(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_test_insert_range_deletion(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_test_set_range_deletion_ready(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* ================================ the daemon ========================================= */

struct mig;

typedef struct shardd {
    store_t *st;
    shv_t *shv;
    curs_reg_t *cursors;
    rdel_t *rdel;                /* the range deleter (rdel.c) */
    struct mig *mig;             /* the migration registry (mig.c) */
    const char *url;             /* where this shard listens (a recipient dials it) */
    const char *name;            /* --name */
    bool no_index;               /* --no-secondary-indexes (differential tests) */
    long long agg_blocking_bytes_max;  /* --agg-blocking-bytes-max (tests; 0 = the limit) */
} shardd_t;

extern const cmd_spec_t shardd_cmd_table[];
extern const int shardd_cmd_table_len;

/* Builds "db.coll" from ctx->db and the command's string value; InvalidNamespace. */
int shardd_ns(const cmd_ctx_t *ctx, char *ns, size_t nssz, ms_error_t *err);
/* shardd_ns, then the shard version check of the request (shv_check; StaleConfig,
 * StaleDbVersion). own NULL: the ownership filter is not wanted (catalog commands);
 * otherwise *own is the filter to apply (caller releases; NULL = none). */
int shardd_ns_versioned(cmd_ctx_t *ctx, char *ns, size_t nssz, shv_filter_t **own,
                        ms_error_t *err);
/* store_ddl(fn) for a command on ns, with the write's critical-section checks inside the
 * transaction (shv_crit_check_write: migration section, movePrimary's database section,
 * database version recheck); a refused change waits outside the lock (bounded) before
 * its StaleConfig / StaleDbVersion is returned. */
int shardd_ddl_guarded(cmd_ctx_t *ctx, const char *ns, store_txn_fn fn, void *arg,
                       ms_error_t *err);
/* Re-creates this shard's identity from the meta table at start-up. */
int shardd_load_identity(shardd_t *app, ms_error_t *err);
void shardd_status(void *app, bson_t *reply);
void shardd_metrics(void *app, bson_t *metrics);   /* serverStatus metrics: cursors */

/* cmd_agg.c */
int cmd_aggregate(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* cmd_crud.c */
int cmd_insert(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_find(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_get_more(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_kill_cursors(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_update(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_delete(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_count(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_distinct(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_find_and_modify(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_explain(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* critsec.c: {_testCriticalSection: "db.coll", action: "enter"|"blockReads"|"leave"}
 * (test-only, --enable-test-commands) */
int cmd_test_critical_section(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* critsec.c: {_shardsvrMovePrimaryEnterCriticalSection: db} and
 * {_shardsvrMovePrimaryExitCriticalSection: db} (config server → old primary, movePrimary) */
int cmd_move_primary_crit(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* coll_ddl.c */
/* createIndexes' work, shared with the migration recipient: the collection created when
 * absent (with uuid when non-NULL: InvalidUUID when it exists with another), every spec of
 * the array registered, built beside reads and writes, made ready. */
typedef struct shardd_index_result {
    int before, after, existed, n;
    bool created;
} shardd_index_result_t;
/* guard: the command whose critical-section checks the catalog steps run under (NULL:
 * none, the migration recipient). no_create: a sharded collection's versioned
 * createIndexes: CannotImplicitlyCreateCollection when ns does not exist here. */
int shardd_build_indexes(shardd_t *app, cmd_ctx_t *guard, const char *ns, const uint8_t *uuid,
                         bool no_create, const bson_iter_t *specs, shardd_index_result_t *res,
                         ms_error_t *err);
/* The migration recipient: ns (existing) gets the shard key pat when it has none. */
int shardd_set_shard_key(shardd_t *app, const char *ns, const keys_pattern_t *pat, ms_error_t *err);
/* cmd_admin.c */
int cmd_create_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_list_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_drop_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_create(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_drop(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_drop_database(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_list_collections(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_list_databases(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_coll_stats(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_db_stats(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_rename_collection(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* collStats' fields of ns (count, size, avgObjSize, numOrphanDocs, ...) appended to out
 * (borrowed): the storageStats of the $collStats stage (cmd_agg.c). */
int shardd_coll_stats(shardd_t *app, const char *ns, int64_t scale, bson_t *out, ms_error_t *err);
int cmd_current_op(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_add_shard(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_shardsvr_shard_collection(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_flush_routing(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* checkMetadataConsistency's participant (cmd_consistency.c). */
int cmd_check_metadata_participant(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
/* _flushDatabaseCacheUpdates {_flushDatabaseCacheUpdates: db}: forget the database's
 * cached version and primary (movePrimary's commit); the next versioned request refreshes. */
int cmd_flush_db_cache(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* split.c */
int cmd_data_size(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_split_vector(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_auto_split_vector(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_auto_split_vector_batch(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* Split-point computation over an index whose pattern starts with kp (split.c). Exposed
 * for tests. keys_out: array of key documents {field: value...} (caller destroys). */
typedef struct split_args {
    const char *ns;
    bson_t key_pattern;          /* borrowed view */
    bson_t min, max;             /* bounds in pattern order; empty = global */
    int64_t max_chunk_bytes;
    int64_t max_chunk_objects;   /* 0 = MS_CHUNK_OBJECTS_MAX */
    int64_t max_split_points;    /* 0 = none */
    int64_t limit;               /* autoSplitVector: 0 = none */
    bool force;
    bool auto_mode;              /* autoSplitVector rules */
} split_args_t;
/* maxChunkSizeBytes within [1 MB, 1024 MB] unless force → else InvalidOptions (72). */
int split_args_check(const split_args_t *a, ms_error_t *err);
int split_compute(store_t *st, const split_args_t *a, bson_t *split_keys_array,
                  bool *continuation, ms_error_t *err);

#endif
