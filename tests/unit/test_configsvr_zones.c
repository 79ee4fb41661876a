/*
 * test_configsvr_zones.c — unit tests of the catalog's zones (configsvr/cat_zones.c) on
 * temporary SQLite files: what the balancer reads (cat_zones_of in key order with full-key
 * bounds, cat_shard_zones), the overlap rule in both directions and at touching bounds,
 * the identical re-add, removal by exact range, and ZoneStillInUse for the last shard of
 * a used zone, including removeShard's start.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/keys.h"
#include "configsvr/configsvr.h"
#include "tests/unit/t.h"
#include "tests/unit/t_cat.h"

static cat_t *fresh(void) {
    cat_t *c = tcat_open("zones", NULL, 0);
    tcat_add_shards(c, 2);
    return c;
}

static int range(cat_t *c, const char *ns, const char *min, const char *max, const char *zone) {
    bson_t *a = J(min), *b = J(max);
    ms_error_t e = {0};
    int rc = cat_zone_update_range(c, ns, a, b, zone, NULL, &e);
    bson_destroy(a);
    bson_destroy(b);
    return rc;
}

static bool json_is(const bson_t *doc, const char *want) {
    bson_t *w = J(want);
    bool eq = bson_equal(doc, w);
    if (!eq) {
        char *s = bson_as_relaxed_extended_json(doc, NULL);
        fprintf(stderr, "got %s want %s\n", s, want);
        bson_free(s);
    }
    bson_destroy(w);
    return eq;
}

static void test_ranges_in_key_order(void) {
    cat_t *c = fresh();
    ms_error_t e = {0};
    tcat_shard_one_chunk(c, "d.c", "{\"a\": 1, \"b\": 1}", "shard0");
    CHECK_INT(cat_zone_add_shard(c, "shard0", "A", &e), 0);
    CHECK_INT(cat_zone_add_shard(c, "shard1", "B", &e), 0);
    CHECK_INT(cat_zone_add_shard(c, "shard1", "A", &e), 0);
    /* inserted out of order; read back in key order with MinKey-extended bounds */
    CHECK_INT(range(c, "d.c", "{\"a\": 20}", "{\"a\": 30}", "B"), 0);
    CHECK_INT(range(c, "d.c", "{\"a\": {\"$minKey\": 1}}", "{\"a\": 5}", "A"), 0);
    CHECK_INT(range(c, "d.c", "{\"a\": 10, \"b\": 3}", "{\"a\": 20}", "A"), 0);  /* touches 20 */
    cat_zone_range_t *v = NULL;
    int n = 0;
    CHECK_INT(cat_zones_of(c, "d.c", &v, &n, &e), 0);
    CHECK_INT(n, 3);
    if (n == 3) {
        CHECK(json_is(&v[0].min, "{\"a\": {\"$minKey\": 1}, \"b\": {\"$minKey\": 1}}"));
        CHECK(json_is(&v[0].max, "{\"a\": 5, \"b\": {\"$minKey\": 1}}"));
        CHECK(json_is(&v[1].min, "{\"a\": 10, \"b\": 3}"));
        CHECK(json_is(&v[2].max, "{\"a\": 30, \"b\": {\"$minKey\": 1}}"));
        CHECK(!strcmp(v[0].zone, "A") && !strcmp(v[1].zone, "A") && !strcmp(v[2].zone, "B"));
    }
    cat_zones_free(v, n);
    CHECK_INT(cat_zones_of(c, "d.other", &v, &n, &e), 0);
    CHECK(n == 0 && v == NULL);
    /* overlaps: inside, around, straddling either bound; identical of another zone */
    CHECK_INT(range(c, "d.c", "{\"a\": 21}", "{\"a\": 22}", "A"), MS_ERR_RANGE_OVERLAP_CONFLICT);
    CHECK_INT(range(c, "d.c", "{\"a\": 15}", "{\"a\": 40}", "A"), MS_ERR_RANGE_OVERLAP_CONFLICT);
    CHECK_INT(range(c, "d.c", "{\"a\": 4}", "{\"a\": 6}", "A"), MS_ERR_RANGE_OVERLAP_CONFLICT);
    CHECK_INT(range(c, "d.c", "{\"a\": 20}", "{\"a\": 30}", "A"), MS_ERR_RANGE_OVERLAP_CONFLICT);
    CHECK_INT(range(c, "d.c", "{\"a\": 20}", "{\"a\": 30}", "B"), 0);    /* identical: ok */
    CHECK_INT(range(c, "d.c", "{\"a\": 5}", "{\"a\": 10}", "B"), 0);     /* fills the gap */
    CHECK_INT(range(c, "d.c", "{\"a\": 40}", "{\"a\": 50}", "C"), MS_ERR_ZONE_NOT_FOUND);
    CHECK_INT(range(c, "d.c", "{\"b\": 40}", "{\"b\": 50}", "A"), MS_ERR_SHARD_KEY_NOT_FOUND);
    CHECK_INT(range(c, "d.c", "{\"a\": 50}", "{\"a\": 50}", "A"), MS_ERR_BAD_VALUE);
    /* removal is by exact (extended) range */
    CHECK_INT(range(c, "d.c", "{\"a\": 20}", "{\"a\": 25}", NULL), 0);
    CHECK_INT(cat_zones_of(c, "d.c", &v, &n, &e), 0);
    cat_zones_free(v, n);
    CHECK_INT(n, 4);
    CHECK_INT(range(c, "d.c", "{\"a\": 20, \"b\": {\"$minKey\": 1}}", "{\"a\": 30}", NULL), 0);
    CHECK_INT(cat_zones_of(c, "d.c", &v, &n, &e), 0);
    cat_zones_free(v, n);
    CHECK_INT(n, 3);
    cat_close(c);
}

static void test_shard_zones_and_still_in_use(void) {
    cat_t *c = fresh();
    ms_error_t e = {0};
    char **z = NULL;
    int n = 0;
    bson_t reply = BSON_INITIALIZER;
    tcat_shard_one_chunk(c, "d.c", "{\"a\": 1}", "shard0");
    CHECK_INT(cat_zone_add_shard(c, "shard1", "X", &e), 0);
    CHECK_INT(cat_zone_add_shard(c, "shard1", "Y", &e), 0);
    CHECK_INT(cat_zone_add_shard(c, "shard1", "X", &e), 0);
    CHECK_INT(cat_zone_add_shard(c, "shard7", "X", &e), MS_ERR_SHARD_NOT_FOUND);
    CHECK_INT(cat_shard_zones(c, "shard1", &z, &n, &e), 0);
    CHECK(n == 2 && !strcmp(z[0], "X") && !strcmp(z[1], "Y"));
    cat_strv_free(z, n);
    CHECK_INT(cat_shard_zones(c, "shard0", &z, &n, &e), 0);
    CHECK(n == 0);
    cat_strv_free(z, n);
    CHECK_INT(cat_shard_zones(c, "shard7", &z, &n, &e), MS_ERR_SHARD_NOT_FOUND);
    CHECK_INT(range(c, "d.c", "{\"a\": 1}", "{\"a\": 2}", "X"), 0);
    CHECK_INT(cat_zone_remove_shard(c, "shard1", "X", &e), MS_ERR_ZONE_STILL_IN_USE);
    CHECK_INT(cat_shard_remove_step(c, "shard1", &reply, &e), MS_ERR_ZONE_STILL_IN_USE);
    CHECK_INT(cat_zone_remove_shard(c, "shard1", "Y", &e), 0);   /* unused zone: fine */
    CHECK_INT(cat_zone_add_shard(c, "shard0", "X", &e), 0);
    CHECK_INT(cat_zone_remove_shard(c, "shard1", "X", &e), 0);   /* shard0 still has X */
    CHECK_INT(cat_shard_remove_step(c, "shard1", &reply, &e), 0);
    bson_destroy(&reply);
    cat_close(c);
}

T_MAIN(T_CASE(test_ranges_in_key_order), T_CASE(test_shard_zones_and_still_in_use))
