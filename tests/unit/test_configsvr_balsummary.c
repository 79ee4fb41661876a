/*
 * test_configsvr_balsummary.c — a differential test of the balancer's summary snapshot
 * (configsvr/cat_balancer.c cat_bal_load_summary, the chunk_counts triggers of catalog.c,
 * bal_policy.c's counted path) against the whole collection read as before (cat_bal_load).
 * After every one of many random splits, merges, migration commits, zone range and shard
 * zone changes and jumbo flags on a catalog file: the maintained counts per shard (chunks,
 * jumbo, chunks wholly inside each zone range) equal a recount of the full load, and the
 * policy over the summary's few candidate chunks decides exactly what it decides over
 * every chunk — bal_choose's moves (chunk, donor, recipient, reason) for both policies
 * under random draining / busy / maxSize / zone states, bal_explain's whole document and
 * bal_compliance. Also: a catalog opened without counts (one from before them) is filled
 * at open, and a drop leaves no count behind.
 */
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "common/rtable.h"
#include "tests/unit/t_cat.h"

#define NSH 4
#define KEY_LO 0
#define KEY_HI 4000

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int rnd_in(int n) { return (int)(rnd() % (uint64_t)n); }

static const char *const names[NSH] = {"shard0", "shard1", "shard2", "shard3"};
static const char *const zone_names[2] = {"A", "B"};

/* x of a bound: MinKey / MaxKey as the ends of the key space. */
static int key_x(const bson_t *b) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, b, "x")) return KEY_LO;
    if (BSON_ITER_HOLDS_INT32(&it)) return bson_iter_int32(&it);
    return bson_iter_type(&it) == BSON_TYPE_MAXKEY ? KEY_HI : KEY_LO - 1;
}

static bson_t *X(int x) {
    bson_t *b = bson_new();
    BSON_APPEND_INT32(b, "x", x);
    return b;
}

/* The collection d.c on {x: 1}: chunks at every 40 over [0, 4000), owners at random. */
static void create(cat_t *c) {
    enum { N = 100 };
    cat_coll_t coll;
    keys_pattern_t p;
    bson_t *key = J("{\"x\": 1}"), b[N + 1];
    cat_chunk_plan_t plan[N];
    ms_error_t e = {0};
    memset(&coll, 0, sizeof coll);
    memset(&p, 0, sizeof p);
    CHECK_INT(keys_pattern_parse(key, &p, &e), 0);
    for (int i = 0; i <= N; i++) {
        bson_init(&b[i]);
        if (i == 0) keys_global_min(&p, &b[i]);
        else if (i == N) keys_global_max(&p, &b[i]);
        else BSON_APPEND_INT32(&b[i], "x", i * (KEY_HI / N));
    }
    for (int i = 0; i < N; i++) plan[i] = (cat_chunk_plan_t){&b[i], &b[i + 1], names[rnd_in(NSH)]};
    snprintf(coll.ns, sizeof coll.ns, "d.c");
    bson_copy_to(key, &coll.key);
    bson_oid_init(&coll.epoch, NULL);
    CHECK_INT(cat_next_ts(c, &coll.ts, &e), 0);
    cat_uuid_new(coll.uuid);
    CHECK_MSG(cat_coll_create(c, &coll, plan, N, &e) == 0, "create: %s", e.msg);
    for (int i = 0; i <= N; i++) bson_destroy(&b[i]);
    cat_coll_free(&coll);
    keys_pattern_free(&p);
    bson_destroy(key);
}

/* ---- the random changes ------------------------------------------------------------- */

static void op_split(cat_t *c, const cat_bal_data_t *d) {
    const bal_chunk_t *ch = &d->chunks[rnd_in(d->nchunks)];
    int lo = key_x(ch->min), hi = key_x(ch->max);
    if (hi - lo < 2) return;
    bson_t *mid = X(lo + 1 + rnd_in(hi - lo - 1));
    const bson_t *pts[] = {mid};
    ms_error_t e = {0};
    CHECK_MSG(cat_chunk_split(c, "d.c", ch->min, ch->max, pts, 1, NULL, &e) == 0, "split: %s", e.msg);
    bson_destroy(mid);
}

static void op_merge(cat_t *c, const cat_bal_data_t *d) {
    int i = rnd_in(d->nchunks);
    if (i + 1 >= d->nchunks || strcmp(d->owners[i], d->owners[i + 1]) != 0) return;
    ms_error_t e = {0};
    CHECK_MSG(cat_chunk_merge(c, "d.c", d->chunks[i].min, d->chunks[i + 1].max, NULL, &e) == 0,
              "merge: %s", e.msg);
}

static void op_move(cat_t *c, const cat_bal_data_t *d) {
    const bal_chunk_t *ch = &d->chunks[rnd_in(d->nchunks)];
    cat_chunk_info_t ci;
    cat_coll_t coll;
    cat_mig_commit_t m;
    cat_version_t dv;
    ms_error_t e = {0};
    CHECK_INT(cat_chunk_for_range(c, "d.c", ch->min, ch->max, &ci, &e), 0);
    CHECK_INT(cat_coll_get(c, "d.c", &coll, &e), 0);
    const char *to = names[rnd_in(NSH)];
    if (strcmp(to, ci.shard) != 0) {
        memset(&m, 0, sizeof m);
        m = (cat_mig_commit_t){.ns = "d.c", .from = ci.shard, .to = to, .min = ch->min, .max = ch->max,
                               .chunk_major = ci.major, .chunk_minor = ci.minor, .epoch = coll.epoch,
                               .ts = coll.ts};
        CHECK_MSG(cat_migration_commit(c, &m, &dv, &e) == 0, "commit: %s", e.msg);
    }
    cat_coll_free(&coll);
    bson_destroy(&ci.min);
    bson_destroy(&ci.max);
}

/* A zone range added (overlaps refused: fine) or one removed. */
static void op_zone_range(cat_t *c, const cat_bal_data_t *d) {
    ms_error_t e = {0};
    if (d->nzones > 0 && rnd_in(3) == 0) {
        const bal_zone_range_t *z = &d->zones[rnd_in(d->nzones)];
        CHECK_INT(cat_zone_update_range(c, "d.c", z->min, z->max, NULL, NULL, &e), 0);
        return;
    }
    int a = rnd_in(KEY_HI - 10), b = a + 1 + rnd_in(400);
    bson_t *mn = X(a), *mx = X(b > KEY_HI ? KEY_HI : b);
    cat_zone_update_range(c, "d.c", mn, mx, zone_names[rnd_in(2)], NULL, &e);
    bson_destroy(mn);
    bson_destroy(mx);
}

static void op_shard_zone(cat_t *c) {
    ms_error_t e = {0};
    const char *s = names[rnd_in(NSH)], *z = zone_names[rnd_in(2)];
    if (rnd_in(2)) CHECK_INT(cat_zone_add_shard(c, s, z, &e), 0);
    else cat_zone_remove_shard(c, s, z, &e);  /* ZoneStillInUse: fine */
}

static void op_jumbo(cat_t *c, const cat_bal_data_t *d) {
    const bal_chunk_t *ch = &d->chunks[rnd_in(d->nchunks)];
    bool changed;
    ms_error_t e = {0};
    CHECK_INT(cat_chunk_jumbo(c, "d.c", ch->min, ch->max, rnd_in(3) != 0, &changed, NULL, 0, &e), 0);
}

/* ---- the comparison ------------------------------------------------------------------- */

/* The shards as a round would see them: zones from the catalog, random states. */
typedef struct cluster {
    bal_snap_t sn;
    bal_snap_shard_t rows[NSH];
    bal_shard_t sh[NSH];
    char **zones[NSH];
    int nzones[NSH];
} cluster_t;

static void cluster_read(cat_t *c, cluster_t *k) {
    ms_error_t e = {0};
    memset(k, 0, sizeof *k);
    for (int s = 0; s < NSH; s++) {
        snprintf(k->rows[s].name, sizeof k->rows[s].name, "%s", names[s]);
        CHECK_INT(cat_shard_zones(c, names[s], &k->zones[s], &k->nzones[s], &e), 0);
        k->sh[s] = (bal_shard_t){.name = names[s], .zones = (const char *const *)k->zones[s],
                                 .nzones = k->nzones[s], .draining = rnd_in(6) == 0,
                                 .busy = rnd_in(8) == 0, .coll_bytes = rnd_in(1000) * 1024};
        if (rnd_in(8) == 0) k->sh[s].max_size_bytes = k->sh[s].total_bytes = 1;
    }
    k->sn = (bal_snap_t){.rows = k->rows, .shards = k->sh, .nshards = NSH};
}

static void cluster_free(cluster_t *k) {
    for (int s = 0; s < NSH; s++) {
        for (int z = 0; z < k->nzones[s]; z++) free(k->zones[s][z]);
        free(k->zones[s]);
    }
}

/* The counts of the summary equal a recount of the full load. */
static void check_counts(const cat_bal_data_t *full, const cat_bal_data_t *sum) {
    const bal_coll_t fc = {.chunks = full->chunks, .nchunks = full->nchunks, .zones = full->zones,
                           .nzones = full->nzones};
    CHECK_INT(sum->total, full->nchunks);
    CHECK_INT(sum->nzones, full->nzones);
    for (int s = 0; s < NSH; s++) {
        int n = 0, j = 0, in[64] = {0};
        for (int i = 0; i < full->nchunks; i++) {
            if (full->chunks[i].owner != s) continue;
            n++;
            j += full->chunks[i].jumbo;
            const char *zone = bal_chunk_zone(&fc, i);
            for (int z = 0; zone[0] && z < full->nzones && z < 64; z++)
                if (rtable_bytes_cmp(full->zones[z].min_enc, full->zones[z].min_len, full->chunks[i].min_enc,
                                 full->chunks[i].min_len) <= 0 &&
                    rtable_bytes_cmp(full->chunks[i].max_enc, full->chunks[i].max_len, full->zones[z].max_enc,
                                 full->zones[z].max_len) <= 0)
                    in[z]++;
        }
        CHECK_INT(sum->shard_chunks[s], n);
        CHECK_INT(sum->shard_jumbo[s], j);
        for (int z = 0; z < full->nzones && z < 64; z++) CHECK_INT(sum->range_chunks[z * NSH + s], in[z]);
    }
}

static bool same_bounds(const bal_chunk_t *a, const bal_chunk_t *b) {
    return rtable_bytes_cmp(a->min_enc, a->min_len, b->min_enc, b->min_len) == 0 &&
           rtable_bytes_cmp(a->max_enc, a->max_len, b->max_enc, b->max_len) == 0;
}

/* The policy's choice, explain and compliance over the summary equal those over all. */
static void check_policy(const cat_bal_data_t *full, const cat_bal_data_t *sum, const cluster_t *k,
                         bal_policy_t policy, bool moved_last) {
    bal_coll_t fc = {.ns = "d.c", .moved_last_round = moved_last, .chunk_size_bytes = 64 * 1024};
    bal_coll_t sc = fc;
    bal_coll_view(full, &fc);
    bal_coll_view(sum, &sc);
    bal_shard_t fs[NSH], ss[NSH];
    bal_move_t fm[NSH], sm[NSH];
    memcpy(fs, k->sh, sizeof fs);
    memcpy(ss, k->sh, sizeof ss);
    int fn = bal_choose(&fc, fs, NSH, policy, fm, NSH), sn = bal_choose(&sc, ss, NSH, policy, sm, NSH);
    CHECK_INT(sn, fn);
    for (int m = 0; m < fn && m < sn; m++) {
        CHECK(same_bounds(&full->chunks[fm[m].chunk], &sum->chunks[sm[m].chunk]));
        CHECK_INT(sm[m].from, fm[m].from);
        CHECK_INT(sm[m].to, fm[m].to);
        CHECK_STR(sm[m].reason, fm[m].reason);
        CHECK(sm[m].min_only == fm[m].min_only);
    }
    bson_t fe = BSON_INITIALIZER, se = BSON_INITIALIZER;
    bal_explain(&fc, k->sh, NSH, policy, &fe);
    bal_explain(&sc, k->sh, NSH, policy, &se);
    char *fj = bson_as_relaxed_extended_json(&fe, NULL), *sj = bson_as_relaxed_extended_json(&se, NULL);
    CHECK_STR(sj, fj);
    bson_free(fj);
    bson_free(sj);
    bson_destroy(&fe);
    bson_destroy(&se);
    const char *fv = bal_compliance(&fc, k->sh, NSH, policy), *sv = bal_compliance(&sc, k->sh, NSH, policy);
    CHECK_STR(sv ? sv : "compliant", fv ? fv : "compliant");
    CHECK(bal_chunk_straddles_zone(&sc) == bal_chunk_straddles_zone(&fc));
}

static int moves_seen;

static void compare(cat_t *c) {
    cat_bal_data_t full, sum;
    cluster_t k;
    ms_error_t e = {0};
    CHECK_INT(cat_bal_load(c, "d.c", &full, &e), 0);
    CHECK_INT(cat_bal_load_summary(c, "d.c", &sum, &e), 0);
    cluster_read(c, &k);
    bal_snap_map(&k.sn, &full);
    bal_snap_map(&k.sn, &sum);
    CHECK(sum.nchunks <= full.nchunks);
    check_counts(&full, &sum);
    for (int p = 0; p < 2; p++) {
        check_policy(&full, &sum, &k, p ? BAL_POLICY_DATA_SIZE : BAL_POLICY_CHUNK_COUNT, rnd_in(2));
        bal_shard_t sh[NSH];
        bal_move_t mv[NSH];
        bal_coll_t fc = {.ns = "d.c"};
        bal_coll_view(&full, &fc);
        memcpy(sh, k.sh, sizeof sh);
        moves_seen += bal_choose(&fc, sh, NSH, BAL_POLICY_CHUNK_COUNT, mv, NSH);
    }
    cluster_free(&k);
    cat_bal_free(&full);
    cat_bal_free(&sum);
}

static void test_summary_equals_full_load(void) {
    cat_t *c = tcat_open("balsum", NULL, 0);
    ms_error_t e = {0};
    tcat_add_shards(c, NSH);
    CHECK_INT(cat_zone_add_shard(c, "shard0", "A", &e), 0);
    CHECK_INT(cat_zone_add_shard(c, "shard1", "B", &e), 0);
    create(c);
    for (int step = 0; step < 1000; step++) {
        cat_bal_data_t d;
        CHECK_INT(cat_bal_load(c, "d.c", &d, &e), 0);
        switch (rnd_in(8)) {
        case 0: case 1: op_split(c, &d); break;
        case 2: op_merge(c, &d); break;
        case 3: case 4: op_move(c, &d); break;
        case 5: op_zone_range(c, &d); break;
        case 6: op_shard_zone(c); break;
        default: op_jumbo(c, &d); break;
        }
        cat_bal_free(&d);
        compare(c);
    }
    CHECK(moves_seen > 100);  /* the comparison saw decisions, not only "balanced" */
    bool existed;
    CHECK_INT(cat_coll_drop(c, "d.c", &existed, &e), 0);
    cat_bal_data_t sum;
    CHECK_INT(cat_bal_load_summary(c, "d.c", &sum, &e), 0);
    CHECK_INT(sum.total, 0);
    CHECK_INT(sum.ncounts, 0);
    cat_bal_free(&sum);
    cat_close(c);
}

/* A catalog written before chunk_counts: the counts are filled when it opens. */
static void test_counts_filled_at_open(void) {
    char path[512];
    cat_t *c = tcat_open("balsumopen", path, sizeof path);
    ms_error_t e = {0};
    tcat_add_shards(c, 2);
    tcat_shard_one_chunk(c, "d.o", "{\"x\": 1}", "shard1");
    cat_close(c);
    sqlite3 *db;
    CHECK_INT(sqlite3_open(path, &db), SQLITE_OK);
    CHECK_INT(sqlite3_exec(db, "DROP TABLE chunk_counts", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    CHECK_INT(cat_open(path, &c, &e), 0);
    cat_bal_data_t sum;
    CHECK_INT(cat_bal_load_summary(c, "d.o", &sum, &e), 0);
    CHECK_INT(sum.total, 1);
    CHECK_INT(sum.ncounts, 1);
    CHECK_STR(sum.counts[0].shard, "shard1");
    CHECK_INT(sum.nchunks, 1);
    cat_bal_free(&sum);
    cat_close(c);
}

T_MAIN(T_CASE(test_summary_equals_full_load), T_CASE(test_counts_filled_at_open))
