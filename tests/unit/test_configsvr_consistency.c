/*
 * test_configsvr_consistency.c — unit tests of the catalog's half of
 * checkMetadataConsistency (configsvr/cat_consistency.c) on temporary catalog files: a
 * healthy catalog reports nothing and lists each sharded collection with the shards that
 * own its chunks; rows broken with SQL (as a bug or a hand edit would leave them) give
 * MongoDB's types with their details; a collection-level check looks at that collection
 * only; the cluster level finds sharded collections of databases that do not exist.
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "configsvr/cat_priv.h"
#include "tests/unit/t.h"
#include "tests/unit/t_cat.h"

/* ns sharded on {h: "hashed"} with n pre-split chunks alternating over shard0, shard1. */
static void hashed_coll(cat_t *c, const char *ns, int n) {
    keys_pattern_t p;
    bson_t *key = J("{\"h\": \"hashed\"}");
    bson_t bounds[9];
    cat_coll_t coll;
    cat_chunk_plan_t plan[8];
    ms_error_t e = {0};
    memset(&p, 0, sizeof p);
    memset(&coll, 0, sizeof coll);
    CHECK_INT(keys_pattern_parse(key, &p, &e), 0);
    cat_hashed_initial_bounds(&p, n, bounds);
    for (int i = 0; i < n; i++) plan[i] = (cat_chunk_plan_t){&bounds[i], &bounds[i + 1], i % 2 ? "shard1" : "shard0"};
    snprintf(coll.ns, sizeof coll.ns, "%s", ns);
    bson_copy_to(key, &coll.key);
    bson_oid_init(&coll.epoch, NULL);
    CHECK_INT(cat_next_ts(c, &coll.ts, &e), 0);
    cat_uuid_new(coll.uuid);
    CHECK_INT(cat_coll_create(c, &coll, plan, n, &e), 0);
    for (int i = 0; i <= n; i++) bson_destroy(&bounds[i]);
    cat_coll_free(&coll);
    keys_pattern_free(&p);
    bson_destroy(key);
}

static void sql(cat_t *c, const char *q) {
    char *msg = NULL;
    int rc = sqlite3_exec(c->db, q, NULL, NULL, &msg);
    CHECK_MSG(rc == SQLITE_OK, "%s: %s", q, msg ? msg : "");
    sqlite3_free(msg);
}

/* The type of found[i] ("" when absent) and its details into *details (a view). */
static const char *found_type(const bson_t *found, int i, bson_t *details) {
    bson_iter_t it, f;
    char k[16];
    snprintf(k, sizeof k, "%d", i);
    if (!bson_iter_init_find(&it, found, k) || !bson_iter_recurse(&it, &f) || !bson_iter_find(&f, "type"))
        return "";
    const char *t = bson_iter_utf8(&f, NULL);
    if (details && bson_iter_recurse(&it, &f) && bson_iter_find(&f, "details")) bsonx_view_container(&f, details);
    return t;
}

static void test_healthy_catalog_lists_owners(void) {
    cat_t *c = tcat_open("cm", NULL, 0);
    ms_error_t e = {0};
    bool created;
    bson_t found = BSON_INITIALIZER;
    cat_cm_coll_t *v = NULL;
    int nfound = 0, n = 0;
    tcat_add_shards(c, 3);
    CHECK_INT(cat_db_ensure(c, "app", "shard0", &created, NULL, &e), 0);
    hashed_coll(c, "app.h", 4);
    tcat_shard_one_chunk(c, "app.one", "{\"x\": 1}", "shard2");
    CHECK_INT(cat_cm_check(c, "app", NULL, &found, &nfound, &v, &n, &e), 0);
    CHECK_INT(nfound, 0);
    CHECK_INT(n, 2);
    CHECK_STR(v[0].ns, "app.h");
    CHECK_INT(v[0].nowners, 2);
    CHECK_STR(v[1].ns, "app.one");
    CHECK_INT(v[1].nowners, 1);
    CHECK_STR(v[1].owners[0], "shard2");
    cat_cm_colls_free(v, n);
    /* collection level: that one only */
    CHECK_INT(cat_cm_check(c, "app", "app.one", &found, &nfound, &v, &n, &e), 0);
    CHECK_INT(n, 1);
    CHECK_STR(v[0].ns, "app.one");
    cat_cm_colls_free(v, n);
    /* cluster level: nothing hidden */
    CHECK_INT(cat_cm_check(c, NULL, NULL, &found, &nfound, NULL, NULL, &e), 0);
    CHECK_INT(nfound, 0);
    bson_destroy(&found);
    cat_close(c);
}

static void test_broken_chunks_give_mongodb_types(void) {
    cat_t *c = tcat_open("cm", NULL, 0);
    ms_error_t e = {0};
    bool created;
    cat_cm_coll_t *v = NULL;
    int n = 0;
    tcat_add_shards(c, 2);
    CHECK_INT(cat_db_ensure(c, "app", "shard0", &created, NULL, &e), 0);
    const char *colls[] = {"app.gap", "app.ovl", "app.min", "app.max", "app.none"};
    for (int i = 0; i < 5; i++) hashed_coll(c, colls[i], 4);
    /* gap: the second chunk gone; overlap: the first chunk stretched over the second;
     * no MinKey / MaxKey: first / last chunk gone; no routing table: all gone */
    sql(c, "DELETE FROM chunks WHERE ns = 'app.gap' AND min_enc = (SELECT min_enc FROM chunks"
           " WHERE ns = 'app.gap' ORDER BY min_enc LIMIT 1 OFFSET 1)");
    sql(c, "UPDATE chunks SET max = (SELECT max FROM chunks WHERE ns = 'app.ovl' ORDER BY min_enc"
           " LIMIT 1 OFFSET 1), max_enc = (SELECT max_enc FROM chunks WHERE ns = 'app.ovl'"
           " ORDER BY min_enc LIMIT 1 OFFSET 1) WHERE ns = 'app.ovl' AND min_enc = (SELECT"
           " min(min_enc) FROM chunks WHERE ns = 'app.ovl')");
    sql(c, "DELETE FROM chunks WHERE ns = 'app.min' AND min_enc = (SELECT min(min_enc) FROM chunks"
           " WHERE ns = 'app.min')");
    sql(c, "DELETE FROM chunks WHERE ns = 'app.max' AND min_enc = (SELECT max(min_enc) FROM chunks"
           " WHERE ns = 'app.max')");
    sql(c, "DELETE FROM chunks WHERE ns = 'app.none'");
    const char *want[] = {"RoutingTableRangeGap", "RoutingTableRangeOverlap",
                          "RoutingTableMissingMinKey", "RoutingTableMissingMaxKey",
                          "MissingRoutingTable"};
    for (int i = 0; i < 5; i++) {
        bson_t found = BSON_INITIALIZER, d;
        bson_iter_t it;
        int nfound = 0;
        CHECK_INT(cat_cm_check(c, "app", colls[i], &found, &nfound, &v, &n, &e), 0);
        CHECK_MSG(nfound == 1, "%s: %d found", colls[i], nfound);
        CHECK_STR(found_type(&found, 0, &d), want[i]);
        CHECK(bson_iter_init_find(&it, &d, "namespace") && strcmp(bson_iter_utf8(&it, NULL), colls[i]) == 0);
        CHECK(bson_iter_init_find(&it, &d, "collectionUUID") && BSON_ITER_HOLDS_BINARY(&it));
        if (i < 2) CHECK(bson_iter_init_find(&it, &d, "chunkA") && bson_iter_init_find(&it, &d, "chunkB"));
        if (i == 2) CHECK(bson_iter_init_find(&it, &d, "minKeyObj") && bson_iter_init_find(&it, &d, "globalMin"));
        if (i == 3) CHECK(bson_iter_init_find(&it, &d, "maxKeyObj") && bson_iter_init_find(&it, &d, "globalMax"));
        if (i == 4) CHECK_INT(v[0].nowners, 0);
        cat_cm_colls_free(v, n);
        bson_destroy(&found);
    }
    /* the database level sees all five */
    bson_t found = BSON_INITIALIZER;
    int nfound = 0;
    CHECK_INT(cat_cm_check(c, "app", NULL, &found, &nfound, NULL, NULL, &e), 0);
    CHECK_INT(nfound, 5);
    bson_destroy(&found);
    cat_close(c);
}

static void test_hidden_sharded_collection(void) {
    cat_t *c = tcat_open("cm", NULL, 0);
    ms_error_t e = {0};
    bson_t found = BSON_INITIALIZER, d;
    bson_iter_t it;
    int nfound = 0;
    tcat_add_shards(c, 1);
    tcat_shard_one_chunk(c, "ghost.x", "{\"x\": 1}", "shard0");   /* no database entry */
    CHECK_INT(cat_cm_check(c, NULL, NULL, &found, &nfound, NULL, NULL, &e), 0);
    CHECK_INT(nfound, 1);
    CHECK_STR(found_type(&found, 0, &d), "HiddenShardedCollection");
    CHECK(bson_iter_init_find(&it, &d, "namespace") && strcmp(bson_iter_utf8(&it, NULL), "ghost.x") == 0);
    CHECK(bson_iter_init(&it, &d) && bson_iter_find_descendant(&it, "collection.key.x", &it));
    bson_destroy(&found);
    cat_close(c);
}

T_MAIN(T_CASE(test_healthy_catalog_lists_owners), T_CASE(test_broken_chunks_give_mongodb_types),
       T_CASE(test_hidden_sharded_collection))
