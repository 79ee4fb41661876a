/*
 * test_shardd_xfer.c — unit tests of a migration's write capture (shardd/xfer.c) over a
 * real store on a temp directory: which writes of the range are captured (inserts, updates,
 * deletes in and out of [min, max), an update moving a key out), that ids appear only after
 * COMMIT and never after a ROLLBACK, take / putback order, de-duplication, the memory bound
 * (the capture fails, the user write succeeds), and one capture per store.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "common/bsonx.h"
#include "common/keys.h"
#include "shardd/shardd.h"
#include "tests/unit/t.h"

#define NS "db.c"

/* One document write of a transaction: 'i' insert {_id, k}, 'u' update to {_id, k},
 * 'd' delete; kind 0 ends the list. */
typedef struct wop {
    char kind;
    int id, k;
    const char *ns;   /* NULL = NS */
} wop_t;

typedef struct wtxn {
    const wop_t *ops;
    int fail_rc;      /* non-zero: the callback writes, then returns this (ROLLBACK) */
    xfer_t *x;        /* when set: pending is sampled inside the transaction */
    int64_t seen_inside;
} wtxn_t;

static store_t *open_store(const char *name) {
    char dir[512];
    store_t *st = NULL;
    ms_error_t e;
    store_opts_t so = {0};
    snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
    CHECK_MSG(store_open(dir, &so, &st, &e) == 0, "open: %s", e.msg);
    return st;
}

static int create_sharded_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    const char *ns = arg;
    store_coll_t *c = NULL;
    bool created;
    keys_pattern_t p;
    bson_t spec;
    int rc;
    if ((rc = store_coll_create(t, ns, NULL, &c, &created, err)) != 0) return rc;
    bson_init(&spec);
    BSON_APPEND_INT32(&spec, "k", 1);
    rc = keys_pattern_parse(&spec, &p, err);
    bson_destroy(&spec);
    if (rc != 0) return rc;
    rc = store_coll_set_shard_key(t, c, &p, false, err);
    keys_pattern_free(&p);
    return rc;
}

static void enc_k(int k, buf_t *out) {
    bson_t d;
    bson_iter_t it;
    ms_error_t e;
    bson_init(&d);
    BSON_APPEND_INT32(&d, "k", k);
    bson_iter_init(&it, &d);
    bson_iter_next(&it);
    CHECK_INT(keys_encode_field(out, &it, "k", &e), 0);
    bson_destroy(&d);
}

/* The row id and document of _id id, or 0 when absent (doc initialised only then). */
static int64_t find_id(store_txn_t *t, store_coll_t *c, int id, bson_t *doc) {
    char sql[64];
    sqlite3_stmt *s;
    bson_t d;
    bson_iter_t it;
    buf_t k = {0};
    int64_t rid = 0;
    ms_error_t e;
    bson_init(&d);
    BSON_APPEND_INT32(&d, "_id", id);
    bson_iter_init_find(&it, &d, "_id");
    keys_encode_field(&k, &it, "_id", &e);
    bson_destroy(&d);
    snprintf(sql, sizeof sql, "SELECT rid, doc FROM c%lld WHERE id = ?", (long long)c->id);
    s = store_stmt(t, sql, &e);
    if (s) {
        sqlite3_bind_blob(s, 1, k.data, (int)k.len, SQLITE_STATIC);
        if (sqlite3_step(s) == SQLITE_ROW) {
            rid = sqlite3_column_int64(s, 0);
            bson_init_static(&d, sqlite3_column_blob(s, 1), (size_t)sqlite3_column_bytes(s, 1));
            bson_copy_to(&d, doc);
        }
        sqlite3_reset(s);
    }
    buf_free(&k);
    return rid;
}

static int write_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    wtxn_t *w = arg;
    int rc = 0;
    for (const wop_t *o = w->ops; o->kind && rc == 0; o++) {
        store_coll_t *c = store_coll_get(t, o->ns ? o->ns : NS);
        bson_t nd, od;
        int64_t rid = 0;
        if (!c) return err_set(err, MS_ERR_INTERNAL, "no collection");
        bson_init(&nd);
        BSON_APPEND_INT32(&nd, "_id", o->id);
        BSON_APPEND_INT32(&nd, "k", o->k);
        if (o->kind == 'i') {
            rc = store_write_doc(t, c, 0, NULL, &nd, &rid, NULL, err);
        } else if ((rid = find_id(t, c, o->id, &od)) == 0) {
            rc = err_set(err, MS_ERR_INTERNAL, "no _id %d", o->id);
        } else {
            rc = store_write_doc(t, c, rid, &od, o->kind == 'u' ? &nd : NULL, NULL, NULL, err);
            bson_destroy(&od);
        }
        bson_destroy(&nd);
    }
    if (w->x) {
        int64_t a, b, bytes;
        xfer_pending(w->x, &a, &b, &bytes);
        w->seen_inside = a + b;
    }
    if (rc == 0 && w->fail_rc) rc = err_set(err, w->fail_rc, "test rolls back");
    return rc;
}

static int run(store_t *st, const wop_t *ops) {
    wtxn_t w = {ops, 0, NULL, 0};
    ms_error_t e;
    int rc = store_write(st, write_fn, &w, &e);
    CHECK_MSG(rc == 0, "write: %s", e.msg);
    return rc;
}

/* A store with NS sharded on {k: 1} and a capture of k in [10, 20). */
static store_t *setup(const char *name, size_t bytes_max, xfer_t **x) {
    store_t *st = open_store(name);
    ms_error_t e;
    buf_t mn = {0}, mx = {0};
    *x = NULL;
    if (!st) return NULL;
    CHECK_INT(store_ddl(st, create_sharded_fn, NS, &e), 0);
    CHECK_INT(store_ddl(st, create_sharded_fn, "db.other", &e), 0);
    enc_k(10, &mn);
    enc_k(20, &mx);
    CHECK_MSG(xfer_start(st, NS, &mn, &mx, bytes_max, x, &e) == 0, "start: %s", e.msg);
    buf_free(&mn);
    buf_free(&mx);
    return st;
}

/* The _id (int) of a captured {_id: n}. */
static int id_of(const buf_t *b) {
    bson_t d;
    bson_iter_t it;
    if (!bson_init_static(&d, b->data, b->len) || !bson_iter_init_find(&it, &d, "_id")) return -1;
    return bson_iter_int32(&it);
}

/* "1,2,3" of a list, for compact checks. */
static const char *ids_str(const buf_t *v, int n, char *out, size_t cap) {
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%d", i ? "," : "", id_of(&v[i]));
    return out;
}

static void take_all(xfer_t *x, char *dels, char *reloads) {
    buf_t *d, *r;
    int nd, nr;
    xfer_take(x, SIZE_MAX, &d, &nd, &r, &nr);
    ids_str(d, nd, dels, 256);
    ids_str(r, nr, reloads, 256);
    xfer_ids_free(d, nd);
    xfer_ids_free(r, nr);
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_capture_in_and_out_of_range(void) {
    xfer_t *x;
    store_t *st = setup("range", MS_MIG_CAPTURE_BYTES_MAX, &x);
    char d[256], r[256];
    static const wop_t seed[] = {{'i', 1, 5, NULL}, {'i', 2, 15, NULL}, {'i', 3, 25, NULL},
                                 {'i', 4, 10, NULL}, {'i', 5, 20, NULL}, {'i', 6, 12, NULL},
                                 {'i', 7, 13, "db.other"}, {0, 0, 0, NULL}};
    static const wop_t mods[] = {
        {'u', 2, 16, NULL},          /* in → in: reload */
        {'u', 4, 30, NULL},          /* in → out: deleted */
        {'u', 3, 11, NULL},          /* out → in: reload */
        {'u', 1, 7, NULL},           /* out → out: nothing */
        {'d', 6, 0, NULL},           /* delete in range: deleted */
        {'d', 5, 0, NULL},           /* delete at max (excluded): nothing */
        {'u', 7, 14, "db.other"},    /* another collection: nothing */
        {0, 0, 0, NULL}};
    if (!st) return;
    run(st, seed);
    take_all(x, d, r);
    CHECK_STR(d, "");
    CHECK_STR(r, "2,4,6");   /* inserts at 15, 10 (min is inside), 12 */
    run(st, mods);
    take_all(x, d, r);
    CHECK_STR(d, "4,6");
    CHECK_STR(r, "2,3");
    take_all(x, d, r);
    CHECK_STR(d, "");
    CHECK_STR(r, "");
    xfer_stop(st, x);
    store_close(st);
}

static void test_rollback_publishes_nothing(void) {
    xfer_t *x;
    store_t *st = setup("rollback", MS_MIG_CAPTURE_BYTES_MAX, &x);
    static const wop_t ins[] = {{'i', 1, 15, NULL}, {'i', 2, 16, NULL}, {0, 0, 0, NULL}};
    static const wop_t mod[] = {{'u', 1, 17, NULL}, {'d', 2, 0, NULL}, {'i', 3, 18, NULL},
                                {0, 0, 0, NULL}};
    wtxn_t w = {ins, MS_ERR_BAD_VALUE, NULL, 0};
    int64_t nd, nr, bytes;
    char d[256], r[256];
    ms_error_t e;
    if (!st) return;
    CHECK_INT(store_write(st, write_fn, &w, &e), MS_ERR_BAD_VALUE);
    xfer_pending(x, &nd, &nr, &bytes);
    CHECK_INT(nd + nr, 0);
    CHECK_INT(bytes, 0);
    run(st, ins);
    take_all(x, d, r);
    CHECK_STR(r, "1,2");
    w.ops = mod;
    CHECK_INT(store_write(st, write_fn, &w, &e), MS_ERR_BAD_VALUE);
    take_all(x, d, r);
    CHECK_STR(d, "");
    CHECK_STR(r, "");
    xfer_stop(st, x);
    store_close(st);
}

static void test_ids_visible_only_after_commit(void) {
    xfer_t *x;
    store_t *st = setup("commit", MS_MIG_CAPTURE_BYTES_MAX, &x);
    static const wop_t ins[] = {{'i', 1, 15, NULL}, {'i', 2, 16, NULL}, {0, 0, 0, NULL}};
    wtxn_t w = {ins, 0, NULL, -1};
    int64_t nd, nr, bytes;
    ms_error_t e;
    if (!st) return;
    w.x = x;
    CHECK_INT(store_write(st, write_fn, &w, &e), 0);
    CHECK_INT(w.seen_inside, 0);       /* captured, not yet published */
    xfer_pending(x, &nd, &nr, &bytes);
    CHECK_INT(nd, 0);
    CHECK_INT(nr, 2);
    CHECK_INT(bytes, 2 * 14);          /* {_id: int32} is 14 bytes */
    xfer_stop(st, x);
    store_close(st);
}

static void test_take_order_and_putback(void) {
    xfer_t *x;
    store_t *st = setup("order", MS_MIG_CAPTURE_BYTES_MAX, &x);
    static const wop_t ins[] = {{'i', 1, 11, NULL}, {'i', 2, 12, NULL}, {'i', 3, 13, NULL},
                                {'i', 4, 14, NULL}, {'i', 5, 15, NULL}, {0, 0, 0, NULL}};
    static const wop_t dels[] = {{'d', 1, 0, NULL}, {'d', 2, 0, NULL}, {'d', 3, 0, NULL},
                                 {0, 0, 0, NULL}};
    static const wop_t more[] = {{'i', 6, 16, NULL}, {'d', 4, 0, NULL}, {0, 0, 0, NULL}};
    buf_t *d, *r;
    int nd, nr;
    char ds[256], rs[256];
    if (!st) return;
    run(st, ins);
    xfer_take(x, SIZE_MAX, &d, &nd, &r, &nr);   /* clear the inserts */
    xfer_ids_free(d, nd);
    xfer_ids_free(r, nr);
    run(st, (const wop_t[]){{'u', 5, 17, NULL}, {0, 0, 0, NULL}});
    run(st, dels);
    /* 2 ids of 14 bytes fit in 30: deletes first, no reload while a delete waits. */
    xfer_take(x, 30, &d, &nd, &r, &nr);
    CHECK_STR(ids_str(d, nd, ds, sizeof ds), "1,2");
    CHECK_INT(nr, 0);
    /* Put back, then more captured: the put-back ids go first. */
    run(st, more);
    xfer_putback(x, d, nd, r, nr);
    xfer_take(x, 1, &d, &nd, &r, &nr);           /* at least one, even over the budget */
    CHECK_STR(ids_str(d, nd, ds, sizeof ds), "1");
    CHECK_INT(nr, 0);
    xfer_putback(x, d, nd, r, nr);
    xfer_take(x, SIZE_MAX, &d, &nd, &r, &nr);
    CHECK_STR(ids_str(d, nd, ds, sizeof ds), "1,2,3,4");
    CHECK_STR(ids_str(r, nr, rs, sizeof rs), "5,6");
    /* Reloads come after every delete fit, in the rest of the budget. */
    xfer_putback(x, d, nd, r, nr);
    xfer_take(x, 14 * 5, &d, &nd, &r, &nr);
    CHECK_STR(ids_str(d, nd, ds, sizeof ds), "1,2,3,4");
    CHECK_STR(ids_str(r, nr, rs, sizeof rs), "5");
    xfer_ids_free(d, nd);
    xfer_ids_free(r, nr);
    take_all(x, ds, rs);
    CHECK_STR(ds, "");
    CHECK_STR(rs, "6");
    xfer_stop(st, x);
    store_close(st);
}

static void test_dedup(void) {
    xfer_t *x;
    store_t *st = setup("dedup", MS_MIG_CAPTURE_BYTES_MAX, &x);
    static const wop_t a[] = {{'i', 1, 15, NULL}, {'u', 1, 16, NULL}, {'u', 1, 17, NULL},
                              {'i', 2, 18, NULL}, {0, 0, 0, NULL}};
    static const wop_t b[] = {{'u', 1, 18, NULL}, {'u', 2, 19, NULL}, {0, 0, 0, NULL}};
    buf_t *d, *r;
    int nd, nr;
    int64_t pd, pr, bytes;
    char ds[256], rs[256];
    if (!st) return;
    run(st, a);
    run(st, b);
    xfer_pending(x, &pd, &pr, &bytes);
    CHECK_INT(pr, 2);
    CHECK_INT(bytes, 28);
    xfer_take(x, SIZE_MAX, &d, &nd, &r, &nr);
    CHECK_STR(ids_str(r, nr, rs, sizeof rs), "1,2");
    /* Captured again while out, then put back: held once. */
    run(st, (const wop_t[]){{'u', 2, 11, NULL}, {0, 0, 0, NULL}});
    xfer_putback(x, d, nd, r, nr);
    xfer_pending(x, &pd, &pr, &bytes);
    CHECK_INT(pr, 2);
    CHECK_INT(bytes, 28);
    take_all(x, ds, rs);
    CHECK_STR(rs, "1,2");
    xfer_stop(st, x);
    store_close(st);
}

static int count_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    int64_t *n = arg, bytes, sb, ib;
    return store_coll_stats(t, store_coll_get(t, NS), n, &bytes, &sb, &ib, err);
}

static void test_bound_fails_capture_not_write(void) {
    xfer_t *x;
    store_t *st = setup("bound", 14 * 3, &x);   /* three ids fit */
    static const wop_t a[] = {{'i', 1, 11, NULL}, {'i', 2, 12, NULL}, {'i', 3, 13, NULL},
                              {0, 0, 0, NULL}};
    static const wop_t b[] = {{'i', 4, 14, NULL}, {'i', 5, 15, NULL}, {0, 0, 0, NULL}};
    int64_t pd, pr, bytes, n = 0;
    ms_error_t e;
    char ds[256], rs[256];
    if (!st) return;
    run(st, a);
    CHECK_INT(xfer_failed(x, &e), 0);
    CHECK_INT(run(st, b), 0);                      /* the write itself succeeds */
    CHECK_INT(xfer_failed(x, &e), MS_ERR_EXCEEDED_MEMORY_LIMIT);
    CHECK_MSG(strstr(e.msg, "MS_MIG_CAPTURE_BYTES_MAX") != NULL, "msg: %s", e.msg);
    xfer_pending(x, &pd, &pr, &bytes);
    CHECK_INT(pd + pr, 0);                          /* holds nothing more */
    CHECK_INT(bytes, 0);
    run(st, (const wop_t[]){{'i', 6, 16, NULL}, {0, 0, 0, NULL}});
    take_all(x, ds, rs);
    CHECK_STR(rs, "");
    CHECK_INT(store_read(st, count_fn, &n, &e), 0);
    CHECK_INT(n, 6);
    xfer_stop(st, x);
    store_close(st);
}

static void test_one_capture_per_store(void) {
    xfer_t *x, *y = NULL;
    store_t *st = setup("one", MS_MIG_CAPTURE_BYTES_MAX, &x);
    buf_t mn = {0}, mx = {0};
    ms_error_t e;
    if (!st) return;
    enc_k(0, &mn);
    enc_k(5, &mx);
    CHECK_INT(xfer_start(st, NS, &mn, &mx, 1000, &y, &e), MS_ERR_CONFLICTING_OPERATION);
    CHECK(y == NULL);
    xfer_stop(st, x);
    xfer_stop(st, NULL);
    CHECK_INT(xfer_start(st, NS, &mn, &mx, 1000, &y, &e), 0);
    run(st, (const wop_t[]){{'i', 1, 3, NULL}, {0, 0, 0, NULL}});
    {
        int64_t pd, pr, bytes;
        xfer_pending(y, &pd, &pr, &bytes);
        CHECK_INT(pr, 1);
    }
    xfer_stop(st, y);
    buf_free(&mn);
    buf_free(&mx);
    store_close(st);
}

T_MAIN(T_CASE(test_capture_in_and_out_of_range), T_CASE(test_rollback_publishes_nothing),
       T_CASE(test_ids_visible_only_after_commit), T_CASE(test_take_order_and_putback),
       T_CASE(test_dedup), T_CASE(test_bound_fails_capture_not_write),
       T_CASE(test_one_capture_per_store))
