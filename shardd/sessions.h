/*
 * sessions.h — the shard's retryable-write records, run by bin/shardd.
 *
 * A driver sends a write with a logical session id (lsid) and a transaction number
 * (txnNumber); statement i of a batch has stmtId i unless stmtIds says otherwise. MongoDB's
 * TransactionParticipant records, in the same storage transaction as the write, that
 * (lsid, txnNumber, stmtId) ran and what it answered (onWriteOpCompletedOnPrimary), and a
 * retry looks the statement up first (checkStatementExecuted) and answers the recorded
 * result instead of writing again. MongoDB keeps one document per session in
 * config.transactions and the statements' results in the oplog; here both live in the
 * shard's SQLite file:
 *   sess_txn(lsid BLOB PRIMARY KEY, txn INTEGER, incomplete INTEGER, last_ms INTEGER)
 *            WITHOUT ROWID
 *   sess_stmt(seq INTEGER PRIMARY KEY, lsid BLOB, txn INTEGER, stmt INTEGER,
 *             ns TEXT, key BLOB, result BLOB, date_ms INTEGER, UNIQUE(lsid, txn, stmt))
 * (created by store.c's schema). lsid is the BSON bytes of the session id document
 * ({id: UUID}); find on config.transactions shows sess_txn shaped like MongoDB's documents.
 */
#ifndef MS_SESSIONS_H
#define MS_SESSIONS_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"
#include "shardd/shardd.h"

/* One statement's record: what a retry of (lsid, txnNumber, stmtId) answers. It lives in the
 * shard's SQLite file, written in the same SQLite transaction as the write it records. */

/* Before running statements of a retryable write (lsid + txnNumber, no transaction), inside the
 * write's store transaction: checks txnNumber against the session's record. Older than the
 * session's latest -> TransactionTooOld (225). Newer -> the session moves to it (its older
 * statement records are removed). Equal -> stays. */
int sess_txn_begin(store_txn_t *t, const bson_t *lsid, int64_t txn, ms_error_t *err);
/* sess_txn_begin, and *fresh = true when the session moved to txn just now (nothing of it
 * can have run here, so a caller may skip sess_stmt_lookup for its statements). */
int sess_txn_start(store_txn_t *t, const bson_t *lsid, int64_t txn, bool *fresh,
                   ms_error_t *err);

/* Looks up a statement. *found = true and *result filled (caller bson_destroy) when it ran
 * already. Not found and the session's history for this txn is marked incomplete ->
 * IncompleteTransactionHistory (217). */
int sess_stmt_lookup(store_txn_t *t, const bson_t *lsid, int64_t txn, int32_t stmt,
                     bson_t *result, bool *found, ms_error_t *err);

/* The statements one session keeps of its txnNumber (default MS_SESSION_STMTS_MAX, a whole
 * batch), checked when a command starts on a txn that has statements here: past it the
 * oldest records go and the history is marked incomplete. A test aid (shardd
 * --session-stmts-max) may lower it; called before serving. */
void sess_set_stmts_max(int n);

/* Records a statement that ran, inside the same write transaction. ns: the collection;
 * key/keylen: the ENCODED SHARD KEY (common/keys.h encoding, same bytes as chunk bounds) of the
 * document the statement touched, or NULL when it touched none (such records never migrate);
 * result: what a retry must answer for this statement (e.g. {n:1}, {n:1,nModified:1,upserted:..},
 * or findAndModify's {lastErrorObject:..., value:...}). */
int sess_stmt_record(store_txn_t *t, const bson_t *lsid, int64_t txn, int32_t stmt,
                     const char *ns, const uint8_t *key, size_t keylen,
                     const bson_t *result, ms_error_t *err);

/* Session migration support. Every record carries a monotonically increasing sequence number
 * `seq` (assigned when written, never reused — the rowid; deletes spare the highest row, see
 * sessions.c).
 * sess_scan_range calls fn for up to `limit` records of `ns` whose key is in [min, max) (bytewise
 * comparison of encoded keys; max may be the encoded MaxKey bound) and whose seq > after_seq,
 * in seq order. `rec` is a self-contained BSON document:
 *   {lsid: {...}, txnNumber: long, stmtId: int, ns: string, key: BinData(0), result: {...},
 *    lastWriteDate: Date, seq: long}
 * The scan runs in a read transaction (store_read) or a write one. fn returning non-zero stops
 * the scan and is returned. */
typedef int (*sess_rec_fn)(void *arg, const bson_t *rec, int64_t seq, ms_error_t *err);
int sess_scan_range(store_txn_t *t, const char *ns, const uint8_t *min, size_t minlen,
                    const uint8_t *max, size_t maxlen, int64_t after_seq, int limit,
                    sess_rec_fn fn, void *arg, ms_error_t *err);

/* The same for the records of `ns` with no key (statements that touched no document, which
 * no range holds), seq > after_seq, in seq order; `key` is empty in rec. Session migration
 * sends a dead-end sentinel for their transactions (mig_session.c). */
int sess_scan_unplaced(store_txn_t *t, const char *ns, int64_t after_seq, int limit,
                       sess_rec_fn fn, void *arg, ms_error_t *err);

/* The highest seq of any record (0 when none): a scan that found nothing up to it need not
 * look below it again. */
int sess_max_seq(store_txn_t *t, int64_t *seq, ms_error_t *err);

/* Recipient side: persists one migrated record (the document sess_scan_range produced) inside a
 * write transaction. If the local session is at an older txnNumber it moves to the record's one
 * (older local statements removed); same txnNumber -> the statement is added (idempotent if
 * present); the record's txnNumber older than the local session's -> ignored (not an error).
 *
 * memo (may be NULL) carries that decision from one record to the next of one transaction: a
 * batch holds a session's statements together, so a record of the (lsid, txnNumber) just
 * decided adds its statement row only, without reading and rewriting the session's row
 * again. Zero it before a transaction's first record, sess_apply_memo_reset it after
 * anything else changes a session in that transaction, and free it after the last. */
typedef struct sess_apply_memo {
    buf_t lsid;      /* the last record's lsid bytes (len 0: nothing decided) */
    int64_t txn;
    bool keep;       /* its statements are kept (false: the session moved on here) */
} sess_apply_memo_t;

int sess_apply_migrated(store_txn_t *t, const bson_t *rec, sess_apply_memo_t *memo,
                        ms_error_t *err);
void sess_apply_memo_reset(sess_apply_memo_t *memo);
void sess_apply_memo_free(sess_apply_memo_t *memo);

/* Marks (lsid, txn) history incomplete on this shard, so later lookups of statements that are
 * not found answer 217 (MongoDB's "dead-end sentinel" of session migration). */
int sess_mark_incomplete(store_txn_t *t, const bson_t *lsid, int64_t txn, ms_error_t *err);

/* ---- expiry and the config.transactions view ---------------------------------------- */

/* Removes, inside a write transaction, up to `limit` sessions (and their statements) last used
 * before cutoff_ms (ms since the epoch); *removed says how many went. */
int sess_expire(store_txn_t *t, int64_t cutoff_ms, int limit, int *removed, ms_error_t *err);

/* The shard's session reaper (MongoDB's LogicalSessionCache reap of config.transactions),
 * called every second by main.c's reaper thread: removes the sessions (and their
 * statements) whose last write is older than timeout_ms, MS_SESSION_REAP_BATCH per write
 * transaction, at most MS_SESSION_REAP_BATCHES_MAX transactions per call. Returns how many
 * went; failures are logged (the next call tries again). */
int sess_reap(store_t *st, int64_t timeout_ms);

/* Calls fn for each session as a config.transactions document
 *   {_id: lsid, txnNum: long, lastWriteOpTime: {ts, t}, lastWriteDate: Date,
 *    incompleteHistory?: true}
 * in lsid order; fn returning non-zero stops (and is returned). */
typedef int (*sess_doc_fn)(void *arg, const bson_t *doc);
int sess_txn_docs(store_txn_t *t, sess_doc_fn fn, void *arg, ms_error_t *err);

/* ---- the write commands' side (sess_write.c) ------------------------------------------ */

/* MongoDB's kUninitializedStmtId: a statement the router marks as not retryable. */
#define SESS_STMT_UNINITIALIZED (-1)

/* A write command's retryable-write arguments. on: lsid and txnNumber both present (no
 * transaction: cmd.c refused startTransaction/autocommit). */
typedef struct sess_write {
    bool on;
    bson_t lsid;             /* a view into the request */
    int64_t txn;
    int32_t *ids;            /* stmtIds, one per statement (caller frees: sess_write_free);
                              * NULL: statement i has stmtId i */
    int nids;
    int32_t stmt;            /* findAndModify's stmtId (default 0) */
} sess_write_t;

/* Reads lsid, txnNumber, stmtIds (nops statements; their count must match) and stmtId from
 * the request (borrowed). Errors: BadValue / TypeMismatch / InvalidLength, as MongoDB's. */
int sess_write_parse(const bson_t *req, int nops, sess_write_t *w, ms_error_t *err);
void sess_write_free(sess_write_t *w);
/* The stmtId of statement i. */
int32_t sess_write_stmt_id(const sess_write_t *w, int i);

/* The record's key of a statement: the encoded shard key of doc (the document it wrote)
 * into *out, or, with doc NULL, of the shard-key equality q targets (a statement that
 * touched nothing). *has = false when the collection is unsharded or q fixes no key. */
int sess_key_of(const store_coll_t *c, const bson_t *doc, const bson_t *q, buf_t *out,
                bool *has, ms_error_t *err);

#endif
