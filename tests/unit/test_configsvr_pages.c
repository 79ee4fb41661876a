/*
 * test_configsvr_pages.c — keyset paging over the config collections (configsvr/cat_docs.c:
 * cat_config_page, cat_config_count, cat_chunk_counts), which config-collection cursors,
 * count, sh.status()'s aggregate and the web view read through: a walk in small pages,
 * with rows refused (CAT_PAGE_STOP) at random, returns every chunk once in key order;
 * the index counts agree with the walk.
 *
 * Also a tool for the long integration test: `test_configsvr_pages --build DBPATH N NS
 * HOST...` writes a catalog (DBPATH/config.db) with the given shards and one collection
 * NS on a hashed key {h: "hashed"} pre-split into N chunks (shards in turn by blocks of
 * 64), the way shardCollection writes its rows, so that a config server started on
 * DBPATH serves a collection of a million chunks a few seconds later.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include <sqlite3.h>

#include "configsvr/configsvr.h"
#include "tests/unit/t.h"

#define BUILD_BLOCK 64

/* Opens path and writes the shards (hosts), the database of ns and ns itself with n
 * chunks; returns the open catalog (0) or an error code. */
static int build(const char *path, int n, const char *ns, char **hosts, int nhosts, cat_t **out,
                 ms_error_t *e) {
    char names[16][64], db[MS_NS_BYTES_MAX + 1];
    keys_pattern_t p;
    cat_coll_t coll;
    bson_t *key = bson_new(), *b = calloc((size_t)n + 1, sizeof *b);
    cat_chunk_plan_t *plan = calloc((size_t)n, sizeof *plan);
    bool created, already;
    int rc = 0;
    if (!b || !plan || nhosts < 1 || nhosts > 16) abort();
    memset(&p, 0, sizeof p);
    memset(&coll, 0, sizeof coll);
    snprintf(db, sizeof db, "%.*s", (int)strcspn(ns, "."), ns);
    if ((rc = cat_open(path, out, e)) != 0) goto done;
    for (int i = 0; i < nhosts && rc == 0; i++) {
        rc = cat_shard_prepare(*out, NULL, hosts[i], names[i], sizeof names[i], &already, e);
        if (rc == 0) rc = cat_shard_insert(*out, names[i], hosts[i], 0, e);
    }
    if (rc == 0) rc = cat_db_ensure(*out, db, names[0], &created, NULL, e);
    BSON_APPEND_UTF8(key, "h", "hashed");
    if (rc == 0) rc = keys_pattern_parse(key, &p, e);
    if (rc) goto done;
    cat_hashed_initial_bounds(&p, n, b);
    for (int i = 0; i < n; i++) plan[i] = (cat_chunk_plan_t){&b[i], &b[i + 1], names[(i / BUILD_BLOCK) % nhosts]};
    snprintf(coll.ns, sizeof coll.ns, "%s", ns);
    bson_copy_to(key, &coll.key);
    bson_oid_init(&coll.epoch, NULL);
    cat_uuid_new(coll.uuid);
    coll.allow_migrations = true;
    coll.created_ms = time_now_ms();
    if ((rc = cat_next_ts(*out, &coll.ts, e)) == 0) rc = cat_coll_create(*out, &coll, plan, n, e);
    bson_destroy(&coll.key);
done:
    for (int i = 0; i <= n; i++)
        if (b[i].len) bson_destroy(&b[i]);
    free(b);
    free(plan);
    bson_destroy(key);
    keys_pattern_free(&p);
    return rc;
}

/* ---- the walk ------------------------------------------------------------------------- */

typedef struct walk {
    int n;                   /* chunks taken */
    int calls;
    bson_t last_max;         /* the last chunk's max: the next chunk's min */
    bool in_order;
    uint64_t rnd;
} walk_t;

static int walk_fn(void *arg, const bson_t *doc) {
    walk_t *w = arg;
    bson_iter_t it;
    bson_t v;
    uint32_t len;
    const uint8_t *data;
    w->calls++;
    w->rnd = w->rnd * 6364136223846793005ull + 1442695040888963407ull;
    if ((w->rnd >> 33) % 5 == 0) return CAT_PAGE_STOP;   /* not taken: must come again */
    if (!bson_iter_init_find(&it, doc, "min") || !BSON_ITER_HOLDS_DOCUMENT(&it)) return 1;
    bson_iter_document(&it, &len, &data);
    bson_init_static(&v, data, len);
    if (w->n > 0 && !bson_equal(&v, &w->last_max)) w->in_order = false;
    if (!bson_iter_init_find(&it, doc, "max") || !BSON_ITER_HOLDS_DOCUMENT(&it)) return 1;
    bson_iter_document(&it, &len, &data);
    bson_destroy(&w->last_max);
    bson_init_static(&v, data, len);
    bson_copy_to(&v, &w->last_max);
    w->n++;
    return 0;
}

static cat_t *small_catalog(int n, uint8_t uuid[16]) {
    static int seq;
    char path[512], *hosts[] = {"tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"};
    cat_t *c = NULL;
    cat_coll_t cc;
    ms_error_t e = {0};
    snprintf(path, sizeof path, "%s/pages%d.db", t_tmpdir(), seq++);
    CHECK_MSG(build(path, n, "app.c", hosts, 3, &c, &e) == 0, "build: %s", e.msg);
    CHECK(cat_coll_get(c, "app.c", &cc, &e) == 0);
    memcpy(uuid, cc.uuid, 16);
    cat_coll_free(&cc);
    return c;
}

static void test_walk_every_chunk_once_in_order(void) {
    uint8_t uuid[16];
    cat_t *c = small_catalog(3000, uuid);
    cat_pin_t pin = {.uuid = uuid};
    ms_error_t e = {0};
    uint64_t seed = t_seed("walk");
    for (int pinned = 0; pinned < 2; pinned++) {
        walk_t w = {.in_order = true, .rnd = seed};
        cat_page_pos_t *pos = cat_page_pos_new();
        bson_init(&w.last_max);
        /* each call a page of 7 rows; bounded: every call takes a row or refuses one */
        for (int i = 0; i < 100000 && !cat_page_pos_done(pos); i++)
            CHECK(cat_config_page(c, "chunks", pinned ? &pin : NULL, pos, 7, walk_fn, &w, &e) == 0);
        CHECK_MSG(w.n == 3000, "pinned=%d took %d chunks", pinned, w.n);
        CHECK(w.in_order);
        CHECK(w.calls > w.n);   /* some rows were refused, and came again */
        bson_destroy(&w.last_max);
        cat_page_pos_free(pos);
    }
    cat_close(c);
}

static int sum_fn(void *arg, const char *ns, const char *shard, int64_t n) {
    int64_t *sums = arg;
    CHECK(strcmp(ns, "app.c") == 0);
    sums[shard[strlen(shard) - 1] - '0'] += n;
    sums[3]++;
    return 0;
}

static void test_index_counts(void) {
    uint8_t uuid[16], other[16] = {0};
    cat_t *c = small_catalog(1000, uuid);
    cat_pin_t pin = {.uuid = uuid}, none = {.uuid = other}, tags = {.ns = "app.c"};
    ms_error_t e = {0};
    int64_t n = -1, sums[4] = {0}, on0 = -1;
    CHECK(cat_config_count(c, "chunks", &pin, NULL, false, &n, &e) == 0 && n == 1000);
    CHECK(cat_config_count(c, "chunks", NULL, NULL, false, &n, &e) == 0 && n == 1000);
    CHECK(cat_config_count(c, "chunks", &none, NULL, false, &n, &e) == 0 && n == 0);
    CHECK(cat_config_count(c, "chunks", &pin, NULL, true, &n, &e) == 0 && n == 0);
    CHECK(cat_config_count(c, "tags", &tags, NULL, false, &n, &e) == 0 && n == 0);
    CHECK(cat_config_count(c, "shards", NULL, NULL, false, &n, &e) == 0 && n == 3);
    CHECK(cat_config_count(c, "chunks", &pin, "shard0", false, &on0, &e) == 0);
    CHECK(cat_chunk_counts(c, &pin, sum_fn, sums, &e) == 0);
    CHECK_MSG(sums[0] + sums[1] + sums[2] == 1000 && sums[3] == 3 && sums[0] == on0,
              "per shard %lld %lld %lld (%lld groups), shard0 counted %lld", (long long)sums[0],
              (long long)sums[1], (long long)sums[2], (long long)sums[3], (long long)on0);
    /* jumbo chunks, flagged here as moveChunk's failure would: counted on their partial index */
    cat_lock(c);
    CHECK(sqlite3_exec(cat_db_handle(c), "UPDATE chunks SET jumbo = 1 WHERE rowid % 100 = 0", NULL, NULL,
                       NULL) == SQLITE_OK);
    cat_unlock(c);
    CHECK(cat_config_count(c, "chunks", &pin, NULL, true, &n, &e) == 0 && n == 10);
    CHECK(cat_config_count(c, "chunks", &none, NULL, true, &n, &e) == 0 && n == 0);
    cat_page_pos_t *pos = cat_page_pos_new();
    CHECK(cat_config_page(c, "nosuch", NULL, pos, 10, walk_fn, NULL, &e) == MS_ERR_NAMESPACE_NOT_FOUND);
    cat_page_pos_free(pos);
    cat_close(c);
}

/* More chunks than one slice of cat_chunk_counts' walk (65,536 index entries): the
 * groups continue across slices and still add up. */
static void test_counts_across_slices(void) {
    uint8_t uuid[16];
    cat_t *c = small_catalog(70000, uuid);
    cat_pin_t pin = {.uuid = uuid};
    ms_error_t e = {0};
    int64_t pinned[4] = {0}, all[4] = {0}, on1 = -1;
    CHECK(cat_chunk_counts(c, &pin, sum_fn, pinned, &e) == 0);
    CHECK(cat_chunk_counts(c, NULL, sum_fn, all, &e) == 0);
    CHECK(cat_config_count(c, "chunks", &pin, "shard1", false, &on1, &e) == 0);
    CHECK_MSG(pinned[0] + pinned[1] + pinned[2] == 70000 && pinned[3] == 3 && pinned[1] == on1,
              "per shard %lld %lld %lld in %lld groups; shard1 counted %lld", (long long)pinned[0],
              (long long)pinned[1], (long long)pinned[2], (long long)pinned[3], (long long)on1);
    CHECK(memcmp(pinned, all, sizeof all) == 0);
    cat_close(c);
}

int main(int argc, char **argv) {
    if (argc >= 6 && strcmp(argv[1], "--build") == 0) {
        char path[4096];
        cat_t *c = NULL;
        ms_error_t e = {0};
        log_init("pages", LOG_WARN);
        snprintf(path, sizeof path, "%s/config.db", argv[2]);
        int rc = build(path, atoi(argv[3]), argv[4], argv + 5, argc - 5, &c, &e);
        cat_close(c);
        if (rc) fprintf(stderr, "build failed: %s\n", e.msg);
        else printf("built %s chunks of %s in %s\n", argv[3], argv[4], path);
        return rc ? 1 : 0;
    }
    static const t_case_t cases[] = {
        {"walk_every_chunk_once_in_order", test_walk_every_chunk_once_in_order},
        {"index_counts", test_index_counts},
        {"counts_across_slices", test_counts_across_slices},
    };
    log_init("test", LOG_WARN);
    return t_run(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
