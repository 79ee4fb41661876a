/*
 * test_router_target.c — unit tests of the router's targeting (router/rt_target.c):
 * chunk lookup by binary search, a document's shard, and a filter's shards through
 * bounds_from_filter (equality, ranges, $in, unplannable, hashed equality), and the chunks
 * a filter may touch (rt_target_chunks), and a differential test of both against a walk
 * of every chunk over random tables and filters.
 */
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/bsonx.h"
#include "common/mem.h"
#include "router/router.h"
#include "tests/unit/t.h"
#include "tests/unit/t_rtable.h"

/* A table over {x: 1} (or hashed) with the n chunks given. */
static rt_table_t *table_from(const ch_t *chunks, int n, bool hashed) {
    rt_table_t *t = mem_calloc_aligned(1, sizeof *t);   /* holds a bson_t */
    bson_t reply;
    bson_oid_t epoch;
    bool need_full;
    ms_error_t err = {0};
    atomic_init(&t->refs, 1);
    t->sharded = true;
    bson_oid_init(&epoch, NULL);
    reply_of_key(&reply, hashed, &epoch, 1, true, chunks, n);
    CHECK_INT(rtable_from_reply(&reply, NULL, &t->rt, &need_full, &err), 0);
    CHECK(!need_full);
    bson_destroy(&reply);
    return t;
}

/* A table over {x: 1} (or hashed) with chunks [Min,0) s0, [0,100) s1, [100,Max) s2. */
static rt_table_t *make_table(bool hashed) {
    static const ch_t chunks[] = {
        {MINK, 0, "s0", 1, 0}, {0, 100, "s1", 1, 1}, {100, MAXK, "s2", 1, 2}};
    return table_from(chunks, 3, hashed);
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

/* Collects rt_target_chunks' visits as a string of 0/1 per chunk (and checks they come
 * in key order, each once). */
typedef struct visits {
    char *got;
    int last;
} visits_t;

static void note_visit(void *arg, int i, const rtable_chunk_t *c) {
    visits_t *v = arg;
    (void)c;
    CHECK_MSG(i > v->last, "chunk %d visited after %d", i, v->last);
    v->last = i;
    v->got[i] = '1';
}

/* The chunks a filter chose, as "0110..." (cap > nchunks). */
static void chunks_of(rt_table_t *t, const bson_t *f, char *got, size_t cap) {
    ms_error_t err = {0};
    visits_t v = {got, -1};
    CHECK((size_t)t->rt.nchunks < cap);
    memset(got, '0', (size_t)t->rt.nchunks);
    got[t->rt.nchunks] = '\0';
    CHECK_INT(rt_target_chunks(t, f, note_visit, &v, &err), 0);
}

/* rt_target_chunks visits the chunks rt_target_filter's shards come from (the first
 * pieces of a multi-write's ranges). */
static void test_filter_chunks(void) {
    rt_table_t *t = make_table(false);
    const char *filters[] = {"{\"x\": 5}", "{\"x\": {\"$gte\": 50}}", "{}",
                             "{\"x\": {\"$in\": [-1, 200]}}", "{\"x\": {\"$gt\": 5, \"$lt\": 3}}"};
    const char *want[] = {"010", "011", "111", "101", "100" /* nothing: the first chunk */};
    for (int i = 0; i < 5; i++) {
        bson_t f;
        char got[4];
        ms_error_t err = {0};
        CHECK(bsonx_from_json(filters[i], &f, &err) == 0);
        chunks_of(t, &f, got, sizeof got);
        CHECK_MSG(strcmp(got, want[i]) == 0, "%s: chunks %s, expected %s", filters[i], got, want[i]);
        bson_destroy(&f);
    }
    rt_table_release(t);
}

/* ---- differential: targeting against a walk of every chunk ---------------------------- */

#define DIFF_TABLES 60
#define DIFF_FILTERS 100      /* per table: 6,000 cases */
#define DIFF_CHUNKS_MAX 600
#define DIFF_SHARDS_MAX 8

static int64_t rnd_key(int64_t span) {
    return (int64_t)(rand() % (int)(span + 20)) - 10;
}

/* A random table: n chunks with boundaries 0, step, 2 step, ... over {x: 1}, owners
 * drawn from nsh shards, some runs of one owner (as migrations leave them). */
static rt_table_t *random_table(int n, int nsh, int64_t step) {
    static const char *names[DIFF_SHARDS_MAX] = {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"};
    ch_t *c = calloc((size_t)n, sizeof *c);
    CHECK(c);
    int owner = rand() % nsh;
    for (int i = 0; i < n; i++) {
        if (rand() % 3 == 0) owner = rand() % nsh;
        c[i] = (ch_t){i == 0 ? MINK : (int64_t)i * step, i == n - 1 ? MAXK : (int64_t)(i + 1) * step,
                      names[owner], 1, (uint32_t)i};
    }
    rt_table_t *t = table_from(c, n, false);
    free(c);
    return t;
}

/* A random filter on x: equality, $in, one- or two-sided ranges (some empty), the whole
 * space, or a field outside the key. */
static void random_filter(bson_t *f, int64_t span) {
    bson_t op, arr;
    bson_init(f);
    int kind = rand() % 7;
    if (kind == 0) {
        BSON_APPEND_INT64(f, "x", rnd_key(span));
        return;
    }
    if (kind == 1) {
        BSON_APPEND_INT32(f, "y", 1);       /* not the shard key: every owner */
        return;
    }
    if (kind == 2) return;                  /* {} */
    BSON_APPEND_DOCUMENT_BEGIN(f, "x", &op);
    if (kind == 3) {
        int n = rand() % 6;
        BSON_APPEND_ARRAY_BEGIN(&op, "$in", &arr);
        for (int i = 0; i < n; i++) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", i);
            BSON_APPEND_INT64(&arr, idx, rnd_key(span));
        }
        bson_append_array_end(&op, &arr);
    } else {
        static const char *lo_ops[] = {"$gt", "$gte"}, *hi_ops[] = {"$lt", "$lte"};
        if (kind != 5) BSON_APPEND_INT64(&op, lo_ops[rand() % 2], rnd_key(span));
        if (kind != 4) BSON_APPEND_INT64(&op, hi_ops[rand() % 2], rnd_key(span));
    }
    bson_append_document_end(f, &op);
}

/* What targeting must choose, by a walk of every chunk against the filter's ranges:
 * a chunk overlapping a range (max > lo, min < hi or = hi when inclusive); none → the
 * first chunk; the whole space → every chunk. */
static uint64_t brute_force(const rt_table_t *t, const bson_t *f, char *want) {
    const rtable_t *rt = &t->rt;
    bounds_t b;
    ms_error_t err = {0};
    uint64_t mask = 0;
    memset(&b, 0, sizeof b);
    CHECK_INT(bounds_from_filter(f, &rt->pattern, RT_TARGET_RANGES_MAX, &b, &err), 0);
    for (int i = 0; i < rt->nchunks; i++) {
        const rtable_chunk_t *c = rtable_chunk(rt, i);
        bool hit = b.all;
        for (int k = 0; k < b.n && !hit; k++) {
            const bounds_range_t *r = &b.r[k];
            int hi = rtable_bytes_cmp(c->min.data, c->min.len, r->hi.data, r->hi.len);
            hit = rtable_bytes_cmp(c->max.data, c->max.len, r->lo.data, r->lo.len) > 0 &&
                  (hi < 0 || (hi == 0 && r->hi_incl));
        }
        want[i] = hit ? '1' : '0';
        if (hit) mask |= 1ull << c->shard;
    }
    want[rt->nchunks] = '\0';
    if (!mask) {
        want[0] = '1';
        mask = 1ull << rtable_chunk(rt, 0)->shard;
    }
    bounds_free(&b);
    return mask;
}

/* Thousands of random tables (small page geometry too, so walks cross pages and blocks)
 * and filters: rt_target_filter's shards and rt_target_chunks' chunks equal the brute
 * force's. */
static void test_targeting_equals_full_walk(void) {
    static char want[DIFF_CHUNKS_MAX + 1], got[DIFF_CHUNKS_MAX + 1];
    srand(25);
    for (int tb = 0; tb < DIFF_TABLES; tb++) {
        if (tb % 2) rtable_set_geometry(2 + rand() % 4, 2 + rand() % 3);
        else rtable_set_geometry(0, 0);
        int n = 1 + rand() % DIFF_CHUNKS_MAX;
        int64_t step = 1 + rand() % 5;
        rt_table_t *t = random_table(n, 1 + rand() % DIFF_SHARDS_MAX, step);
        for (int q = 0; q < DIFF_FILTERS; q++) {
            bson_t f;
            uint64_t mask = 0;
            bool point;
            ms_error_t err = {0};
            random_filter(&f, (int64_t)n * step);
            uint64_t wmask = brute_force(t, &f, want);
            CHECK_INT(rt_target_filter(t, &f, &mask, &point, &err), 0);
            chunks_of(t, &f, got, sizeof got);
            char *js = bson_as_relaxed_extended_json(&f, NULL);
            CHECK_MSG(mask == wmask, "table %d %s: shards %llx, expected %llx", tb, js,
                      (unsigned long long)mask, (unsigned long long)wmask);
            CHECK_MSG(strcmp(got, want) == 0, "table %d %s: chunks differ", tb, js);
            bson_free(js);
            bson_destroy(&f);
        }
        rt_table_release(t);
    }
    rtable_set_geometry(0, 0);
}

T_MAIN(T_CASE(test_doc_targeting), T_CASE(test_filter_targeting),
       T_CASE(test_hashed_equality_targets_one_shard), T_CASE(test_exact_id),
       T_CASE(test_filter_chunks), T_CASE(test_targeting_equals_full_walk))
