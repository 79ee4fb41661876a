/*
 * test_configsvr_balcompliance.c — unit tests of balancerCollectionStatus's pure part
 * (configsvr/bal_policy.c bal_compliance, bal_chunk_straddles_zone) on plain snapshots:
 * compliant, chunksImbalance (also under the dataSize rule), draining before imbalance,
 * a chunk on a shard outside its zone, a zone bound inside a chunk, and noBalance / busy /
 * moved-last-round left out of the answer.
 */
#include <string.h>

#include "configsvr/configsvr.h"
#include "tests/unit/t.h"

#define NCH 64
#define NSH 4

/* chunk i covers the one-byte encoded keys [i, i+1) */
typedef struct snap {
    uint8_t keys[NCH + 1];
    bal_chunk_t ch[NCH];
    bal_zone_range_t zr[4];
    uint8_t zkeys[4][2][2];
    bal_shard_t sh[NSH];
    bal_coll_t coll;
    int nsh;
} snap_t;

static const char *names[NSH] = {"s0", "s1", "s2", "s3"};

static void mk(snap_t *t, int nsh, const int *counts) {
    int n = 0;
    memset(t, 0, sizeof *t);
    for (int i = 0; i <= NCH; i++) t->keys[i] = (uint8_t)i;
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

/* A zone range [lo, hi); a bound with mid set is the two-byte key {b, 5}: strictly
 * between the one-byte keys b and b+1, i.e. inside chunk b. */
static void zone(snap_t *t, int lo, bool lo_mid, int hi, bool hi_mid, const char *name) {
    int z = t->coll.nzones++;
    t->zkeys[z][0][0] = (uint8_t)lo;
    t->zkeys[z][0][1] = 5;
    t->zkeys[z][1][0] = (uint8_t)hi;
    t->zkeys[z][1][1] = 5;
    t->zr[z].min_enc = t->zkeys[z][0];
    t->zr[z].min_len = lo_mid ? 2 : 1;
    t->zr[z].max_enc = t->zkeys[z][1];
    t->zr[z].max_len = hi_mid ? 2 : 1;
    t->zr[z].zone = name;
}

static const char *viol(const snap_t *t, bal_policy_t p) {
    const char *v = bal_compliance(&t->coll, t->sh, t->nsh, p);
    return v ? v : "compliant";
}

static void test_balanced_and_imbalanced(void) {
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

static void test_data_size_is_chunks_imbalance(void) {
    snap_t t;
    mk(&t, 2, (int[]){4, 4});
    t.sh[0].coll_bytes = 10 << 20;
    t.sh[1].coll_bytes = 1 << 20;
    CHECK_STR(viol(&t, BAL_POLICY_DATA_SIZE), "chunksImbalance");
    t.sh[0].coll_bytes = 3 << 20;
    CHECK_STR(viol(&t, BAL_POLICY_DATA_SIZE), "compliant");
}

static void test_draining_first(void) {
    snap_t t;
    mk(&t, 3, (int[]){9, 0, 1});
    t.sh[2].draining = true;
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "draining");
    mk(&t, 3, (int[]){1, 1, 0});
    t.sh[2].draining = true;  /* draining but empty: nothing to do for it */
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "compliant");
}

static void test_zones(void) {
    snap_t t;
    const char *z1[] = {"Z"};
    mk(&t, 2, (int[]){2, 2});
    zone(&t, 0, false, 1, false, "Z");   /* chunk 0 (on s0) is in Z, which only s1 carries */
    t.sh[1].zones = z1;
    t.sh[1].nzones = 1;
    CHECK(!bal_chunk_straddles_zone(&t.coll));
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "zoneViolation");
    /* the zone on one of s1's own chunks: compliant (zoneless chunks 2 vs 1) */
    mk(&t, 2, (int[]){2, 2});
    zone(&t, 3, false, 4, false, "Z");
    t.sh[1].zones = z1;
    t.sh[1].nzones = 1;
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "compliant");
    /* a bound inside chunk 2 (min) or inside chunk 3 (max): a split is due */
    mk(&t, 2, (int[]){2, 2});
    zone(&t, 2, true, 4, false, "Z");
    t.sh[1].zones = z1;
    t.sh[1].nzones = 1;
    CHECK(bal_chunk_straddles_zone(&t.coll));
    CHECK_STR(viol(&t, BAL_POLICY_CHUNK_COUNT), "zoneViolation");
    mk(&t, 2, (int[]){2, 2});
    zone(&t, 2, false, 3, true, "Z");
    CHECK(bal_chunk_straddles_zone(&t.coll));
}

T_MAIN(T_CASE(test_balanced_and_imbalanced), T_CASE(test_data_size_is_chunks_imbalance),
       T_CASE(test_draining_first), T_CASE(test_zones))
