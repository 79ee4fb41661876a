/*
 * store_priv.h — what the files of bin/shardd's storage layer (store.c, store_index.c,
 * store_write.c) share and nothing else includes: the store's and a transaction's insides,
 * the cached connection statements, the conflicts of index builds in progress, and the few
 * helpers more than one of them calls. Everyone else sees only shardd.h's store_ API.
 */
#ifndef MS_STORE_PRIV_H
#define MS_STORE_PRIV_H

#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>

#include "shardd/shardd.h"

#define STMT_CACHE_MAX 128

/* A cached statement is found by the hash of its text, or — for the write path's own
 * statements — by (kind, table number) without formatting any text (kind 0 = by text). */
typedef struct stmt_ent {
    uint64_t hash;
    int kind;
    int64_t table;
    char *sql;
    sqlite3_stmt *st;
} stmt_ent_t;

typedef struct conn {
    sqlite3 *db;
    stmt_ent_t cache[STMT_CACHE_MAX];
    int ncache;
    struct conn *next;
    struct store *owner;   /* reader connections: the store whose list holds it */
    bool in_use;           /* reader connections: a live thread holds it (under rmu) */
} conn_t;

struct store {
    char path[PATH_MAX];
    bool sync_full;
    pthread_mutex_t wmu;        /* the single writer */
    atomic_int wwaiting;        /* writers waiting for wmu (an index build yields to them) */
    conn_t *writer;
    pthread_rwlock_t cat_lock;  /* the in-memory catalog */
    pthread_key_t rkey;         /* this thread's reader connection */
    pthread_mutex_t rmu;        /* the list of reader connections */
    conn_t *readers;
    store_coll_t **colls;
    int ncolls, capcolls;
    int64_t next_id;            /* next table number (c<id>, i<id>) */
    store_write_observer_fn obs;
    store_write_end_fn obs_end;
    void *obs_arg;
    struct ibuild *builds;      /* unique conflicts of builds in progress (under wmu) */
    store_coll_t **dirty;       /* collections whose fast counts the open write changed */
    int ndirty, capdirty;
};

/* Adds one document change to c's fast counts of the open write transaction. */
void store_counts_delta(store_txn_t *t, store_coll_t *c, int64_t dn, int64_t dbytes);

struct store_txn {
    store_t *st;
    conn_t *c;
    bool write;
    lclock_ts_t time;   /* a write transaction's cluster time ({0, 0} for a read) */
};

/* Unique-key conflicts met by writes to an index being built: (key, rid) of a document
 * whose key another document already held. MongoDB records such violations in a side
 * table and re-checks them when the build commits, so a write never fails on an index
 * that is not ready yet; the commit re-checks these (store_index_build_commit). Kept in
 * memory, under the writer mutex (every writer and every build batch holds it): a crash
 * loses the build anyway. */
typedef struct ib_conflict {
    buf_t key;
    int64_t rid;
} ib_conflict_t;

typedef struct ibuild {
    int64_t ix_id;              /* the building index (table i<id>) */
    ib_conflict_t *v;
    int n, cap;
    bool failed;                /* more than SHARDD_INDEX_BUILD_CONFLICTS_MAX: fails now */
    ms_error_t ferr;
    struct ibuild *next;
} ibuild_t;

/* The write path's statements, one per (kind, table): found without formatting SQL, so a
 * document costs no snprintf or string hashing (the bench's profile showed ~10 % there).
 * Every parameter is bound on each use, so no clear_bindings either. */
enum tstmt {
    TS_DOC_INSERT = 1, TS_DOC_UPDATE, TS_DOC_DELETE, TS_DOC_BY_ROWID, TS_KEY_INSERT,
    TS_KEY_DELETE, TS_SAVEPOINT, TS_RELEASE, TS_ROLLBACK_TO, TS_KINDS
};
extern const char *const store_tstmt_sql[TS_KINDS];

/* ---- store.c ------------------------------------------------------------------------ */

/* Drops every cached statement of the connection (before a table they name goes). */
void store_cache_clear(conn_t *c);
/* Runs one formatted SQL statement (at most 511 bytes) on the transaction's connection. */
int store_sql_fmt_exec(store_txn_t *t, ms_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A catalog index from its spec (side table i<id>); *out is the caller's on success. */
int store_index_new(const bson_t *spec, int64_t id, bool multikey, store_index_t **out,
                    ms_error_t *err);
void store_index_free(store_index_t *ix);  /* accepts NULL */

/* The cached write-path statement kind for table c<table>/i<table>, reset; NULL and err
 * set when it cannot be prepared. The connection's cache owns it. */
sqlite3_stmt *store_table_stmt(store_txn_t *t, enum tstmt kind, int64_t table, ms_error_t *err);
/* Binds a blob parameter; borrows p until the statement is reset (SQLITE_STATIC). */
int store_bind_blob(sqlite3_stmt *s, int i, const void *p, size_t n);
/* Steps s once and resets it: 0 on SQLITE_DONE, else err says what failed. */
int store_step_done(store_txn_t *t, sqlite3_stmt *s, const char *what, ms_error_t *err);
/* qsort comparator of two buf_t index keys (memcmp order, shorter first). */
int store_buf_cmp(const void *a, const void *b);

/* ---- store_index.c ------------------------------------------------------------------ */

/* The conflict record of the build of index ix_id, or NULL (under the writer mutex). */
ibuild_t *store_ib_find(store_t *st, int64_t ix_id);
void store_ib_free_all(store_t *st);  /* every build's record (store_close) */

/* ---- store_write.c: index maintenance the index builds share -------------------------- */

int store_index_put(store_txn_t *t, store_coll_t *c, store_index_t *ix, const buf_t *k,
                    int64_t rid, const bson_t *doc, bson_t *err_info, ms_error_t *err);
int store_index_put_building(store_txn_t *t, store_coll_t *c, store_index_t *ix,
                             const buf_t *k, int64_t rid, const bson_t *doc, bool from_scan,
                             ms_error_t *err);
int store_mark_multikey(store_txn_t *t, store_index_t *ix, ms_error_t *err);

#endif
