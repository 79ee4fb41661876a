/*
 * test_common_rtable.c — unit tests of the shared routing table (common/rtable.c):
 * parsing a getRoutingTable reply, incremental merges after a split, a merge and a
 * migration (new owner, control chunk, a shard left with nothing), a merge that leaves a
 * gap, a generation change, chunk lookup by binary search against a linear scan (and
 * where a range scan starts), the version comparison rules of notes §2.1, and database
 * versions.
 */
#include <stdlib.h>
#include <string.h>

#include "common/rtable.h"
#include "tests/unit/t.h"
#include "tests/unit/t_rtable.h"

static bson_oid_t epoch_a, epoch_b;

static void enc(const rtable_t *t, int64_t x, buf_t *out) {
    bson_t doc = BSON_INITIALIZER;
    ms_error_t err = {0};
    buf_init(out);
    BSON_APPEND_INT64(&doc, "x", x);
    CHECK(keys_extract(&t->pattern, &doc, NULL, out, &err) == 0);
    bson_destroy(&doc);
}

/* The shard owning x. */
static const char *owner(const rtable_t *t, int64_t x) {
    buf_t k;
    enc(t, x, &k);
    int i = rtable_find(t, k.data, k.len);
    buf_free(&k);
    return t->shards[rtable_chunk(t, i)->shard];
}

static void check_shard_version(const rtable_t *t, const char *shard, uint32_t major,
                                uint32_t minor) {
    rtable_version_t v;
    rtable_shard_version(t, rtable_shard_index(t, shard), &v);
    CHECK_MSG(v.major == major && v.minor == minor, "%s: %u|%u, expected %u|%u", shard, v.major,
              v.minor, major, minor);
}

static const ch_t three[] = {
    {100, MAXK, "s0", 1, 2},   /* out of order on purpose: the table sorts */
    {MINK, 0, "s0", 1, 0},
    {0, 100, "s1", 1, 1},
};

static void test_full_parse_versions_and_lookup(void) {
    rtable_t t;
    bool nf = true;
    CHECK_INT(build(&t, NULL, &epoch_a, 10, true, three, 3, &nf), 0);
    CHECK(!nf);
    CHECK_INT(t.nchunks, 3);
    CHECK_INT(t.coll_major, 1);
    CHECK_INT(t.coll_minor, 2);
    check_shard_version(&t, "s0", 1, 2);
    check_shard_version(&t, "s1", 1, 1);
    CHECK_INT(rtable_shard_index(&t, "nope"), -1);
    CHECK_STR(owner(&t, -5), "s0");
    CHECK_STR(owner(&t, 0), "s1");
    CHECK_STR(owner(&t, 99), "s1");
    CHECK_STR(owner(&t, 100), "s0");
    rtable_version_t cv;
    rtable_coll_version(&t, &cv);
    CHECK(bson_oid_equal(&cv.epoch, &epoch_a));
    CHECK_INT(cv.ts_t, 10);
    rtable_clear(&t);
    rtable_clear(&t);   /* a cleared table clears again harmlessly */
}

/* split → merge → migration, each applied as an incremental reply (lastmod >= since). */
static void test_incremental_split_merge_migration(void) {
    rtable_t t0, t1, t2, t3;
    bool nf = true;
    CHECK_INT(build(&t0, NULL, &epoch_a, 10, true, three, 3, &nf), 0);

    /* split [0,100) at 50: pieces (1,3), (1,4); since (1,2) also returns [100,Max). */
    const ch_t split[] = {{0, 50, "s1", 1, 3}, {50, 100, "s1", 1, 4}, {100, MAXK, "s0", 1, 2}};
    CHECK_INT(build(&t1, &t0, &epoch_a, 10, false, split, 3, &nf), 0);
    CHECK(!nf);
    CHECK_INT(t1.nchunks, 4);
    CHECK_INT(t1.coll_minor, 4);
    check_shard_version(&t1, "s1", 1, 4);
    check_shard_version(&t1, "s0", 1, 2);
    CHECK_STR(owner(&t1, 49), "s1");
    CHECK_STR(owner(&t1, 50), "s1");

    /* merge them back: one chunk (1,5) replaces both old pieces. */
    const ch_t merge[] = {{0, 100, "s1", 1, 5}};
    CHECK_INT(build(&t2, &t1, &epoch_a, 10, false, merge, 1, &nf), 0);
    CHECK(!nf);
    CHECK_INT(t2.nchunks, 3);
    check_shard_version(&t2, "s1", 1, 5);

    /* migrate [0,100) to a new shard s2 at (2,0); the control chunk on the donor s0 gets
     * (2,1); s1 is left with nothing. */
    const ch_t move[] = {{MINK, 0, "s0", 2, 1}, {0, 100, "s2", 2, 0}};
    CHECK_INT(build(&t3, &t2, &epoch_a, 10, false, move, 2, &nf), 0);
    CHECK(!nf);
    CHECK_INT(t3.nchunks, 3);
    CHECK_INT(t3.coll_major, 2);
    CHECK_INT(t3.coll_minor, 1);
    check_shard_version(&t3, "s2", 2, 0);
    check_shard_version(&t3, "s0", 2, 1);
    check_shard_version(&t3, "s1", 0, 0);
    CHECK_STR(owner(&t3, 7), "s2");
    CHECK_STR(owner(&t3, 700), "s0");
    /* the base is untouched by a merge built on it */
    CHECK_INT(t2.nchunks, 3);
    CHECK_STR(owner(&t2, 7), "s1");
    rtable_clear(&t0);
    rtable_clear(&t1);
    rtable_clear(&t2);
    rtable_clear(&t3);
}

static void test_gap_or_overlap_asks_for_full(void) {
    rtable_t t0, t1;
    bool nf = false;
    CHECK_INT(build(&t0, NULL, &epoch_a, 10, true, three, 3, &nf), 0);
    /* [0,60) replaces [0,100) and leaves [60,100) uncovered. */
    const ch_t gap[] = {{0, 60, "s1", 1, 3}};
    CHECK_INT(build(&t1, &t0, &epoch_a, 10, false, gap, 1, &nf), 0);
    CHECK(nf);
    CHECK_INT(t1.nchunks, 0);
    rtable_clear(&t1);
    /* overlapping fresh chunks */
    const ch_t over[] = {{0, 60, "s1", 1, 3}, {50, 100, "s1", 1, 4}};
    CHECK_INT(build(&t1, &t0, &epoch_a, 10, false, over, 2, &nf), 0);
    CHECK(nf);
    /* incremental without a base */
    CHECK_INT(build(&t1, NULL, &epoch_a, 10, false, over, 2, &nf), 0);
    CHECK(nf);
    /* a full reply that does not tile is an error */
    nf = false;
    CHECK_INT(build(&t1, NULL, &epoch_a, 10, true, gap, 1, &nf), MS_ERR_FAILED_TO_PARSE);
    CHECK(!nf);
    /* min >= max */
    const ch_t bad[] = {{MINK, MAXK, "s0", 1, 0}, {5, 5, "s0", 1, 1}};
    CHECK_INT(build(&t1, NULL, &epoch_a, 10, true, bad, 2, &nf), MS_ERR_FAILED_TO_PARSE);
    rtable_clear(&t0);
}

static void test_generation_change(void) {
    rtable_t t0, t1;
    bool nf = false;
    CHECK_INT(build(&t0, NULL, &epoch_a, 10, true, three, 3, &nf), 0);
    /* an incremental answer of another generation cannot be merged */
    const ch_t one[] = {{MINK, MAXK, "s1", 1, 0}};
    CHECK_INT(build(&t1, &t0, &epoch_b, 11, false, one, 1, &nf), 0);
    CHECK(nf);
    /* the full answer replaces everything, shard numbering included */
    CHECK_INT(build(&t1, &t0, &epoch_b, 11, true, one, 1, &nf), 0);
    CHECK(!nf);
    CHECK_INT(t1.nchunks, 1);
    CHECK_INT(t1.nshards, 1);
    CHECK_STR(owner(&t1, 5), "s1");
    check_shard_version(&t1, "s1", 1, 0);
    CHECK_INT(rtable_shard_index(&t1, "s0"), -1);
    rtable_version_t a, b;
    bool cmp;
    rtable_coll_version(&t0, &a);
    rtable_coll_version(&t1, &b);
    CHECK(rtable_version_cmp(&a, &b, &cmp) < 0 && cmp);   /* newer timestamp wins */
    CHECK(!rtable_same_generation(&a, &b));
    CHECK(!rtable_write_compatible(&a, &b));
    rtable_clear(&t0);
    rtable_clear(&t1);
}

static void test_version_rules(void) {
    rtable_version_t u, a, b;
    bool cmp = true;
    rtable_version_unsharded(&u);
    CHECK(rtable_version_is_unsharded(&u));
    a = (rtable_version_t){.epoch = epoch_a, .ts_t = 5, .ts_i = 1, .major = 3, .minor = 2};
    b = a;
    CHECK(!rtable_version_is_unsharded(&a));
    rtable_version_cmp(&u, &a, &cmp);
    CHECK(!cmp);                               /* UNSHARDED orders with nothing */
    CHECK(!rtable_write_compatible(&u, &u));
    b.minor = 9;
    CHECK(rtable_write_compatible(&a, &b));    /* minor drift tolerated */
    CHECK(rtable_version_cmp(&a, &b, &cmp) < 0 && cmp);
    b.major = 2;
    CHECK(!rtable_write_compatible(&a, &b));
    CHECK(rtable_version_cmp(&a, &b, &cmp) > 0 && cmp);
    b = a;
    b.epoch = epoch_b;                         /* same timestamp, other epoch: no order */
    rtable_version_cmp(&a, &b, &cmp);
    CHECK(!cmp);
    b.ts_t = 4;
    b.major = 100;
    CHECK(rtable_version_cmp(&a, &b, &cmp) > 0 && cmp);   /* timestamp before major */

    /* wire form round trip */
    bson_t d = BSON_INITIALIZER;
    bson_iter_t it;
    rtable_version_t back;
    ms_error_t err = {0};
    rtable_version_append(&d, "v", &a);
    CHECK(bson_iter_init_find(&it, &d, "v"));
    CHECK_INT(rtable_version_parse(&it, &back, &err), 0);
    CHECK(rtable_same_generation(&a, &back) && back.major == 3 && back.minor == 2);
    bson_destroy(&d);
    bson_init(&d);
    BSON_APPEND_INT32(&d, "v", 1);
    CHECK(bson_iter_init_find(&it, &d, "v"));
    CHECK_INT(rtable_version_parse(&it, &back, &err), MS_ERR_TYPE_MISMATCH);
    bson_destroy(&d);
}

/* Random splits of [Min, Max) among 4 shards; rtable_find against a linear scan. */
static void test_find_matches_linear_scan(void) {
    uint64_t seed = t_seed("test_find_matches_linear_scan");
    srand((unsigned)seed);
    ch_t c[200];
    int64_t cuts[199];
    int n = 1 + rand() % 200;
    for (int i = 0; i < n - 1; i++) cuts[i] = (int64_t)(i * 1000 + rand() % 900);
    const char *names[] = {"a", "b", "c", "d"};
    for (int i = 0; i < n; i++) {
        c[i].min = i == 0 ? MINK : cuts[i - 1];
        c[i].max = i == n - 1 ? MAXK : cuts[i];
        c[i].shard = names[rand() % 4];
        c[i].major = 1;
        c[i].minor = (uint32_t)i;
    }
    rtable_t t;
    bool nf;
    CHECK_INT(build(&t, NULL, &epoch_a, 3, true, c, n, &nf), 0);
    for (int k = 0; k < 2000; k++) {
        int64_t x = (int64_t)(rand() % (n * 1000 + 2000)) - 1000;
        int want = 0;
        for (int i = 0; i < n; i++)
            if ((c[i].min == MINK || c[i].min <= x) && (c[i].max == MAXK || x < c[i].max))
                want = i;
        CHECK_MSG(strcmp(owner(&t, x), c[want].shard) == 0, "seed=%llu x=%lld", (unsigned long long)seed, (long long)x);
        buf_t kx;
        enc(&t, x, &kx);
        CHECK_INT(rtable_first_ending_after(&t, kx.data, kx.len), want);
        buf_free(&kx);
    }
    /* MaxKey is no chunk's interior: a scan from it starts past the last chunk */
    bson_t bmax = BSON_INITIALIZER;
    buf_t kmax = {0};
    keys_global_max(&t.pattern, &bmax);
    CHECK_INT(keys_encode_bound(&t.pattern, &bmax, &kmax, NULL), 0);
    CHECK_INT(rtable_first_ending_after(&t, kmax.data, kmax.len), t.nchunks);
    CHECK_INT(rtable_find(&t, kmax.data, kmax.len), t.nchunks - 1);
    buf_free(&kmax);
    bson_destroy(&bmax);
    rtable_clear(&t);
}

static void test_database_versions(void) {
    rtable_dbv_t a = {.ts_t = 10, .ts_i = 1, .last_mod = 1}, b, back;
    char primary[32] = "";
    bson_t doc = BSON_INITIALIZER;
    bson_iter_t it;
    ms_error_t err = {0};
    memset(a.uuid, 0xA1, sizeof a.uuid);
    b = a;
    CHECK(rtable_dbv_equal(&a, &b) && !rtable_dbv_newer(&b, &a));
    b.last_mod = 2;                      /* movePrimary */
    CHECK(rtable_dbv_newer(&b, &a) && !rtable_dbv_newer(&a, &b) && !rtable_dbv_equal(&a, &b));
    b = a;
    memset(b.uuid, 0xB2, sizeof b.uuid);
    b.ts_t = 11;                         /* re-created: a later timestamp wins */
    CHECK(rtable_dbv_newer(&b, &a) && !rtable_dbv_newer(&a, &b));
    /* a config.databases document round trip */
    BSON_APPEND_UTF8(&doc, "_id", "app");
    BSON_APPEND_UTF8(&doc, "primary", "shard2");
    rtable_dbv_append(&doc, "version", &b);
    CHECK_INT(rtable_db_entry_parse(&doc, primary, sizeof primary, &back, &err), 0);
    CHECK_STR(primary, "shard2");
    CHECK(rtable_dbv_equal(&back, &b));
    CHECK(bson_iter_init_find(&it, &doc, "_id"));
    CHECK_INT(rtable_dbv_parse(&it, &back, &err), MS_ERR_TYPE_MISMATCH);
    bson_destroy(&doc);
    bson_init(&doc);
    BSON_APPEND_UTF8(&doc, "primary", "shard2");
    CHECK_INT(rtable_db_entry_parse(&doc, primary, sizeof primary, &back, &err),
              MS_ERR_FAILED_TO_PARSE);
    bson_destroy(&doc);
    rtable_db_find_cmd(&doc, "app");
    CHECK(bson_iter_init(&it, &doc) && bson_iter_next(&it) && !strcmp(bson_iter_key(&it), "find"));
    bson_destroy(&doc);
}

static void init_epochs(void) {
    bson_oid_init(&epoch_a, NULL);
    bson_oid_init(&epoch_b, NULL);
}

static void test_setup(void) {
    init_epochs();
    CHECK(!bson_oid_equal(&epoch_a, &epoch_b));
}

T_MAIN(T_CASE(test_setup), T_CASE(test_full_parse_versions_and_lookup),
       T_CASE(test_incremental_split_merge_migration), T_CASE(test_gap_or_overlap_asks_for_full),
       T_CASE(test_generation_change), T_CASE(test_version_rules),
       T_CASE(test_find_matches_linear_scan), T_CASE(test_database_versions))
