/*
 * mig_session.c — session migration, run by bin/shardd: the retryable-write history of the
 * moving range goes with its documents, so a retry of a write that the donor ran answers
 * the recorded result on the recipient instead of running a second time. MongoDB's
 * SessionCatalogMigrationSource (donor) and SessionCatalogMigrationDestination (recipient,
 * the "sessionCatalogMigrationProducer" thread), over the internal command
 * `_getNextSessionMods`.
 *
 * What moves: the records (shardd/sessions.h) of namespace ns whose encoded shard key lies
 * in [min, max) — the statements that touched a document of the range — in the order they
 * were written (their `seq`). Records written during the migration get higher seqs, so the
 * same pull that moves the history moves them too. A record with no key (the statement
 * touched no document: an update or delete that matched nothing) cannot be placed in any
 * range; the donor sends a dead-end sentinel for its (lsid, txnNumber) instead (MongoDB's
 * `$incompleteOplogHistory` entry, stmtId -1), and so it does for a migrating record whose
 * history is already incomplete here. The recipient marks such a transaction incomplete:
 * a retry of one of its statements that the recipient does not know answers
 * IncompleteTransactionHistory (217) rather than running again.
 *
 * The pull is stateless on the donor: the recipient asks for the records after the last
 * seq it has persisted (`afterSeq`), so a reply lost on the way is asked for again and
 * nothing is skipped (MongoDB's donor keeps a cursor; its command is not idempotent).
 * It runs on a thread of its own from the start of the clone, alongside clone and
 * catch-up, in bounded batches (records and bytes), each call with a deadline. It ends
 * when a pull that the donor answered inside its critical section (`commitStarted`, read
 * before the scan) comes back empty: no write of the collection can commit on the donor
 * any more, so nothing can follow. The receive reports `done` — and the donor may commit —
 * only after that; the donor goes into its critical section only once one pull came back
 * empty (the bulk of the history has moved), so the last pulls are short.
 *
 * Crash behaviour: the records are persisted before the receive is done, in the
 * recipient's own transactions; a kill -9 of either side before `done` aborts the
 * migration as for any other step (the donor's recovery). Records that reached a recipient
 * of a migration that then aborted stay there: they are true facts about writes that ran,
 * and a retry reaches a shard only for a range it owns (MongoDB keeps them too).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/opctx.h"
#include "common/rpc.h"
#include "shardd/mig.h"
#include "shardd/mig_priv.h"
#include "shardd/sessions.h"

/* MongoDB's kIncompleteHistoryStmtId: the statement id of a dead-end sentinel, and of the
 * keyless marker record a recipient keeps for it (so that the next donation of the range
 * sends the sentinel on). Drivers number statements from 0. */
#define SESS_INCOMPLETE_STMT_ID (-1)
/* A statement id no write uses: looking it up asks only "is this history incomplete?". */
#define SESS_PROBE_STMT_ID INT32_MIN

/* ---- donor: _getNextSessionMods (SessionCatalogMigrationSource) ------------------------ */

/* Records of one scan, their bytes back to back (one stream, seq order). */
typedef struct sess_pick {
    buf_t data;
    size_t *off;
    int64_t *seq;
    int n, cap;
    size_t bytes_max;
    bool full;                   /* stopped by the byte bound */
} sess_pick_t;

/* sess_scan_* callback: keeps the record unless the stream's bound is reached. */
static int pick_fn(void *arg, const bson_t *rec, int64_t seq, ms_error_t *err) {
    sess_pick_t *p = arg;
    (void)err;
    if (p->n >= p->cap || (p->n > 0 && p->data.len + rec->len > p->bytes_max)) {
        p->full = true;
        return -1;               /* stops the scan; not an error (see scan_stream) */
    }
    p->off[p->n] = p->data.len;
    p->seq[p->n] = seq;
    buf_put(&p->data, bson_get_data(rec), rec->len);
    p->n++;
    return 0;
}

static void pick_free(sess_pick_t *p) {
    buf_free(&p->data);
    free(p->off);
    free(p->seq);
}

static void pick_view(const sess_pick_t *p, int i, bson_t *rec) {
    size_t end = i + 1 < p->n ? p->off[i + 1] : p->data.len;
    bson_init_static(rec, p->data.data + p->off[i], end - p->off[i]);
}

typedef struct next_mods_arg {
    mig_donor_t *d;
    int64_t after_seq;
    bson_t *arr;                 /* the reply's oplog array, under construction */
    int n;
    size_t bytes;
    int64_t last_seq, records, sentinels;
} next_mods_arg_t;

/* A sentinel for (lsid, txnNumber) of rec: "this transaction's history here is not whole". */
static void append_sentinel(next_mods_arg_t *a, const bson_t *rec) {
    bson_t s, v;
    bson_iter_t it;
    char k[16];
    snprintf(k, sizeof k, "%d", a->n++);
    BSON_APPEND_DOCUMENT_BEGIN(a->arr, k, &s);
    if (bson_iter_init_find(&it, rec, "lsid") && bsonx_view_container(&it, &v))
        BSON_APPEND_DOCUMENT(&s, "lsid", &v);
    if (bson_iter_init_find(&it, rec, "txnNumber")) bsonx_append_iter(&s, "txnNumber", &it);
    BSON_APPEND_INT32(&s, "stmtId", SESS_INCOMPLETE_STMT_ID);
    if (bson_iter_init_find(&it, rec, "ns")) bsonx_append_iter(&s, "ns", &it);
    BSON_APPEND_BOOL(&s, "incompleteHistory", true);
    bson_append_document_end(a->arr, &s);
    a->bytes += rec->len;
    a->sentinels++;
}

static bool same_txn(const bson_t *a, const bson_t *b) {
    bson_iter_t ia, ib;
    bson_t la, lb;
    int64_t ta = 0, tb = 0;
    if (!bson_iter_init_find(&ia, a, "lsid") || !bsonx_view_container(&ia, &la) ||
        !bson_iter_init_find(&ib, b, "lsid") || !bsonx_view_container(&ib, &lb) || !bson_equal(&la, &lb))
        return false;
    if (bson_iter_init_find(&ia, a, "txnNumber")) bsonx_as_int64(&ia, &ta);
    if (bson_iter_init_find(&ib, b, "txnNumber")) bsonx_as_int64(&ib, &tb);
    return ta == tb;
}

/* Whether this shard's history of rec's (lsid, txnNumber) is already incomplete (it came
 * here with a sentinel): asked as the question a retry asks — would a statement this
 * shard does not know answer IncompleteTransactionHistory? */
static int history_incomplete(store_txn_t *t, const bson_t *rec, bool *incomplete, ms_error_t *err) {
    bson_iter_t it;
    bson_t lsid, result;
    int64_t txn = 0;
    bool found = false;
    int rc;
    *incomplete = false;
    if (!bson_iter_init_find(&it, rec, "lsid") || !bsonx_view_container(&it, &lsid)) return 0;
    if (bson_iter_init_find(&it, rec, "txnNumber")) bsonx_as_int64(&it, &txn);
    rc = sess_stmt_lookup(t, &lsid, txn, SESS_PROBE_STMT_ID, &result, &found, err);
    if (rc == 0 && found) bson_destroy(&result);
    if (rc == MS_ERR_INCOMPLETE_TRANSACTION_HISTORY || rc == MS_ERR_TRANSACTION_TOO_OLD) {
        /* Too old cannot happen in one snapshot (a newer txnNumber removes the older
         * records); were it to, the recipient ignores the record anyway. */
        *incomplete = rc == MS_ERR_INCOMPLETE_TRANSACTION_HISTORY;
        memset(err, 0, sizeof *err);
        return 0;
    }
    return rc;
}

/* Appends one record (a range record, or a sentinel in place of an unplaced one) unless
 * the batch is full; *added tells. */
static int append_record(store_txn_t *t, next_mods_arg_t *a, const bson_t *rec, int64_t seq,
                         bool unplaced, const bson_t *prev, bool *added, ms_error_t *err) {
    char k[16];
    bool incomplete = false, dup;
    int rc;
    *added = false;
    if (a->n > 0 && (a->n + 2 > MS_MIG_SESSION_BATCH_RECORDS_MAX ||
                     a->bytes + 2 * rec->len > MS_MIG_SESSION_BATCH_BYTES_MAX))
        return 0;
    /* One sentinel per transaction in a row is enough (records come in seq order, and a
     * transaction's statements are written together). */
    dup = prev && same_txn(prev, rec);
    if (unplaced) {
        if (!dup) append_sentinel(a, rec);
    } else {
        if (!dup && (rc = history_incomplete(t, rec, &incomplete, err)) != 0) return rc;
        if (incomplete) append_sentinel(a, rec);
        snprintf(k, sizeof k, "%d", a->n++);
        BSON_APPEND_DOCUMENT(a->arr, k, rec);
        a->bytes += rec->len;
        a->records++;
    }
    a->last_seq = seq;
    *added = true;
    return 0;
}

/* Scans one stream into p; the byte stop (-1) is not an error. */
static int scan_stream(store_txn_t *t, mig_donor_t *d, int64_t after, bool unplaced, sess_pick_t *p,
                       ms_error_t *err) {
    int rc;
    p->cap = MS_MIG_SESSION_BATCH_RECORDS_MAX;
    p->bytes_max = MS_MIG_SESSION_BATCH_BYTES_MAX;
    p->off = calloc((size_t)p->cap, sizeof *p->off);
    p->seq = calloc((size_t)p->cap, sizeof *p->seq);
    if (!p->off || !p->seq) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    if (unplaced)
        rc = sess_scan_unplaced(t, d->ns, after, p->cap, pick_fn, p, err);
    else
        rc = sess_scan_range(t, d->ns, d->min_enc.data, d->min_enc.len, d->max_enc.data,
                             d->max_enc.len, after, p->cap, pick_fn, p, err);
    if (rc == -1 && p->full) {
        memset(err, 0, sizeof *err);
        rc = 0;
    }
    return rc;
}

/* Whether the scan stopped before the stream's end (the record or byte cap of one batch). */
static bool pick_cut(const sess_pick_t *p) { return p->full || p->n == p->cap; }

/* One snapshot: both streams read, then merged in seq order into the batch. Each stream
 * holds its own smallest seqs, so the merged prefix is exactly the records after after_seq
 * up to the batch's last seq — as long as the merge stops where a stream that was cut
 * short runs out: the other stream's next record may come after records of the cut one
 * that were not read. */
static int next_mods_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    next_mods_arg_t *a = arg;
    sess_pick_t in = {0}, out = {0};
    int i = 0, j = 0, rc;
    if ((rc = scan_stream(t, a->d, a->after_seq, false, &in, err)) != 0 ||
        (rc = scan_stream(t, a->d, a->after_seq, true, &out, err)) != 0)
        goto out;
    while ((i < in.n || j < out.n) && !(i == in.n && pick_cut(&in)) &&
           !(j == out.n && pick_cut(&out))) {
        bool take_in = j >= out.n || (i < in.n && in.seq[i] < out.seq[j]);
        sess_pick_t *p = take_in ? &in : &out;
        int k = take_in ? i++ : j++;
        /* (A view of a static bson_t points into the struct itself: views are made afresh
         * from the stream, never copied.) */
        bson_t rec, prev;
        bool added = false;
        pick_view(p, k, &rec);
        if (k > 0) pick_view(p, k - 1, &prev);
        rc = append_record(t, a, &rec, p->seq[k], !take_in, k > 0 ? &prev : NULL, &added, err);
        if (rc != 0) goto out;
        if (!added) goto out;   /* the batch is full: the rest comes next time */
    }
    /* Both streams were read to their end and everything went out: no record up to the
     * snapshot's last seq is left for this range, so the next pull starts there (a range
     * with few records among many then never rereads the others). */
    if (in.n < in.cap && !in.full && out.n < out.cap && !out.full) {
        int64_t top = 0;
        if ((rc = sess_max_seq(t, &top, err)) == 0 && top > a->last_seq) a->last_seq = top;
    }
out:
    pick_free(&in);
    pick_free(&out);
    return rc;
}

/* `_getNextSessionMods {_getNextSessionMods: ns, sessionId, afterSeq}` → {oplog: [records
 * and sentinels], lastSeq, commitStarted}. */
int cmd_get_next_session_mods(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_donor_t *d = mig_donor_for(ctx, err);
    bson_iter_t it;
    bson_t arr;
    int64_t after = 0;
    bool commit_started;
    int rc;
    if (!d) return err->code;
    if (cmd_field(ctx, "afterSeq", &it) && (!bsonx_as_int64(&it, &after) || after < 0)) {
        mig_donor_release(app->mig, d);
        return err_set(err, MS_ERR_BAD_VALUE, "_getNextSessionMods: afterSeq must be a number >= 0");
    }
    /* Read before the scan: when the section already held writes, an empty scan is final. */
    pthread_mutex_lock(&d->mu);
    commit_started = d->sess_commit_started;
    pthread_mutex_unlock(&d->mu);
    BSON_APPEND_ARRAY_BEGIN(reply, "oplog", &arr);
    next_mods_arg_t a = {.d = d, .after_seq = after, .arr = &arr, .last_seq = after};
    rc = store_read(app->st, next_mods_fn, &a, err);
    bson_append_array_end(reply, &arr);
    if (rc == 0) rc = fp_eval(FP_HANG_IN_GET_NEXT_SESSION_MODS, err);
    if (rc == 0) {
        BSON_APPEND_INT64(reply, "lastSeq", a.last_seq);
        BSON_APPEND_BOOL(reply, "commitStarted", commit_started);
        pthread_mutex_lock(&d->mu);
        d->sess_sent += a.records;
        d->sess_sentinels += a.sentinels;
        /* The bulk of the history has moved once a pull finds nothing new: the critical
         * section may come (step 3 waits for this, MongoDB's inCatchupPhase). */
        if (a.n == 0 && !d->sess_caught_up) {
            d->sess_caught_up = true;
            pthread_cond_broadcast(&d->cv);   /* step 3 may be waiting for just this */
        }
        pthread_mutex_unlock(&d->mu);
    }
    mig_donor_release(app->mig, d);
    return rc;
}

/* ---- recipient: the session migration thread (SessionCatalogMigrationDestination) ------ */

enum sd_state { SD_MIGRATING, SD_READY, SD_DONE, SD_ERROR };
static const char *const sd_state_names[] = {"migrating", "readyToCommit", "done", "errorOccurred"};

struct mig_sessdest {
    mig_t *m;
    char ns[MS_NS_BYTES_MAX + 1];
    char session[320], from_url[MS_URL_BYTES_MAX];
    buf_t min_enc, max_enc;
    bool (*stop)(void *arg);     /* the receive was aborted or the shard stops */
    void *stop_arg;
    pthread_t th;
    bool started;
    /* under mu, written by the thread: */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum sd_state state;
    int64_t after_seq, records, sentinels, batches;
    char errmsg[512];
};

static void sd_set(mig_sessdest_t *s, enum sd_state st, const ms_error_t *e) {
    pthread_mutex_lock(&s->mu);
    if (s->state != SD_ERROR && s->state != SD_DONE) {
        s->state = st;
        if (e) snprintf(s->errmsg, sizeof s->errmsg, "%s", e->msg);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

typedef struct sd_apply_arg {
    mig_sessdest_t *s;
    bson_iter_t recs;
    int64_t records, sentinels;
    sess_apply_memo_t memo;      /* the session decided last in this transaction */
} sd_apply_arg_t;

/* A dead-end sentinel: the transaction is marked incomplete here, and — when this shard's
 * session is at that transaction — a keyless marker record of it is kept, which
 * sess_scan_unplaced finds when this shard donates the range on, so the sentinel travels
 * with every later migration (MongoDB passes its $incompleteOplogHistory entries along). */
static int sd_apply_sentinel(store_txn_t *t, mig_sessdest_t *s, const bson_t *rec,
                             const bson_t *lsid, int64_t txn, ms_error_t *err) {
    bson_iter_t it;
    bson_t result, marker = BSON_INITIALIZER;
    bool found = false;
    const char *ns = bson_iter_init_find(&it, rec, "ns") && BSON_ITER_HOLDS_UTF8(&it)
                         ? bson_iter_utf8(&it, NULL) : s->ns;
    int rc = sess_mark_incomplete(t, lsid, txn, err);
    if (rc == 0) rc = sess_stmt_lookup(t, lsid, txn, SESS_PROBE_STMT_ID, &result, &found, err);
    if (rc == 0 && found) bson_destroy(&result);
    if (rc == MS_ERR_TRANSACTION_TOO_OLD) {
        memset(err, 0, sizeof *err);   /* the session moved on here: nothing to keep */
        return 0;
    }
    if (rc != MS_ERR_INCOMPLETE_TRANSACTION_HISTORY) return rc;   /* (marked: always 217) */
    memset(err, 0, sizeof *err);
    BSON_APPEND_BOOL(&marker, "incompleteHistory", true);
    rc = sess_stmt_record(t, lsid, txn, SESS_INCOMPLETE_STMT_ID, ns, NULL, 0, &marker, err);
    bson_destroy(&marker);
    return rc;
}

/* One migrated record or sentinel, checked: it comes from the network. */
static int sd_apply_one(store_txn_t *t, sd_apply_arg_t *a, const bson_t *rec, ms_error_t *err) {
    bson_iter_t it;
    bson_t lsid;
    int64_t txn = 0;
    if (!bson_iter_init_find(&it, rec, "lsid") || !bsonx_view_container(&it, &lsid) ||
        !bson_iter_init_find(&it, rec, "txnNumber") || !bsonx_as_int64(&it, &txn))
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "_getNextSessionMods record without lsid or txnNumber");
    if (bson_iter_init_find(&it, rec, "incompleteHistory") && bson_iter_as_bool(&it)) {
        a->sentinels++;
        sess_apply_memo_reset(&a->memo);   /* the sentinel may change a session's row */
        return sd_apply_sentinel(t, a->s, rec, &lsid, txn, err);
    }
    {
        /* Only records of the range are ours to keep (as for documents). */
        const uint8_t *key = NULL;
        uint32_t len = 0;
        bson_subtype_t st;
        buf_t k = {0};
        bool inside;
        if (!bson_iter_init_find(&it, rec, "key") || !BSON_ITER_HOLDS_BINARY(&it))
            return err_set(err, MS_ERR_FAILED_TO_PARSE, "_getNextSessionMods record without key");
        bson_iter_binary(&it, &st, &len, &key);
        k.data = (uint8_t *)key;
        k.len = len;
        inside = mig_key_in_range(&k, &a->s->min_enc, &a->s->max_enc);
        if (!inside) return 0;
    }
    a->records++;
    return sess_apply_migrated(t, rec, &a->memo, err);
}

static int sd_apply_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sd_apply_arg_t *a = arg;
    bson_iter_t it = a->recs;
    int rc = 0;
    a->records = a->sentinels = 0;
    sess_apply_memo_reset(&a->memo);   /* a retried transaction starts over */
    while (rc == 0 && bson_iter_next(&it)) {
        bson_t rec;
        if (!bsonx_view_container(&it, &rec))
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE,
                         "_getNextSessionMods oplog holds a non-document");
        else
            rc = sd_apply_one(t, a, &rec, err);
    }
    return rc;
}

/* One pull's answer. */
typedef struct sd_batch {
    mig_sessdest_t *s;
    int64_t after;               /* asked for the records after this seq */
    bson_t reply;
    bson_iter_t recs;            /* the oplog array, in reply */
    bool empty, final;
    int64_t last;                /* the next pull's afterSeq */
    int rc;
    ms_error_t err;
} sd_batch_t;

/* What the answer in b->reply says (its oplog array, empty, final, the next afterSeq); a
 * malformed one is destroyed and is an error. */
static int sd_parse(sd_batch_t *b) {
    bson_iter_t it, probe;
    if (!bson_iter_init_find(&it, &b->reply, "oplog") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &b->recs)) {
        bson_destroy(&b->reply);
        return b->rc = err_set(&b->err, MS_ERR_FAILED_TO_PARSE,
                               "_getNextSessionMods response does not have the 'oplog' field as array");
    }
    probe = b->recs;
    b->empty = !bson_iter_next(&probe);
    b->final = bson_iter_init_find(&it, &b->reply, "commitStarted") && bson_iter_as_bool(&it);
    b->last = b->after;
    if (bson_iter_init_find(&it, &b->reply, "lastSeq")) bsonx_as_int64(&it, &b->last);
    if (b->last < b->after) b->last = b->after;
    return 0;
}

/* Asks the donor for the records after b->after; on success b->reply holds the answer
 * (caller destroys) and the fields say what it is. */
static int sd_fetch(sd_batch_t *b) {
    mig_sessdest_t *s = b->s;
    bson_t cmd;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "_getNextSessionMods", s->ns);
    BSON_APPEND_UTF8(&cmd, "sessionId", s->session);
    BSON_APPEND_INT64(&cmd, "afterSeq", b->after);
    b->rc = mig_call(s->from_url, &cmd, MS_RPC_PEER_TIMEOUT_MS_DEFAULT, &b->reply, &b->err);
    bson_destroy(&cmd);
    if (b->rc != 0) return b->rc;
    return sd_parse(b);
}

/* Moves batch src (answered) into dst: a bson_t must not be copied as a struct (its buffer
 * pointer may point into the struct itself), so the reply is stolen and looked at anew. */
static void sd_move(sd_batch_t *dst, sd_batch_t *src) {
    *dst = *src;
    bson_steal(&dst->reply, &src->reply);
    sd_parse(dst);
}

static void *sd_fetch_main(void *p) {
    sd_fetch(p);
    return NULL;
}

/* Persists a non-empty batch in one transaction, then moves afterSeq past it. */
static int sd_persist(mig_sessdest_t *s, sd_batch_t *b, ms_error_t *err) {
    sd_apply_arg_t a = {.s = s, .recs = b->recs};
    int rc = store_write(s->m->app->st, sd_apply_fn, &a, err);
    sess_apply_memo_free(&a.memo);
    if (rc != 0) return rc;
    pthread_mutex_lock(&s->mu);
    s->after_seq = b->last;
    s->records += a.records;
    s->sentinels += a.sentinels;
    s->batches++;
    pthread_mutex_unlock(&s->mu);
    /* Persisted: a crash from here on leaves these records and aborts the migration. */
    return fp_eval(FP_SESSION_MIGRATION_HANG_AFTER_BATCH, err);
}

/* The pulls of one stretch with records: while a batch is persisted, the next is fetched
 * on a second thread (MongoDB's clone fetcher and inserter, a queue of one) — the donor's
 * scan and the recipient's writes overlap. Returns once a pull came back empty: *cur then
 * holds that answer (caller destroys). */
static int sd_drain(mig_sessdest_t *s, sd_batch_t *cur, ms_error_t *err) {
    for (;;) {
        sd_batch_t next = {.s = s, .after = cur->last};
        pthread_t th;
        bool started;
        int rc;
        if (cur->empty) return 0;
        started = pthread_create(&th, NULL, sd_fetch_main, &next) == 0;
        rc = sd_persist(s, cur, err);
        if (started) pthread_join(th, NULL);
        else sd_fetch(&next);
        bson_destroy(&cur->reply);
        if (rc != 0) {
            if (next.rc == 0) bson_destroy(&next.reply);
            return rc;
        }
        if (next.rc != 0) {
            *err = next.err;
            return next.rc;
        }
        sd_move(cur, &next);
        if (cur->rc != 0) {
            *err = cur->err;
            return cur->rc;
        }
        if (s->stop(s->stop_arg)) {
            bson_destroy(&cur->reply);
            return err_set(err, MS_ERR_OPERATION_FAILED, "migration aborted");
        }
    }
}

static void *sd_main(void *p) {
    mig_sessdest_t *s = p;
    ms_error_t e = {0};
    int rc = 0;
    op_set_deadline_ms(0);
    /* Each round is one bounded call (and its prefetch); the loop ends at the final empty
     * pull, an error, or the receive's end (abort, shutdown). */
    for (;;) {
        sd_batch_t b = {.s = s};
        bool final;
        if (s->stop(s->stop_arg)) {
            rc = err_set(&e, MS_ERR_OPERATION_FAILED, "migration aborted");
            break;
        }
        pthread_mutex_lock(&s->mu);
        b.after = s->after_seq;
        pthread_mutex_unlock(&s->mu);
        if ((rc = sd_fetch(&b)) != 0) {
            e = b.err;
            break;
        }
        if ((rc = sd_drain(s, &b, &e)) != 0) break;
        final = b.final;
        bson_destroy(&b.reply);
        if (final) {
            rc = fp_eval(FP_SESSION_MIGRATION_HANG_BEFORE_DONE, &e);
            break;
        }
        sd_set(s, SD_READY, NULL);
        /* Caught up: ask again shortly (MongoDB's donor holds the call until there is
         * something; polling keeps the donor's command workers free). */
        pthread_mutex_lock(&s->mu);
        time_cond_wait_ms(&s->cv, &s->mu, MS_MIG_SESSION_POLL_MS);
        pthread_mutex_unlock(&s->mu);
    }
    if (rc != 0) {
        err_prefix(&e, "session migration: ");
        log_warn("session migration failed ns=%s session=%s errmsg=%s", log_str(s->ns),
                 log_str(s->session), log_str(e.msg));
        sd_set(s, SD_ERROR, &e);
    } else {
        sd_set(s, SD_DONE, NULL);
    }
    return NULL;
}

int mig_sessdest_start(mig_t *m, const char *ns, const char *from_url, const char *session,
                       const buf_t *min_enc, const buf_t *max_enc, bool (*stop)(void *arg),
                       void *stop_arg, mig_sessdest_t **out, ms_error_t *err) {
    mig_sessdest_t *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    s->m = m;
    snprintf(s->ns, sizeof s->ns, "%s", ns);
    snprintf(s->from_url, sizeof s->from_url, "%s", from_url);
    snprintf(s->session, sizeof s->session, "%s", session);
    buf_put(&s->min_enc, min_enc->data, min_enc->len);
    buf_put(&s->max_enc, max_enc->data, max_enc->len);
    s->stop = stop;
    s->stop_arg = stop_arg;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, sd_main, s) != 0) {
        mig_sessdest_free(s);
        return err_set(err, MS_ERR_INTERNAL, "cannot start the session migration thread");
    }
    s->started = true;
    *out = s;
    return 0;
}

int mig_sessdest_wait(mig_sessdest_t *s, long long until_ms, ms_error_t *err) {
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    while (s->state != SD_DONE && s->state != SD_ERROR && time_mono_ms() < until_ms)
        time_cond_wait_ms(&s->cv, &s->mu, 100);
    if (s->state == SD_ERROR)
        rc = err_set(err, MS_ERR_OPERATION_FAILED, "%s", s->errmsg);
    else if (s->state != SD_DONE)
        rc = err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT,
                     "session migration did not finish its final pull in time");
    pthread_mutex_unlock(&s->mu);
    return rc;
}

bool mig_sessdest_failed(mig_sessdest_t *s, ms_error_t *err) {
    bool failed;
    pthread_mutex_lock(&s->mu);
    failed = s->state == SD_ERROR;
    if (failed) err_set(err, MS_ERR_OPERATION_FAILED, "%s", s->errmsg);
    pthread_mutex_unlock(&s->mu);
    return failed;
}

void mig_sessdest_kick(mig_sessdest_t *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void mig_sessdest_counts(mig_sessdest_t *s, int64_t *records, int64_t *sentinels) {
    pthread_mutex_lock(&s->mu);
    *records = s->records;
    *sentinels = s->sentinels;
    pthread_mutex_unlock(&s->mu);
}

void mig_sessdest_status(mig_sessdest_t *s, bson_t *out) {
    bson_t doc;
    pthread_mutex_lock(&s->mu);
    BSON_APPEND_DOCUMENT_BEGIN(out, "sessionMigration", &doc);
    BSON_APPEND_UTF8(&doc, "state", sd_state_names[s->state]);
    BSON_APPEND_INT64(&doc, "records", s->records);
    BSON_APPEND_INT64(&doc, "sentinels", s->sentinels);
    BSON_APPEND_INT64(&doc, "batches", s->batches);
    BSON_APPEND_INT64(&doc, "lastSeq", s->after_seq);
    if (s->errmsg[0]) BSON_APPEND_UTF8(&doc, "errmsg", s->errmsg);
    bson_append_document_end(out, &doc);
    pthread_mutex_unlock(&s->mu);
}

void mig_sessdest_free(mig_sessdest_t *s) {
    if (!s) return;
    if (s->started) pthread_join(s->th, NULL);
    buf_free(&s->min_enc);
    buf_free(&s->max_enc);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
