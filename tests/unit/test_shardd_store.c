/*
 * test_shardd_store.c — unit tests of the shard daemon's storage layer (shardd/store.c,
 * shardd/plan.c) on real SQLite files in a temp directory: CRUD through the single write
 * path, E11000 shapes, secondary indexes incl. multikey and unique, parallel arrays, the
 * planner's choices, shard-key filling, persistence across reopen, and crash atomicity of
 * a write transaction (a forked child dies mid-batch), the 16 MB batch rule, pinned
 * cursors (CursorInUse), and a document failed by the hangBeforeWriteObserver failpoint
 * rolled back alone, and the fast counts against a scan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/mem.h"
#include "shardd/store_priv.h"
#include "tests/unit/t.h"

static char dirbuf[512];

static const char *fresh_dir(const char *name) {
    snprintf(dirbuf, sizeof dirbuf, "%s/%s", t_tmpdir(), name);
    return dirbuf;
}

static bson_t *J(const char *json) {
    bson_t *b = mem_calloc_aligned(1, sizeof *b);
    ms_error_t e;
    if (bsonx_from_json(json, b, &e) != 0) {
        t_fail(__FILE__, __LINE__, "bad json %s: %s", json, e.msg);
        bson_init(b);
    }
    return b;
}

static void Jfree(bson_t *b) {
    bson_destroy(b);
    free(b);
}

/* ---- small drivers ----------------------------------------------------------------- */

typedef struct op {
    const char *ns;
    const char *json;      /* document, index spec or filter */
    const char *json2;     /* sort */
    int rc;
    ms_error_t err;
    bson_t info;
    int64_t n;
    char plan_ix[128];
    int plan_kind;
    bool blocking;
    int64_t ids[64];       /* _id ints of matches, in order */
} op_t;

static int create_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    op_t *o = arg;
    return store_coll_create(t, o->ns, NULL, NULL, NULL, err);
}

static int index_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    op_t *o = arg;
    store_coll_t *c;
    bson_t *spec = J(o->json);
    bool existed;
    int rc = store_coll_create(t, o->ns, NULL, &c, NULL, err);
    if (rc == 0) rc = store_index_create(t, c, spec, &existed, err);
    o->n = existed;
    Jfree(spec);
    return rc;
}

static int insert_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    op_t *o = arg;
    store_coll_t *c = store_coll_get(t, o->ns);
    bson_t *d = J(o->json);
    int64_t rid;
    int rc;
    bson_init(&o->info);
    rc = store_write_doc(t, c, 0, NULL, d, &rid, &o->info, err);
    Jfree(d);
    return rc;
}

static int do_insert(store_t *st, const char *ns, const char *json, op_t *o) {
    memset(o, 0, sizeof *o);
    o->ns = ns;
    o->json = json;
    o->rc = store_write(st, insert_fn, o, &o->err);
    return o->rc;
}

static int find_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    op_t *o = arg;
    store_coll_t *c = store_coll_get(t, o->ns);
    bson_t *f = J(o->json), *s = o->json2 ? J(o->json2) : NULL;
    query_t *q = NULL;
    sortspec_t *ss = NULL;
    plan_query_t eq;
    plan_t p;
    int64_t *rids = NULL;
    size_t n = 0;
    int rc;
    memset(&eq, 0, sizeof eq);
    if (!c) {
        rc = err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "no coll");
        goto out;
    }
    if ((rc = query_compile(f, &q, err)) != 0) goto out;
    if (s && (rc = sortspec_compile(s, &ss, err)) != 0) goto out;
    eq.filter = f;
    eq.q = q;
    eq.sort = ss;
    if ((rc = plan_choose(t, c, &eq, &p, err)) != 0) goto out;
    o->plan_kind = p.kind;
    snprintf(o->plan_ix, sizeof o->plan_ix, "%s", p.kind == PLAN_IXSCAN ? p.ix_name : "");
    o->blocking = p.blocking_sort;
    plan_free(&p);
    if ((rc = plan_match_rowids(t, c, &eq, &rids, &n, err)) != 0) goto out;
    o->n = (int64_t)n;
    for (size_t i = 0; i < n && i < 64; i++) {
        bson_t doc;
        bson_iter_t it;
        if (store_get_by_rowid(t, c, rids[i], &doc, err) != 0) continue;
        if (bson_iter_init_find(&it, &doc, "_id")) bsonx_as_int64(&it, &o->ids[i]);
        bson_destroy(&doc);
    }
out:
    free(rids);
    query_free(q);
    sortspec_free(ss);
    Jfree(f);
    if (s) Jfree(s);
    return rc;
}

static void do_find(store_t *st, const char *ns, const char *filter, const char *sort, op_t *o) {
    memset(o, 0, sizeof *o);
    o->ns = ns;
    o->json = filter;
    o->json2 = sort;
    o->rc = store_read(st, find_fn, o, &o->err);
    CHECK_MSG(o->rc == 0, "find %s failed: %s", filter, o->err.msg);
}

static store_t *open_store(const char *name) {
    store_t *st = NULL;
    ms_error_t e;
    store_opts_t so = {0};
    int rc = store_open(fresh_dir(name), &so, &st, &e);
    CHECK_MSG(rc == 0, "open: %s", e.msg);
    return st;
}

static void create_coll(store_t *st, const char *ns) {
    op_t o;
    memset(&o, 0, sizeof o);
    o.ns = ns;
    CHECK_INT(store_ddl(st, create_fn, &o, &o.err), 0);
}

static int create_index(store_t *st, const char *ns, const char *spec, op_t *o) {
    memset(o, 0, sizeof *o);
    o->ns = ns;
    o->json = spec;
    o->rc = store_ddl(st, index_fn, o, &o->err);
    return o->rc;
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_crud_and_dup_id(void) {
    store_t *st = open_store("crud");
    op_t o;
    create_coll(st, "db.c");
    CHECK_INT(do_insert(st, "db.c", "{\"_id\": 1, \"a\": 5}", &o), 0);
    CHECK_INT(do_insert(st, "db.c", "{\"_id\": 2, \"a\": 6}", &o), 0);
    CHECK_INT(do_insert(st, "db.c", "{\"_id\": 1, \"a\": 7}", &o), MS_ERR_DUPLICATE_KEY);
    CHECK_STR(o.err.msg, "E11000 duplicate key error collection: db.c index: _id_ dup key: { _id: 1 }");
    bson_destroy(&o.info);
    /* '$' names are stored (MongoDB 5.0+), but not inside a document _id */
    CHECK_INT(do_insert(st, "db.c", "{\"_id\": {\"$bad\": 1}}", &o), MS_ERR_DOLLAR_PREFIXED_FIELD_NAME);
    bson_destroy(&o.info);
    do_find(st, "db.c", "{}", NULL, &o);
    CHECK_INT(o.n, 2);
    do_find(st, "db.c", "{\"a\": {\"$gt\": 5}}", NULL, &o);
    CHECK_INT(o.n, 1);
    CHECK_INT(o.ids[0], 2);
    do_find(st, "db.c", "{\"_id\": 2}", NULL, &o);
    CHECK_INT(o.plan_kind, PLAN_IXSCAN);
    CHECK_STR(o.plan_ix, "_id_");
    CHECK_INT(o.n, 1);
    store_close(st);
}

static int update_delete_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    op_t *o = arg;
    store_coll_t *c = store_coll_get(t, o->ns);
    bson_t *nd = J("{\"_id\": 1, \"a\": [7, 8], \"b\": 1}");
    plan_query_t eq;
    query_t *q = NULL;
    bson_t *f = J("{\"_id\": 1}");
    int64_t *rids = NULL;
    size_t n = 0;
    int rc;
    memset(&eq, 0, sizeof eq);
    query_compile(f, &q, err);
    eq.filter = f;
    eq.q = q;
    rc = plan_match_rowids(t, c, &eq, &rids, &n, err);
    if (rc == 0 && n == 1) {
        bson_t old;
        rc = store_get_by_rowid(t, c, rids[0], &old, err);
        if (rc == 0) rc = store_write_doc(t, c, rids[0], &old, nd, NULL, NULL, err);
        if (rc == 0) {
            bson_t *bad = J("{\"_id\": 99}");
            bson_t cur;
            store_get_by_rowid(t, c, rids[0], &cur, err);
            /* _id is immutable */
            o->rc = store_write_doc(t, c, rids[0], &cur, bad, NULL, NULL, &o->err);
            bson_destroy(&cur);
            Jfree(bad);
        }
        bson_destroy(&old);
    }
    free(rids);
    query_free(q);
    Jfree(f);
    Jfree(nd);
    return rc;
}

static int delete_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    op_t *o = arg;
    store_coll_t *c = store_coll_get(t, o->ns);
    plan_query_t eq;
    query_t *q = NULL;
    bson_t *f = J(o->json);
    int64_t *rids = NULL;
    size_t n = 0;
    int rc;
    memset(&eq, 0, sizeof eq);
    query_compile(f, &q, err);
    eq.filter = f;
    eq.q = q;
    rc = plan_match_rowids(t, c, &eq, &rids, &n, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        bson_t old;
        rc = store_get_by_rowid(t, c, rids[i], &old, err);
        if (rc == 0) rc = store_write_doc(t, c, rids[i], &old, NULL, NULL, NULL, err);
        bson_destroy(&old);
    }
    o->n = (int64_t)n;
    free(rids);
    query_free(q);
    Jfree(f);
    return rc;
}

static void test_index_maintenance_multikey(void) {
    store_t *st = open_store("multikey");
    op_t o;
    create_coll(st, "db.c");
    CHECK_INT(create_index(st, "db.c", "{\"key\": {\"a\": 1}}", &o), 0);
    CHECK_INT(create_index(st, "db.c", "{\"key\": {\"a\": 1}}", &o), 0);
    CHECK_INT(o.n, 1);  /* same spec twice: existed */
    CHECK_INT(create_index(st, "db.c", "{\"key\": {\"a\": -1}, \"name\": \"a_1\"}", &o),
              MS_ERR_INDEX_KEY_SPECS_CONFLICT);
    CHECK_INT(create_index(st, "db.c", "{\"key\": {\"a\": 1}, \"name\": \"other\"}", &o),
              MS_ERR_INDEX_OPTIONS_CONFLICT);
    CHECK_INT(do_insert(st, "db.c", "{\"_id\": 1, \"a\": 5}", &o), 0);
    CHECK_INT(do_insert(st, "db.c", "{\"_id\": 2, \"a\": [5, 6, 5]}", &o), 0);
    CHECK_INT(do_insert(st, "db.c", "{\"_id\": 3, \"a\": [7]}", &o), 0);
    CHECK_INT(do_insert(st, "db.c", "{\"_id\": 4}", &o), 0);
    do_find(st, "db.c", "{\"a\": 5}", NULL, &o);
    CHECK_STR(o.plan_ix, "a_1");
    CHECK_INT(o.n, 2);  /* doc 2 once, although it has key 5 twice */
    do_find(st, "db.c", "{\"a\": {\"$in\": [5, 6, 7]}}", NULL, &o);
    CHECK_INT(o.n, 3);
    do_find(st, "db.c", "{\"a\": null}", NULL, &o);
    CHECK_INT(o.n, 1);
    CHECK_INT(o.ids[0], 4);
    /* update moves doc 1's keys: 5 → 7, 8 */
    memset(&o, 0, sizeof o);
    o.ns = "db.c";
    CHECK_INT(store_write(st, update_delete_fn, &o, &o.err), 0);
    CHECK_INT(o.rc, MS_ERR_IMMUTABLE_FIELD);
    do_find(st, "db.c", "{\"a\": 5}", NULL, &o);
    CHECK_INT(o.n, 1);
    do_find(st, "db.c", "{\"a\": 8}", NULL, &o);
    CHECK_INT(o.n, 1);
    CHECK_INT(o.ids[0], 1);
    do_find(st, "db.c", "{\"a\": 7}", NULL, &o);
    CHECK_INT(o.n, 2);
    /* sort on a multikey index needs a blocking sort */
    do_find(st, "db.c", "{}", "{\"a\": 1}", &o);
    CHECK(o.blocking);
    /* delete removes the index keys too */
    memset(&o, 0, sizeof o);
    o.ns = "db.c";
    o.json = "{\"a\": 7}";
    CHECK_INT(store_write(st, delete_fn, &o, &o.err), 0);
    CHECK_INT(o.n, 2);
    do_find(st, "db.c", "{\"a\": {\"$gte\": 0}}", NULL, &o);
    CHECK_INT(o.n, 1);
    CHECK_INT(o.ids[0], 2);
    store_close(st);
}

static void test_unique_and_parallel_arrays(void) {
    store_t *st = open_store("unique");
    op_t o;
    create_coll(st, "db.u");
    CHECK_INT(do_insert(st, "db.u", "{\"_id\": 1, \"b\": 5}", &o), 0);
    CHECK_INT(do_insert(st, "db.u", "{\"_id\": 2, \"b\": 5}", &o), 0);
    /* a unique build over duplicate data fails and leaves no index behind */
    CHECK_INT(create_index(st, "db.u", "{\"key\": {\"b\": 1}, \"unique\": true}", &o),
              MS_ERR_DUPLICATE_KEY);
    CHECK(strstr(o.err.msg, "index: b_1 dup key: { b: 5 }") != NULL);
    do_find(st, "db.u", "{\"b\": 5}", NULL, &o);
    CHECK_INT(o.plan_kind, PLAN_COLLSCAN);
    CHECK_INT(o.n, 2);
    /* remove the duplicate, build, then a duplicate insert is refused atomically */
    memset(&o, 0, sizeof o);
    o.ns = "db.u";
    o.json = "{\"_id\": 2}";
    CHECK_INT(store_write(st, delete_fn, &o, &o.err), 0);
    CHECK_INT(create_index(st, "db.u", "{\"key\": {\"b\": 1}, \"unique\": true}", &o), 0);
    CHECK_INT(do_insert(st, "db.u", "{\"_id\": 3, \"b\": 5}", &o), MS_ERR_DUPLICATE_KEY);
    CHECK_STR(o.err.msg, "E11000 duplicate key error collection: db.u index: b_1 dup key: { b: 5 }");
    bson_destroy(&o.info);
    do_find(st, "db.u", "{}", NULL, &o);
    CHECK_INT(o.n, 1);  /* doc 3's row was rolled back with its index entry */
    CHECK_INT(do_insert(st, "db.u", "{\"_id\": 3, \"b\": 6}", &o), 0);
    /* compound multikey of two arrays */
    CHECK_INT(create_index(st, "db.u", "{\"key\": {\"x\": 1, \"y\": -1}}", &o), 0);
    CHECK_INT(do_insert(st, "db.u", "{\"_id\": 4, \"x\": [1, 2], \"y\": [3, 4]}", &o),
              MS_ERR_CANNOT_INDEX_PARALLEL_ARRAYS);
    bson_destroy(&o.info);
    CHECK_INT(do_insert(st, "db.u", "{\"_id\": 5, \"x\": [1, 2], \"y\": 3}", &o), 0);
    do_find(st, "db.u", "{\"x\": 2, \"y\": 3}", NULL, &o);
    CHECK_STR(o.plan_ix, "x_1_y_-1");
    CHECK_INT(o.n, 1);
    store_close(st);
}

static void test_planner_and_sort(void) {
    store_t *st = open_store("planner");
    op_t o;
    char doc[128];
    create_coll(st, "db.p");
    CHECK_INT(create_index(st, "db.p", "{\"key\": {\"a\": 1, \"b\": -1}}", &o), 0);
    CHECK_INT(create_index(st, "db.p", "{\"key\": {\"c\": 1}}", &o), 0);
    for (int i = 0; i < 300; i++) {
        snprintf(doc, sizeof doc, "{\"_id\": %d, \"a\": %d, \"b\": %d, \"c\": %d}", i, i % 10, i, i % 3);
        CHECK_INT(do_insert(st, "db.p", doc, &o), 0);
    }
    do_find(st, "db.p", "{\"a\": 3, \"c\": 1}", NULL, &o);
    CHECK_STR(o.plan_ix, "a_1_b_-1");  /* 30 keys beat 100 */
    CHECK_INT(o.n, 10);
    do_find(st, "db.p", "{\"_id\": 7, \"a\": 7}", NULL, &o);
    CHECK_STR(o.plan_ix, "_id_");
    do_find(st, "db.p", "{\"z\": 1}", NULL, &o);
    CHECK_INT(o.plan_kind, PLAN_COLLSCAN);
    /* the index order gives the sort: no blocking sort, and the order is right */
    do_find(st, "db.p", "{\"a\": {\"$gte\": 8}}", "{\"a\": -1, \"b\": 1}", &o);
    CHECK_STR(o.plan_ix, "a_1_b_-1");
    CHECK(!o.blocking);
    CHECK_INT(o.n, 60);
    CHECK_INT(o.ids[0], 9);
    CHECK_INT(o.ids[1], 19);
    do_find(st, "db.p", "{}", "{\"c\": 1, \"_id\": -1}", &o);
    CHECK(o.blocking);
    CHECK_INT(o.n, 300);
    CHECK_INT(o.ids[0], 297);
    store_close(st);
}

static void test_index_names(void) {
    bson_t *k = J("{\"a\": 1, \"b\": -1}");
    char name[128];
    store_index_name(k, name, sizeof name);
    CHECK_STR(name, "a_1_b_-1");
    Jfree(k);
    k = J("{\"x.y\": \"hashed\"}");
    store_index_name(k, name, sizeof name);
    CHECK_STR(name, "x.y_hashed");
    Jfree(k);
}

static int shard_key_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    op_t *o = arg;
    store_coll_t *c = store_coll_get(t, o->ns);
    bson_t *kp = J(o->json);
    keys_pattern_t p;
    int rc = keys_pattern_parse(kp, &p, err);
    if (rc == 0) rc = store_coll_set_shard_key(t, c, &p, false, err);
    keys_pattern_free(&p);
    Jfree(kp);
    return rc;
}

static void test_shard_key_fill_and_reopen(void) {
    store_t *st = open_store("sk");
    op_t o;
    ms_error_t e;
    store_opts_t so = {0};
    create_coll(st, "db.s");
    CHECK_INT(create_index(st, "db.s", "{\"key\": {\"k\": 1}}", &o), 0);
    CHECK_INT(do_insert(st, "db.s", "{\"_id\": 1, \"k\": 1}", &o), 0);
    CHECK_INT(do_insert(st, "db.s", "{\"_id\": 2, \"k\": [1, 2]}", &o), 0);
    memset(&o, 0, sizeof o);
    o.ns = "db.s";
    o.json = "{\"k\": 1}";
    CHECK_INT(store_ddl(st, shard_key_fn, &o, &o.err), MS_ERR_BAD_VALUE);  /* array in key */
    memset(&o, 0, sizeof o);
    o.ns = "db.s";
    o.json = "{\"_id\": 2}";
    CHECK_INT(store_write(st, delete_fn, &o, &o.err), 0);
    memset(&o, 0, sizeof o);
    o.ns = "db.s";
    o.json = "{\"k\": 1}";
    CHECK_INT(store_ddl(st, shard_key_fn, &o, &o.err), 0);
    /* now an array shard key is refused on insert */
    CHECK_INT(do_insert(st, "db.s", "{\"_id\": 3, \"k\": [5]}", &o), MS_ERR_BAD_VALUE);
    bson_destroy(&o.info);
    store_close(st);
    /* reopen: catalog, shard key and index survive */
    CHECK_INT(store_open(fresh_dir("sk"), &so, &st, &e), 0);
    do_find(st, "db.s", "{\"k\": 1}", NULL, &o);
    CHECK_STR(o.plan_ix, "k_1");
    CHECK_INT(o.n, 1);
    CHECK_INT(do_insert(st, "db.s", "{\"_id\": 4, \"k\": [5]}", &o), MS_ERR_BAD_VALUE);
    bson_destroy(&o.info);
    store_close(st);
}

/* Crash safety: a child commits one batch, then dies (_exit, as kill -9 would) in the middle
 * of a second batch's transaction. The parent reopens: all of batch 1, none of batch 2. */
static int crash_after;
static void crash_observer(void *arg, const char *ns, const bson_t *o, const bson_t *n,
                           const buf_t *osk, const buf_t *nsk) {
    (void)arg, (void)ns, (void)o, (void)n, (void)osk, (void)nsk;
    if (crash_after > 0 && --crash_after == 0) _exit(0);
}

typedef struct batch_arg {
    int from, n;
} batch_arg_t;

static int batch_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    batch_arg_t *b = arg;
    store_coll_t *c = store_coll_get(t, "db.crash");
    for (int i = b->from; i < b->from + b->n; i++) {
        bson_t d;
        int rc;
        bson_init(&d);
        BSON_APPEND_INT32(&d, "_id", i);
        BSON_APPEND_INT32(&d, "v", i * 2);
        rc = store_write_doc(t, c, 0, NULL, &d, NULL, NULL, err);
        bson_destroy(&d);
        if (rc) return rc;
    }
    return 0;
}

/* Fast counts (store_coll_t.fast_n / fast_bytes, table coll_counts) against a scan of
 * the collection after inserts, updates that change sizes, deletes, a failed document
 * (duplicate _id), a transaction rolled back whole, a drop in the transaction that wrote,
 * a reopen, and a file whose counts are missing (counted once at open). */
typedef struct fc {
    const char *ns;
    int64_t fast_n, fast_bytes, scan_n, scan_bytes;
    bool fail;  /* mutate_fn: return an error at the end (the transaction rolls back) */
} fc_t;

static int fc_stats_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    fc_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    char sql[96];
    sqlite3_stmt *s;
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "no coll");
    int rc = store_coll_stats(t, c, &a->fast_n, &a->fast_bytes, NULL, NULL, err);
    if (rc) return rc;
    snprintf(sql, sizeof sql, "SELECT count(*), total(length(doc)) FROM c%lld", (long long)c->id);
    if (!(s = store_stmt(t, sql, err))) return err->code;
    if (sqlite3_step(s) == SQLITE_ROW) {
        a->scan_n = sqlite3_column_int64(s, 0);
        a->scan_bytes = (int64_t)sqlite3_column_double(s, 1);
    }
    sqlite3_reset(s);
    return 0;
}

/* Every third document grows, every fifth goes; then one duplicate _id fails alone. */
static int fc_mutate_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    fc_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    char sql[96];
    sqlite3_stmt *s;
    int64_t rids[4096];
    int n = 0, rc = 0;
    snprintf(sql, sizeof sql, "SELECT rid FROM c%lld ORDER BY rid", (long long)c->id);
    if (!(s = store_stmt(t, sql, err))) return err->code;
    while (n < 4096 && sqlite3_step(s) == SQLITE_ROW) rids[n++] = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    for (int i = 0; i < n && rc == 0; i++) {
        bson_t old, nd;
        bson_iter_t it;
        if (i % 3 && i % 5) continue;
        if ((rc = store_get_by_rowid(t, c, rids[i], &old, err)) != 0) break;
        if (i % 5 == 0) {
            rc = store_write_doc(t, c, rids[i], &old, NULL, NULL, NULL, err);
        } else {
            bson_init(&nd);
            if (bson_iter_init_find(&it, &old, "_id")) bsonx_append_iter(&nd, "_id", &it);
            BSON_APPEND_UTF8(&nd, "pad", "a longer document than it was before the update");
            rc = store_write_doc(t, c, rids[i], &old, &nd, NULL, NULL, err);
            bson_destroy(&nd);
        }
        bson_destroy(&old);
    }
    if (rc == 0) {
        bson_t dup;
        ms_error_t e;
        bson_init(&dup);
        BSON_APPEND_INT32(&dup, "_id", 1);
        CHECK_INT(store_write_doc(t, c, 0, NULL, &dup, NULL, NULL, &e), MS_ERR_DUPLICATE_KEY);
        bson_destroy(&dup);
    }
    if (rc == 0 && a->fail) rc = err_set(err, MS_ERR_BAD_VALUE, "rolled back on purpose");
    return rc;
}

static int fc_drop_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    batch_arg_t b = {5000, 10};
    (void)arg;
    int rc = batch_fn(t, &b, err);  /* writes db.crash, then drops it in the same txn */
    return rc ? rc : store_coll_drop(t, "db.crash", err);
}

static void fc_check(store_t *st, const char *ns, int64_t want_n) {
    fc_t a = {.ns = ns};
    ms_error_t e;
    CHECK_INT(store_read(st, fc_stats_fn, &a, &e), 0);
    CHECK_INT(a.fast_n, a.scan_n);
    CHECK_INT(a.fast_bytes, a.scan_bytes);
    CHECK_INT(a.fast_n, want_n);
}

static int fc_forget_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sqlite3_stmt *s = store_stmt(t, "DELETE FROM coll_counts", err);
    int rc;
    (void)arg;
    if (!s) return err->code;
    rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? 0 : err_set(err, MS_ERR_INTERNAL, "delete counts: %d", rc);
}

static void test_fast_counts(void) {
    store_t *st = open_store("fastcounts");
    batch_arg_t b = {0, 300};
    fc_t m = {.ns = "db.crash"};
    ms_error_t e;
    create_coll(st, "db.crash");
    fc_check(st, "db.crash", 0);
    CHECK_INT(store_write(st, batch_fn, &b, &e), 0);
    fc_check(st, "db.crash", 300);
    m.fail = true;                                   /* all of it rolled back */
    CHECK_INT(store_write(st, fc_mutate_fn, &m, &e), MS_ERR_BAD_VALUE);
    fc_check(st, "db.crash", 300);
    m.fail = false;
    CHECK_INT(store_write(st, fc_mutate_fn, &m, &e), 0);
    fc_check(st, "db.crash", 240);                   /* 60 of 300 deleted (i % 5 == 0) */
    store_close(st);
    CHECK_INT(store_open(fresh_dir("fastcounts"), &(store_opts_t){0}, &st, &e), 0);
    if (!st) return;
    fc_check(st, "db.crash", 240);                   /* persisted */
    CHECK_INT(store_write(st, fc_forget_fn, NULL, &e), 0);
    store_close(st);
    CHECK_INT(store_open(fresh_dir("fastcounts"), &(store_opts_t){0}, &st, &e), 0);
    if (!st) return;
    fc_check(st, "db.crash", 240);                   /* no stored counts: counted at open */
    CHECK_INT(store_ddl(st, fc_drop_fn, NULL, &e), 0);
    create_coll(st, "db.crash");                     /* a new table: counts from zero */
    fc_check(st, "db.crash", 0);
    store_close(st);
}

static void test_crash_mid_batch(void) {
    pid_t pid = fork();
    int status = 0;
    op_t o;
    if (pid == 0) {
        store_t *st = NULL;
        ms_error_t e;
        store_opts_t so = {0};
        batch_arg_t b1 = {0, 1000}, b2 = {1000, 1000};
        if (store_open(fresh_dir("crash"), &so, &st, &e) != 0) _exit(3);
        memset(&o, 0, sizeof o);
        o.ns = "db.crash";
        if (store_ddl(st, create_fn, &o, &e) != 0) _exit(4);
        {
            op_t ix;
            memset(&ix, 0, sizeof ix);
            ix.ns = "db.crash";
            ix.json = "{\"key\": {\"v\": 1}}";
            if (store_ddl(st, index_fn, &ix, &e) != 0) _exit(5);
        }
        if (store_write(st, batch_fn, &b1, &e) != 0) _exit(6);
        crash_after = 500;
        store_set_write_observer(st, crash_observer, NULL, NULL, &e);
        store_write(st, batch_fn, &b2, &e);
        _exit(7);  /* not reached: the observer exits first */
    }
    CHECK(pid > 0);
    waitpid(pid, &status, 0);
    CHECK_INT(WEXITSTATUS(status), 0);
    {
        store_t *st = NULL;
        ms_error_t e;
        store_opts_t so = {0};
        CHECK_INT(store_open(fresh_dir("crash"), &so, &st, &e), 0);
        if (!st) return;
        do_find(st, "db.crash", "{}", NULL, &o);
        CHECK_INT(o.n, 1000);
        do_find(st, "db.crash", "{\"v\": {\"$gte\": 0}}", NULL, &o);
        CHECK_STR(o.plan_ix, "v_1");
        CHECK_INT(o.n, 1000);
        do_find(st, "db.crash", "{\"_id\": 1000}", NULL, &o);
        CHECK_INT(o.n, 0);
        fc_check(st, "db.crash", 1000);  /* the fast counts died with the batch too */
        store_close(st);
    }
}

/* hangBeforeWriteObserver with action "error": the point fails a document after its row
 * and index keys are written, so the store must roll that document back alone (the point
 * forces the per-document savepoint even with no observer and no unique index). */
typedef struct two_docs {
    int rc1, rc2;
    int64_t rows, keys;
} two_docs_t;

static int two_docs_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    two_docs_t *a = arg;
    store_coll_t *c = store_coll_get(t, "db.fp");
    bson_t *d1 = J("{\"_id\": 1, \"v\": 1}"), *d2 = J("{\"_id\": 2, \"v\": 2}");
    ms_error_t e;
    a->rc1 = store_write_doc(t, c, 0, NULL, d1, NULL, NULL, &e);
    a->rc2 = store_write_doc(t, c, 0, NULL, d2, NULL, NULL, &e);
    Jfree(d1);
    Jfree(d2);
    (void)err;
    return 0;
}

static int count_rows_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    two_docs_t *a = arg;
    store_coll_t *c = store_coll_get(t, "db.fp");
    char sql[64];
    sqlite3_stmt *s;
    snprintf(sql, sizeof sql, "SELECT count(*) FROM c%lld", (long long)c->id);
    if (!(s = store_stmt(t, sql, err))) return err->code;
    if (sqlite3_step(s) == SQLITE_ROW) a->rows = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM i%lld", (long long)c->ix[1]->id);
    if (!(s = store_stmt(t, sql, err))) return err->code;
    if (sqlite3_step(s) == SQLITE_ROW) a->keys = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return 0;
}

static void test_observer_failpoint_rolls_back_one_doc(void) {
    store_t *st = open_store("fp");
    bson_t *cmd = J("{\"configureFailPoint\": \"" FP_BEFORE_WRITE_OBSERVER "\", \"mode\": "
                    "{\"times\": 1}, \"data\": {\"action\": \"error\"}}");
    bson_t reply = BSON_INITIALIZER;
    two_docs_t a = {0};
    op_t o;
    ms_error_t e;
    shardd_register_failpoints();
    create_coll(st, "db.fp");
    CHECK_INT(create_index(st, "db.fp", "{\"key\": {\"v\": 1}}", &o), 0);
    CHECK_INT(fp_configure(cmd, &reply, &e), 0);
    CHECK_INT(store_write(st, two_docs_fn, &a, &e), 0);
    CHECK_INT(a.rc1, MS_ERR_FAIL_POINT_ENABLED);
    CHECK_INT(a.rc2, 0);
    CHECK_INT(store_read(st, count_rows_fn, &a, &e), 0);
    CHECK_INT(a.rows, 1);  /* document 1's row is gone ... */
    CHECK_INT(a.keys, 1);  /* ... and so is its index key */
    do_find(st, "db.fp", "{\"v\": {\"$gte\": 0}}", NULL, &o);
    CHECK_INT(o.n, 1);
    CHECK_INT(o.ids[0], 2);
    bson_destroy(&reply);
    Jfree(cmd);
    store_close(st);
}

static int index_keys_count(const char *pattern, const char *doc, bool *mk) {
    bson_t *p = J(pattern), *d = J(doc);
    keys_pattern_t kp;
    buf_t *keys = NULL;
    int n = -1;
    ms_error_t e;
    if (keys_pattern_parse(p, &kp, &e) == 0) {
        if (store_index_keys(&kp, d, &keys, &n, mk, &e) != 0) n = -e.code;
        store_keys_free(keys, n > 0 ? n : 0);
        keys_pattern_free(&kp);
    }
    Jfree(p);
    Jfree(d);
    return n;
}

static void test_index_keys(void) {
    bool mk;
    CHECK_INT(index_keys_count("{\"a\": 1}", "{\"a\": 1}", &mk), 1);
    CHECK(!mk);
    CHECK_INT(index_keys_count("{\"a\": 1}", "{\"a\": [1, 2, 2]}", &mk), 2);
    CHECK(mk);
    CHECK_INT(index_keys_count("{\"a.b\": 1}", "{\"a\": [{\"b\": 1}, {\"b\": 2}, {\"c\": 3}]}", &mk), 3);
    CHECK_INT(index_keys_count("{\"a\": 1, \"b\": 1}", "{\"a\": [1, 2], \"b\": 5}", &mk), 2);
    CHECK_INT(index_keys_count("{\"a\": 1, \"b\": 1}", "{\"a\": [1], \"b\": [5]}", &mk),
              -MS_ERR_CANNOT_INDEX_PARALLEL_ARRAYS);
    CHECK_INT(index_keys_count("{\"a\": \"hashed\"}", "{\"a\": 42}", &mk), 1);
    CHECK_INT(index_keys_count("{\"a\": 1}", "{\"a\": []}", &mk), 1);
}

/* ---- batches and cursors ------------------------------------------------------------- */

typedef struct big_arg {
    const char *ns;
    int n;
    size_t pad_bytes;
} big_arg_t;

/* Inserts {_id: i, pad: "xxx..."} documents of about pad_bytes each. */
static int big_insert_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    big_arg_t *a = arg;
    store_coll_t *c;
    char *pad = malloc(a->pad_bytes + 1);
    int rc = store_coll_create(t, a->ns, NULL, &c, NULL, err);
    memset(pad, 'x', a->pad_bytes);
    pad[a->pad_bytes] = '\0';
    for (int i = 0; rc == 0 && i < a->n; i++) {
        bson_t d = BSON_INITIALIZER;
        BSON_APPEND_INT32(&d, "_id", i);
        BSON_APPEND_UTF8(&d, "pad", pad);
        rc = store_write_doc(t, c, 0, NULL, &d, NULL, NULL, err);
        bson_destroy(&d);
    }
    free(pad);
    return rc;
}

/* The batch's length and the cursor id of a find/getMore reply. */
static int batch_len(const bson_t *reply, const char *key, int64_t *id) {
    bson_iter_t it, ch;
    char path[64];
    int n = 0;
    snprintf(path, sizeof path, "cursor.%s", key);
    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, path, &ch) &&
        bson_iter_recurse(&ch, &it))
        while (bson_iter_next(&it)) n++;
    *id = -1;
    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.id", &ch))
        *id = bson_iter_as_int64(&ch);
    return n;
}

static int64_t first_batch(store_t *st, curs_reg_t *cs, const char *ns, int *n) {
    find_args_t fa;
    bson_t reply = BSON_INITIALIZER;
    ms_error_t e;
    int64_t id = -1;
    memset(&fa, 0, sizeof fa);
    fa.ns = ns;
    fa.batch_size = -1;
    CHECK_INT(plan_find(st, cs, &fa, &reply, &e), 0);
    *n = batch_len(&reply, "firstBatch", &id);
    bson_destroy(&reply);
    return id;
}

static int next_batch(store_t *st, curs_reg_t *cs, const char *ns, int64_t id, int *n,
                      int64_t *next_id) {
    bson_t reply = BSON_INITIALIZER;
    ms_error_t e;
    int rc = plan_get_more(st, cs, id, ns, -1, &reply, &e);
    *n = rc == 0 ? batch_len(&reply, "nextBatch", next_id) : 0;
    bson_destroy(&reply);
    return rc;
}

/* A batch stops before 16 MB; the result that did not fit opens the next batch; a single
 * document larger than the batch limit still goes out alone (MongoDB returns at least one). */
static void test_batch_bytes(void) {
    store_t *st = open_store("batchbytes");
    curs_reg_t *cs = NULL;
    big_arg_t six = {"db.six", 5, 6u << 20}, huge = {"db.huge", 2, (16u << 20) - 200};
    ms_error_t e;
    int n = 0;
    int64_t id, id2 = -1;
    CHECK_INT(plan_cursors_new(60000, &cs), 0);
    CHECK_INT(store_write(st, big_insert_fn, &six, &e), 0);
    CHECK_INT(store_write(st, big_insert_fn, &huge, &e), 0);
    /* 6 MB documents: 2 per batch (a third would pass 16 MB), 2, then the last one. */
    id = first_batch(st, cs, "db.six", &n);
    CHECK_INT(n, 2);
    CHECK(id > 0);
    CHECK_INT(next_batch(st, cs, "db.six", id, &n, &id2), 0);
    CHECK_INT(n, 2);
    CHECK_INT(id2, id);
    CHECK_INT(next_batch(st, cs, "db.six", id, &n, &id2), 0);
    CHECK_INT(n, 1);
    CHECK_INT(id2, 0);
    /* documents of ~16 MB, each over the batch limit on its own: one per batch */
    id = first_batch(st, cs, "db.huge", &n);
    CHECK_INT(n, 1);
    CHECK(id > 0);
    CHECK_INT(next_batch(st, cs, "db.huge", id, &n, &id2), 0);
    CHECK_INT(n, 1);
    CHECK_INT(id2, 0);
    CHECK_INT(curs_count(cs), 0);
    curs_reg_free(cs);
    store_close(st);
}

/* A pinned cursor (a getMore running on it) → CursorInUse for a second getMore; killed
 * while pinned → freed when the pin ends, then CursorNotFound. */
static void test_cursor_in_use(void) {
    store_t *st = open_store("inuse");
    curs_reg_t *cs = NULL;
    big_arg_t small = {"db.c", 300, 10};
    curs_t *pinned = NULL;
    ms_error_t e;
    int n = 0;
    int64_t id, id2 = -1;
    bson_t reply = BSON_INITIALIZER;
    CHECK_INT(plan_cursors_new(60000, &cs), 0);
    CHECK_INT(store_write(st, big_insert_fn, &small, &e), 0);
    id = first_batch(st, cs, "db.c", &n);
    CHECK_INT(n, 101);
    CHECK(id > 0);
    CHECK_INT(curs_pin(cs, id, NULL, &pinned, &e), 0);
    CHECK_INT(plan_get_more(st, cs, id, "db.c", 10, &reply, &e), MS_ERR_CURSOR_IN_USE);
    CHECK_INT(e.code, 143);
    CHECK_INT(curs_pin(cs, id, NULL, &pinned, &e), MS_ERR_CURSOR_IN_USE);
    curs_unpin(cs, pinned, false);
    CHECK_INT(next_batch(st, cs, "db.c", id, &n, &id2), 0);
    CHECK_INT(n, 199);
    CHECK_INT(id2, 0);
    CHECK_INT(next_batch(st, cs, "db.c", id, &n, &id2), MS_ERR_CURSOR_NOT_FOUND);
    /* killCursors while a getMore holds it */
    id = first_batch(st, cs, "db.c", &n);
    CHECK_INT(curs_pin(cs, id, NULL, &pinned, &e), 0);
    CHECK(curs_kill(cs, id));
    CHECK_INT(curs_count(cs), 1);
    CHECK_INT(curs_pin(cs, id, NULL, &pinned, &e) == 0 ? 0 : e.code, MS_ERR_CURSOR_NOT_FOUND);
    curs_unpin(cs, pinned, false);
    CHECK_INT(curs_count(cs), 0);
    CHECK_INT(next_batch(st, cs, "db.c", id, &n, &id2), MS_ERR_CURSOR_NOT_FOUND);
    bson_destroy(&reply);
    curs_reg_free(cs);
    store_close(st);
}

/* Threads that read and end hand their reader connection to the next new thread: 40
 * short-lived reader threads, 4 at a time, leave at most 4 SQLite connections open (a
 * migration starts threads of its own every time; before, each kept one until shutdown). */
static int noop_read_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    (void)t;
    (void)arg;
    (void)err;
    return 0;
}

static void *reader_thread(void *arg) {
    ms_error_t e;
    CHECK_INT(store_read(arg, noop_read_fn, NULL, &e), 0);
    return NULL;
}

static void test_reader_connections_reused(void) {
    store_t *st = open_store("readers");
    int open = 0;
    for (int round = 0; round < 10; round++) {
        pthread_t th[4];
        for (int i = 0; i < 4; i++) CHECK_INT(pthread_create(&th[i], NULL, reader_thread, st), 0);
        for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    }
    pthread_mutex_lock(&st->rmu);
    for (conn_t *c = st->readers; c; c = c->next) {
        open++;
        CHECK(!c->in_use);
    }
    pthread_mutex_unlock(&st->rmu);
    CHECK_MSG(open >= 1 && open <= 4, "%d reader connections open after 40 threads", open);
    store_close(st);
}

T_MAIN(T_CASE(test_crud_and_dup_id), T_CASE(test_index_maintenance_multikey),
       T_CASE(test_unique_and_parallel_arrays), T_CASE(test_planner_and_sort),
       T_CASE(test_index_names), T_CASE(test_shard_key_fill_and_reopen),
       T_CASE(test_crash_mid_batch), T_CASE(test_index_keys), T_CASE(test_batch_bytes),
       T_CASE(test_cursor_in_use), T_CASE(test_observer_failpoint_rolls_back_one_doc),
       T_CASE(test_fast_counts), T_CASE(test_reader_connections_reused))
