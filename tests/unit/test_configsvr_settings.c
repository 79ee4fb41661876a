/*
 * test_configsvr_settings.c — unit tests of config.settings updates in the config
 * server's catalog (configsvr/cat_settings.c) on temporary SQLite files: upserts,
 * operators, replacements, validation that refuses a write and leaves the stored
 * document unchanged, multi, and the chunk size the catalog derives.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "configsvr/configsvr.h"
#include "tests/unit/t.h"

static bson_t *J(const char *json) {
    bson_error_t be;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &be);
    if (!b) abort();
    return b;
}

static cat_t *fresh(void) {
    static int seq;
    char path[512];
    cat_t *c = NULL;
    ms_error_t e = {0};
    snprintf(path, sizeof path, "%s/set%d.db", t_tmpdir(), ++seq);
    CHECK_INT(cat_open(path, &c, &e), 0);
    return c;
}

/* Runs one update statement; returns its code and fills the counts. */
static int upd(cat_t *c, const char *q, const char *u, bool upsert, bool multi, int64_t *n,
               int64_t *nmod, bool *upserted) {
    bson_t *bq = J(q), *bu = J(u), id;
    ms_error_t e = {0};
    int rc = cat_settings_update(c, bq, bu, upsert, multi, n, nmod, upserted, &id, &e);
    if (rc == 0 && *upserted) bson_destroy(&id);
    bson_destroy(bq);
    bson_destroy(bu);
    return rc;
}

static char *get_json(cat_t *c, const char *id) {
    bson_t d;
    bool found = false;
    ms_error_t e = {0};
    CHECK_INT(cat_settings_get(c, id, &d, &found, &e), 0);
    if (!found) return NULL;
    char *j = bson_as_relaxed_extended_json(&d, NULL);
    bson_destroy(&d);
    return j;
}

static void test_upsert_and_operators(void) {
    cat_t *c = fresh();
    int64_t n, nmod;
    bool up;
    CHECK_INT(upd(c, "{\"_id\": \"balancer\"}", "{\"$set\": {\"stopped\": true}}", false, false, &n, &nmod, &up), 0);
    CHECK(n == 0 && !up);  /* no upsert: nothing */
    CHECK(get_json(c, "balancer") == NULL);
    CHECK_INT(upd(c, "{\"_id\": \"balancer\"}", "{\"$set\": {\"stopped\": true, \"mode\": \"off\"}}", true, false, &n, &nmod, &up), 0);
    CHECK(up);
    char *j = get_json(c, "balancer");
    CHECK(j && strstr(j, "\"stopped\" : true") && strstr(j, "\"mode\" : \"off\""));
    bson_free(j);
    CHECK_INT(upd(c, "{\"_id\": \"balancer\"}", "{\"$set\": {\"stopped\": true}}", true, false, &n, &nmod, &up), 0);
    CHECK(n == 1 && nmod == 0 && !up);  /* unchanged document: not modified */
    CHECK_INT(upd(c, "{\"_id\": \"balancer\"}", "{\"$unset\": {\"mode\": 1}}", false, false, &n, &nmod, &up), 0);
    CHECK(n == 1 && nmod == 1);
    cat_close(c);
}

static void test_validation_refuses_and_keeps(void) {
    cat_t *c = fresh();
    int64_t n, nmod;
    bool up;
    CHECK_INT(upd(c, "{\"_id\": \"chunksize\"}", "{\"$set\": {\"value\": 64}}", true, false, &n, &nmod, &up), 0);
    CHECK_INT(cat_chunk_size_bytes(c), 64LL * 1024 * 1024);
    CHECK_INT(upd(c, "{\"_id\": \"chunksize\"}", "{\"$set\": {\"value\": 2048}}", true, false, &n, &nmod, &up),
              MS_ERR_BAD_VALUE);
    CHECK_INT(upd(c, "{\"_id\": \"chunksize\"}", "{\"_id\": \"chunksize\", \"value\": 0}", true, false, &n, &nmod, &up),
              MS_ERR_BAD_VALUE);
    CHECK_INT(cat_chunk_size_bytes(c), 64LL * 1024 * 1024);  /* unchanged */
    CHECK_INT(upd(c, "{\"_id\": \"balancer\"}",
                  "{\"$set\": {\"activeWindow\": {\"start\": \"08:00\", \"stop\": \"08:00\"}}}", true, false,
                  &n, &nmod, &up), MS_ERR_BAD_VALUE);
    CHECK(get_json(c, "balancer") == NULL);  /* refused upsert inserted nothing */
    CHECK_INT(upd(c, "{\"_id\": \"chunksize\"}", "{\"$set\": {\"_id\": \"other\"}}", false, false, &n, &nmod, &up),
              MS_ERR_IMMUTABLE_FIELD);
    CHECK_INT(upd(c, "{\"_id\": {\"$bad\": 1}}", "{\"$set\": {\"a\": 1}}", false, false, &n, &nmod, &up),
              MS_ERR_BAD_VALUE);
    CHECK(upd(c, "{}", "{\"a\": 1}", false, true, &n, &nmod, &up) != 0);  /* multi + replacement */
    cat_close(c);
}

static void test_multi_and_default_chunksize(void) {
    cat_t *c = fresh();
    int64_t n, nmod;
    bool up;
    CHECK_INT(cat_chunk_size_bytes(c), 128LL * 1024 * 1024);
    CHECK_INT(upd(c, "{\"_id\": \"automerge\"}", "{\"$set\": {\"enabled\": false}}", true, false, &n, &nmod, &up), 0);
    CHECK_INT(upd(c, "{\"_id\": \"autosplit\"}", "{\"$set\": {\"enabled\": false}}", true, false, &n, &nmod, &up), 0);
    CHECK_INT(upd(c, "{\"enabled\": false}", "{\"$set\": {\"enabled\": true}}", false, true, &n, &nmod, &up), 0);
    CHECK(n == 2 && nmod == 2);
    CHECK_INT(upd(c, "{\"enabled\": true}", "{\"$set\": {\"enabled\": 5}}", false, true, &n, &nmod, &up),
              MS_ERR_BAD_VALUE);
    char *j = get_json(c, "automerge");
    CHECK(j && strstr(j, "\"enabled\" : true"));  /* the failed multi rolled back entirely */
    bson_free(j);
    /* an upsert without _id gets an ObjectId */
    CHECK_INT(upd(c, "{\"kind\": \"x\"}", "{\"$set\": {\"v\": 1}}", true, false, &n, &nmod, &up), 0);
    CHECK(up);
    cat_close(c);
}

T_MAIN(T_CASE(test_upsert_and_operators), T_CASE(test_validation_refuses_and_keeps),
       T_CASE(test_multi_and_default_chunksize))
