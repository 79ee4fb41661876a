/*
 * t_cat.h — fixtures the config server's catalog unit tests share (test_configsvr_catalog,
 * test_configsvr_migrate, test_configsvr_zones): a fresh catalog file, registered shards,
 * a collection sharded with one chunk, and BSON from JSON text. Static inline so a test
 * that uses only some of them links cleanly.
 */
#ifndef MS_T_CAT_H
#define MS_T_CAT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "configsvr/configsvr.h"
#include "tests/unit/t.h"

/* A document from JSON text (caller destroys); aborts the test binary on bad JSON. */
static inline bson_t *J(const char *json) {
    bson_error_t be;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &be);
    if (!b) {
        fprintf(stderr, "bad test json %s: %s\n", json, be.message);
        abort();
    }
    return b;
}

/* A fresh catalog file <tmpdir>/<tag><n>.db; its path into path_out when non-NULL. */
static inline cat_t *tcat_open(const char *tag, char *path_out, size_t cap) {
    static int seq;
    char path[512];
    cat_t *c = NULL;
    ms_error_t e = {0};
    snprintf(path, sizeof path, "%s/%s%d.db", t_tmpdir(), tag, ++seq);
    if (path_out) snprintf(path_out, cap, "%s", path);
    int rc = cat_open(path, &c, &e);
    CHECK_MSG(rc == 0, "cat_open: %s", e.msg);
    return c;
}

/* Adds shards shard0..shard{n-1} with hosts tcp://127.0.0.1:1000{i}. */
static inline void tcat_add_shards(cat_t *c, int n) {
    for (int i = 0; i < n; i++) {
        char name[64], host[64];
        bool already = true;
        ms_error_t e = {0};
        snprintf(host, sizeof host, "tcp://127.0.0.1:%d", 10000 + i);
        CHECK_INT(cat_shard_prepare(c, NULL, host, name, sizeof name, &already, &e), 0);
        CHECK(!already);
        CHECK_INT(cat_shard_insert(c, name, host, 0, &e), 0);
    }
}

/* Shards ns with a single chunk [MinKey, MaxKey) on shard under key json. */
static inline void tcat_shard_one_chunk(cat_t *c, const char *ns, const char *key_json,
                                        const char *shard) {
    cat_coll_t coll;
    keys_pattern_t p;
    bson_t *key = J(key_json), gmin = BSON_INITIALIZER, gmax = BSON_INITIALIZER;
    ms_error_t e = {0};
    memset(&coll, 0, sizeof coll);
    memset(&p, 0, sizeof p);
    CHECK_INT(keys_pattern_parse(key, &p, &e), 0);
    keys_global_min(&p, &gmin);
    keys_global_max(&p, &gmax);
    snprintf(coll.ns, sizeof coll.ns, "%s", ns);
    bson_copy_to(key, &coll.key);
    bson_oid_init(&coll.epoch, NULL);
    CHECK_INT(cat_next_ts(c, &coll.ts, &e), 0);
    cat_uuid_new(coll.uuid);
    coll.created_ms = 1000;
    cat_chunk_plan_t plan = {&gmin, &gmax, shard};
    int rc = cat_coll_create(c, &coll, &plan, 1, &e);
    CHECK_MSG(rc == 0, "create: %s", e.msg);
    cat_coll_free(&coll);
    keys_pattern_free(&p);
    bson_destroy(&gmin);
    bson_destroy(&gmax);
    bson_destroy(key);
}

#endif
