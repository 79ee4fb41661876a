/*
 * test_router_target.c — unit tests of the router's targeting (router/rt_target.c):
 * chunk lookup by binary search, a document's shard, and a filter's shards through
 * bounds_from_filter (equality, ranges, $in, unplannable, hashed equality), and the chunks
 * a filter may touch (rt_target_chunks).
 */
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/mem.h"
#include "router/router.h"
#include "tests/unit/t.h"
#include "tests/unit/t_rtable.h"

/* A table over {x: 1} (or hashed) with chunks [Min,0) s0, [0,100) s1, [100,Max) s2. */
static rt_table_t *make_table(bool hashed) {
    static const ch_t chunks[] = {
        {MINK, 0, "s0", 1, 0}, {0, 100, "s1", 1, 1}, {100, MAXK, "s2", 1, 2}};
    rt_table_t *t = mem_calloc_aligned(1, sizeof *t);   /* holds a bson_t */
    bson_t reply;
    bson_oid_t epoch;
    bool need_full;
    ms_error_t err = {0};
    atomic_init(&t->refs, 1);
    t->sharded = true;
    bson_oid_init(&epoch, NULL);
    reply_of_key(&reply, hashed, &epoch, 1, true, chunks, 3);
    CHECK_INT(rtable_from_reply(&reply, NULL, &t->rt, &need_full, &err), 0);
    CHECK(!need_full);
    bson_destroy(&reply);
    return t;
}

static uint64_t mask_of(rt_table_t *t, const char *json, bool *point) {
    bson_t f;
    ms_error_t err = {0};
    uint64_t m = 0;
    CHECK(bsonx_from_json(json, &f, &err) == 0);
    int rc = rt_target_filter(t, &f, &m, point, &err);
    CHECK_MSG(rc == 0, "%s: %s", json, err.msg);
    bson_destroy(&f);
    return m;
}

static void test_doc_targeting(void) {
    rt_table_t *t = make_table(false);
    const char *docs[] = {"{\"x\": -5}", "{\"x\": 0}", "{\"x\": 99.5}", "{\"x\": 100}",
                          "{\"y\": 1}", "{\"x\": \"str\"}"};
    int want[] = {0, 1, 1, 2, 0 /* missing = null < numbers */, 2 /* strings > numbers */};
    for (int i = 0; i < 6; i++) {
        bson_t d;
        ms_error_t err = {0};
        int shard = -1;
        CHECK(bsonx_from_json(docs[i], &d, &err) == 0);
        CHECK_INT(rt_target_doc(t, &d, &shard, &err), 0);
        CHECK_MSG(shard == want[i], "%s → s%d, expected s%d", docs[i], shard, want[i]);
        bson_destroy(&d);
    }
    bson_t arr;
    ms_error_t err = {0};
    int shard = -1;
    CHECK(bsonx_from_json("{\"x\": [1, 2]}", &arr, &err) == 0);
    CHECK(rt_target_doc(t, &arr, &shard, &err) != 0);   /* arrays are not shard keys */
    bson_destroy(&arr);
    rt_table_release(t);
}

static void test_filter_targeting(void) {
    rt_table_t *t = make_table(false);
    bool point = false;
    CHECK_INT(mask_of(t, "{\"x\": 5}", &point), 2);
    CHECK(point);
    CHECK_INT(mask_of(t, "{\"x\": {\"$gte\": 0, \"$lt\": 100}}", &point), 2);
    CHECK(!point);
    CHECK_INT(mask_of(t, "{\"x\": {\"$gte\": 50}}", &point), 6);
    CHECK_INT(mask_of(t, "{\"x\": {\"$in\": [-1, 150]}}", &point), 5);
    CHECK_INT(mask_of(t, "{}", &point), 7);
    CHECK_INT(mask_of(t, "{\"y\": 3}", &point), 7);
    CHECK_INT(mask_of(t, "{\"x\": {\"$lt\": 100}}", &point), 3);
    rt_table_release(t);
}

static void test_hashed_equality_targets_one_shard(void) {
    rt_table_t *t = make_table(true);
    bool point = false;
    /* hash(42) = -944302157085130861 < 0 → chunk [Min, 0) → s0 */
    CHECK_INT(mask_of(t, "{\"x\": 42}", &point), 1);
    CHECK(point);
    /* ranges on a hashed field: every shard */
    CHECK_INT(mask_of(t, "{\"x\": {\"$gt\": 5}}", &point), 7);
    rt_table_release(t);
}

static void test_exact_id(void) {
    const char *yes[] = {"{\"_id\": 5}", "{\"_id\": {\"$eq\": 5}}", "{\"_id\": {\"a\": 1}}"};
    const char *no[] = {"{\"a\": 5}", "{\"_id\": {\"$gt\": 5}}", "{\"_id\": {\"$in\": [1]}}"};
    for (int i = 0; i < 3; i++) {
        bson_t d;
        CHECK(bsonx_from_json(yes[i], &d, NULL) == 0);
        CHECK_MSG(rt_filter_has_exact_id(&d), "%s", yes[i]);
        bson_destroy(&d);
        CHECK(bsonx_from_json(no[i], &d, NULL) == 0);
        CHECK_MSG(!rt_filter_has_exact_id(&d), "%s", no[i]);
        bson_destroy(&d);
    }
}

/* rt_target_chunks marks the chunks rt_target_filter's shards come from (the first
 * pieces of a multi-write's ranges). */
static void test_filter_chunks(void) {
    rt_table_t *t = make_table(false);
    const char *filters[] = {"{\"x\": 5}", "{\"x\": {\"$gte\": 50}}", "{}",
                             "{\"x\": {\"$in\": [-1, 200]}}", "{\"x\": {\"$gt\": 5, \"$lt\": 3}}"};
    const char *want[] = {"010", "011", "111", "101", "100" /* nothing: the first chunk */};
    for (int i = 0; i < 5; i++) {
        bson_t f;
        bool marks[3];
        char got[4] = "";
        ms_error_t err = {0};
        CHECK(bsonx_from_json(filters[i], &f, &err) == 0);
        CHECK_INT(rt_target_chunks(t, &f, marks, &err), 0);
        for (int j = 0; j < 3; j++) got[j] = marks[j] ? '1' : '0';
        CHECK_MSG(strcmp(got, want[i]) == 0, "%s: chunks %s, expected %s", filters[i], got, want[i]);
        bson_destroy(&f);
    }
    rt_table_release(t);
}

T_MAIN(T_CASE(test_doc_targeting), T_CASE(test_filter_targeting),
       T_CASE(test_hashed_equality_targets_one_shard), T_CASE(test_exact_id),
       T_CASE(test_filter_chunks))
