/*
 * test_shardd_sessions.c — unit tests of the shard's retryable-write records
 * (shardd/sessions.c) on a temporary store: a recorded statement is found with its result
 * (also after a reopen), a rolled-back write leaves no record, older txnNumbers are
 * TransactionTooOld, a newer one drops the older records, incomplete history answers 217
 * only for statements not found (also past the statement cap), expiry removes old sessions
 * in bounded batches, seq is never given out twice, and the
 * session-migration pair: sess_scan_range by key range and seq, sess_apply_migrated's
 * three cases, and the config.transactions view.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "shardd/sessions.h"
#include "tests/unit/t.h"
#include "tests/unit/t_store.h"

/* What one transaction function is asked to do, and what it saw. */
typedef struct sa {
    bson_t lsid;
    int64_t txn;
    int32_t stmt;
    const char *ns;
    const uint8_t *key;
    size_t keylen;
    int n_result;           /* the recorded result is {n: n_result} */
    bool fail_after;        /* the transaction fails after recording: rolled back */
    bool found;
    int64_t got_n;
    int32_t cap_n;          /* scan: records seen */
    int64_t seqs[16];
    bson_t recs[16];
    int removed;
} sa_t;

static void lsid_of(int i, bson_t *out) {
    uint8_t id[16] = {0};
    id[15] = (uint8_t)i;
    id[0] = 0x5e;
    bson_init(out);
    BSON_APPEND_BINARY(out, "id", BSON_SUBTYPE_UUID, id, sizeof id);
}

static int begin_record_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sa_t *a = arg;
    bson_t res = BSON_INITIALIZER;
    int rc = sess_txn_begin(t, &a->lsid, a->txn, err);
    BSON_APPEND_INT32(&res, "n", a->n_result);
    if (rc == 0)
        rc = sess_stmt_record(t, &a->lsid, a->txn, a->stmt, a->ns ? a->ns : "db.c", a->key,
                              a->keylen, &res, err);
    bson_destroy(&res);
    if (rc == 0 && a->fail_after) rc = err_set(err, MS_ERR_BAD_VALUE, "rolled back on purpose");
    return rc;
}

static int begin_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sa_t *a = arg;
    return sess_txn_begin(t, &a->lsid, a->txn, err);
}

static int lookup_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sa_t *a = arg;
    bson_t res;
    bson_iter_t it;
    int rc = sess_stmt_lookup(t, &a->lsid, a->txn, a->stmt, &res, &a->found, err);
    a->got_n = -1;
    if (rc == 0 && a->found) {
        if (bson_iter_init_find(&it, &res, "n")) bsonx_as_int64(&it, &a->got_n);
        bson_destroy(&res);
    }
    return rc;
}

static int mark_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sa_t *a = arg;
    return sess_mark_incomplete(t, &a->lsid, a->txn, err);
}

static int record(store_t *st, int sess, int64_t txn, int32_t stmt, int n) {
    sa_t a = {.txn = txn, .stmt = stmt, .n_result = n};
    ms_error_t e = {0};
    lsid_of(sess, &a.lsid);
    int rc = store_write(st, begin_record_fn, &a, &e);
    bson_destroy(&a.lsid);
    return rc;
}

/* 0 and *n = the recorded n when found (-1 when not), or the lookup's error code. */
static int lookup(store_t *st, int sess, int64_t txn, int32_t stmt, int64_t *n) {
    sa_t a = {.txn = txn, .stmt = stmt};
    ms_error_t e = {0};
    lsid_of(sess, &a.lsid);
    int rc = store_read(st, lookup_fn, &a, &e);
    *n = rc == 0 && a.found ? a.got_n : -1;
    bson_destroy(&a.lsid);
    return rc;
}

static void test_record_then_lookup(void) {
    store_t *st = open_at("rl");
    int64_t n;
    CHECK_INT(record(st, 1, 5, 0, 1), 0);
    CHECK_INT(record(st, 1, 5, 1, 7), 0);
    CHECK_INT(lookup(st, 1, 5, 0, &n), 0);
    CHECK_INT(n, 1);
    CHECK_INT(lookup(st, 1, 5, 1, &n), 0);
    CHECK_INT(n, 7);
    CHECK_INT(lookup(st, 1, 5, 2, &n), 0);   /* not run yet: runs */
    CHECK_INT(n, -1);
    CHECK_INT(lookup(st, 2, 5, 0, &n), 0);   /* another session */
    CHECK_INT(n, -1);
    CHECK_INT(lookup(st, 1, 6, 0, &n), 0);   /* a newer txn: nothing ran */
    CHECK_INT(n, -1);
    CHECK_INT(record(st, 1, 5, 1, 99), 0);   /* a record never changes */
    CHECK_INT(lookup(st, 1, 5, 1, &n), 0);
    CHECK_INT(n, 7);
    store_close(st);
    st = open_at("rl");                      /* persisted */
    CHECK_INT(lookup(st, 1, 5, 1, &n), 0);
    CHECK_INT(n, 7);
    store_close(st);
}

static void test_rollback_leaves_no_record(void) {
    store_t *st = open_at("rb");
    sa_t a = {.txn = 3, .stmt = 0, .n_result = 1, .fail_after = true};
    ms_error_t e = {0};
    int64_t n;
    lsid_of(1, &a.lsid);
    CHECK_INT(store_write(st, begin_record_fn, &a, &e), MS_ERR_BAD_VALUE);
    CHECK_INT(lookup(st, 1, 3, 0, &n), 0);
    CHECK_INT(n, -1);
    bson_destroy(&a.lsid);
    store_close(st);
}

static void test_too_old_and_newer(void) {
    store_t *st = open_at("old");
    sa_t a = {.txn = 4};
    ms_error_t e = {0};
    int64_t n;
    CHECK_INT(record(st, 1, 5, 0, 1), 0);
    lsid_of(1, &a.lsid);
    CHECK_INT(store_write(st, begin_fn, &a, &e), MS_ERR_TRANSACTION_TOO_OLD);
    CHECK_INT(lookup(st, 1, 4, 0, &n), MS_ERR_TRANSACTION_TOO_OLD);
    a.txn = 5;
    CHECK_INT(store_write(st, begin_fn, &a, &e), 0);   /* equal: stays */
    CHECK_INT(lookup(st, 1, 5, 0, &n), 0);
    CHECK_INT(n, 1);
    CHECK_INT(record(st, 1, 6, 0, 2), 0);              /* newer: older records go */
    CHECK_INT(lookup(st, 1, 5, 0, &n), MS_ERR_TRANSACTION_TOO_OLD);
    CHECK_INT(lookup(st, 1, 6, 0, &n), 0);
    CHECK_INT(n, 2);
    bson_destroy(&a.lsid);
    store_close(st);
}

static void test_incomplete(void) {
    store_t *st = open_at("inc");
    sa_t a = {.txn = 5};
    ms_error_t e = {0};
    int64_t n;
    CHECK_INT(record(st, 1, 5, 0, 1), 0);
    lsid_of(1, &a.lsid);
    CHECK_INT(store_write(st, mark_fn, &a, &e), 0);
    CHECK_INT(lookup(st, 1, 5, 0, &n), 0);            /* found: still answered */
    CHECK_INT(n, 1);
    CHECK_INT(lookup(st, 1, 5, 1, &n), MS_ERR_INCOMPLETE_TRANSACTION_HISTORY);
    CHECK_INT(lookup(st, 1, 6, 0, &n), 0);            /* a newer txn is not affected */
    CHECK_INT(record(st, 1, 6, 0, 3), 0);             /* and clears the mark */
    CHECK_INT(lookup(st, 1, 6, 1, &n), 0);
    CHECK_INT(n, -1);
    a.txn = 5;                                        /* older than the session: ignored */
    CHECK_INT(store_write(st, mark_fn, &a, &e), 0);
    CHECK_INT(lookup(st, 1, 6, 1, &n), 0);
    a.txn = 9;                                        /* unknown session txn: marked */
    bson_destroy(&a.lsid);
    lsid_of(2, &a.lsid);
    CHECK_INT(store_write(st, mark_fn, &a, &e), 0);
    CHECK_INT(lookup(st, 2, 9, 0, &n), MS_ERR_INCOMPLETE_TRANSACTION_HISTORY);
    CHECK_INT(lookup(st, 2, 8, 0, &n), MS_ERR_TRANSACTION_TOO_OLD);
    bson_destroy(&a.lsid);
    store_close(st);
}

/* Over the statement cap (checked when a command starts on the same txn) the oldest record
 * goes and the history is marked incomplete: its retry answers 217, the kept ones answer. */
static void test_cap_marks_incomplete(void) {
    store_t *st = open_at("cap");
    sa_t a = {.txn = 1};
    ms_error_t e = {0};
    int64_t n;
    sess_set_stmts_max(2);
    for (int i = 0; i < 3; i++) CHECK_INT(record(st, 1, 1, i, 10 + i), 0);
    lsid_of(1, &a.lsid);
    CHECK_INT(store_write(st, begin_fn, &a, &e), 0);   /* the next command on txn 1 trims */
    CHECK_INT(lookup(st, 1, 1, 0, &n), MS_ERR_INCOMPLETE_TRANSACTION_HISTORY);
    CHECK_INT(lookup(st, 1, 1, 2, &n), 0);
    CHECK_INT(n, 12);
    CHECK_INT(lookup(st, 1, 1, 7, &n), MS_ERR_INCOMPLETE_TRANSACTION_HISTORY);
    sess_set_stmts_max(0);   /* back to the default */
    bson_destroy(&a.lsid);
    store_close(st);
}

static int expire_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sa_t *a = arg;
    return sess_expire(t, a->txn, a->stmt, &a->removed, err);
}

static void test_expiry(void) {
    store_t *st = open_at("exp");
    sa_t a = {.stmt = 2};
    ms_error_t e = {0};
    int64_t n;
    for (int s = 1; s <= 5; s++) CHECK_INT(record(st, s, 1, 0, s), 0);
    a.txn = 0;   /* cutoff in the past: nothing goes */
    CHECK_INT(store_write(st, expire_fn, &a, &e), 0);
    CHECK_INT(a.removed, 0);
    t_sleep_ms(5);
    a.txn = (int64_t)time(NULL) * 1000 + 1000;   /* every session older: two per batch */
    CHECK_INT(store_write(st, expire_fn, &a, &e), 0);
    CHECK_INT(a.removed, 2);
    CHECK_INT(store_write(st, expire_fn, &a, &e), 0);
    CHECK_INT(a.removed, 2);
    CHECK_INT(store_write(st, expire_fn, &a, &e), 0);
    CHECK_INT(a.removed, 1);
    CHECK_INT(store_write(st, expire_fn, &a, &e), 0);
    CHECK_INT(a.removed, 0);
    for (int s = 1; s <= 5; s++) {   /* records gone with their sessions */
        CHECK_INT(lookup(st, s, 1, 0, &n), 0);
        CHECK_INT(n, -1);
    }
    store_close(st);
}

/* ---- session migration ---------------------------------------------------------------- */

static int scan_cb(void *arg, const bson_t *rec, int64_t seq, ms_error_t *err) {
    sa_t *a = arg;
    (void)err;
    if (a->cap_n < 16) {
        a->seqs[a->cap_n] = seq;
        bson_copy_to(rec, &a->recs[a->cap_n]);
    }
    a->cap_n++;
    return 0;
}

typedef struct scan_args {
    sa_t *a;
    const uint8_t *min, *max;
    size_t minlen, maxlen;
    int64_t after;
    int limit;
} scan_args_t;

static int range_scan_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    scan_args_t *s = arg;
    return sess_scan_range(t, "db.c", s->min, s->minlen, s->max, s->maxlen, s->after, s->limit,
                           scan_cb, s->a, err);
}

static int record_key(store_t *st, int sess, int64_t txn, int32_t stmt, const char *ns,
                      const char *key, int n) {
    sa_t a = {.txn = txn, .stmt = stmt, .n_result = n, .ns = ns, .key = (const uint8_t *)key,
              .keylen = key ? strlen(key) : 0};
    ms_error_t e = {0};
    lsid_of(sess, &a.lsid);
    int rc = store_write(st, begin_record_fn, &a, &e);
    bson_destroy(&a.lsid);
    return rc;
}

static void free_recs(sa_t *a) {
    for (int i = 0; i < a->cap_n && i < 16; i++) bson_destroy(&a->recs[i]);
    a->cap_n = 0;
}

static void test_scan_range(void) {
    store_t *st = open_at("scan");
    sa_t a = {0};
    ms_error_t e = {0};
    CHECK_INT(record_key(st, 1, 1, 0, "db.c", "b", 1), 0);
    CHECK_INT(record_key(st, 2, 1, 0, "db.c", "d", 2), 0);
    CHECK_INT(record_key(st, 3, 1, 0, "db.c", NULL, 3), 0);   /* no key: never migrates */
    CHECK_INT(record_key(st, 4, 1, 0, "db.other", "b", 4), 0);
    CHECK_INT(record_key(st, 1, 1, 1, "db.c", "c", 5), 0);
    CHECK_INT(record_key(st, 5, 1, 0, "db.c", "e", 6), 0);     /* at max: outside */
    scan_args_t s = {&a, (const uint8_t *)"b", (const uint8_t *)"e", 1, 1, 0, 100};
    CHECK_INT(store_read(st, range_scan_fn, &s, &e), 0);
    CHECK_INT(a.cap_n, 3);                                     /* b, d, c in seq order */
    CHECK(a.seqs[0] < a.seqs[1] && a.seqs[1] < a.seqs[2]);
    {
        bson_iter_t it;
        int64_t txn = 0;
        CHECK(bson_iter_init_find(&it, &a.recs[0], "lsid") && BSON_ITER_HOLDS_DOCUMENT(&it));
        CHECK(bson_iter_init_find(&it, &a.recs[0], "txnNumber") && bsonx_as_int64(&it, &txn));
        CHECK_INT(txn, 1);
        CHECK(bson_iter_init_find(&it, &a.recs[2], "stmtId") && bson_iter_int32(&it) == 1);
        CHECK(bson_iter_init_find(&it, &a.recs[1], "ns") &&
              strcmp(bson_iter_utf8(&it, NULL), "db.c") == 0);
        CHECK(bson_iter_init_find(&it, &a.recs[1], "key") && BSON_ITER_HOLDS_BINARY(&it));
        CHECK(bson_iter_init_find(&it, &a.recs[1], "result") && BSON_ITER_HOLDS_DOCUMENT(&it));
        CHECK(bson_iter_init_find(&it, &a.recs[1], "lastWriteDate") &&
              BSON_ITER_HOLDS_DATE_TIME(&it));
        CHECK(bson_iter_init_find(&it, &a.recs[1], "seq") && bson_iter_int64(&it) == a.seqs[1]);
    }
    int64_t second = a.seqs[0];
    free_recs(&a);
    s.after = second;                                          /* resume after a seq */
    CHECK_INT(store_read(st, range_scan_fn, &s, &e), 0);
    CHECK_INT(a.cap_n, 2);
    free_recs(&a);
    s.after = 0;
    s.limit = 1;                                               /* bounded */
    CHECK_INT(store_read(st, range_scan_fn, &s, &e), 0);
    CHECK_INT(a.cap_n, 1);
    free_recs(&a);
    store_close(st);
}

/* A session moving on deletes its older records; the seq of a new record is still above
 * every seq given out before (sess_scan_range's after_seq must never skip a record). */
static void test_seq_never_reused(void) {
    store_t *st = open_at("seq");
    sa_t a = {0};
    ms_error_t e = {0};
    int64_t last = 0;
    for (int txn = 1; txn <= 4; txn++) {
        CHECK_INT(record_key(st, 1, txn, 0, "db.c", "b", txn), 0);
        scan_args_t s = {&a, (const uint8_t *)"a", (const uint8_t *)"z", 1, 1, last, 100};
        CHECK_INT(store_read(st, range_scan_fn, &s, &e), 0);
        CHECK_INT(a.cap_n, 1);                  /* exactly the new record, above `last` */
        CHECK(a.seqs[0] > last);
        last = a.seqs[0];
        free_recs(&a);
    }
    int64_t n;
    CHECK_INT(lookup(st, 1, 4, 0, &n), 0);
    CHECK_INT(n, 4);
    store_close(st);
}

static bool g_apply_memo;   /* apply_fn carries a memo from record to record */

static int apply_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sa_t *a = arg;
    sess_apply_memo_t memo = {0};
    int rc = 0;
    for (int i = 0; i < a->cap_n && rc == 0; i++)
        rc = sess_apply_migrated(t, &a->recs[i], g_apply_memo ? &memo : NULL, err);
    sess_apply_memo_free(&memo);
    return rc;
}

/* The same records applied one by one, or with a memo (two of session 1's txn 7 kept,
 * two of session 2's txn 3 ignored in a row): the same rows either way. */
static void apply_migrated_case(bool with_memo, const char *don, const char *rcp) {
    store_t *donor = open_at(don), *rcpt = open_at(rcp);
    sa_t a = {0};
    ms_error_t e = {0};
    int64_t n;
    CHECK_INT(record_key(donor, 1, 7, 0, "db.c", "k1", 11), 0);
    CHECK_INT(record_key(donor, 1, 7, 1, "db.c", "k2", 12), 0);
    CHECK_INT(record_key(donor, 2, 3, 0, "db.c", "k3", 13), 0);
    CHECK_INT(record_key(donor, 2, 3, 1, "db.c", "k5", 15), 0);
    CHECK_INT(record_key(donor, 3, 4, 0, "db.c", "k4", 14), 0);
    /* recipient: session 2 already newer (record ignored), session 3 older (moves on) */
    CHECK_INT(record_key(rcpt, 2, 5, 0, "db.c", "x", 21), 0);
    CHECK_INT(record_key(rcpt, 3, 2, 0, "db.c", "y", 22), 0);
    scan_args_t s = {&a, (const uint8_t *)"k", (const uint8_t *)"l", 1, 1, 0, 100};
    CHECK_INT(store_read(donor, range_scan_fn, &s, &e), 0);
    CHECK_INT(a.cap_n, 5);
    g_apply_memo = with_memo;
    CHECK_INT(store_write(rcpt, apply_fn, &a, &e), 0);
    CHECK_INT(store_write(rcpt, apply_fn, &a, &e), 0);    /* idempotent */
    CHECK_INT(lookup(rcpt, 1, 7, 0, &n), 0);
    CHECK_INT(n, 11);
    CHECK_INT(lookup(rcpt, 1, 7, 1, &n), 0);
    CHECK_INT(n, 12);
    CHECK_INT(lookup(rcpt, 2, 3, 0, &n), MS_ERR_TRANSACTION_TOO_OLD);
    CHECK_INT(lookup(rcpt, 2, 5, 0, &n), 0);
    CHECK_INT(n, 21);
    CHECK_INT(lookup(rcpt, 3, 4, 0, &n), 0);
    CHECK_INT(n, 14);
    CHECK_INT(lookup(rcpt, 3, 2, 0, &n), MS_ERR_TRANSACTION_TOO_OLD);
    g_apply_memo = false;
    free_recs(&a);
    store_close(donor);
    store_close(rcpt);
}

static void test_apply_migrated(void) { apply_migrated_case(false, "don", "rcp"); }
static void test_apply_migrated_memo(void) { apply_migrated_case(true, "donm", "rcpm"); }

static int docs_cb(void *arg, const bson_t *doc) {
    sa_t *a = arg;
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_init_find(&it, doc, "txnNum") && BSON_ITER_HOLDS_INT64(&it) &&
        bson_iter_init_find(&it, doc, "lastWriteDate") && BSON_ITER_HOLDS_DATE_TIME(&it) &&
        bson_iter_init_find(&it, doc, "lastWriteOpTime"))
        a->cap_n++;
    return 0;
}

static int docs_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    return sess_txn_docs(t, docs_cb, arg, err);
}

static void test_txn_docs(void) {
    store_t *st = open_at("docs");
    sa_t a = {0};
    ms_error_t e = {0};
    CHECK_INT(record(st, 1, 5, 0, 1), 0);
    CHECK_INT(record(st, 2, 9, 0, 1), 0);
    CHECK_INT(store_read(st, docs_fn, &a, &e), 0);
    CHECK_INT(a.cap_n, 2);
    store_close(st);
}

T_MAIN(T_CASE(test_record_then_lookup), T_CASE(test_rollback_leaves_no_record),
       T_CASE(test_too_old_and_newer), T_CASE(test_incomplete), T_CASE(test_cap_marks_incomplete), T_CASE(test_expiry),
       T_CASE(test_scan_range), T_CASE(test_seq_never_reused),
       T_CASE(test_apply_migrated), T_CASE(test_apply_migrated_memo), T_CASE(test_txn_docs))
