/*
 * sessions.c — the shard's retryable-write records, run by bin/shardd (sessions.h says what
 * they are). Every function runs inside the caller's store transaction, so a record commits
 * or rolls back with the write it describes: after a crash a write and its record are both
 * there or both absent, and a retry finds the record exactly when the write happened.
 *
 * MongoDB's TransactionParticipant keeps, per session, the active txnNumber and the
 * executed statements of it (loaded from the oplog chain of config.transactions'
 * lastWriteOpTime); a newer txnNumber starts over, an older one is TransactionTooOld, and
 * a statement not found in a history marked incomplete (a migration could not bring every
 * record, or a record was dropped) is IncompleteTransactionHistory. The same rules here,
 * over two tables: sess_txn (one row per session) and sess_stmt (one row per statement).
 */
#include "shardd/sessions.h"

#include <sqlite3.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/lclock.h"
#include "common/log.h"
#include "shardd/store_priv.h"

/* The statement cap (MS_SESSION_STMTS_MAX; --session-stmts-max lowers it for tests). Set
 * once at start-up, before any write. */
static int g_stmts_max = MS_SESSION_STMTS_MAX;

void sess_set_stmts_max(int n) {
    g_stmts_max = n > 0 && n < MS_SESSION_STMTS_MAX ? n : MS_SESSION_STMTS_MAX;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int need_write(store_txn_t *t, const char *what, ms_error_t *err) {
    if (!t->write) return err_set(err, MS_ERR_INTERNAL, "%s needs a write transaction", what);
    return 0;
}

/* lsid as stored: the BSON bytes of {id: UUID, uid?: ...}. A malformed one never reaches
 * here (cmd.c checks it is a document). */
static void bind_lsid(sqlite3_stmt *s, int i, const bson_t *lsid) {
    store_bind_blob(s, i, bson_get_data(lsid), lsid->len);
}

/* The session's row: *exists, and its txn and incomplete flag when it does. */
static int txn_row(store_txn_t *t, const bson_t *lsid, bool *exists, int64_t *txn,
                   bool *incomplete, ms_error_t *err) {
    sqlite3_stmt *s = store_stmt(t, "SELECT txn, incomplete FROM sess_txn WHERE lsid = ?", err);
    int src, rc = 0;
    if (!s) return err->code;
    bind_lsid(s, 1, lsid);
    src = sqlite3_step(s);
    *exists = src == SQLITE_ROW;
    if (src == SQLITE_ROW) {
        *txn = sqlite3_column_int64(s, 0);
        *incomplete = sqlite3_column_int(s, 1) != 0;
    } else if (src != SQLITE_DONE) {
        rc = err_from_sqlite(err, src, "sess_txn get", t->c->db);
    }
    sqlite3_reset(s);
    return rc;
}

/* The session's row set to (txn, incomplete) with its last use now: the wall clock (for
 * expiry and lastWriteDate) and the cluster time of the write transaction it is part of
 * (lastWriteOpTime.ts, the same time the write's reply carries as operationTime). */
static int txn_put(store_txn_t *t, const bson_t *lsid, int64_t txn, bool incomplete,
                   ms_error_t *err) {
    lclock_ts_t ts = store_txn_time(t);
    sqlite3_stmt *s = store_stmt(t, "INSERT OR REPLACE INTO sess_txn(lsid, txn, incomplete,"
                                    " last_ms, last_ts) VALUES(?,?,?,?,?)", err);
    if (!s) return err->code;
    bind_lsid(s, 1, lsid);
    sqlite3_bind_int64(s, 2, txn);
    sqlite3_bind_int(s, 3, incomplete ? 1 : 0);
    sqlite3_bind_int64(s, 4, now_ms());
    sqlite3_bind_int64(s, 5, (int64_t)((uint64_t)ts.secs << 32 | ts.inc));
    return store_step_done(t, s, "sess_txn put", err);
}

/* Removes the session's statements of txnNumbers other than txn (a newer one started).
 * Every delete of sess_stmt spares the row of the highest seq: seq is the rowid
 * (max(seq) + 1 for a new row, without AUTOINCREMENT's extra b-tree write per record), so
 * keeping the highest row keeps a seq from ever being given out twice (sess_scan_range's
 * after_seq relies on it). That one row of an older txn is invisible to lookups (they ask
 * for the session's current txn) and goes with the next delete after a newer record. */
static int stmts_drop_other(store_txn_t *t, const bson_t *lsid, int64_t txn, ms_error_t *err) {
    sqlite3_stmt *s = store_stmt(t, "DELETE FROM sess_stmt WHERE lsid = ? AND txn <> ?"
                                    " AND seq < (SELECT max(seq) FROM sess_stmt)", err);
    if (!s) return err->code;
    bind_lsid(s, 1, lsid);
    sqlite3_bind_int64(s, 2, txn);
    return store_step_done(t, s, "sess_stmt drop", err);
}

static int too_old(int64_t txn, int64_t latest, ms_error_t *err) {
    return err_set(err, MS_ERR_TRANSACTION_TOO_OLD,
                   "Cannot start transaction %lld on session because a newer transaction %lld "
                   "has already started", (long long)txn, (long long)latest);
}

/* Moves the session to txn: older statements gone, history complete again. */
static int txn_advance(store_txn_t *t, const bson_t *lsid, int64_t txn, ms_error_t *err) {
    int rc = stmts_drop_other(t, lsid, txn, err);
    return rc ? rc : txn_put(t, lsid, txn, false, err);
}

/* The cap on the statements a session keeps of its txn, applied when a command starts on a
 * txn that already has statements here: over it, the oldest
 * go and the history is marked incomplete, so a retry of a dropped one answers 217 rather
 * than running again. Counting when a command starts, not per statement, keeps the cost
 * off the write path; a session then holds at most the cap plus one batch. */
static int stmts_trim(store_txn_t *t, const bson_t *lsid, int64_t txn, ms_error_t *err) {
    sqlite3_stmt *s = store_stmt(t, "SELECT count(*) FROM sess_stmt WHERE lsid = ? AND txn = ?",
                                 err);
    int64_t n = 0;
    int src, rc;
    if (!s) return err->code;
    bind_lsid(s, 1, lsid);
    sqlite3_bind_int64(s, 2, txn);
    if ((src = sqlite3_step(s)) == SQLITE_ROW) n = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    if (src != SQLITE_ROW) return err_from_sqlite(err, src, "sess_stmt count", t->c->db);
    if (n <= g_stmts_max) return 0;
    s = store_stmt(t, "DELETE FROM sess_stmt WHERE seq IN (SELECT seq FROM sess_stmt"
                      " WHERE lsid = ? AND txn = ? ORDER BY seq LIMIT ?)"
                      " AND seq < (SELECT max(seq) FROM sess_stmt)", err);
    if (!s) return err->code;
    bind_lsid(s, 1, lsid);
    sqlite3_bind_int64(s, 2, txn);
    sqlite3_bind_int64(s, 3, n - g_stmts_max);
    if ((rc = store_step_done(t, s, "sess_stmt cap", err)) != 0) return rc;
    log_warn("retryable-write history capped: oldest statements dropped, history marked "
             "incomplete txnNumber=%lld dropped=%lld stmts_max=%d", (long long)txn,
             (long long)(n - g_stmts_max), g_stmts_max);
    return txn_put(t, lsid, txn, true, err);
}

int sess_txn_start(store_txn_t *t, const bson_t *lsid, int64_t txn, bool *fresh,
                   ms_error_t *err) {
    bool exists = false, incomplete = false;
    int64_t cur = 0;
    int rc;
    if (fresh) *fresh = false;
    if ((rc = need_write(t, "sess_txn_begin", err)) != 0) return rc;
    if (txn < 0) return err_set(err, MS_ERR_BAD_VALUE, "txnNumber may not be negative");
    if ((rc = txn_row(t, lsid, &exists, &cur, &incomplete, err)) != 0) return rc;
    if (exists && txn < cur) return too_old(txn, cur, err);
    if (exists && txn == cur) {   /* the same txn again (a retry, a router's next round) */
        if ((rc = txn_put(t, lsid, txn, incomplete, err)) != 0) return rc;   /* last use */
        return stmts_trim(t, lsid, txn, err);
    }
    if (exists && (rc = stmts_drop_other(t, lsid, txn, err)) != 0) return rc;
    if ((rc = txn_put(t, lsid, txn, false, err)) == 0 && fresh) *fresh = true;
    return rc;
}

int sess_txn_begin(store_txn_t *t, const bson_t *lsid, int64_t txn, ms_error_t *err) {
    return sess_txn_start(t, lsid, txn, NULL, err);
}

/* A stored blob as a document (copied): *out initialised on success. */
static int blob_doc(sqlite3_stmt *s, int col, bson_t *out, ms_error_t *err) {
    const void *p = sqlite3_column_blob(s, col);
    int n = sqlite3_column_bytes(s, col);
    bson_t view;
    if (!p || n < 5 || !bson_init_static(&view, p, (size_t)n))
        return err_set(err, MS_ERR_INVALID_BSON, "bad document in sess_stmt");
    bson_copy_to(&view, out);
    return 0;
}

int sess_stmt_lookup(store_txn_t *t, const bson_t *lsid, int64_t txn, int32_t stmt,
                     bson_t *result, bool *found, ms_error_t *err) {
    bool exists = false, incomplete = false;
    int64_t cur = 0;
    int src, rc;
    *found = false;
    if ((rc = txn_row(t, lsid, &exists, &cur, &incomplete, err)) != 0) return rc;
    if (!exists || txn > cur) return 0;   /* nothing of this txn ran here */
    if (txn < cur) return too_old(txn, cur, err);
    sqlite3_stmt *s = store_stmt(t, "SELECT result FROM sess_stmt WHERE lsid = ? AND txn = ?"
                                    " AND stmt = ?", err);
    if (!s) return err->code;
    bind_lsid(s, 1, lsid);
    sqlite3_bind_int64(s, 2, txn);
    sqlite3_bind_int(s, 3, stmt);
    src = sqlite3_step(s);
    if (src == SQLITE_ROW && (rc = blob_doc(s, 0, result, err)) == 0) *found = true;
    else if (src != SQLITE_ROW && src != SQLITE_DONE)
        rc = err_from_sqlite(err, src, "sess_stmt get", t->c->db);
    sqlite3_reset(s);
    if (rc == 0 && !*found && incomplete)
        rc = err_set(err, MS_ERR_INCOMPLETE_TRANSACTION_HISTORY,
                     "Incomplete history detected for transaction %lld on session; "
                     "statement %d may have executed already", (long long)txn, stmt);
    return rc;
}


/* Inserts one statement row (an existing (lsid, txn, stmt) is kept: a record never
 * changes). *added says whether it was new. */
static int stmt_insert(store_txn_t *t, const bson_t *lsid, int64_t txn, int32_t stmt,
                       const char *ns, const uint8_t *key, size_t keylen, const bson_t *result,
                       int64_t date_ms, bool *added, ms_error_t *err) {
    sqlite3_stmt *s = store_stmt(t, "INSERT OR IGNORE INTO sess_stmt(lsid, txn, stmt, ns, key,"
                                    " result, date_ms) VALUES(?,?,?,?,?,?,?)", err);
    int rc;
    if (!s) return err->code;
    bind_lsid(s, 1, lsid);
    sqlite3_bind_int64(s, 2, txn);
    sqlite3_bind_int(s, 3, stmt);
    sqlite3_bind_text(s, 4, ns, -1, SQLITE_STATIC);
    if (key) store_bind_blob(s, 5, key, keylen);
    else sqlite3_bind_null(s, 5);
    store_bind_blob(s, 6, bson_get_data(result), result->len);
    sqlite3_bind_int64(s, 7, date_ms);
    rc = store_step_done(t, s, "sess_stmt put", err);
    *added = rc == 0 && sqlite3_changes(t->c->db) > 0;
    return rc;
}

int sess_stmt_record(store_txn_t *t, const bson_t *lsid, int64_t txn, int32_t stmt,
                     const char *ns, const uint8_t *key, size_t keylen, const bson_t *result,
                     ms_error_t *err) {
    bool added = false;
    int rc;
    if ((rc = need_write(t, "sess_stmt_record", err)) != 0) return rc;
    return stmt_insert(t, lsid, txn, stmt, ns, key, keylen, result, now_ms(), &added, err);
}

int sess_mark_incomplete(store_txn_t *t, const bson_t *lsid, int64_t txn, ms_error_t *err) {
    bool exists = false, incomplete = false;
    int64_t cur = 0;
    int rc;
    if ((rc = need_write(t, "sess_mark_incomplete", err)) != 0) return rc;
    if ((rc = txn_row(t, lsid, &exists, &cur, &incomplete, err)) != 0) return rc;
    if (exists && txn < cur) return 0;   /* a newer txn is what retries can still meet */
    if (exists && txn == cur) return txn_put(t, lsid, txn, true, err);
    if ((rc = stmts_drop_other(t, lsid, txn, err)) != 0) return rc;
    return txn_put(t, lsid, txn, true, err);
}

/* ---- session migration: scan and apply ------------------------------------------------ */

/* The record document of the current row of s (columns as in sess_scan_range's SELECT). */
static int rec_doc(sqlite3_stmt *s, bson_t *rec, ms_error_t *err) {
    const void *lp = sqlite3_column_blob(s, 1);
    int ln = sqlite3_column_bytes(s, 1);
    bson_t lsid, result;
    int rc;
    if (!lp || ln < 5 || !bson_init_static(&lsid, lp, (size_t)ln))
        return err_set(err, MS_ERR_INVALID_BSON, "bad lsid in sess_stmt");
    if ((rc = blob_doc(s, 6, &result, err)) != 0) return rc;
    bson_init(rec);
    BSON_APPEND_DOCUMENT(rec, "lsid", &lsid);
    BSON_APPEND_INT64(rec, "txnNumber", sqlite3_column_int64(s, 2));
    BSON_APPEND_INT32(rec, "stmtId", sqlite3_column_int(s, 3));
    BSON_APPEND_UTF8(rec, "ns", (const char *)sqlite3_column_text(s, 4));
    BSON_APPEND_BINARY(rec, "key", BSON_SUBTYPE_BINARY, sqlite3_column_blob(s, 5),
                       (uint32_t)sqlite3_column_bytes(s, 5));
    BSON_APPEND_DOCUMENT(rec, "result", &result);
    BSON_APPEND_DATE_TIME(rec, "lastWriteDate", sqlite3_column_int64(s, 7));
    BSON_APPEND_INT64(rec, "seq", sqlite3_column_int64(s, 0));
    bson_destroy(&result);
    return 0;
}

/* Runs one of the scans below: ?1 ns, ?2 min, ?3 max, ?4 after_seq, ?5 limit. */
static int scan_stmts(store_txn_t *t, const char *sql, const char *ns, const uint8_t *min,
                      size_t minlen, const uint8_t *max, size_t maxlen, int64_t after_seq,
                      int limit, sess_rec_fn fn, void *arg, ms_error_t *err) {
    /* Not the statement cache: fn may run other session statements on this connection. */
    sqlite3_stmt *s = NULL;
    sqlite3 *db = t->c->db;
    int src = sqlite3_prepare_v2(db, sql, -1, &s, NULL), rc = 0;
    if (src != SQLITE_OK) return err_from_sqlite(err, src, "sess_stmt scan", db);
    sqlite3_bind_text(s, 1, ns, -1, SQLITE_STATIC);
    sqlite3_bind_blob(s, 2, min, (int)minlen, SQLITE_STATIC);
    sqlite3_bind_blob(s, 3, max, (int)maxlen, SQLITE_STATIC);
    sqlite3_bind_int64(s, 4, after_seq);
    sqlite3_bind_int(s, 5, limit > 0 ? limit : 1);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        bson_t rec;
        if ((rc = rec_doc(s, &rec, err)) != 0) break;
        rc = fn(arg, &rec, sqlite3_column_int64(s, 0), err);
        bson_destroy(&rec);
        if (rc) break;
    }
    if (rc == 0 && src != SQLITE_DONE) rc = err_from_sqlite(err, src, "sess_stmt scan", db);
    sqlite3_finalize(s);
    return rc;
}

int sess_scan_range(store_txn_t *t, const char *ns, const uint8_t *min, size_t minlen,
                    const uint8_t *max, size_t maxlen, int64_t after_seq, int limit,
                    sess_rec_fn fn, void *arg, ms_error_t *err) {
    static const char sql[] =
        "SELECT seq, lsid, txn, stmt, ns, key, result, date_ms FROM sess_stmt"
        " WHERE ns = ?1 AND key IS NOT NULL AND key >= ?2 AND key < ?3 AND seq > ?4"
        " ORDER BY seq LIMIT ?5";
    return scan_stmts(t, sql, ns, min, minlen, max, maxlen, after_seq, limit, fn, arg, err);
}

int sess_max_seq(store_txn_t *t, int64_t *seq, ms_error_t *err) {
    sqlite3_stmt *s = store_stmt(t, "SELECT max(seq) FROM sess_stmt", err);
    int src;
    if (!s) return err->code;
    src = sqlite3_step(s);
    *seq = src == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_reset(s);
    return src == SQLITE_ROW ? 0 : err_from_sqlite(err, src, "sess_stmt max", t->c->db);
}

int sess_scan_unplaced(store_txn_t *t, const char *ns, int64_t after_seq, int limit,
                       sess_rec_fn fn, void *arg, ms_error_t *err) {
    static const char sql[] =
        "SELECT seq, lsid, txn, stmt, ns, key, result, date_ms FROM sess_stmt"
        " WHERE ns = ?1 AND key IS NULL AND seq > ?4 ORDER BY seq LIMIT ?5";
    return scan_stmts(t, sql, ns, NULL, 0, NULL, 0, after_seq, limit, fn, arg, err);
}

/* The fields of a migrated record; views into rec. */
typedef struct mrec {
    bson_t lsid, result;
    int64_t txn, date_ms;
    int32_t stmt;
    const char *ns;
    const uint8_t *key;
    uint32_t keylen;
} mrec_t;

static int mrec_parse(const bson_t *rec, mrec_t *m, ms_error_t *err) {
    bson_iter_t it;
    bson_subtype_t sub;
    memset(m, 0, sizeof *m);
    if (!bson_iter_init_find(&it, rec, "lsid") || !bsonx_view_container(&it, &m->lsid) ||
        !bson_iter_init_find(&it, rec, "txnNumber") || !bsonx_as_int64(&it, &m->txn) ||
        !bson_iter_init_find(&it, rec, "stmtId") || !BSON_ITER_HOLDS_INT32(&it))
        return err_set(err, MS_ERR_BAD_VALUE, "migrated session record needs lsid, txnNumber, "
                       "stmtId");
    m->stmt = bson_iter_int32(&it);
    if (!bson_iter_init_find(&it, rec, "ns") || !BSON_ITER_HOLDS_UTF8(&it))
        return err_set(err, MS_ERR_BAD_VALUE, "migrated session record needs ns");
    m->ns = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init_find(&it, rec, "key") || !BSON_ITER_HOLDS_BINARY(&it))
        return err_set(err, MS_ERR_BAD_VALUE, "migrated session record needs key");
    bson_iter_binary(&it, &sub, &m->keylen, &m->key);
    if (!bson_iter_init_find(&it, rec, "result") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bsonx_view_container(&it, &m->result))
        return err_set(err, MS_ERR_BAD_VALUE, "migrated session record needs result");
    m->date_ms = bson_iter_init_find(&it, rec, "lastWriteDate") && BSON_ITER_HOLDS_DATE_TIME(&it)
                     ? bson_iter_date_time(&it) : now_ms();
    return 0;
}

void sess_apply_memo_reset(sess_apply_memo_t *memo) {
    if (memo) memo->lsid.len = 0;
}

void sess_apply_memo_free(sess_apply_memo_t *memo) {
    if (memo) buf_free(&memo->lsid);
}

/* Whether memo decided m's (lsid, txn) already. */
static bool memo_holds(const sess_apply_memo_t *memo, const mrec_t *m) {
    return memo && memo->lsid.len > 0 && memo->txn == m->txn && memo->lsid.len == m->lsid.len &&
           memcmp(memo->lsid.data, bson_get_data(&m->lsid), m->lsid.len) == 0;
}

static void memo_set(sess_apply_memo_t *memo, const mrec_t *m, bool keep) {
    if (!memo) return;
    memo->lsid.len = 0;
    buf_put(&memo->lsid, bson_get_data(&m->lsid), m->lsid.len);
    memo->txn = m->txn;
    memo->keep = keep;
}

/* The session's row brought to the record's txn: *keep says whether its statement is
 * kept (false: the session moved on here). */
static int apply_session_row(store_txn_t *t, const mrec_t *m, bool *keep, ms_error_t *err) {
    bool exists = false, incomplete = false;
    int64_t cur = 0;
    int rc;
    *keep = false;
    if ((rc = txn_row(t, &m->lsid, &exists, &cur, &incomplete, err)) != 0) return rc;
    if (exists && m->txn < cur) return 0;   /* the session moved on here: nothing to keep */
    if (!exists || m->txn > cur) rc = txn_advance(t, &m->lsid, m->txn, err);
    else rc = txn_put(t, &m->lsid, m->txn, incomplete, err);
    *keep = rc == 0;
    return rc;
}

int sess_apply_migrated(store_txn_t *t, const bson_t *rec, sess_apply_memo_t *memo,
                        ms_error_t *err) {
    mrec_t m;
    bool keep = false, added = false;
    int rc;
    if ((rc = need_write(t, "sess_apply_migrated", err)) != 0) return rc;
    if ((rc = mrec_parse(rec, &m, err)) != 0) return rc;
    if (memo_holds(memo, &m)) {
        keep = memo->keep;
    } else {
        if ((rc = apply_session_row(t, &m, &keep, err)) != 0) return rc;
        memo_set(memo, &m, keep);
    }
    if (!keep) return 0;
    /* No count per record (it made applying a session's batch quadratic): the donor held
     * at most the cap plus one batch of this txn, so the records here stay bounded until
     * the next command on the txn trims them (sess_txn_start). */
    return stmt_insert(t, &m.lsid, m.txn, m.stmt, m.ns, m.key, m.keylen, &m.result, m.date_ms,
                       &added, err);
}

/* ---- expiry and config.transactions ----------------------------------------------------- */

int sess_expire(store_txn_t *t, int64_t cutoff_ms, int limit, int *removed, ms_error_t *err) {
    /* The same ordered, bounded choice of sessions twice in one transaction: their
     * statements first, then the sessions. */
    static const char *const sql[2] = {
        "DELETE FROM sess_stmt WHERE lsid IN (SELECT lsid FROM sess_txn WHERE last_ms < ?"
        " ORDER BY lsid LIMIT ?) AND seq < (SELECT max(seq) FROM sess_stmt)",
        "DELETE FROM sess_txn WHERE lsid IN (SELECT lsid FROM sess_txn WHERE last_ms < ?"
        " ORDER BY lsid LIMIT ?)"};
    int rc;
    *removed = 0;
    if ((rc = need_write(t, "sess_expire", err)) != 0) return rc;
    for (int i = 0; i < 2; i++) {
        sqlite3_stmt *s = store_stmt(t, sql[i], err);
        if (!s) return err->code;
        sqlite3_bind_int64(s, 1, cutoff_ms);
        sqlite3_bind_int(s, 2, limit > 0 ? limit : 1);
        if ((rc = store_step_done(t, s, "session expiry", err)) != 0) return rc;
    }
    *removed = sqlite3_changes(t->c->db);
    return 0;
}

typedef struct reap_arg {
    int64_t cutoff_ms;
    bool any;      /* a session expired before the cutoff */
    int removed;   /* sessions the last batch removed */
} reap_arg_t;

static int reap_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    reap_arg_t *a = arg;
    return sess_expire(t, a->cutoff_ms, MS_SESSION_REAP_BATCH, &a->removed, err);
}

/* Whether any session expired before the cutoff: asked in a read transaction, which no
 * writer waits for, so that the writer lock is taken only when there is work. */
static int any_expired_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    reap_arg_t *a = arg;
    sqlite3_stmt *s = store_stmt(t, "SELECT 1 FROM sess_txn WHERE last_ms < ? LIMIT 1", err);
    int src;
    if (!s) return err->code;
    sqlite3_bind_int64(s, 1, a->cutoff_ms);
    src = sqlite3_step(s);
    a->any = src == SQLITE_ROW;
    sqlite3_reset(s);
    return src == SQLITE_ROW || src == SQLITE_DONE ? 0
                                                   : err_from_sqlite(err, src, "sess_txn expiry", t->c->db);
}

int sess_reap(store_t *st, int64_t timeout_ms) {
    reap_arg_t a = {.cutoff_ms = now_ms() - timeout_ms};
    int total = 0;
    ms_error_t e0 = {0};
    if (store_read(st, any_expired_fn, &a, &e0) != 0 || !a.any) return 0;
    for (int i = 0; i < MS_SESSION_REAP_BATCHES_MAX; i++) {
        ms_error_t e = {0};
        if (store_write(st, reap_fn, &a, &e) != 0) {
            log_warn("session reaper failed code=%d errmsg=%s", e.code, log_str(e.msg));
            break;
        }
        total += a.removed;
        if (a.removed < MS_SESSION_REAP_BATCH) break;
    }
    if (total) log_info("expired sessions removed=%d timeout_ms=%lld", total, (long long)timeout_ms);
    return total;
}

int sess_txn_docs(store_txn_t *t, sess_doc_fn fn, void *arg, ms_error_t *err) {
    sqlite3_stmt *s = NULL;
    sqlite3 *db = t->c->db;
    int src = sqlite3_prepare_v2(db, "SELECT lsid, txn, incomplete, last_ms, last_ts FROM sess_txn"
                                     " ORDER BY lsid", -1, &s, NULL), rc = 0;
    if (src != SQLITE_OK) return err_from_sqlite(err, src, "sess_txn scan", db);
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        const void *lp = sqlite3_column_blob(s, 0);
        int ln = sqlite3_column_bytes(s, 0);
        int64_t ms = sqlite3_column_int64(s, 3);
        bson_t lsid, doc, op;
        if (!lp || ln < 5 || !bson_init_static(&lsid, lp, (size_t)ln)) continue;
        bson_init(&doc);
        BSON_APPEND_DOCUMENT(&doc, "_id", &lsid);
        BSON_APPEND_INT64(&doc, "txnNum", sqlite3_column_int64(s, 1));
        /* MongoDB's lastWriteOpTime names the session's last oplog entry; a shard here has
         * no oplog, so the cluster time of its last write stands in for the entry's
         * timestamp (docs/cluster-time.md; term -1: no replica set). */
        uint64_t ts = (uint64_t)sqlite3_column_int64(s, 4);
        BSON_APPEND_DOCUMENT_BEGIN(&doc, "lastWriteOpTime", &op);
        BSON_APPEND_TIMESTAMP(&op, "ts", (uint32_t)(ts >> 32), (uint32_t)ts);
        BSON_APPEND_INT64(&op, "t", -1);
        bson_append_document_end(&doc, &op);
        BSON_APPEND_DATE_TIME(&doc, "lastWriteDate", ms);
        if (sqlite3_column_int(s, 2)) BSON_APPEND_BOOL(&doc, "incompleteHistory", true);
        rc = fn(arg, &doc);
        bson_destroy(&doc);
        if (rc) break;
    }
    if (rc == 0 && src != SQLITE_DONE) rc = err_from_sqlite(err, src, "sess_txn scan", db);
    sqlite3_finalize(s);
    return rc;
}
