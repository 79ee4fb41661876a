/*
 * test_configsvr_catalog.c — unit tests of the config server's catalog (configsvr/
 * catalog.c) on temporary SQLite files: shard/database/collection metadata, chunk
 * versions after split and merge (notes §2.2), the tiling invariant, incremental
 * getRoutingTable, MongoDB's hashed initial split points, settings validation, the
 * catalog's before-COMMIT failpoints (an injected error rolls the whole change back), and
 * a seeded random walk of splits and merges checked against a model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/keys.h"
#include "configsvr/configsvr.h"
#include "tests/unit/t.h"
#include "tests/unit/t_cat.h"

/* One chunk of a routing table: min/max as JSON and version. */
typedef struct rchunk {
    char min[256], max[256], shard[64];
    uint32_t M, m;
} rchunk_t;

static int routing(cat_t *c, const char *ns, const cat_version_t *since, rchunk_t *out, int cap,
                   bool *full, cat_version_t *cv) {
    bson_t reply = BSON_INITIALIZER;
    bson_iter_t it, arr;
    ms_error_t e = {0};
    int n = 0;
    int rc = cat_routing_table(c, ns, since, &reply, &e);
    CHECK_MSG(rc == 0, "routing: %s", e.msg);
    if (rc) {
        bson_destroy(&reply);
        return -1;
    }
    if (bson_iter_init_find(&it, &reply, "full")) *full = bson_iter_bool(&it);
    if (bson_iter_init_find(&it, &reply, "collectionVersion")) {
        uint32_t len;
        const uint8_t *data;
        bson_t d;
        bson_iter_document(&it, &len, &data);
        bson_init_static(&d, data, len);
        CHECK_INT(cat_version_parse(&d, cv, &e), 0);
    }
    CHECK(bson_iter_init_find(&it, &reply, "chunks") && bson_iter_recurse(&it, &arr));
    while (bson_iter_next(&arr) && n < cap) {
        bson_iter_t ch;
        bson_iter_recurse(&arr, &ch);
        while (bson_iter_next(&ch)) {
            const char *k = bson_iter_key(&ch);
            if (strcmp(k, "min") == 0 || strcmp(k, "max") == 0) {
                uint32_t len;
                const uint8_t *data;
                bson_t d;
                bson_iter_document(&ch, &len, &data);
                bson_init_static(&d, data, len);
                char *j = bson_as_relaxed_extended_json(&d, NULL);
                snprintf(k[1] == 'i' ? out[n].min : out[n].max, 256, "%s", j);
                bson_free(j);
            } else if (strcmp(k, "shard") == 0) {
                snprintf(out[n].shard, 64, "%s", bson_iter_utf8(&ch, NULL));
            } else if (strcmp(k, "lastmod") == 0) {
                bson_iter_timestamp(&ch, &out[n].M, &out[n].m);
            }
        }
        n++;
    }
    bson_destroy(&reply);
    return n;
}

/* Counts the documents of config.<coll> whose `what` is what (NULL = all). */
typedef struct what_acc {
    const char *what;
    int n;
} what_acc_t;

static int what_fn(void *arg, const bson_t *doc) {
    what_acc_t *a = arg;
    bson_iter_t it;
    if (!a->what) a->n++;
    else if (bson_iter_init_find(&it, doc, "what") && strcmp(bson_iter_utf8(&it, NULL), a->what) == 0)
        a->n++;
    return 0;
}

static int count_what(cat_t *c, const char *coll, const char *what) {
    what_acc_t a = {what, 0};
    ms_error_t e = {0};
    CHECK_INT(cat_config_scan(c, coll, what_fn, &a, &e), 0);
    return a.n;
}

/* ---- tests ----------------------------------------------------------------------- */

static void test_hashed_split_points(void) {
    int64_t pts[16];
    cat_hashed_split_points(4, pts);
    /* MongoDB's values for 4 chunks (notes §7). */
    CHECK(pts[0] == -4611686018427387902LL);
    CHECK(pts[1] == 0);
    CHECK(pts[2] == 4611686018427387902LL);
    cat_hashed_split_points(2, pts);
    CHECK(pts[0] == 0);
    cat_hashed_split_points(3, pts);
    /* odd: ±interval/2 with interval = (INT64_MAX/3)*2 */
    CHECK(pts[0] == -((INT64_MAX / 3) * 2 / 2));
    CHECK(pts[1] == (INT64_MAX / 3) * 2 / 2);
    cat_hashed_split_points(6, pts);
    int64_t iv = (INT64_MAX / 6) * 2;
    CHECK(pts[0] == -2 * iv && pts[1] == -iv && pts[2] == 0 && pts[3] == iv && pts[4] == 2 * iv);
    for (int n = 1; n <= 16; n++) {
        cat_hashed_split_points(n, pts);
        for (int i = 1; i < n - 1; i++) CHECK(pts[i - 1] < pts[i]);
        for (int i = 0; i < n - 1; i++) CHECK(pts[i] == -pts[n - 2 - i]);  /* symmetric */
    }
}

static void test_open_reopen_cluster_id(void) {
    char path[512];
    cat_t *c = tcat_open("cat", path, sizeof path), *c2 = NULL;
    bson_oid_t a, b;
    cat_ts_t t1, t2;
    ms_error_t e = {0};
    cat_cluster_id(c, &a);
    CHECK_INT(cat_next_ts(c, &t1, &e), 0);
    CHECK_INT(cat_next_ts(c, &t2, &e), 0);
    CHECK(t2.t > t1.t || (t2.t == t1.t && t2.i > t1.i));
    cat_close(c);
    CHECK_INT(cat_open(path, &c2, &e), 0);
    cat_cluster_id(c2, &b);
    CHECK(bson_oid_equal(&a, &b));
    /* cluster time survives a restart: still strictly increasing */
    CHECK_INT(cat_next_ts(c2, &t1, &e), 0);
    CHECK(t1.t > t2.t || (t1.t == t2.t && t1.i > t2.i));
    cat_close(c2);
}

static void test_shards_names_and_duplicates(void) {
    char path[512], name[64];
    cat_t *c = tcat_open("cat", path, sizeof path);
    ms_error_t e = {0};
    bool already = false;
    tcat_add_shards(c, 2);
    /* same host again without a name: idempotent */
    CHECK_INT(cat_shard_prepare(c, NULL, "tcp://127.0.0.1:10000", name, sizeof name, &already, &e), 0);
    CHECK(already);
    CHECK_STR(name, "shard0");
    /* same host, another name: refused */
    CHECK_INT(cat_shard_prepare(c, "other", "tcp://127.0.0.1:10000", name, sizeof name, &already, &e),
              MS_ERR_ILLEGAL_OPERATION);
    CHECK(strstr(e.msg, "shard0") != NULL);
    /* name taken by another host */
    CHECK_INT(cat_shard_prepare(c, "shard1", "tcp://127.0.0.1:19999", name, sizeof name, &already, &e),
              MS_ERR_ILLEGAL_OPERATION);
    /* explicit name ok; next default is one past the highest shardN */
    CHECK_INT(cat_shard_prepare(c, "alpha", "tcp://127.0.0.1:19998", name, sizeof name, &already, &e), 0);
    CHECK_INT(cat_shard_insert(c, "alpha", "tcp://127.0.0.1:19998", 0, &e), 0);
    CHECK_INT(cat_shard_prepare(c, NULL, "tcp://127.0.0.1:19997", name, sizeof name, &already, &e), 0);
    CHECK_STR(name, "shard2");
    /* listShards shape */
    bson_t r = BSON_INITIALIZER;
    CHECK_INT(cat_shards_append(c, &r, "shards", &e), 0);
    char *j = bsonx_to_json(&r);
    CHECK(strstr(j, "\"_id\" : \"alpha\"") || strstr(j, "\"_id\":\"alpha\""));
    CHECK(strstr(j, "state") != NULL);
    bson_free(j);
    bson_destroy(&r);
    char host[128];
    CHECK_INT(cat_shard_host(c, "nope", host, sizeof host, NULL, &e), MS_ERR_SHARD_NOT_FOUND);
    cat_close(c);
}

static void test_databases_primary_choice(void) {
    char path[512], prim[64];
    cat_t *c = tcat_open("cat", path, sizeof path);
    ms_error_t e = {0};
    bool created = false;
    CHECK_INT(cat_db_ensure(c, "app", NULL, &created, NULL, &e), MS_ERR_SHARD_NOT_FOUND);
    tcat_add_shards(c, 2);
    CHECK_INT(cat_db_ensure(c, "a", NULL, &created, NULL, &e), 0);
    CHECK(created);
    CHECK_INT(cat_db_primary(c, "a", prim, sizeof prim, &e), 0);
    CHECK_STR(prim, "shard0");
    /* fewest databases wins */
    CHECK_INT(cat_db_ensure(c, "b", NULL, &created, NULL, &e), 0);
    CHECK_INT(cat_db_primary(c, "b", prim, sizeof prim, &e), 0);
    CHECK_STR(prim, "shard1");
    /* existing: same primary ok, different refused */
    bson_t out = BSON_INITIALIZER;
    CHECK_INT(cat_db_ensure(c, "b", "shard1", &created, &out, &e), 0);
    CHECK(!created);
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, &out, "version") && BSON_ITER_HOLDS_DOCUMENT(&it));
    bson_destroy(&out);
    CHECK_INT(cat_db_ensure(c, "b", "shard0", &created, NULL, &e), MS_ERR_NAMESPACE_EXISTS);
    CHECK_INT(cat_db_ensure(c, "c", "nope", &created, NULL, &e), MS_ERR_SHARD_NOT_FOUND);
    CHECK_INT(cat_db_ensure(c, "config", NULL, &created, NULL, &e), MS_ERR_ILLEGAL_OPERATION);
    CHECK_INT(cat_db_ensure(c, "a.b", NULL, &created, NULL, &e), MS_ERR_INVALID_NAMESPACE);
    CHECK_INT(cat_db_primary(c, "zzz", prim, sizeof prim, &e), MS_ERR_NAMESPACE_NOT_FOUND);
    cat_close(c);
}

static void test_split_versions(void) {
    char path[512];
    cat_t *c = tcat_open("cat", path, sizeof path);
    ms_error_t e = {0};
    rchunk_t ch[16];
    bool full = false;
    cat_version_t cv;
    tcat_add_shards(c, 1);
    tcat_shard_one_chunk(c, "app.u", "{\"x\": 1}", "shard0");
    CHECK_INT(routing(c, "app.u", NULL, ch, 16, &full, &cv), 1);
    CHECK(full && ch[0].M == 1 && ch[0].m == 0);

    bson_t *mn = J("{\"x\": {\"$minKey\": 1}}"), *mx = J("{\"x\": {\"$maxKey\": 1}}");
    bson_t *p10 = J("{\"x\": 10}"), *p20 = J("{\"x\": 20}"), *p30 = J("{\"x\": 30}");
    const bson_t *pts1[] = {p10};
    bson_t info = BSON_INITIALIZER;
    CHECK_INT(cat_chunk_split(c, "app.u", mn, mx, pts1, 1, &info, &e), 0);
    /* pieces (1,1) and (1,2) */
    CHECK_INT(routing(c, "app.u", NULL, ch, 16, &full, &cv), 2);
    CHECK(ch[0].M == 1 && ch[0].m == 1 && ch[1].M == 1 && ch[1].m == 2);
    CHECK(cv.major == 1 && cv.minor == 2);
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, &info, "shard") && strcmp(bson_iter_utf8(&it, NULL), "shard0") == 0);
    bson_destroy(&info);

    /* multi-split of [10, MaxKey) at 20 and 30: (1,3), (1,4), (1,5) */
    const bson_t *pts2[] = {p20, p30};
    CHECK_INT(cat_chunk_split(c, "app.u", p10, mx, pts2, 2, NULL, &e), 0);
    CHECK_INT(routing(c, "app.u", NULL, ch, 16, &full, &cv), 4);
    CHECK(ch[0].m == 1 && ch[1].m == 3 && ch[2].m == 4 && ch[3].m == 5);
    CHECK_INT(cat_verify_tiling(c, "app.u", &e), 0);

    /* preconditions as MongoDB: no such chunk, key == min, not increasing, outside */
    CHECK_INT(cat_chunk_split(c, "app.u", mn, mx, pts1, 1, NULL, &e), MS_ERR_BAD_VALUE);
    const bson_t *eqmin[] = {p10};
    CHECK_INT(cat_chunk_split(c, "app.u", p10, p20, eqmin, 1, NULL, &e), MS_ERR_INVALID_OPTIONS);
    bson_t *p15 = J("{\"x\": 15}"), *p12 = J("{\"x\": 12}"), *bad = J("{\"y\": 12}");
    const bson_t *dec[] = {p15, p12};
    CHECK_INT(cat_chunk_split(c, "app.u", p10, p20, dec, 2, NULL, &e), MS_ERR_INVALID_OPTIONS);
    const bson_t *out_of[] = {p30};
    CHECK_INT(cat_chunk_split(c, "app.u", p10, p20, out_of, 1, NULL, &e), MS_ERR_INVALID_OPTIONS);
    const bson_t *badk[] = {bad};
    CHECK_INT(cat_chunk_split(c, "app.u", p10, p20, badk, 1, NULL, &e), MS_ERR_BAD_VALUE);
    CHECK_INT(cat_chunk_split(c, "app.none", p10, p20, pts1, 1, NULL, &e), MS_ERR_NAMESPACE_NOT_SHARDED);
    /* nothing changed by the refused splits */
    CHECK_INT(routing(c, "app.u", NULL, ch, 16, &full, &cv), 4);
    CHECK(cv.major == 1 && cv.minor == 5);

    /* changelog: one `split` and three `multi-split` entries */
    CHECK_INT(count_what(c, "changelog", "split"), 1);
    CHECK_INT(count_what(c, "changelog", "multi-split"), 3);
    CHECK_INT(count_what(c, "changelog", "shardCollection.end"), 1);
    bson_destroy(mn);
    bson_destroy(mx);
    bson_destroy(p10);
    bson_destroy(p20);
    bson_destroy(p30);
    bson_destroy(p15);
    bson_destroy(p12);
    bson_destroy(bad);
    cat_close(c);
}

static void test_merge_versions(void) {
    char path[512];
    cat_t *c = tcat_open("cat", path, sizeof path);
    ms_error_t e = {0};
    rchunk_t ch[16];
    bool full;
    cat_version_t cv;
    tcat_add_shards(c, 1);
    tcat_shard_one_chunk(c, "app.m", "{\"x\": 1}", "shard0");
    bson_t *mn = J("{\"x\": {\"$minKey\": 1}}"), *mx = J("{\"x\": {\"$maxKey\": 1}}");
    bson_t *p10 = J("{\"x\": 10}"), *p20 = J("{\"x\": 20}"), *p30 = J("{\"x\": 30}");
    const bson_t *pts[] = {p10, p20, p30};
    CHECK_INT(cat_chunk_split(c, "app.m", mn, mx, pts, 3, NULL, &e), 0);  /* (1,1)..(1,4) */
    /* merge [10, 30): two chunks → (1,5), first keeps its place */
    bson_t info = BSON_INITIALIZER;
    CHECK_INT(cat_chunk_merge(c, "app.m", p10, p30, &info, &e), 0);
    CHECK_INT(routing(c, "app.m", NULL, ch, 16, &full, &cv), 3);
    CHECK_STR(ch[1].min, "{ \"x\" : 10 }");
    CHECK_STR(ch[1].max, "{ \"x\" : 30 }");
    CHECK(ch[1].M == 1 && ch[1].m == 5);
    CHECK(cv.major == 1 && cv.minor == 5);
    bson_destroy(&info);
    /* already one chunk: ok, no version change */
    CHECK_INT(cat_chunk_merge(c, "app.m", p10, p30, NULL, &e), 0);
    CHECK_INT(cat_coll_version(c, "app.m", &cv, &e), 0);
    CHECK(cv.major == 1 && cv.minor == 5);
    /* bounds not on chunk boundaries */
    bson_t *p25 = J("{\"x\": 25}");
    CHECK_INT(cat_chunk_merge(c, "app.m", p10, p25, NULL, &e), MS_ERR_ILLEGAL_OPERATION);
    CHECK_INT(cat_chunk_merge(c, "app.m", p25, mx, NULL, &e), MS_ERR_ILLEGAL_OPERATION);
    CHECK_INT(cat_chunk_merge(c, "app.m", p30, p10, NULL, &e), MS_ERR_BAD_VALUE);
    /* whole range */
    CHECK_INT(cat_chunk_merge(c, "app.m", mn, mx, NULL, &e), 0);
    CHECK_INT(routing(c, "app.m", NULL, ch, 16, &full, &cv), 1);
    CHECK(ch[0].M == 1 && ch[0].m == 6);
    CHECK_INT(count_what(c, "changelog", "merge"), 2);
    CHECK_INT(cat_verify_tiling(c, "app.m", &e), 0);
    bson_destroy(mn);
    bson_destroy(mx);
    bson_destroy(p10);
    bson_destroy(p20);
    bson_destroy(p30);
    bson_destroy(p25);
    cat_close(c);
}

static void test_merge_refuses_two_shards(void) {
    char path[512];
    cat_t *c = tcat_open("cat", path, sizeof path);
    ms_error_t e = {0};
    keys_pattern_t p;
    bson_t *key = J("{\"h\": \"hashed\"}");
    bson_t bounds[5];
    cat_coll_t coll;
    tcat_add_shards(c, 2);
    memset(&p, 0, sizeof p);
    memset(&coll, 0, sizeof coll);
    CHECK_INT(keys_pattern_parse(key, &p, &e), 0);
    cat_hashed_initial_bounds(&p, 4, bounds);
    cat_chunk_plan_t plan[4];
    const char *owners[] = {"shard0", "shard1", "shard0", "shard1"};
    for (int i = 0; i < 4; i++) plan[i] = (cat_chunk_plan_t){&bounds[i], &bounds[i + 1], owners[i]};
    snprintf(coll.ns, sizeof coll.ns, "app.h");
    bson_copy_to(key, &coll.key);
    bson_oid_init(&coll.epoch, NULL);
    CHECK_INT(cat_next_ts(c, &coll.ts, &e), 0);
    cat_uuid_new(coll.uuid);
    CHECK_INT(cat_coll_create(c, &coll, plan, 4, &e), 0);
    /* the hashed points are MongoDB's */
    char *j = bsonx_to_json(&bounds[1]);
    CHECK(strstr(j, "-4611686018427387902") != NULL);
    bson_free(j);
    rchunk_t ch[8];
    bool full;
    cat_version_t cv;
    CHECK_INT(routing(c, "app.h", NULL, ch, 8, &full, &cv), 4);
    for (int i = 0; i < 4; i++) {
        CHECK(ch[i].M == 1 && ch[i].m == (uint32_t)i);
        CHECK_STR(ch[i].shard, owners[i]);
    }
    CHECK_INT(cat_chunk_merge(c, "app.h", &bounds[0], &bounds[2], NULL, &e), MS_ERR_ILLEGAL_OPERATION);
    CHECK(strstr(e.msg, "one shard") != NULL);
    /* creating again: NamespaceExists; a plan with a gap: refused before writing */
    CHECK_INT(cat_coll_create(c, &coll, plan, 4, &e), MS_ERR_NAMESPACE_EXISTS);
    snprintf(coll.ns, sizeof coll.ns, "app.gap");
    cat_chunk_plan_t gap[2] = {{&bounds[0], &bounds[1], "shard0"}, {&bounds[2], &bounds[4], "shard0"}};
    CHECK_INT(cat_coll_create(c, &coll, gap, 2, &e), MS_ERR_BAD_VALUE);
    CHECK_INT(cat_coll_get(c, "app.gap", &coll, &e), MS_ERR_NAMESPACE_NOT_SHARDED);
    for (int i = 0; i < 5; i++) bson_destroy(&bounds[i]);
    cat_coll_free(&coll);
    keys_pattern_free(&p);
    bson_destroy(key);
    cat_close(c);
}

static void test_incremental_routing(void) {
    char path[512];
    cat_t *c = tcat_open("cat", path, sizeof path);
    ms_error_t e = {0};
    rchunk_t ch[16];
    bool full = true;
    cat_version_t cv, since;
    tcat_add_shards(c, 1);
    tcat_shard_one_chunk(c, "app.r", "{\"a\": 1, \"b\": 1}", "shard0");
    bson_t *mn = J("{\"a\": {\"$minKey\": 1}, \"b\": {\"$minKey\": 1}}");
    bson_t *mx = J("{\"a\": {\"$maxKey\": 1}, \"b\": {\"$maxKey\": 1}}");
    bson_t *p1 = J("{\"a\": 5, \"b\": {\"$minKey\": 1}}"), *p2 = J("{\"a\": 9, \"b\": \"z\"}");
    const bson_t *pts[] = {p1, p2};
    CHECK_INT(cat_chunk_split(c, "app.r", mn, mx, pts, 2, NULL, &e), 0);   /* (1,1),(1,2),(1,3) */
    CHECK_INT(routing(c, "app.r", NULL, ch, 16, &full, &cv), 3);
    since = cv;  /* (1,3) */
    /* nothing new: only the chunk at (1,3) itself (lastmod >= since) */
    CHECK_INT(routing(c, "app.r", &since, ch, 16, &full, &cv), 1);
    CHECK(!full);
    /* split the first chunk: its pieces (1,4),(1,5) plus (1,3) */
    bson_t *p0 = J("{\"a\": 1, \"b\": 1}");
    const bson_t *pts0[] = {p0};
    CHECK_INT(cat_chunk_split(c, "app.r", mn, p1, pts0, 1, NULL, &e), 0);
    CHECK_INT(routing(c, "app.r", &since, ch, 16, &full, &cv), 3);
    CHECK(!full);
    CHECK(ch[0].m == 4 && ch[1].m == 5 && ch[2].m == 3);  /* sorted by min */
    CHECK(cv.minor == 5);
    /* another generation → full */
    bson_oid_init(&since.epoch, NULL);
    CHECK_INT(routing(c, "app.r", &since, ch, 16, &full, &cv), 4);
    CHECK(full);
    /* drop then reshard: new generation, full table of one chunk */
    bool existed = false;
    cat_version_t old = cv;
    CHECK_INT(cat_coll_drop(c, "app.r", &existed, &e), 0);
    CHECK(existed);
    CHECK_INT(cat_routing_table(c, "app.r", NULL, &(bson_t)BSON_INITIALIZER, &e), MS_ERR_NAMESPACE_NOT_SHARDED);
    tcat_shard_one_chunk(c, "app.r", "{\"a\": 1, \"b\": 1}", "shard0");
    CHECK_INT(routing(c, "app.r", &old, ch, 16, &full, &cv), 1);
    CHECK(full && !bson_oid_equal(&cv.epoch, &old.epoch));
    CHECK(cv.ts.t > old.ts.t || (cv.ts.t == old.ts.t && cv.ts.i > old.ts.i));
    bson_destroy(mn);
    bson_destroy(mx);
    bson_destroy(p0);
    bson_destroy(p1);
    bson_destroy(p2);
    cat_close(c);
}

/* Shapes of config documents a user reads (notes §9). */
typedef struct first_doc {
    bson_t doc;
    bool have;
} first_doc_t;

static int first_fn(void *arg, const bson_t *doc) {
    first_doc_t *f = arg;
    if (!f->have) {
        bson_copy_to(doc, &f->doc);
        f->have = true;
    }
    return 0;
}

static bool has_type(const bson_t *d, const char *k, bson_type_t t) {
    bson_iter_t it;
    return bson_iter_init_find(&it, d, k) && bson_iter_type(&it) == t;
}

static void test_config_document_shapes(void) {
    char path[512];
    cat_t *c = tcat_open("cat", path, sizeof path);
    ms_error_t e = {0};
    bool created;
    tcat_add_shards(c, 1);
    CHECK_INT(cat_db_ensure(c, "app", NULL, &created, NULL, &e), 0);
    tcat_shard_one_chunk(c, "app.s", "{\"x\": 1}", "shard0");
    first_doc_t f = {.have = false};
    CHECK_INT(cat_config_scan(c, "chunks", first_fn, &f, &e), 0);
    CHECK(f.have);
    CHECK(has_type(&f.doc, "_id", BSON_TYPE_OID) && has_type(&f.doc, "uuid", BSON_TYPE_BINARY) &&
          has_type(&f.doc, "min", BSON_TYPE_DOCUMENT) && has_type(&f.doc, "max", BSON_TYPE_DOCUMENT) &&
          has_type(&f.doc, "shard", BSON_TYPE_UTF8) && has_type(&f.doc, "lastmod", BSON_TYPE_TIMESTAMP) &&
          has_type(&f.doc, "onCurrentShardSince", BSON_TYPE_TIMESTAMP) &&
          has_type(&f.doc, "history", BSON_TYPE_ARRAY));
    bson_destroy(&f.doc);
    f.have = false;
    CHECK_INT(cat_config_scan(c, "collections", first_fn, &f, &e), 0);
    CHECK(has_type(&f.doc, "_id", BSON_TYPE_UTF8) && has_type(&f.doc, "lastmodEpoch", BSON_TYPE_OID) &&
          has_type(&f.doc, "lastmod", BSON_TYPE_DATE_TIME) && has_type(&f.doc, "timestamp", BSON_TYPE_TIMESTAMP) &&
          has_type(&f.doc, "key", BSON_TYPE_DOCUMENT) && has_type(&f.doc, "unique", BSON_TYPE_BOOL) &&
          has_type(&f.doc, "noBalance", BSON_TYPE_BOOL));
    bson_destroy(&f.doc);
    f.have = false;
    CHECK_INT(cat_config_scan(c, "databases", first_fn, &f, &e), 0);
    CHECK(has_type(&f.doc, "_id", BSON_TYPE_UTF8) && has_type(&f.doc, "primary", BSON_TYPE_UTF8) &&
          has_type(&f.doc, "version", BSON_TYPE_DOCUMENT));
    bson_destroy(&f.doc);
    f.have = false;
    CHECK_INT(cat_config_scan(c, "version", first_fn, &f, &e), 0);
    CHECK(has_type(&f.doc, "clusterId", BSON_TYPE_OID));
    bson_destroy(&f.doc);
    f.have = false;
    CHECK_INT(cat_config_scan(c, "changelog", first_fn, &f, &e), 0);
    CHECK(has_type(&f.doc, "_id", BSON_TYPE_UTF8) && has_type(&f.doc, "time", BSON_TYPE_DATE_TIME) &&
          has_type(&f.doc, "what", BSON_TYPE_UTF8) && has_type(&f.doc, "details", BSON_TYPE_DOCUMENT));
    bson_destroy(&f.doc);
    CHECK_INT(cat_router_ping(c, "tcp://127.0.0.1:1", 5, false, "0.1", &e), 0);
    CHECK_INT(cat_router_ping(c, "tcp://127.0.0.1:1", 6, true, "0.1", &e), 0);
    CHECK_INT(count_what(c, "mongos", NULL), 1);
    CHECK_INT(cat_config_scan(c, "nope", first_fn, &f, &e), MS_ERR_NAMESPACE_NOT_FOUND);
    int64_t s, d, co, ch;
    CHECK_INT(cat_counts(c, &s, &d, &co, &ch, &e), 0);
    CHECK(s == 1 && d == 1 && co == 1 && ch == 1);
    cat_close(c);
}

static void test_settings_validation(void) {
    static const struct {
        const char *json;
        int code;
    } cases[] = {
        {"{\"_id\": \"balancer\", \"stopped\": true, \"mode\": \"off\"}", 0},
        {"{\"_id\": \"balancer\", \"mode\": \"full\"}", 0},
        {"{\"_id\": \"balancer\", \"mode\": \"sometimes\"}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"balancer\", \"stopped\": 1}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"balancer\", \"activeWindow\": {\"start\": \"23:00\", \"stop\": \"06:00\"}}", 0},
        {"{\"_id\": \"balancer\", \"activeWindow\": {\"start\": \"10:00\", \"stop\": \"10:00\"}}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"balancer\", \"activeWindow\": {\"start\": \"24:00\", \"stop\": \"10:00\"}}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"balancer\", \"activeWindow\": {\"start\": \"1:00\", \"stop\": \"10:00\"}}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"balancer\", \"activeWindow\": {\"start\": \"01:00\"}}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"balancer\", \"activeWindow\": \"01:00-02:00\"}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"balancer\", \"_secondaryThrottle\": {\"w\": 1}}", 0},
        {"{\"_id\": \"chunksize\", \"value\": 64}", 0},
        {"{\"_id\": \"chunksize\", \"value\": 1}", 0},
        {"{\"_id\": \"chunksize\", \"value\": 1024}", 0},
        {"{\"_id\": \"chunksize\", \"value\": 0}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"chunksize\", \"value\": 1025}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"chunksize\", \"value\": 1.5}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"chunksize\", \"value\": \"64\"}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"chunksize\"}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"automerge\", \"enabled\": false}", 0},
        {"{\"_id\": \"automerge\", \"enabled\": \"no\"}", MS_ERR_BAD_VALUE},
        {"{\"_id\": \"custom\", \"anything\": 1}", 0},
        {"{\"x\": 1}", MS_ERR_BAD_VALUE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_t *d = J(cases[i].json);
        ms_error_t e = {0};
        int rc = cat_settings_validate(d, &e);
        CHECK_MSG(rc == cases[i].code, "%s: got %d (%s), want %d", cases[i].json, rc, e.msg,
                  cases[i].code);
        bson_destroy(d);
    }
}

static void test_remove_shard_and_drops(void) {
    char path[512];
    cat_t *c = tcat_open("cat", path, sizeof path);
    ms_error_t e = {0};
    bool created, existed;
    bson_iter_t it;
    tcat_add_shards(c, 2);
    CHECK_INT(cat_db_ensure(c, "app", "shard1", &created, NULL, &e), 0);
    tcat_shard_one_chunk(c, "app.d", "{\"x\": 1}", "shard1");
    bson_t r = BSON_INITIALIZER;
    CHECK_INT(cat_shard_remove_step(c, "shard1", &r, &e), 0);
    CHECK(bson_iter_init_find(&it, &r, "state") && strcmp(bson_iter_utf8(&it, NULL), "started") == 0);
    bson_destroy(&r);
    bson_init(&r);
    /* a second draining shard is refused */
    CHECK_INT(cat_shard_remove_step(c, "shard0", &r, &e), MS_ERR_CONFLICTING_OPERATION);
    CHECK_INT(cat_shard_remove_step(c, "shard1", &r, &e), 0);
    CHECK(bson_iter_init_find(&it, &r, "state") && strcmp(bson_iter_utf8(&it, NULL), "ongoing") == 0);
    CHECK(bson_iter_init_find(&it, &r, "remaining"));
    char *j = bsonx_to_json(&r);
    CHECK(strstr(j, "\"chunks\" : 1") != NULL && strstr(j, "\"dbs\" : 1") != NULL);
    bson_free(j);
    bson_destroy(&r);
    /* a draining shard is not picked as a primary */
    CHECK_INT(cat_db_ensure(c, "other", "shard1", &created, NULL, &e), MS_ERR_ILLEGAL_OPERATION);
    char **colls = NULL;
    int n = 0;
    CHECK_INT(cat_db_collections(c, "app", &colls, &n, &e), 0);
    CHECK_INT(n, 1);
    cat_strv_free(colls, n);
    CHECK_INT(cat_db_drop(c, "app", &existed, &e), 0);
    CHECK(existed);
    CHECK_INT(count_what(c, "chunks", NULL), 0);
    CHECK_INT(count_what(c, "collections", NULL), 0);
    bson_init(&r);
    CHECK_INT(cat_shard_remove_step(c, "shard1", &r, &e), 0);
    CHECK(bson_iter_init_find(&it, &r, "state") && strcmp(bson_iter_utf8(&it, NULL), "completed") == 0);
    bson_destroy(&r);
    bson_init(&r);
    /* never the last shard */
    CHECK_INT(cat_shard_remove_step(c, "shard0", &r, &e), MS_ERR_ILLEGAL_OPERATION);
    CHECK_INT(cat_shard_remove_step(c, "shard9", &r, &e), MS_ERR_SHARD_NOT_FOUND);
    bson_destroy(&r);
    CHECK_INT(count_what(c, "shards", NULL), 1);
    cat_close(c);
}

/* Seeded random walk: random splits and merges on a model of the chunk table; after each
 * step the catalog's table equals the model, versions are unique and the collection
 * version only grows, and the tiling holds. */
static void test_random_split_merge_walk(void) {
    char path[512];
    cat_t *c = tcat_open("cat", path, sizeof path);
    ms_error_t e = {0};
    uint64_t seed = t_seed("random_split_merge_walk");
    srand((unsigned)seed);
    tcat_add_shards(c, 1);
    tcat_shard_one_chunk(c, "app.w", "{\"k\": 1}", "shard0");
    /* model: boundaries as ints; -1 = MinKey, 1000000 = MaxKey */
    enum { MAXB = 64, KMAX = 1000000 };
    int b[MAXB + 1] = {-1, KMAX}, nb = 2;
    uint32_t last_minor = 0;
    for (int step = 0; step < 200; step++) {
        int i = rand() % (nb - 1);  /* chunk [b[i], b[i+1]) */
        char jmin[64], jmax[64];
        if (b[i] < 0) snprintf(jmin, sizeof jmin, "{\"k\": {\"$minKey\": 1}}");
        else snprintf(jmin, sizeof jmin, "{\"k\": %d}", b[i]);
        bool do_split = nb < MAXB && (rand() % 3 != 0);
        if (do_split) {
            int lo = b[i] < 0 ? 0 : b[i] + 1, hi = b[i + 1] == KMAX ? 100000 : b[i + 1];
            if (hi - lo < 1) continue;
            int k = lo + rand() % (hi - lo);
            if (k == b[i]) continue;
            if (b[i + 1] == KMAX) snprintf(jmax, sizeof jmax, "{\"k\": {\"$maxKey\": 1}}");
            else snprintf(jmax, sizeof jmax, "{\"k\": %d}", b[i + 1]);
            char jk[64];
            snprintf(jk, sizeof jk, "{\"k\": %d}", k);
            bson_t *mn = J(jmin), *mx = J(jmax), *pk = J(jk);
            const bson_t *pts[] = {pk};
            int rc = cat_chunk_split(c, "app.w", mn, mx, pts, 1, NULL, &e);
            CHECK_MSG(rc == 0, "step %d split: %s", step, e.msg);
            memmove(&b[i + 2], &b[i + 1], sizeof(int) * (size_t)(nb - i - 1));
            b[i + 1] = k;
            nb++;
            bson_destroy(mn);
            bson_destroy(mx);
            bson_destroy(pk);
        } else {
            int j = i + 1 + rand() % 3;  /* merge chunks i..j-1 */
            if (j > nb - 1) j = nb - 1;
            if (b[j] == KMAX) snprintf(jmax, sizeof jmax, "{\"k\": {\"$maxKey\": 1}}");
            else snprintf(jmax, sizeof jmax, "{\"k\": %d}", b[j]);
            bson_t *mn = J(jmin), *mx = J(jmax);
            int rc = cat_chunk_merge(c, "app.w", mn, mx, NULL, &e);
            CHECK_MSG(rc == 0, "step %d merge: %s", step, e.msg);
            memmove(&b[i + 1], &b[j], sizeof(int) * (size_t)(nb - j));
            nb -= j - i - 1;
            bson_destroy(mn);
            bson_destroy(mx);
        }
        rchunk_t ch[MAXB];
        bool full;
        cat_version_t cv;
        int n = routing(c, "app.w", NULL, ch, MAXB, &full, &cv);
        CHECK_INT(n, nb - 1);
        CHECK(cv.major == 1 && cv.minor >= last_minor);
        last_minor = cv.minor;
        for (int x = 0; x < n && x < nb - 1; x++) {
            char want[64];
            if (b[x] < 0) snprintf(want, sizeof want, "{ \"k\" : { \"$minKey\" : 1 } }");
            else snprintf(want, sizeof want, "{ \"k\" : %d }", b[x]);
            CHECK_STR(ch[x].min, want);
            for (int y = 0; y < x; y++) CHECK(ch[y].m != ch[x].m);
        }
        CHECK_INT(cat_verify_tiling(c, "app.w", &e), 0);
        if (t_case_failures) break;
    }
    cat_close(c);
}

/* Turns point name on for one firing with action "error". */
static void fp_error_once(const char *name) {
    bson_t *cmd = NULL, reply = BSON_INITIALIZER;
    ms_error_t e = {0};
    char json[256];
    snprintf(json, sizeof json,
             "{\"configureFailPoint\": \"%s\", \"mode\": {\"times\": 1}, \"data\": {\"action\": \"error\"}}",
             name);
    cmd = J(json);
    CHECK_INT(fp_configure(cmd, &reply, &e), 0);
    bson_destroy(&reply);
    bson_destroy(cmd);
}

/* The catalog's *BeforeCommit points fire with every row of the change written: an
 * error there must roll all of it back (versions, pieces, changelog), leave the catalog
 * usable, and the same operation must then succeed. */
static void test_failpoints_before_commit(void) {
    char path[512];
    cat_t *c = tcat_open("cat", path, sizeof path);
    ms_error_t e = {0};
    rchunk_t ch[16];
    bool full = false, upserted = false;
    cat_version_t cv;
    int64_t n = 0, nmod = 0;
    cfg_register_failpoints();
    tcat_add_shards(c, 2);
    tcat_shard_one_chunk(c, "app.f", "{\"x\": 1}", "shard0");
    bson_t *mn = J("{\"x\": {\"$minKey\": 1}}"), *mx = J("{\"x\": {\"$maxKey\": 1}}");
    bson_t *p10 = J("{\"x\": 10}");
    const bson_t *pts[] = {p10};

    /* split */
    fp_error_once(CFG_FP_SPLIT_BEFORE_COMMIT);
    CHECK_INT(cat_chunk_split(c, "app.f", mn, mx, pts, 1, NULL, &e), MS_ERR_FAIL_POINT_ENABLED);
    CHECK(strstr(e.msg, CFG_FP_SPLIT_BEFORE_COMMIT) != NULL);
    CHECK_INT(routing(c, "app.f", NULL, ch, 16, &full, &cv), 1);
    CHECK(cv.major == 1 && cv.minor == 0);
    CHECK_INT(count_what(c, "changelog", "split"), 0);
    CHECK_INT(cat_chunk_split(c, "app.f", mn, mx, pts, 1, NULL, &e), 0);
    CHECK_INT(routing(c, "app.f", NULL, ch, 16, &full, &cv), 2);
    CHECK(cv.major == 1 && cv.minor == 2);

    /* merge */
    fp_error_once(CFG_FP_MERGE_BEFORE_COMMIT);
    CHECK_INT(cat_chunk_merge(c, "app.f", mn, mx, NULL, &e), MS_ERR_FAIL_POINT_ENABLED);
    CHECK_INT(routing(c, "app.f", NULL, ch, 16, &full, &cv), 2);
    CHECK(cv.major == 1 && cv.minor == 2);
    CHECK_INT(count_what(c, "changelog", "merge"), 0);
    CHECK_INT(cat_chunk_merge(c, "app.f", mn, mx, NULL, &e), 0);
    CHECK_INT(routing(c, "app.f", NULL, ch, 16, &full, &cv), 1);
    CHECK(cv.major == 1 && cv.minor == 3);
    CHECK_INT(cat_verify_tiling(c, "app.f", &e), 0);

    /* removeShard's first step (mark draining) */
    bson_t r = BSON_INITIALIZER;
    fp_error_once(CFG_FP_REMOVE_SHARD_BEFORE_COMMIT);
    CHECK_INT(cat_shard_remove_step(c, "shard1", &r, &e), MS_ERR_FAIL_POINT_ENABLED);
    CHECK_INT(r.len, 5);  /* nothing appended to the reply */
    bool draining = true;
    CHECK_INT(cat_shard_host(c, "shard1", NULL, 0, &draining, &e), 0);
    CHECK(!draining);
    CHECK_INT(cat_shard_remove_step(c, "shard1", &r, &e), 0);
    CHECK_INT(cat_shard_host(c, "shard1", NULL, 0, &draining, &e), 0);
    CHECK(draining);
    bson_destroy(&r);

    /* settings update */
    bson_t *q = J("{\"_id\": \"chunksize\"}"), *u = J("{\"$set\": {\"value\": 64}}"), uid;
    fp_error_once(CFG_FP_SETTINGS_BEFORE_COMMIT);
    CHECK_INT(cat_settings_update(c, q, u, true, false, &n, &nmod, &upserted, &uid, &e),
              MS_ERR_FAIL_POINT_ENABLED);
    CHECK(!upserted && n == 0);
    CHECK_INT((int)(cat_chunk_size_bytes(c) >> 20), CAT_CHUNKSIZE_MB_DEFAULT);
    CHECK_INT(cat_settings_update(c, q, u, true, false, &n, &nmod, &upserted, &uid, &e), 0);
    CHECK(upserted);
    if (upserted) bson_destroy(&uid);
    CHECK_INT((int)(cat_chunk_size_bytes(c) >> 20), 64);

    bson_destroy(q);
    bson_destroy(u);
    bson_destroy(mn);
    bson_destroy(mx);
    bson_destroy(p10);
    cat_close(c);
}

T_MAIN(T_CASE(test_hashed_split_points), T_CASE(test_open_reopen_cluster_id),
       T_CASE(test_shards_names_and_duplicates), T_CASE(test_databases_primary_choice),
       T_CASE(test_split_versions), T_CASE(test_merge_versions),
       T_CASE(test_merge_refuses_two_shards), T_CASE(test_incremental_routing),
       T_CASE(test_config_document_shapes), T_CASE(test_settings_validation),
       T_CASE(test_remove_shard_and_drops), T_CASE(test_random_split_merge_walk),
       T_CASE(test_failpoints_before_commit))
