/*
 * test_configsvr_balpolicy.c — unit tests of the balancer's chunk selection policy
 * (configsvr/bal_policy.c) on plain snapshots: the classic thresholds at 19/20/79/80
 * chunks, going on while the difference is >= 2, draining first, zone violations and
 * per-zone balancing, at most one migration per shard per round (across collections),
 * jumbo chunks skipped, maxSize respected, the data-size rule, noBalance, and explain;
 * and balancerCollectionStatus's compliance (bal_compliance, bal_chunk_straddles_zone).
 */
#include <stdio.h>
#include <string.h>

#include "configsvr/configsvr.h"
#include "tests/unit/t.h"

#define NCH_MAX 256
#define NSH_MAX 8

/* A snapshot: chunk i covers the one-byte encoded keys [i, i+1). */
typedef struct snap {
    uint8_t keys[NCH_MAX + 1];
    bal_chunk_t ch[NCH_MAX];
    bal_zone_range_t zr[8];
    uint8_t zkeys[16];
    uint8_t mkeys[8][2][2];  /* two-byte zone bounds (zone_mid) */
    bal_shard_t sh[NSH_MAX];
    bal_coll_t coll;
    int nsh;
} snap_t;

static const char *names[NSH_MAX] = {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"};

/* counts[s] chunks on shard s, in shard order along the key space. */
static void mk(snap_t *t, int nsh, const int *counts) {
    int n = 0;
    memset(t, 0, sizeof *t);
    for (int i = 0; i <= NCH_MAX; i++) t->keys[i] = (uint8_t)i;
    for (int s = 0; s < nsh; s++) {
        t->sh[s].name = names[s];
        for (int k = 0; k < counts[s]; k++, n++) {
            t->ch[n].min_enc = &t->keys[n];
            t->ch[n].max_enc = &t->keys[n + 1];
            t->ch[n].min_len = t->ch[n].max_len = 1;
            t->ch[n].owner = s;
            t->ch[n].est_bytes = -1;
        }
    }
    t->nsh = nsh;
    t->coll.ns = "db.c";
    t->coll.chunks = t->ch;
    t->coll.nchunks = n;
    t->coll.zones = t->zr;
    t->coll.chunk_size_bytes = 1 << 20;
}

static void zone(snap_t *t, int lo, int hi, const char *name) {
    int z = t->coll.nzones++;
    t->zkeys[2 * z] = (uint8_t)lo;
    t->zkeys[2 * z + 1] = (uint8_t)hi;
    t->zr[z].min_enc = &t->zkeys[2 * z];
    t->zr[z].max_enc = &t->zkeys[2 * z + 1];
    t->zr[z].min_len = t->zr[z].max_len = 1;
    t->zr[z].zone = name;
}

static int choose(snap_t *t, bal_policy_t p, bal_move_t *mv) {
    return bal_choose(&t->coll, t->sh, t->nsh, p, mv, NSH_MAX);
}

/* Moves for two shards with a and b chunks (fresh round, no previous moves). */
static int moves2(int a, int b) {
    snap_t t;
    bal_move_t mv[NSH_MAX];
    mk(&t, 2, (int[]){a, b});
    return choose(&t, BAL_POLICY_CHUNK_COUNT, mv);
}

static void test_thresholds(void) {
    CHECK_INT(bal_threshold(1), 2);
    CHECK_INT(bal_threshold(19), 2);
    CHECK_INT(bal_threshold(20), 4);
    CHECK_INT(bal_threshold(79), 4);
    CHECK_INT(bal_threshold(80), 8);
    CHECK_INT(bal_threshold(5000), 8);
    /* 19 chunks: threshold 2 */
    CHECK_INT(moves2(10, 9), 0);
    CHECK_INT(moves2(11, 8), 1);
    /* 20 chunks: threshold 4 */
    CHECK_INT(moves2(11, 9), 0);
    CHECK_INT(moves2(12, 8), 1);
    /* 79 chunks: threshold 4 */
    CHECK_INT(moves2(41, 38), 0);
    CHECK_INT(moves2(42, 37), 1);
    /* 80 chunks: threshold 8 */
    CHECK_INT(moves2(43, 37), 0);
    CHECK_INT(moves2(44, 36), 1);
}

static void test_go_on_until_below_two(void) {
    snap_t t;
    bal_move_t mv[NSH_MAX];
    /* 80 chunks, difference 2: not enough to start, enough to go on. */
    mk(&t, 2, (int[]){41, 39});
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 0);
    mk(&t, 2, (int[]){41, 39});
    t.coll.moved_last_round = true;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 1);
    CHECK_INT(mv[0].from, 0);
    CHECK_INT(mv[0].to, 1);
    CHECK_STR(mv[0].reason, "chunksImbalance");
    mk(&t, 2, (int[]){41, 40});
    t.coll.moved_last_round = true;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 0);
}

static void test_draining_first(void) {
    snap_t t;
    bal_move_t mv[NSH_MAX];
    mk(&t, 4, (int[]){2, 10, 1, 0});
    t.sh[0].draining = true;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 2);
    CHECK_STR(mv[0].reason, "draining");
    CHECK_INT(mv[0].from, 0);
    CHECK_INT(mv[0].to, 3);  /* least loaded */
    CHECK_INT(mv[0].chunk, 0);
    CHECK_STR(mv[1].reason, "chunksImbalance");
    CHECK_INT(mv[1].from, 1);
    CHECK_INT(mv[1].to, 2);
    /* never to a draining shard */
    mk(&t, 3, (int[]){10, 0, 0});
    t.sh[1].draining = true;
    t.sh[2].draining = true;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 0);
    /* a draining shard's jumbo chunk stays; the next one goes */
    mk(&t, 2, (int[]){3, 3});
    t.sh[0].draining = true;
    t.ch[0].jumbo = true;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 1);
    CHECK_INT(mv[0].chunk, 1);
}

static void test_zones(void) {
    snap_t t;
    bal_move_t mv[NSH_MAX];
    static const char *za[] = {"A"};
    /* chunks [0,10) on s0; zone A = [0,5) carried by s1 only: violation, chunk 0 to s1 */
    mk(&t, 3, (int[]){10, 0, 0});
    zone(&t, 0, 5, "A");
    t.sh[1].zones = za;
    t.sh[1].nzones = 1;
    CHECK_STR(bal_chunk_zone(&t.coll, 0), "A");
    CHECK_STR(bal_chunk_zone(&t.coll, 5), "");
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 1);
    CHECK_STR(mv[0].reason, "zoneViolation");
    CHECK_INT(mv[0].from, 0);
    CHECK_INT(mv[0].to, 1);
    /* a chunk only partly inside a range has no zone */
    mk(&t, 3, (int[]){10, 0, 0});
    t.zkeys[0] = 0;
    zone(&t, 0, 5, "A");
    t.zr[0].max_enc = &t.keys[5];
    CHECK_STR(bal_chunk_zone(&t.coll, 4), "A");
    CHECK_STR(bal_chunk_zone(&t.coll, 5), "");
    /* per-zone balance: zone A on s0 and s1 (8 + 0 chunks of A): A's chunks go to s1,
     * never to s2 which does not carry A */
    mk(&t, 3, (int[]){8, 0, 0});
    zone(&t, 0, 8, "A");
    t.sh[0].zones = za;
    t.sh[0].nzones = 1;
    t.sh[1].zones = za;
    t.sh[1].nzones = 1;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 1);
    CHECK_INT(mv[0].to, 1);
    CHECK_STR(mv[0].reason, "chunksImbalance");
    /* the zone's only shard is busy: nothing, the chunk waits */
    mk(&t, 3, (int[]){10, 0, 0});
    zone(&t, 0, 5, "A");
    t.sh[1].zones = za;
    t.sh[1].nzones = 1;
    t.sh[1].busy = true;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 1);  /* the no-zone part still balances */
    CHECK_STR(mv[0].reason, "chunksImbalance");
    CHECK_INT(mv[0].to, 2);
}

static void test_one_per_shard(void) {
    snap_t t, u;
    bal_move_t mv[NSH_MAX];
    mk(&t, 4, (int[]){40, 0, 0, 0});
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 1);
    mk(&t, 4, (int[]){20, 20, 0, 0});
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 2);
    CHECK(mv[0].from != mv[1].from && mv[0].to != mv[1].to && mv[0].from != mv[1].to &&
          mv[0].to != mv[1].from);
    CHECK(t.sh[0].busy && t.sh[1].busy && t.sh[2].busy && t.sh[3].busy);
    /* the busy flags are shared across the collections of one round */
    mk(&u, 4, (int[]){20, 20, 0, 0});
    CHECK_INT(bal_choose(&u.coll, t.sh, 4, BAL_POLICY_CHUNK_COUNT, mv, NSH_MAX), 0);
    /* 6 shards: at most 3 at once */
    mk(&t, 6, (int[]){30, 30, 30, 0, 0, 0});
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 3);
}

static void test_jumbo_skipped(void) {
    snap_t t;
    bal_move_t mv[NSH_MAX];
    mk(&t, 2, (int[]){10, 0});
    t.ch[0].jumbo = t.ch[1].jumbo = t.ch[2].jumbo = true;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 1);
    CHECK_INT(mv[0].chunk, 3);
    mk(&t, 2, (int[]){4, 0});
    for (int i = 0; i < 4; i++) t.ch[i].jumbo = true;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 0);
    CHECK(!t.sh[0].busy && !t.sh[1].busy);  /* giving up does not mark a shard busy */
    bson_t ex = BSON_INITIALIZER;
    bal_explain(&t.coll, t.sh, t.nsh, BAL_POLICY_CHUNK_COUNT, &ex);
    char *j = bson_as_relaxed_extended_json(&ex, NULL);
    CHECK_MSG(j && strstr(j, "\"why\" : \"jumbo\""), "explain: %s", j ? j : "?");
    bson_free(j);
    bson_destroy(&ex);
}

static void test_max_size(void) {
    snap_t t;
    bal_move_t mv[NSH_MAX];
    mk(&t, 3, (int[]){10, 0, 2});
    t.sh[1].max_size_bytes = 100;
    t.sh[1].total_bytes = 100;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 1);
    CHECK_INT(mv[0].to, 2);
    mk(&t, 3, (int[]){10, 0, 0});
    t.sh[1].max_size_bytes = t.sh[2].max_size_bytes = 100;
    t.sh[1].total_bytes = t.sh[2].total_bytes = 150;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 0);
    bson_t ex = BSON_INITIALIZER;
    bal_explain(&t.coll, t.sh, t.nsh, BAL_POLICY_CHUNK_COUNT, &ex);
    char *j = bson_as_relaxed_extended_json(&ex, NULL);
    CHECK_MSG(j && strstr(j, "\"why\" : \"maxSize\""), "explain: %s", j ? j : "?");
    bson_free(j);
    bson_destroy(&ex);
    /* below the cap is fine */
    mk(&t, 2, (int[]){10, 0});
    t.sh[1].max_size_bytes = 100;
    t.sh[1].total_bytes = 99;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 1);
}

static void test_data_size_rule(void) {
    snap_t t;
    bal_move_t mv[NSH_MAX];
    const int64_t mb = 1 << 20;
    /* chunk counts balanced, data not: 5 MB vs 2 MB = 3 x chunk size → move, min only */
    mk(&t, 2, (int[]){3, 3});
    t.sh[0].coll_bytes = 5 * mb;
    t.sh[1].coll_bytes = 2 * mb;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 0);
    mk(&t, 2, (int[]){3, 3});
    t.sh[0].coll_bytes = 5 * mb;
    t.sh[1].coll_bytes = 2 * mb;
    CHECK_INT(choose(&t, BAL_POLICY_DATA_SIZE, mv), 1);
    CHECK_STR(mv[0].reason, "dataSizeImbalance");
    CHECK(mv[0].min_only);
    CHECK_INT(mv[0].from, 0);
    CHECK_INT(mv[0].to, 1);
    CHECK_INT(mv[0].chunk, 0);
    /* just under 3 x chunk size: nothing */
    mk(&t, 2, (int[]){3, 3});
    t.sh[0].coll_bytes = 5 * mb - 1;
    t.sh[1].coll_bytes = 2 * mb;
    CHECK_INT(choose(&t, BAL_POLICY_DATA_SIZE, mv), 0);
    /* the smallest is the recipient, the largest the donor, whatever the counts */
    mk(&t, 3, (int[]){1, 5, 5});
    t.sh[0].coll_bytes = 10 * mb;
    t.sh[1].coll_bytes = 1 * mb;
    t.sh[2].coll_bytes = 4 * mb;
    CHECK_INT(choose(&t, BAL_POLICY_DATA_SIZE, mv), 1);
    CHECK_INT(mv[0].from, 0);
    CHECK_INT(mv[0].to, 1);
}

static void test_no_balance_and_explain(void) {
    snap_t t;
    bal_move_t mv[NSH_MAX];
    mk(&t, 2, (int[]){10, 0});
    t.coll.no_balance = true;
    CHECK_INT(choose(&t, BAL_POLICY_CHUNK_COUNT, mv), 0);
    bson_t ex = BSON_INITIALIZER;
    bal_explain(&t.coll, t.sh, t.nsh, BAL_POLICY_CHUNK_COUNT, &ex);
    char *j = bson_as_relaxed_extended_json(&ex, NULL);
    CHECK_MSG(j && strstr(j, "\"why\" : \"noBalance\""), "explain: %s", j ? j : "?");
    bson_free(j);
    bson_destroy(&ex);
    /* balanced: says the difference vs the threshold; explain does not mark shards busy */
    mk(&t, 2, (int[]){11, 9});
    bson_init(&ex);
    bal_explain(&t.coll, t.sh, t.nsh, BAL_POLICY_CHUNK_COUNT, &ex);
    j = bson_as_relaxed_extended_json(&ex, NULL);
    CHECK_MSG(j && strstr(j, "\"why\" : \"balanced\"") && strstr(j, "\"threshold\" : 4"),
              "explain: %s", j ? j : "?");
    bson_free(j);
    bson_destroy(&ex);
    mk(&t, 2, (int[]){12, 8});
    bson_init(&ex);
    bal_explain(&t.coll, t.sh, t.nsh, BAL_POLICY_CHUNK_COUNT, &ex);
    j = bson_as_relaxed_extended_json(&ex, NULL);
    CHECK_MSG(j && strstr(j, "\"decision\" : \"move\"") && strstr(j, "chunksImbalance"),
              "explain: %s", j ? j : "?");
    CHECK(!t.sh[0].busy && !t.sh[1].busy);
    bson_free(j);
    bson_destroy(&ex);
}

/* balancerCollectionStatus's pure part (bal_compliance, bal_chunk_straddles_zone): a zone
 * range [lo, hi) whose bound with mid set is the two-byte key {b, 5}, strictly between the
 * one-byte keys b and b+1, i.e. inside chunk b. */
static void zone_mid(snap_t *t, int lo, bool lo_mid, int hi, bool hi_mid, const char *name) {
    int z = t->coll.nzones++;
    t->mkeys[z][0][0] = (uint8_t)lo;
    t->mkeys[z][0][1] = 5;
    t->mkeys[z][1][0] = (uint8_t)hi;
    t->mkeys[z][1][1] = 5;
    t->zr[z].min_enc = t->mkeys[z][0];
    t->zr[z].min_len = lo_mid ? 2 : 1;
    t->zr[z].max_enc = t->mkeys[z][1];
    t->zr[z].max_len = hi_mid ? 2 : 1;
    t->zr[z].zone = name;
}

static const char *viol(const snap_t *t, bal_policy_t p) {
    const char *v = bal_compliance(&t->coll, t->sh, t->nsh, p);
    return v ? v : "compliant";
}

static void test_compliance_balanced_and_imbalanced(void) {
    snap_t t;
    mk(&t, 3, (int[]){3, 3, 2});
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "compliant");
    mk(&t, 3, (int[]){9, 0, 0});
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "chunksImbalance");
    /* The distribution alone: noBalance, busy shards, the round's state play no part. */
    t.coll.no_balance = true;
    t.coll.moved_last_round = true;
    t.sh[0].busy = t.sh[1].busy = t.sh[2].busy = true;
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "chunksImbalance");
    CHECK(t.sh[0].busy && t.coll.no_balance);  /* the caller's snapshot is left as it was */
    /* moved_last_round would lower the threshold to 2; compliance uses the start one */
    mk(&t, 2, (int[]){12, 10});
    t.coll.moved_last_round = true;
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "compliant");
}

static void test_compliance_data_size(void) {
    snap_t t;
    mk(&t, 2, (int[]){4, 4});
    t.sh[0].coll_bytes = 10 << 20;
    t.sh[1].coll_bytes = 1 << 20;
    CHECK_STR(viol(&t, BAL_POLICY_DATA_SIZE), "chunksImbalance");
    t.sh[0].coll_bytes = 3 << 20;
    CHECK_STR(viol(&t, BAL_POLICY_DATA_SIZE), "compliant");
}

static void test_compliance_draining_first(void) {
    snap_t t;
    mk(&t, 3, (int[]){9, 0, 1});
    t.sh[2].draining = true;
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "draining");
    mk(&t, 3, (int[]){1, 1, 0});
    t.sh[2].draining = true;  /* draining but empty: nothing to do for it */
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "compliant");
}

static void test_compliance_zones(void) {
    snap_t t;
    const char *z1[] = {"Z"};
    mk(&t, 2, (int[]){2, 2});
    zone_mid(&t, 0, false, 1, false, "Z");   /* chunk 0 (on s0) is in Z, which only s1 carries */
    t.sh[1].zones = z1;
    t.sh[1].nzones = 1;
    CHECK(!bal_chunk_straddles_zone(&t.coll));
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "zoneViolation");
    /* the zone on one of s1's own chunks: compliant (zoneless chunks 2 vs 1) */
    mk(&t, 2, (int[]){2, 2});
    zone_mid(&t, 3, false, 4, false, "Z");
    t.sh[1].zones = z1;
    t.sh[1].nzones = 1;
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "compliant");
    /* a bound inside chunk 2 (min) or inside chunk 3 (max): a split is due */
    mk(&t, 2, (int[]){2, 2});
    zone_mid(&t, 2, true, 4, false, "Z");
    t.sh[1].zones = z1;
    t.sh[1].nzones = 1;
    CHECK(bal_chunk_straddles_zone(&t.coll));
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "zoneViolation");
    mk(&t, 2, (int[]){2, 2});
    zone_mid(&t, 2, false, 3, true, "Z");
    CHECK(bal_chunk_straddles_zone(&t.coll));
}

T_MAIN(T_CASE(test_thresholds), T_CASE(test_go_on_until_below_two), T_CASE(test_draining_first),
       T_CASE(test_zones), T_CASE(test_one_per_shard), T_CASE(test_jumbo_skipped),
       T_CASE(test_max_size), T_CASE(test_data_size_rule), T_CASE(test_no_balance_and_explain),
       T_CASE(test_compliance_balanced_and_imbalanced), T_CASE(test_compliance_data_size),
       T_CASE(test_compliance_draining_first), T_CASE(test_compliance_zones))
