/*
 * test_shardd_sdoc.c — unit tests of the shard's own persisted documents
 * (shardd/store_docs.c): put/get/replace/delete/scan in id order inside transactions,
 * kept across a reopen, tables kept apart, a read transaction refused for writes, and
 * store_sdoc_find's filtered one-batch reply (what find on config.rangeDeletions serves).
 */
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "shardd/shardd.h"
#include "tests/unit/t.h"
#include "tests/unit/t_store.h"

typedef struct sd {
    const char *coll, *id, *json;
    int rc;
    ms_error_t err;
    bson_t got;
    char ids[256];
} sd_t;

static int put_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sd_t *a = arg;
    bson_t d;
    if (!t_json(a->json, &d)) return MS_ERR_BAD_VALUE;
    int rc = store_sdoc_put(t, a->coll, a->id, &d, err);
    bson_destroy(&d);
    return rc;
}

static int get_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sd_t *a = arg;
    return store_sdoc_get(t, a->coll, a->id, &a->got, err);
}

static int del_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sd_t *a = arg;
    return store_sdoc_delete(t, a->coll, a->id, err);
}

static int scan_one(void *arg, const char *id, const bson_t *doc) {
    sd_t *a = arg;
    (void)doc;
    strncat(a->ids, id, sizeof a->ids - strlen(a->ids) - 2);
    strcat(a->ids, ",");
    return a->id && strcmp(id, a->id) == 0 ? 7 : 0;
}

static int sdscan_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    sd_t *a = arg;
    int rc = store_sdoc_scan(t, a->coll, scan_one, a, err);
    a->rc = rc;
    return 0;
}

static int put(store_t *st, const char *coll, const char *id, const char *json) {
    sd_t a = {.coll = coll, .id = id, .json = json};
    return store_write(st, put_fn, &a, &a.err);
}

static void test_put_get_delete_scan(void) {
    store_t *st = open_at("pgds");
    sd_t a = {0};
    CHECK_INT(put(st, SDOC_RANGE_DELETIONS, "bb", "{\"n\": 2}"), 0);
    CHECK_INT(put(st, SDOC_RANGE_DELETIONS, "aa", "{\"n\": 1}"), 0);
    CHECK_INT(put(st, SDOC_COORDINATORS, "aa", "{\"c\": 1}"), 0);
    CHECK_INT(put(st, SDOC_RANGE_DELETIONS, "bb", "{\"n\": 3}"), 0);   /* replaces */

    a = (sd_t){.coll = SDOC_RANGE_DELETIONS, .id = "bb"};
    CHECK_INT(store_read(st, get_fn, &a, &a.err), 0);
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, &a.got, "n") && bson_iter_as_int64(&it) == 3);
    bson_destroy(&a.got);

    a = (sd_t){.coll = SDOC_RECIPIENTS, .id = "aa"};
    CHECK_INT(store_read(st, get_fn, &a, &a.err), MS_ERR_NO_SUCH_KEY);

    a = (sd_t){.coll = SDOC_RANGE_DELETIONS};
    CHECK_INT(store_read(st, sdscan_fn, &a, &a.err), 0);
    CHECK_STR(a.ids, "aa,bb,");
    a = (sd_t){.coll = SDOC_RANGE_DELETIONS, .id = "aa"};   /* fn stops: its value returned */
    CHECK_INT(store_read(st, sdscan_fn, &a, &a.err), 0);
    CHECK_INT(a.rc, 7);
    CHECK_STR(a.ids, "aa,");

    /* writes need a write transaction */
    a = (sd_t){.coll = SDOC_RANGE_DELETIONS, .id = "aa"};
    CHECK_INT(store_read(st, del_fn, &a, &a.err), MS_ERR_INTERNAL);
    CHECK_INT(store_write(st, del_fn, &a, &a.err), 0);
    CHECK_INT(store_write(st, del_fn, &a, &a.err), 0);   /* absent: fine */
    store_close(st);

    st = open_at("pgds");   /* persisted */
    a = (sd_t){.coll = SDOC_RANGE_DELETIONS};
    CHECK_INT(store_read(st, sdscan_fn, &a, &a.err), 0);
    CHECK_STR(a.ids, "bb,");
    a = (sd_t){.coll = SDOC_COORDINATORS};
    CHECK_INT(store_read(st, sdscan_fn, &a, &a.err), 0);
    CHECK_STR(a.ids, "aa,");
    store_close(st);
}

static void test_find_reply(void) {
    store_t *st = open_at("find");
    bson_t reply, f;
    query_t *q = NULL;
    ms_error_t e;
    bson_iter_t it;
    CHECK_INT(put(st, SDOC_RANGE_DELETIONS, "01", "{\"nss\": \"d.a\", \"pending\": true}"), 0);
    CHECK_INT(put(st, SDOC_RANGE_DELETIONS, "02", "{\"nss\": \"d.b\"}"), 0);
    CHECK_INT(put(st, SDOC_RANGE_DELETIONS, "03", "{\"nss\": \"d.a\"}"), 0);
    CHECK(store_sdoc_coll_of("config.rangeDeletions") != NULL);
    CHECK(store_sdoc_coll_of("config.migrationCoordinators") != NULL);
    CHECK(store_sdoc_coll_of("config.chunks") == NULL);
    CHECK(store_sdoc_coll_of("x.rangeDeletions") == NULL);

    t_json("{\"nss\": \"d.a\"}", &f);
    CHECK_INT(query_compile(&f, &q, &e), 0);
    bson_init(&reply);
    CHECK_INT(store_sdoc_find(st, "config.rangeDeletions", q, 0, &reply, &e), 0);
    CHECK(bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch.1.nss", &it));
    CHECK(bson_iter_init(&it, &reply) && !bson_iter_find_descendant(&it, "cursor.firstBatch.2", &it));
    CHECK(bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.id", &it) &&
          bson_iter_as_int64(&it) == 0);
    bson_destroy(&reply);
    bson_init(&reply);   /* limit */
    CHECK_INT(store_sdoc_find(st, "config.rangeDeletions", NULL, 2, &reply, &e), 0);
    CHECK(bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "cursor.firstBatch.1", &it));
    CHECK(bson_iter_init(&it, &reply) && !bson_iter_find_descendant(&it, "cursor.firstBatch.2", &it));
    bson_destroy(&reply);
    bson_init(&reply);
    CHECK_INT(store_sdoc_find(st, "config.migrationRecipients", NULL, 0, &reply, &e), 0);
    CHECK(bson_iter_init(&it, &reply) && !bson_iter_find_descendant(&it, "cursor.firstBatch.0", &it));
    bson_destroy(&reply);
    query_free(q);
    bson_destroy(&f);
    store_close(st);
}

T_MAIN(T_CASE(test_put_get_delete_scan), T_CASE(test_find_reply))
