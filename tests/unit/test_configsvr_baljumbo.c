/*
 * test_configsvr_baljumbo.c — unit tests of bal_zone_cuts (configsvr/bal_jumbo.c), the
 * pure part of the balancer's zone-boundary splits: which zone range bounds lie strictly
 * inside a chunk, in key order, a bound shared by two neighbouring ranges counted once,
 * bounds on the chunk's own edges or outside it not at all, the capacity respected; and
 * cat_chunk_jumbo (cat_balancer.c) on a real catalog file: marking keeps the version,
 * clearing bumps the collection's major version, a chunk not jumbo or not there.
 */
#include <string.h>

#include "configsvr/configsvr.h"
#include "tests/unit/t.h"
#include "tests/unit/t_cat.h"

/* Keys are one encoded byte each: the chunk [lo, hi), the zones [zlo[i], zhi[i]). */
typedef struct fix {
    uint8_t ck[2], zk[16];
    bal_chunk_t ch;
    bal_zone_range_t z[8];
    int nz;
} fix_t;

static void chunk(fix_t *f, int lo, int hi) {
    memset(f, 0, sizeof *f);
    f->ck[0] = (uint8_t)lo;
    f->ck[1] = (uint8_t)hi;
    f->ch.min_enc = &f->ck[0];
    f->ch.max_enc = &f->ck[1];
    f->ch.min_len = f->ch.max_len = 1;
}

static void zone(fix_t *f, int lo, int hi) {
    int i = f->nz++;
    f->zk[2 * i] = (uint8_t)lo;
    f->zk[2 * i + 1] = (uint8_t)hi;
    f->z[i].min_enc = &f->zk[2 * i];
    f->z[i].max_enc = &f->zk[2 * i + 1];
    f->z[i].min_len = f->z[i].max_len = 1;
    f->z[i].zone = "Z";
}

static void test_straddling_bounds(void) {
    fix_t f;
    int cuts[16];
    /* a range wholly inside the chunk: both bounds */
    chunk(&f, 10, 50);
    zone(&f, 20, 30);
    CHECK_INT(bal_zone_cuts(&f.ch, f.z, f.nz, cuts, 16), 2);
    CHECK_INT(cuts[0], 0);  /* zone 0 min */
    CHECK_INT(cuts[1], 1);  /* zone 0 max */
    /* a range overlapping the chunk's start: only its max is inside */
    chunk(&f, 10, 50);
    zone(&f, 0, 20);
    CHECK_INT(bal_zone_cuts(&f.ch, f.z, f.nz, cuts, 16), 1);
    CHECK_INT(cuts[0], 1);
    /* a range overlapping the chunk's end: only its min */
    chunk(&f, 10, 50);
    zone(&f, 40, 90);
    CHECK_INT(bal_zone_cuts(&f.ch, f.z, f.nz, cuts, 16), 1);
    CHECK_INT(cuts[0], 0);
    /* a range covering the whole chunk: nothing to cut */
    chunk(&f, 10, 50);
    zone(&f, 0, 90);
    CHECK_INT(bal_zone_cuts(&f.ch, f.z, f.nz, cuts, 16), 0);
}

static void test_edges_outside_and_shared(void) {
    fix_t f;
    int cuts[16];
    /* bounds equal to the chunk's own min / max are not strictly inside */
    chunk(&f, 10, 50);
    zone(&f, 10, 50);
    CHECK_INT(bal_zone_cuts(&f.ch, f.z, f.nz, cuts, 16), 0);
    /* ranges wholly outside */
    chunk(&f, 10, 50);
    zone(&f, 0, 5);
    zone(&f, 60, 70);
    CHECK_INT(bal_zone_cuts(&f.ch, f.z, f.nz, cuts, 16), 0);
    /* neighbouring ranges [20, 30) [30, 40): the shared 30 once, key order */
    chunk(&f, 10, 50);
    zone(&f, 20, 30);
    zone(&f, 30, 40);
    CHECK_INT(bal_zone_cuts(&f.ch, f.z, f.nz, cuts, 16), 3);
    CHECK_INT(cuts[0], 0);  /* 20 */
    CHECK_INT(cuts[1], 1);  /* 30 (zone 0's max) */
    CHECK_INT(cuts[2], 3);  /* 40 (zone 1's max) */
    /* capacity */
    CHECK_INT(bal_zone_cuts(&f.ch, f.z, f.nz, cuts, 2), 2);
}

/* The jumbo flag of the first chunk of ns and the collection version. */
static void chunk_state(cat_t *c, const char *ns, bool *jumbo, cat_version_t *v) {
    cat_bal_data_t d;
    ms_error_t e = {0};
    CHECK_INT(cat_bal_load(c, ns, &d, &e), 0);
    *jumbo = d.nchunks > 0 && d.chunks[0].jumbo;
    cat_bal_free(&d);
    CHECK_INT(cat_coll_version(c, ns, v, &e), 0);
}

static void test_mark_and_clear_jumbo(void) {
    cat_t *c = tcat_open("baljumbo", NULL, 0);
    ms_error_t e = {0};
    bool changed = false, jumbo = false;
    cat_version_t v0, v1;
    char owner[CAT_SHARD_NAME_BYTES_MAX] = "";
    tcat_add_shards(c, 2);
    tcat_shard_one_chunk(c, "db.c", "{\"k\": 1}", "shard0");
    bson_t *mn = J("{\"k\": {\"$minKey\": 1}}"), *mx = J("{\"k\": {\"$maxKey\": 1}}");
    bson_t *mid = J("{\"k\": 5}");
    chunk_state(c, "db.c", &jumbo, &v0);
    CHECK(!jumbo);
    /* clearing a chunk that is not jumbo: ok, nothing written */
    CHECK_INT(cat_chunk_jumbo(c, "db.c", mn, mx, false, &changed, owner, sizeof owner, &e), 0);
    CHECK(!changed);
    /* marking: the flag, the same version */
    CHECK_INT(cat_chunk_jumbo(c, "db.c", mn, mx, true, &changed, owner, sizeof owner, &e), 0);
    CHECK(changed);
    CHECK_STR(owner, "shard0");
    chunk_state(c, "db.c", &jumbo, &v1);
    CHECK(jumbo);
    CHECK_INT((int)v1.major, (int)v0.major);
    CHECK_INT((int)v1.minor, (int)v0.minor);
    /* marking again: nothing to write */
    CHECK_INT(cat_chunk_jumbo(c, "db.c", mn, mx, true, &changed, NULL, 0, &e), 0);
    CHECK(!changed);
    /* clearing: flag gone, (M+1, 0) */
    CHECK_INT(cat_chunk_jumbo(c, "db.c", mn, mx, false, &changed, NULL, 0, &e), 0);
    CHECK(changed);
    chunk_state(c, "db.c", &jumbo, &v1);
    CHECK(!jumbo);
    CHECK_INT((int)v1.major, (int)v0.major + 1);
    CHECK_INT((int)v1.minor, 0);
    /* bounds that are not a chunk: clearing fails with 51262, marking is a no-op */
    CHECK_INT(cat_chunk_jumbo(c, "db.c", mn, mid, false, &changed, NULL, 0, &e), MS_ERR_LOC_CHUNK_NOT_FOUND);
    CHECK_INT(cat_chunk_jumbo(c, "db.c", mn, mid, true, &changed, NULL, 0, &e), 0);
    CHECK(!changed);
    bson_destroy(mn);
    bson_destroy(mx);
    bson_destroy(mid);
    cat_close(c);
}

T_MAIN(T_CASE(test_straddling_bounds), T_CASE(test_edges_outside_and_shared),
       T_CASE(test_mark_and_clear_jumbo))
