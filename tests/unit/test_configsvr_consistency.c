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

/* ---- the local tiling check of a change ------------------------------------------------ */

#define LOCAL_N 16

/* ns sharded on {h: "hashed"} with LOCAL_N chunks: 0..11 on shard0, 12.. on shard1; the
 * bounds into b (LOCAL_N + 1, caller destroys), the generation into *coll. */
static void local_coll(cat_t *c, const char *ns, bson_t *b, cat_coll_t *coll) {
    keys_pattern_t p;
    bson_t *key = J("{\"h\": \"hashed\"}");
    cat_chunk_plan_t plan[LOCAL_N];
    ms_error_t e = {0};
    memset(&p, 0, sizeof p);
    memset(coll, 0, sizeof *coll);
    CHECK_INT(keys_pattern_parse(key, &p, &e), 0);
    cat_hashed_initial_bounds(&p, LOCAL_N, b);
    for (int i = 0; i < LOCAL_N; i++) plan[i] = (cat_chunk_plan_t){&b[i], &b[i + 1], i < 12 ? "shard0" : "shard1"};
    snprintf(coll->ns, sizeof coll->ns, "%s", ns);
    bson_copy_to(key, &coll->key);
    bson_oid_init(&coll->epoch, NULL);
    CHECK_INT(cat_next_ts(c, &coll->ts, &e), 0);
    cat_uuid_new(coll->uuid);
    CHECK_INT(cat_coll_create(c, coll, plan, LOCAL_N, &e), 0);
    keys_pattern_free(&p);
    bson_destroy(key);
}

/* Splits chunk i ([b[i], b[i+1])) of ns at its hashed midpoint (i < LOCAL_N - 1). */
static int split_mid(cat_t *c, const char *ns, const bson_t *b, int i, ms_error_t *e) {
    bson_iter_t lo, hi;
    bson_t mid = BSON_INITIALIZER;
    CHECK(bson_iter_init_find(&lo, &b[i], "h") && bson_iter_init_find(&hi, &b[i + 1], "h"));
    int64_t h = bson_iter_int64(&hi);  /* chunk 0 starts at MinKey: split just below its max */
    BSON_APPEND_INT64(&mid, "h", BSON_ITER_HOLDS_INT64(&lo) ? bson_iter_int64(&lo) / 2 + h / 2 : h - 1000);
    const bson_t *pts[] = {&mid};
    int rc = cat_chunk_split(c, ns, &b[i], &b[i + 1], pts, 1, NULL, e);
    bson_destroy(&mid);
    return rc;
}

/* Moves chunk i of ns (at version (1, i), as created) from shard0 to shard1. */
static int move_chunk(cat_t *c, const cat_coll_t *coll, const bson_t *b, int i, ms_error_t *e) {
    cat_mig_commit_t m;
    cat_version_t donor;
    memset(&m, 0, sizeof m);
    m.ns = coll->ns;
    m.from = "shard0";
    m.to = "shard1";
    m.min = &b[i];
    m.max = &b[i + 1];
    m.chunk_major = 1;
    m.chunk_minor = (uint32_t)i;
    bson_oid_copy(&coll->epoch, &m.epoch);
    m.ts = coll->ts;
    return cat_migration_commit(c, &m, &donor, e);
}

/* Chunks of ns whose min is chunk i's min (1 when it is intact). */
static int64_t rows_at(cat_t *c, const bson_t *b, int i) {
    int64_t n = -1;
    sqlite3_stmt *st = NULL;
    CHECK_INT(sqlite3_prepare_v2(c->db, "SELECT count(*) FROM chunks WHERE ns = 'app.t' AND min = ?", -1,
                                 &st, NULL), SQLITE_OK);
    sqlite3_bind_blob(st, 1, bson_get_data(&b[i]), (int)b[i].len, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* A gap and an overlap written into config.chunks by hand: a split, a merge or a commit
 * whose range touches one is refused (InternalError naming the inconsistency, nothing
 * written); one far from both succeeds — the local check does not see them — and
 * checkMetadataConsistency reports both. */
static void test_local_check_refuses_corrupt_neighbour(void) {
    cat_t *c = tcat_open("cm", NULL, 0);
    ms_error_t e = {0};
    bool created;
    bson_t b[LOCAL_N + 1];
    cat_coll_t coll;
    tcat_add_shards(c, 2);
    CHECK_INT(cat_db_ensure(c, "app", "shard0", &created, NULL, &e), 0);
    local_coll(c, "app.t", b, &coll);
    /* a gap: chunk 1 gone (chunks 0 and 2 no longer meet); an overlap: chunk 9 stretched
     * over chunk 10 */
    sql(c, "DELETE FROM chunks WHERE ns = 'app.t' AND min_enc = (SELECT min_enc FROM chunks"
           " WHERE ns = 'app.t' ORDER BY min_enc LIMIT 1 OFFSET 1)");
    sql(c, "UPDATE chunks SET max = (SELECT max FROM chunks WHERE ns = 'app.t' ORDER BY min_enc"
           " LIMIT 1 OFFSET 9), max_enc = (SELECT max_enc FROM chunks WHERE ns = 'app.t'"
           " ORDER BY min_enc LIMIT 1 OFFSET 9) WHERE ns = 'app.t' AND min_enc = (SELECT min_enc"
           " FROM chunks WHERE ns = 'app.t' ORDER BY min_enc LIMIT 1 OFFSET 8)");

    /* next to the gap: chunk 2 (above it) and chunk 0 (below it) */
    CHECK_INT(split_mid(c, "app.t", b, 2, &e), MS_ERR_INTERNAL);
    CHECK_MSG(strstr(e.msg, "RoutingTableRangeGap") != NULL, "%s", e.msg);
    CHECK_INT(split_mid(c, "app.t", b, 0, &e), MS_ERR_INTERNAL);
    CHECK_INT(cat_chunk_merge(c, "app.t", &b[2], &b[4], NULL, &e), MS_ERR_INTERNAL);
    CHECK_INT(move_chunk(c, &coll, b, 2, &e), MS_ERR_INTERNAL);
    /* next to the overlap: chunk 10 (its lower neighbour reaches into it) */
    CHECK_INT(split_mid(c, "app.t", b, 10, &e), MS_ERR_INTERNAL);
    CHECK_MSG(strstr(e.msg, "RoutingTableRangeOverlap") != NULL, "%s", e.msg);
    CHECK_INT(cat_chunk_merge(c, "app.t", &b[10], &b[12], NULL, &e), MS_ERR_INTERNAL);
    CHECK_INT(move_chunk(c, &coll, b, 10, &e), MS_ERR_INTERNAL);
    /* nothing written by the refusals */
    CHECK_INT((int)rows_at(c, b, 2), 1);
    CHECK_INT((int)rows_at(c, b, 3), 1);
    CHECK_INT((int)rows_at(c, b, 10), 1);
    CHECK_INT((int)rows_at(c, b, 11), 1);

    /* far from both: chunks 4..6 */
    CHECK_INT(split_mid(c, "app.t", b, 4, &e), 0);
    CHECK_INT(cat_chunk_merge(c, "app.t", &b[4], &b[5], NULL, &e), 0);
    CHECK_INT(move_chunk(c, &coll, b, 6, &e), 0);
    CHECK_INT(cat_verify_tiling(c, "app.t", &e), MS_ERR_INTERNAL);  /* the test-time check */

    /* checkMetadataConsistency finds both, wherever they are */
    bson_t found = BSON_INITIALIZER;
    cat_cm_coll_t *v = NULL;
    int nfound = 0, n = 0;
    CHECK_INT(cat_cm_check(c, "app", "app.t", &found, &nfound, &v, &n, &e), 0);
    CHECK_INT(nfound, 2);
    CHECK_STR(found_type(&found, 0, NULL), "RoutingTableRangeGap");
    CHECK_STR(found_type(&found, 1, NULL), "RoutingTableRangeOverlap");
    cat_cm_colls_free(v, n);
    bson_destroy(&found);
    for (int i = 0; i <= LOCAL_N; i++) bson_destroy(&b[i]);
    cat_coll_free(&coll);
    cat_close(c);
}

/* Each hot query of config.chunks (cat_priv.h's CAT_HOT_CHUNK_SQL) is a search of the
 * index named beside it: no full scan of the table, no sort of the collection's chunks. The incremental refresh
 * sorts its few changed rows by min; that sort is over the rows the lastmod index found. */
static void test_hot_queries_use_indexes(void) {
    cat_t *c = tcat_open("cm", NULL, 0);
    static const struct {
        const char *sql, *index;
    } hot[] = CAT_HOT_CHUNK_SQL;
    for (size_t i = 0; i < sizeof hot / sizeof hot[0]; i++) {
        char q[1200], plan[2000] = "", want[128];
        sqlite3_stmt *st = NULL;
        snprintf(q, sizeof q, "EXPLAIN QUERY PLAN %s", hot[i].sql);
        snprintf(want, sizeof want, "INDEX %s (", hot[i].index);
        CHECK_MSG(sqlite3_prepare_v2(c->db, q, -1, &st, NULL) == SQLITE_OK, "%s: %s", hot[i].sql,
                  sqlite3_errmsg(c->db));
        while (st && sqlite3_step(st) == SQLITE_ROW) {
            size_t len = strlen(plan);
            snprintf(plan + len, sizeof plan - len, "%s; ", (const char *)sqlite3_column_text(st, 3));
        }
        sqlite3_finalize(st);
        CHECK_MSG(strstr(plan, want) != NULL, "%s: %s", hot[i].sql, plan);
        CHECK_MSG(strstr(plan, "SCAN") == NULL, "%s: %s", hot[i].sql, plan);
        /* (a routing-table page too: it reads in lastmod order, the index's own) */
        CHECK_MSG(strstr(plan, "TEMP B-TREE") == NULL, "%s: %s", hot[i].sql, plan);
    }
    cat_close(c);
}

T_MAIN(T_CASE(test_local_check_refuses_corrupt_neighbour), T_CASE(test_hot_queries_use_indexes),
       T_CASE(test_healthy_catalog_lists_owners), T_CASE(test_broken_chunks_give_mongodb_types),
       T_CASE(test_hidden_sharded_collection))
