/*
 * test_configsvr_migrate.c — unit tests of the catalog side of chunk migration
 * (configsvr/cat_migrate.c) on temporary SQLite files: the commit's versions (notes §2.2:
 * moved range (M+1, 0), remainders (M+1, 1) / (M+1, 2), the donor's control chunk, a
 * donor left with nothing at (0, 0)), idempotent repeats, the refusals (StaleEpoch,
 * ConflictingOperationInProgress, ShardNotFound), the recovery fence
 * (ensureChunkVersionIsGreaterThan), config.migrations, shard changelog entries and the
 * hangBeforeCommitMigration failpoint rolling everything back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/keys.h"
#include "configsvr/configsvr.h"
#include "tests/unit/t.h"
#include "tests/unit/t_cat.h"

/* Shards ns by {x: 1} with one chunk on shard0, then splits it at the given x values. */
static void make_coll(cat_t *c, const char *ns, const int *splits, int n) {
    cat_coll_t coll;
    bson_t *key = J("{\"x\": 1}"), *mn = J("{\"x\": {\"$minKey\": 1}}"), *mx = J("{\"x\": {\"$maxKey\": 1}}");
    ms_error_t e = {0};
    memset(&coll, 0, sizeof coll);
    snprintf(coll.ns, sizeof coll.ns, "%s", ns);
    bson_copy_to(key, &coll.key);
    bson_oid_init(&coll.epoch, NULL);
    CHECK_INT(cat_next_ts(c, &coll.ts, &e), 0);
    cat_uuid_new(coll.uuid);
    cat_chunk_plan_t plan = {mn, mx, "shard0"};
    CHECK_INT(cat_coll_create(c, &coll, &plan, 1, &e), 0);
    cat_coll_free(&coll);
    if (n > 0) {
        bson_t pts[8];
        const bson_t *pp[8];
        for (int i = 0; i < n; i++) {
            bson_init(&pts[i]);
            BSON_APPEND_INT32(&pts[i], "x", splits[i]);
            pp[i] = &pts[i];
        }
        CHECK_INT(cat_chunk_split(c, ns, mn, mx, pp, n, NULL, &e), 0);
        for (int i = 0; i < n; i++) bson_destroy(&pts[i]);
    }
    bson_destroy(key);
    bson_destroy(mn);
    bson_destroy(mx);
}

/* One chunk as the test sees it: min x (INT32_MIN for MinKey), shard, version. */
typedef struct tchunk {
    int min;
    char shard[32];
    uint32_t M, m;
    char hist0[32];   /* shard of the first history entry */
} tchunk_t;

typedef struct scan {
    const char *ns;
    tchunk_t v[16];
    int n;
} scan_t;

static int scan_fn(void *arg, const bson_t *doc) {
    scan_t *s = arg;
    bson_iter_t it, sub;
    if (s->n >= 16) return 0;
    tchunk_t *t = &s->v[s->n++];
    memset(t, 0, sizeof *t);
    t->min = INT32_MIN;
    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, "min.x", &sub) &&
        BSON_ITER_HOLDS_INT32(&sub))
        t->min = bson_iter_int32(&sub);
    if (bson_iter_init_find(&it, doc, "shard")) snprintf(t->shard, sizeof t->shard, "%s", bson_iter_utf8(&it, NULL));
    if (bson_iter_init_find(&it, doc, "lastmod")) bson_iter_timestamp(&it, &t->M, &t->m);
    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, "history.0.shard", &sub))
        snprintf(t->hist0, sizeof t->hist0, "%s", bson_iter_utf8(&sub, NULL));
    return 0;
}

/* The chunks of ns in key order (chunk documents name their collection by uuid only;
 * each test's catalog holds one collection). */
static int chunks(cat_t *c, const char *ns, scan_t *s) {
    ms_error_t e = {0};
    memset(s, 0, sizeof *s);
    s->ns = ns;
    CHECK_INT(cat_config_scan(c, "chunks", scan_fn, s, &e), 0);
    return s->n;
}

static bool chunk_is(const tchunk_t *t, int min, const char *shard, uint32_t M, uint32_t m) {
    bool ok = t->min == min && strcmp(t->shard, shard) == 0 && t->M == M && t->m == m;
    if (!ok)
        fprintf(stderr, "  chunk min=%d shard=%s %u|%u, expected min=%d shard=%s %u|%u\n", t->min,
                t->shard, t->M, t->m, min, shard, M, m);
    return ok;
}

/* Bound {x: v}, or MinKey / MaxKey for INT32_MIN / INT32_MAX (caller destroys). */
static bson_t *bound(int v) {
    if (v == INT32_MIN) return J("{\"x\": {\"$minKey\": 1}}");
    if (v == INT32_MAX) return J("{\"x\": {\"$maxKey\": 1}}");
    bson_t *b = bson_new();
    BSON_APPEND_INT32(b, "x", v);
    return b;
}

/* Commits the move of [lo, hi) of ns from -> to, seen at chunk version (M, m). */
static int commit(cat_t *c, const char *ns, const char *from, const char *to, int lo, int hi,
                  uint32_t M, uint32_t m, cat_version_t *donor, ms_error_t *e) {
    cat_coll_t coll;
    cat_mig_commit_t req;
    bson_t *mn = bound(lo), *mx = bound(hi);
    int rc = cat_coll_get(c, ns, &coll, e);
    memset(&req, 0, sizeof req);
    if (rc == 0) {
        bson_oid_copy(&coll.epoch, &req.epoch);
        req.ts = coll.ts;
        cat_coll_free(&coll);
    } else {
        bson_oid_init(&req.epoch, NULL);
    }
    req.ns = ns;
    req.from = from;
    req.to = to;
    req.min = mn;
    req.max = mx;
    req.chunk_major = M;
    req.chunk_minor = m;
    rc = cat_migration_commit(c, &req, donor, e);
    bson_destroy(mn);
    bson_destroy(mx);
    return rc;
}

#define MIN INT32_MIN
#define MAX INT32_MAX

static void test_move_whole_chunks(void) {
    cat_t *c = tcat_open("mig", NULL, 0);
    ms_error_t e = {0};
    cat_version_t d;
    scan_t s;
    const int sp[] = {10, 20};
    tcat_add_shards(c, 2);
    make_coll(c, "app.m", sp, 2);   /* [MinKey,10) 1|1, [10,20) 1|2, [20,MaxKey) 1|3 */
    CHECK_INT(chunks(c, "app.m", &s), 3);
    CHECK(chunk_is(&s.v[1], 10, "shard0", 1, 2));

    /* [10,20) moves: (2,0) on shard1; the control chunk [MinKey,10) (2,1) */
    CHECK_INT(commit(c, "app.m", "shard0", "shard1", 10, 20, 1, 2, &d, &e), 0);
    CHECK_INT(chunks(c, "app.m", &s), 3);
    CHECK(chunk_is(&s.v[0], MIN, "shard0", 2, 1));
    CHECK(chunk_is(&s.v[1], 10, "shard1", 2, 0));
    CHECK(chunk_is(&s.v[2], 20, "shard0", 1, 3));
    CHECK_STR(s.v[1].hist0, "shard1");
    CHECK(d.major == 2 && d.minor == 1);
    CHECK_INT(cat_verify_tiling(c, "app.m", &e), 0);

    /* idempotent: the same commit again changes nothing and answers the donor version */
    memset(&d, 0, sizeof d);
    CHECK_INT(commit(c, "app.m", "shard0", "shard1", 10, 20, 1, 2, &d, &e), 0);
    CHECK(d.major == 2 && d.minor == 1);
    CHECK_INT(chunks(c, "app.m", &s), 3);
    CHECK(chunk_is(&s.v[1], 10, "shard1", 2, 0));
    CHECK(chunk_is(&s.v[0], MIN, "shard0", 2, 1));

    /* [MinKey,10) moves: (3,0); control chunk [20,MaxKey) (3,1) */
    CHECK_INT(commit(c, "app.m", "shard0", "shard1", MIN, 10, 2, 1, &d, &e), 0);
    CHECK_INT(chunks(c, "app.m", &s), 3);
    CHECK(chunk_is(&s.v[0], MIN, "shard1", 3, 0));
    CHECK(chunk_is(&s.v[2], 20, "shard0", 3, 1));
    CHECK(d.major == 3 && d.minor == 1);

    /* the last chunk leaves the donor: donor version (0,0) */
    CHECK_INT(commit(c, "app.m", "shard0", "shard1", 20, MAX, 3, 1, &d, &e), 0);
    CHECK_INT(chunks(c, "app.m", &s), 3);
    CHECK(chunk_is(&s.v[2], 20, "shard1", 4, 0));
    CHECK(d.major == 0 && d.minor == 0);
    cat_version_t cv;
    CHECK_INT(cat_coll_version(c, "app.m", &cv, &e), 0);
    CHECK(cv.major == 4 && cv.minor == 0);
    CHECK_INT(cat_verify_tiling(c, "app.m", &e), 0);
    cat_close(c);
}

static void test_move_sub_range(void) {
    cat_t *c = tcat_open("mig", NULL, 0);
    ms_error_t e = {0};
    cat_version_t d;
    scan_t s;
    const int sp[] = {100};
    tcat_add_shards(c, 2);
    make_coll(c, "app.r", sp, 1);   /* [MinKey,100) 1|1, [100,MaxKey) 1|2 */

    /* moveRange [10,20) out of [MinKey,100): left (2,1), moved (2,0), right (2,2), and
     * the control chunk [100,MaxKey) (2,3) */
    CHECK_INT(commit(c, "app.r", "shard0", "shard1", 10, 20, 1, 1, &d, &e), 0);
    CHECK_INT(chunks(c, "app.r", &s), 4);
    CHECK(chunk_is(&s.v[0], MIN, "shard0", 2, 1));
    CHECK(chunk_is(&s.v[1], 10, "shard1", 2, 0));
    CHECK(chunk_is(&s.v[2], 20, "shard0", 2, 2));
    CHECK(chunk_is(&s.v[3], 100, "shard0", 2, 3));
    CHECK_STR(s.v[1].hist0, "shard1");
    CHECK_STR(s.v[0].hist0, "shard0");   /* remainders keep the chunk's history */
    CHECK(d.major == 2 && d.minor == 3);
    CHECK_INT(cat_verify_tiling(c, "app.r", &e), 0);
    /* repeat: idempotent */
    CHECK_INT(commit(c, "app.r", "shard0", "shard1", 10, 20, 1, 1, &d, &e), 0);
    CHECK_INT(chunks(c, "app.r", &s), 4);
    CHECK(d.major == 2 && d.minor == 3);

    /* a range at the start of a chunk (no left remainder): right (3,1), control (3,2) */
    CHECK_INT(commit(c, "app.r", "shard0", "shard1", MIN, 5, 2, 1, &d, &e), 0);
    CHECK_INT(chunks(c, "app.r", &s), 5);
    CHECK(chunk_is(&s.v[0], MIN, "shard1", 3, 0));
    CHECK(chunk_is(&s.v[1], 5, "shard0", 3, 1));
    CHECK(chunk_is(&s.v[3], 20, "shard0", 3, 2));
    CHECK(chunk_is(&s.v[4], 100, "shard0", 2, 3));
    CHECK(d.major == 3 && d.minor == 2);
    CHECK_INT(cat_verify_tiling(c, "app.r", &e), 0);
    cat_close(c);
}

static void test_commit_refusals(void) {
    cat_t *c = tcat_open("mig", NULL, 0);
    ms_error_t e = {0};
    cat_version_t d, cv;
    scan_t s;
    const int sp[] = {10, 20};
    tcat_add_shards(c, 3);
    make_coll(c, "app.x", sp, 2);

    /* unknown namespace and another generation: StaleEpoch */
    CHECK_INT(commit(c, "app.none", "shard0", "shard1", 10, 20, 1, 2, &d, &e), MS_ERR_STALE_EPOCH);
    {
        cat_coll_t coll;
        cat_mig_commit_t req;
        bson_t *mn = bound(10), *mx = bound(20);
        CHECK_INT(cat_coll_get(c, "app.x", &coll, &e), 0);
        memset(&req, 0, sizeof req);
        bson_oid_init(&req.epoch, NULL);   /* not the collection's */
        req.ts = coll.ts;
        req.ns = "app.x", req.from = "shard0", req.to = "shard1", req.min = mn, req.max = mx;
        req.chunk_major = 1, req.chunk_minor = 2;
        CHECK_INT(cat_migration_commit(c, &req, &d, &e), MS_ERR_STALE_EPOCH);
        cat_coll_free(&coll);
        bson_destroy(mn);
        bson_destroy(mx);
    }
    /* range across two chunks, or not owned by fromShard: ConflictingOperationInProgress */
    CHECK_INT(commit(c, "app.x", "shard0", "shard1", 5, 15, 1, 2, &d, &e), MS_ERR_CONFLICTING_OPERATION);
    CHECK_INT(commit(c, "app.x", "shard2", "shard1", 10, 20, 1, 2, &d, &e), MS_ERR_CONFLICTING_OPERATION);
    /* the chunk changed since the migration started (it saw 1|1, the chunk is 1|2) */
    CHECK_INT(commit(c, "app.x", "shard0", "shard1", 10, 20, 1, 1, &d, &e), MS_ERR_CONFLICTING_OPERATION);
    /* unknown and draining recipients */
    CHECK_INT(commit(c, "app.x", "shard0", "shard9", 10, 20, 1, 2, &d, &e), MS_ERR_SHARD_NOT_FOUND);
    bson_t r = BSON_INITIALIZER;
    CHECK_INT(cat_shard_remove_step(c, "shard2", &r, &e), 0);
    bson_destroy(&r);
    CHECK_INT(commit(c, "app.x", "shard0", "shard2", 10, 20, 1, 2, &d, &e), MS_ERR_CONFLICTING_OPERATION);
    CHECK(strstr(e.msg, "draining") != NULL);
    /* bounds of another pattern, min >= max: BadValue */
    CHECK_INT(commit(c, "app.x", "shard0", "shard1", 20, 10, 1, 2, &d, &e), MS_ERR_BAD_VALUE);
    /* nothing changed */
    CHECK_INT(cat_coll_version(c, "app.x", &cv, &e), 0);
    CHECK(cv.major == 1 && cv.minor == 3);
    CHECK_INT(chunks(c, "app.x", &s), 3);
    CHECK(chunk_is(&s.v[1], 10, "shard0", 1, 2));
    cat_close(c);
}

static void test_ensure_version_fence(void) {
    cat_t *c = tcat_open("mig", NULL, 0);
    ms_error_t e = {0};
    cat_version_t d, v;
    cat_coll_t coll;
    scan_t s;
    bool bumped = false;
    const int sp[] = {10, 20};
    bson_t *mn = bound(10), *mx = bound(20), *other = bound(30);
    tcat_add_shards(c, 2);
    make_coll(c, "app.f", sp, 2);
    CHECK_INT(cat_coll_get(c, "app.f", &coll, &e), 0);
    bson_oid_copy(&coll.epoch, &v.epoch);
    v.ts = coll.ts;
    v.major = 1, v.minor = 2;   /* the preMigrationChunkVersion of [10,20) */

    /* not newer than the version: bumped to (collM+1, 0) on the same shard */
    CHECK_INT(cat_chunk_ensure_version_gt(c, "app.f", coll.uuid, mn, mx, &v, &bumped, &e), 0);
    CHECK(bumped);
    CHECK_INT(chunks(c, "app.f", &s), 3);
    CHECK(chunk_is(&s.v[1], 10, "shard0", 2, 0));
    /* again: now newer, no-op */
    CHECK_INT(cat_chunk_ensure_version_gt(c, "app.f", coll.uuid, mn, mx, &v, &bumped, &e), 0);
    CHECK(!bumped);
    CHECK_INT(chunks(c, "app.f", &s), 3);
    CHECK(chunk_is(&s.v[1], 10, "shard0", 2, 0));
    /* the late commit of the migration that saw 1|2 now fails */
    CHECK_INT(commit(c, "app.f", "shard0", "shard1", 10, 20, 1, 2, &d, &e), MS_ERR_CONFLICTING_OPERATION);
    /* no such exact chunk, another uuid, unknown ns: no-ops */
    v.major = 5;
    CHECK_INT(cat_chunk_ensure_version_gt(c, "app.f", coll.uuid, mn, other, &v, &bumped, &e), 0);
    CHECK(!bumped);
    uint8_t u2[16];
    cat_uuid_new(u2);
    CHECK_INT(cat_chunk_ensure_version_gt(c, "app.f", u2, mn, mx, &v, &bumped, &e), 0);
    CHECK(!bumped);
    CHECK_INT(cat_chunk_ensure_version_gt(c, "app.none", coll.uuid, mn, mx, &v, &bumped, &e), 0);
    CHECK(!bumped);
    CHECK_INT(chunks(c, "app.f", &s), 3);
    CHECK(chunk_is(&s.v[1], 10, "shard0", 2, 0));
    CHECK_INT(cat_verify_tiling(c, "app.f", &e), 0);
    cat_coll_free(&coll);
    bson_destroy(mn);
    bson_destroy(mx);
    bson_destroy(other);
    cat_close(c);
}

static void test_chunk_for_range(void) {
    cat_t *c = tcat_open("mig", NULL, 0);
    ms_error_t e = {0};
    cat_chunk_info_t ch;
    const int sp[] = {10, 20};
    bson_t *b5 = bound(5), *b10 = bound(10), *b15 = bound(15), *b20 = bound(20);
    bson_t *bad = J("{\"y\": 1}");
    tcat_add_shards(c, 1);
    make_coll(c, "app.c", sp, 2);
    CHECK_INT(cat_chunk_for_range(c, "app.c", b10, b20, &ch, &e), 0);
    CHECK(ch.major == 1 && ch.minor == 2);
    CHECK_STR(ch.shard, "shard0");
    bson_destroy(&ch.min);
    bson_destroy(&ch.max);
    /* only min / only max: the chunk holding it (max is exclusive) */
    CHECK_INT(cat_chunk_for_range(c, "app.c", b15, NULL, &ch, &e), 0);
    CHECK(ch.minor == 2);
    bson_destroy(&ch.min);
    bson_destroy(&ch.max);
    CHECK_INT(cat_chunk_for_range(c, "app.c", NULL, b10, &ch, &e), 0);
    CHECK(ch.minor == 1);
    bson_destroy(&ch.min);
    bson_destroy(&ch.max);
    CHECK_INT(cat_chunk_for_range(c, "app.c", b5, b15, &ch, &e), MS_ERR_CONFLICTING_OPERATION);
    CHECK_INT(cat_chunk_for_range(c, "app.c", b15, b10, &ch, &e), MS_ERR_BAD_VALUE);
    CHECK_INT(cat_chunk_for_range(c, "app.c", bad, NULL, &ch, &e), MS_ERR_BAD_VALUE);
    CHECK_INT(cat_chunk_for_range(c, "app.none", b5, NULL, &ch, &e), MS_ERR_NAMESPACE_NOT_SHARDED);
    bson_destroy(b5);
    bson_destroy(b10);
    bson_destroy(b15);
    bson_destroy(b20);
    bson_destroy(bad);
    cat_close(c);
}

static int count_fn(void *arg, const bson_t *doc) {
    (void)doc;
    (*(int *)arg)++;
    return 0;
}

static int server_fn(void *arg, const bson_t *doc) {
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "what") && strcmp(bson_iter_utf8(&it, NULL), "moveChunk.from") == 0 &&
        bson_iter_init_find(&it, doc, "server"))
        snprintf(arg, 64, "%s", bson_iter_utf8(&it, NULL));
    return 0;
}

static void test_migrations_and_changelog(void) {
    cat_t *c = tcat_open("mig", NULL, 0);
    ms_error_t e = {0};
    bool joined = true;
    int n = 0;
    int64_t cleared = 0;
    char server[64] = "";
    bson_t *a = J("{\"_id\": \"app.m-{\\\"x\\\": 10}\", \"ns\": \"app.m\", \"toShard\": \"shard1\"}");
    bson_t *b = J("{\"_id\": \"app.m-{\\\"x\\\": 10}\", \"ns\": \"app.m\", \"toShard\": \"shard2\"}");
    CHECK_INT(cat_migration_record(c, a, &joined, &e), 0);
    CHECK(!joined);
    CHECK_INT(cat_migration_record(c, a, &joined, &e), 0);   /* identical: joins */
    CHECK(joined);
    CHECK_INT(cat_migration_record(c, b, &joined, &e), MS_ERR_CONFLICTING_OPERATION);
    CHECK_INT(cat_config_scan(c, "migrations", count_fn, &n, &e), 0);
    CHECK_INT(n, 1);
    CHECK_INT(cat_migration_forget(c, "app.m-{\"x\": 10}", &e), 0);
    CHECK_INT(cat_migration_forget(c, "app.m-{\"x\": 10}", &e), 0);   /* absent: fine */
    n = 0;
    CHECK_INT(cat_config_scan(c, "migrations", count_fn, &n, &e), 0);
    CHECK_INT(n, 0);
    CHECK_INT(cat_migration_record(c, a, &joined, &e), 0);
    CHECK_INT(cat_migrations_clear(c, &cleared, &e), 0);
    CHECK_INT(cleared, 1);

    bson_t *det = J("{\"step 1 of 6\": 3}");
    CHECK_INT(cat_changelog_from(c, "shard0", "moveChunk.from", "app.m", det, &e), 0);
    CHECK_INT(cat_config_scan(c, "changelog", server_fn, server, &e), 0);
    CHECK_STR(server, "shard0");
    bson_destroy(det);
    bson_destroy(a);
    bson_destroy(b);
    cat_close(c);
}

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

/* The point fires with every row of the commit written: an error there rolls it all back
 * and the same commit then succeeds. */
static void test_failpoint_before_commit(void) {
    cat_t *c = tcat_open("mig", NULL, 0);
    ms_error_t e = {0};
    cat_version_t d, cv;
    scan_t s;
    const int sp[] = {10};
    cfg_register_failpoints();
    tcat_add_shards(c, 2);
    make_coll(c, "app.p", sp, 1);
    fp_error_once(CFG_FP_HANG_BEFORE_COMMIT_MIGRATION);
    CHECK_INT(commit(c, "app.p", "shard0", "shard1", 5, 8, 1, 1, &d, &e), MS_ERR_FAIL_POINT_ENABLED);
    CHECK_INT(chunks(c, "app.p", &s), 2);
    CHECK(chunk_is(&s.v[0], MIN, "shard0", 1, 1));
    CHECK_INT(cat_coll_version(c, "app.p", &cv, &e), 0);
    CHECK(cv.major == 1 && cv.minor == 2);
    CHECK_INT(commit(c, "app.p", "shard0", "shard1", 5, 8, 1, 1, &d, &e), 0);
    CHECK_INT(chunks(c, "app.p", &s), 4);
    CHECK_INT(cat_verify_tiling(c, "app.p", &e), 0);
    cat_close(c);
}

T_MAIN(T_CASE(test_move_whole_chunks), T_CASE(test_move_sub_range), T_CASE(test_commit_refusals),
       T_CASE(test_ensure_version_fence), T_CASE(test_chunk_for_range),
       T_CASE(test_migrations_and_changelog), T_CASE(test_failpoint_before_commit))
