/*
 * test_configsvr_defrag.c — unit tests of the pure part of defragmentation and the
 * auto-merger (configsvr/bal_defrag.c) on plain snapshots: phase names and transitions
 * (retry stays, restart of phase 2 goes back to phase 1), merge runs (same shard, same
 * zone, never jumbo or ineligible chunks), phase 2's neighbour scoring in MongoDB's order
 * of weight, and one migration per shard per round; and the catalog's part
 * (configsvr/cat_defrag.c): configureCollectionBalancing's write, the stored phase and
 * its end, chunk estimates, onCurrentShardSince.
 */
#include <stdio.h>
#include <string.h>

#include "configsvr/configsvr.h"
#include "tests/unit/t.h"
#include "tests/unit/t_cat.h"

#define NCH 32
#define NSH 4

/* Chunk i covers the one-byte encoded keys [i, i+1); owner[i], est[i] given. */
typedef struct snap {
    uint8_t keys[NCH + 1], zkeys[8];
    bal_chunk_t ch[NCH];
    bal_zone_range_t zr[4];
    bal_shard_t sh[NSH];
    bal_coll_t coll;
} snap_t;

static const char *names[NSH] = {"s0", "s1", "s2", "s3"};

static void mk(snap_t *t, int n, const int *owner, const int64_t *est) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i <= NCH; i++) t->keys[i] = (uint8_t)i;
    for (int s = 0; s < NSH; s++) t->sh[s].name = names[s];
    for (int i = 0; i < n; i++) {
        t->ch[i].min_enc = &t->keys[i];
        t->ch[i].max_enc = &t->keys[i + 1];
        t->ch[i].min_len = t->ch[i].max_len = 1;
        t->ch[i].owner = owner[i];
        t->ch[i].est_bytes = est ? est[i] : -1;
    }
    t->coll.ns = "db.c";
    t->coll.chunks = t->ch;
    t->coll.nchunks = n;
    t->coll.zones = t->zr;
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

static void test_phases(void) {
    CHECK_STR(bal_defrag_phase_name(BAL_DEFRAG_MERGE_MEASURE), "mergeAndMeasureChunks");
    CHECK_STR(bal_defrag_phase_name(BAL_DEFRAG_MOVE_MERGE), "moveAndMergeChunks");
    CHECK_STR(bal_defrag_phase_name(BAL_DEFRAG_MERGE), "mergeChunks");
    CHECK_STR(bal_defrag_phase_name(BAL_DEFRAG_FINISHED), "finished");
    for (int p = BAL_DEFRAG_MERGE_MEASURE; p <= BAL_DEFRAG_FINISHED; p++)
        CHECK_INT(bal_defrag_phase_parse(bal_defrag_phase_name((bal_defrag_phase_t)p)), p);
    CHECK_INT(bal_defrag_phase_parse(""), BAL_DEFRAG_NONE);
    CHECK_INT(bal_defrag_phase_parse("splitChunks"), BAL_DEFRAG_MERGE_MEASURE);
    /* done → the next phase */
    CHECK_INT(bal_defrag_next(BAL_DEFRAG_NONE, 0, false), BAL_DEFRAG_MERGE_MEASURE);
    CHECK_INT(bal_defrag_next(BAL_DEFRAG_MERGE_MEASURE, 0, false), BAL_DEFRAG_MOVE_MERGE);
    CHECK_INT(bal_defrag_next(BAL_DEFRAG_MOVE_MERGE, 0, false), BAL_DEFRAG_MERGE);
    CHECK_INT(bal_defrag_next(BAL_DEFRAG_MERGE, 0, false), BAL_DEFRAG_FINISHED);
    /* retriable work pending → the same phase */
    CHECK_INT(bal_defrag_next(BAL_DEFRAG_MERGE_MEASURE, 2, false), BAL_DEFRAG_MERGE_MEASURE);
    CHECK_INT(bal_defrag_next(BAL_DEFRAG_MOVE_MERGE, 1, false), BAL_DEFRAG_MOVE_MERGE);
    CHECK_INT(bal_defrag_next(BAL_DEFRAG_MERGE, 1, false), BAL_DEFRAG_MERGE);
    /* non-retriable → restart the phase; phase 2 restarts from phase 1 */
    CHECK_INT(bal_defrag_next(BAL_DEFRAG_MERGE_MEASURE, 0, true), BAL_DEFRAG_MERGE_MEASURE);
    CHECK_INT(bal_defrag_next(BAL_DEFRAG_MOVE_MERGE, 0, true), BAL_DEFRAG_MERGE_MEASURE);
    CHECK_INT(bal_defrag_next(BAL_DEFRAG_MERGE, 0, true), BAL_DEFRAG_MERGE);
    CHECK(bal_defrag_retriable(MS_ERR_HOST_UNREACHABLE));
    CHECK(bal_defrag_retriable(MS_ERR_LOCK_BUSY));
    CHECK(bal_defrag_retriable(MS_ERR_CONFLICTING_OPERATION));
    /* a merge's precondition failing = the chunks changed under the secondary thread (a
     * migration of the round won the race): reissued, not a restart */
    CHECK(bal_defrag_retriable(MS_ERR_ILLEGAL_OPERATION));
    CHECK(!bal_defrag_retriable(MS_ERR_BAD_VALUE));
}

static void test_runs(void) {
    snap_t t;
    bal_run_t r[NCH];
    /* 0 0 0 1 1 2 0 0 : runs [0,2], [3,4], [6,7] */
    mk(&t, 8, (int[]){0, 0, 0, 1, 1, 2, 0, 0}, NULL);
    int n = bal_merge_runs(&t.coll, NULL, r, NCH);
    CHECK_INT(n, 3);
    CHECK(r[0].first == 0 && r[0].last == 2);
    CHECK(r[1].first == 3 && r[1].last == 4);
    CHECK(r[2].first == 6 && r[2].last == 7);
    /* a jumbo chunk splits a run and is never part of one */
    t.ch[1].jumbo = true;
    n = bal_merge_runs(&t.coll, NULL, r, NCH);
    CHECK_INT(n, 2);
    CHECK(r[0].first == 3 && r[1].first == 6);
    t.ch[1].jumbo = false;
    /* ineligible chunks (moved recently) too */
    bool ok[8] = {true, true, false, true, true, true, true, true};
    n = bal_merge_runs(&t.coll, ok, r, NCH);
    CHECK_INT(n, 3);
    CHECK(r[0].first == 0 && r[0].last == 1);
    /* a zone boundary stops a run: zone Z = [1, 3) */
    zone(&t, 1, 3, "Z");
    n = bal_merge_runs(&t.coll, NULL, r, NCH);
    CHECK_INT(n, 3);
    CHECK(r[0].first == 1 && r[0].last == 2);
    /* owner -1 (another shard for mergeAllChunksOnShard) never merges; cap respected */
    mk(&t, 4, (int[]){-1, -1, 0, 0}, NULL);
    n = bal_merge_runs(&t.coll, NULL, r, NCH);
    CHECK_INT(n, 1);
    CHECK(r[0].first == 2 && r[0].last == 3);
    mk(&t, 6, (int[]){0, 0, 1, 1, 2, 2}, NULL);
    CHECK_INT(bal_merge_runs(&t.coll, NULL, r, 2), 2);
    /* one shard's chunks alone (mergeAllChunksOnShard reads only those): neighbours in
     * the array that do not meet — another shard's chunk between — are no run.
     * [0,1) [1,2) [3,4) [4,5): runs [0,1] and [2,3], not one */
    mk(&t, 4, (int[]){0, 0, 0, 0}, NULL);
    t.ch[2].min_enc = &t.keys[3];
    t.ch[2].max_enc = &t.keys[4];
    t.ch[3].min_enc = &t.keys[4];
    t.ch[3].max_enc = &t.keys[5];
    n = bal_merge_runs(&t.coll, NULL, r, NCH);
    CHECK_INT(n, 2);
    CHECK(r[0].first == 0 && r[0].last == 1 && r[1].first == 2 && r[1].last == 3);
}

static void test_scoring(void) {
    snap_t t;
    int64_t bytes[NSH];
    const int64_t small = 100;
    /* (1) a neighbour on the chunk's own shard beats everything else */
    mk(&t, 3, (int[]){1, 0, 0}, (int64_t[]){10, 5, 1000});
    bal_defrag_shard_bytes(&t.coll, NSH, bytes);
    CHECK_INT(bal_defrag_pick(&t.coll, t.sh, NSH, bytes, 1, small), 2);
    /* (2) both elsewhere: the neighbour the chunk is smaller than */
    mk(&t, 3, (int[]){1, 0, 2}, (int64_t[]){3, 5, 50});
    bal_defrag_shard_bytes(&t.coll, NSH, bytes);
    CHECK_INT(bal_defrag_pick(&t.coll, t.sh, NSH, bytes, 1, small), 2);
    mk(&t, 3, (int[]){1, 0, 2}, (int64_t[]){50, 5, 3});
    bal_defrag_shard_bytes(&t.coll, NSH, bytes);
    CHECK_INT(bal_defrag_pick(&t.coll, t.sh, NSH, bytes, 1, small), 0);
    /* (3) both bigger: the one whose merge is no longer small */
    mk(&t, 3, (int[]){1, 0, 2}, (int64_t[]){20, 10, 95});
    bal_defrag_shard_bytes(&t.coll, NSH, bytes);
    CHECK_INT(bal_defrag_pick(&t.coll, t.sh, NSH, bytes, 1, small), 2);
    /* (4) both merges still small: the target shard with less data */
    mk(&t, 5, (int[]){1, 0, 2, 2, 1}, (int64_t[]){20, 10, 20, 30, 5});
    bal_defrag_shard_bytes(&t.coll, NSH, bytes);  /* s1 = 25, s2 = 50 */
    CHECK_INT(bal_defrag_pick(&t.coll, t.sh, NSH, bytes, 1, small), 0);
    bytes[1] = 60;
    CHECK_INT(bal_defrag_pick(&t.coll, t.sh, NSH, bytes, 1, small), 2);
    /* ties: the smaller shard name */
    bytes[1] = bytes[2] = 7;
    CHECK_INT(bal_defrag_pick(&t.coll, t.sh, NSH, bytes, 1, small), 0);
    /* another zone, a jumbo or a draining shard's neighbour is no candidate */
    mk(&t, 3, (int[]){1, 0, 2}, (int64_t[]){30, 10, 30});
    zone(&t, 0, 1, "Z");
    bal_defrag_shard_bytes(&t.coll, NSH, bytes);
    CHECK_INT(bal_defrag_pick(&t.coll, t.sh, NSH, bytes, 1, small), 2);
    t.ch[2].jumbo = true;
    CHECK_INT(bal_defrag_pick(&t.coll, t.sh, NSH, bytes, 1, small), -1);
    mk(&t, 2, (int[]){0, 1}, (int64_t[]){30, 10});
    t.sh[0].draining = true;
    CHECK_INT(bal_defrag_pick(&t.coll, t.sh, NSH, bytes, 1, small), -1);
}

static void test_moves_one_per_shard(void) {
    snap_t t;
    bal_defrag_act_t a[NCH];
    int waiting = 0;
    /* s0 s1 s0 s1 s0 s1, all small: only one migration fits two shards */
    mk(&t, 6, (int[]){0, 1, 0, 1, 0, 1}, (int64_t[]){5, 6, 7, 8, 9, 10});
    int n = bal_defrag_moves(&t.coll, t.sh, 2, 100, a, NCH, &waiting);
    CHECK_INT(n, 1);
    CHECK(a[0].chunk == 0 && a[0].into == 1 && a[0].move && a[0].from == 0 && a[0].to == 1);
    CHECK(t.sh[0].busy && t.sh[1].busy);
    CHECK_MSG(waiting >= 4, "waiting %d", waiting);
    /* merges on the chunk's own shard need no free shard */
    mk(&t, 4, (int[]){0, 0, 1, 1}, (int64_t[]){5, 50, 6, 50});
    t.sh[0].busy = t.sh[1].busy = true;
    n = bal_defrag_moves(&t.coll, t.sh, 2, 100, a, NCH, &waiting);
    CHECK_INT(n, 2);
    CHECK(!a[0].move && !a[1].move);
    /* nothing small: nothing to do, nothing waiting (phase 2 is over) */
    mk(&t, 3, (int[]){0, 1, 0}, (int64_t[]){500, 600, -1});
    n = bal_defrag_moves(&t.coll, t.sh, 2, 100, a, NCH, &waiting);
    CHECK_INT(n, 0);
    CHECK_INT(waiting, 0);
    /* a small chunk alone in its zone has no neighbour: not waiting either */
    mk(&t, 3, (int[]){0, 1, 0}, (int64_t[]){500, 6, 500});
    zone(&t, 1, 2, "Z");
    n = bal_defrag_moves(&t.coll, t.sh, 2, 100, a, NCH, &waiting);
    CHECK_INT(n, 0);
    CHECK_INT(waiting, 0);
}

/* What the secondary thread asks after its phase-2 merges: is any small chunk left that
 * has a neighbour to go to? */
static void test_small_left(void) {
    snap_t t;
    /* s0 s1 s0, the middle one small: one left (a migration the round still owes) */
    mk(&t, 3, (int[]){0, 1, 0}, (int64_t[]){500, 6, 500});
    CHECK_INT(bal_defrag_small_left(&t.coll, t.sh, 2, 100), 1);
    /* busy shards do not matter: the work is still there, for a later round */
    t.sh[0].busy = t.sh[1].busy = true;
    CHECK_INT(bal_defrag_small_left(&t.coll, t.sh, 2, 100), 1);
    /* moved and merged: s0 [500+6] s0 -> nothing small */
    mk(&t, 2, (int[]){0, 0}, (int64_t[]){506, 500});
    CHECK_INT(bal_defrag_small_left(&t.coll, t.sh, 2, 100), 0);
    /* unmeasured (-1) and jumbo chunks are never small; alone in its zone: no neighbour */
    mk(&t, 3, (int[]){0, 1, 0}, (int64_t[]){-1, 6, 500});
    t.ch[0].jumbo = true;
    zone(&t, 1, 2, "Z");
    CHECK_INT(bal_defrag_small_left(&t.coll, t.sh, 2, 100), 0);
    /* a neighbour on another, draining shard is no target */
    mk(&t, 2, (int[]){0, 1}, (int64_t[]){6, 500});
    t.sh[1].draining = true;
    CHECK_INT(bal_defrag_small_left(&t.coll, t.sh, 2, 100), 0);
    t.sh[1].draining = false;
    CHECK_INT(bal_defrag_small_left(&t.coll, t.sh, 2, 100), 1);
}

/* The config.collections document of one namespace, as find on config shows it. */
typedef struct coll_find {
    const char *ns;
    bson_t *doc;
} coll_find_t;

static int coll_scan(void *arg, const bson_t *doc) {
    coll_find_t *a = arg;
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), a->ns) == 0)
        bson_concat(a->doc, doc);
    return 0;
}

/* Finds field in the document of ns (copied into *keep, initialised here). */
static bool coll_field(cat_t *c, const char *ns, const char *field, bson_iter_t *out, bson_t *keep) {
    coll_find_t a = {ns, keep};
    ms_error_t e = {0};
    bson_init(keep);
    CHECK_INT(cat_config_scan(c, "collections", coll_scan, &a, &e), 0);
    return bson_iter_init_find(out, keep, field);
}

static void test_catalog(void) {
    cat_t *c = tcat_open("defrag", NULL, 0);
    ms_error_t e = {0};
    cat_coll_t coll;
    bson_iter_t it;
    bson_t doc;
    tcat_add_shards(c, 1);
    tcat_shard_one_chunk(c, "db.c", "{\"k\": 1}", "shard0");
    CHECK_INT(cat_coll_configure_balancing(c, "db.nope", 1, -1, -1, &e), MS_ERR_NAMESPACE_NOT_SHARDED);
    /* chunk size and auto-merge */
    CHECK_INT(cat_coll_configure_balancing(c, "db.c", 3, -1, 0, &e), 0);
    CHECK_INT(cat_coll_get(c, "db.c", &coll, &e), 0);
    CHECK(coll.max_chunk_size_bytes == 3LL * 1024 * 1024 && !coll.enable_auto_merge && !coll.defragment);
    cat_coll_free(&coll);
    CHECK_INT(cat_coll_configure_balancing(c, "db.c", 0, 1, 1, &e), 0);
    CHECK_INT(cat_coll_get(c, "db.c", &coll, &e), 0);
    CHECK(coll.max_chunk_size_bytes == 0 && coll.enable_auto_merge && coll.defragment);
    CHECK_STR(coll.defrag_phase, "mergeAndMeasureChunks");
    cat_coll_free(&coll);
    CHECK(!coll_field(c, "db.c", "maxChunkSizeBytes", &it, &doc));
    bson_destroy(&doc);
    /* the phase moves on; a second start does not reset it */
    CHECK_INT(cat_coll_set_defrag_phase(c, "db.c", "mergeChunks", &e), 0);
    CHECK_INT(cat_coll_configure_balancing(c, "db.c", -1, 1, -1, &e), 0);
    CHECK(coll_field(c, "db.c", "defragmentationPhase", &it, &doc) &&
          strcmp(bson_iter_utf8(&it, NULL), "mergeChunks") == 0);
    bson_destroy(&doc);
    /* estimates: set on the exact chunk; the end of defragmentation clears them */
    cat_bal_data_t d;
    CHECK_INT(cat_bal_load(c, "db.c", &d, &e), 0);
    CHECK_INT(d.nchunks, 1);
    CHECK_INT(cat_chunk_set_est(c, "db.c", d.chunks[0].min_enc, d.chunks[0].min_len,
                                d.chunks[0].max_enc, d.chunks[0].max_len, 4242, &e), 0);
    int64_t since = 0;
    CHECK_INT(cat_chunks_since(c, "db.c", d.chunks, 1, &since, &e), 0);
    CHECK(since > 1000000000 && since != INT64_MAX);
    cat_bal_free(&d);
    CHECK_INT(cat_bal_load(c, "db.c", &d, &e), 0);
    CHECK(d.chunks[0].est_bytes == 4242);
    cat_bal_free(&d);
    CHECK_INT(cat_coll_set_defrag_phase(c, "db.c", NULL, &e), 0);
    CHECK_INT(cat_bal_load(c, "db.c", &d, &e), 0);
    CHECK(d.chunks[0].est_bytes == -1);
    cat_bal_free(&d);
    CHECK(!coll_field(c, "db.c", "defragmentCollection", &it, &doc));
    bson_destroy(&doc);
    CHECK(!coll_field(c, "db.c", "defragmentationPhase", &it, &doc));
    bson_destroy(&doc);
    /* not defragmenting: a phase is not stored (an abort during a step wins) */
    CHECK_INT(cat_coll_set_defrag_phase(c, "db.c", "mergeChunks", &e), 0);
    CHECK(!coll_field(c, "db.c", "defragmentationPhase", &it, &doc));
    bson_destroy(&doc);
    cat_close(c);
}

T_MAIN(T_CASE(test_catalog), T_CASE(test_phases), T_CASE(test_runs), T_CASE(test_scoring), T_CASE(test_moves_one_per_shard),
       T_CASE(test_small_left))
