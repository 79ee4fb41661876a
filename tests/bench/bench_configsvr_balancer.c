/*
 * bench_configsvr_balancer.c — what a balancer round, balancerExplain and
 * balancerCollectionStatus cost the config server against the size of the collection:
 * 2,000, 100,000 and 1,000,000 chunks (bin/configsvr's catalog and policy called
 * directly on a catalog file). Each reads the collection's summary (cat_bal_load_summary:
 * the chunk counts per shard kept by the catalog, the counts inside each zone range, the
 * few candidate chunks) and asks the policy (bal_choose, bal_explain, bal_compliance); the
 * goal is ≤ 100 ms at 1,000,000 chunks. For comparison, once per size, the full load
 * every round used to do (cat_bal_load: every chunk copied under the catalog lock).
 *
 * The table: a hashed key over four shards in blocks of four chunks (balanced: an idle
 * round moves nothing), one zone range over 1 % of the key space carried by every shard
 * (still balanced; the zone-range count and the zone candidates are part of each read), built with
 * cat_coll_create in one transaction as shardCollection builds a pre-split table. The
 * shard-side parts of a round (dataSize calls under the dataSize policy, listDatabases
 * for a maxSize) are network calls per shard, not per chunk, and are not here.
 *
 * Prints a table and one `BENCH_JSON {"balancer_scale": {...}}` line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "configsvr/configsvr.h"
#include "tests/bench/b_stats.h"
#include "tests/unit/t.h"

#define NSH 4
#define BLOCK 4
#define REPS 25

static const char *const names[NSH] = {"shard0", "shard1", "shard2", "shard3"};

static void die(const char *what, const ms_error_t *e) {
    fprintf(stderr, "bench_configsvr_balancer: %s: %s\n", what, e->msg);
    exit(1);
}

typedef struct row {
    int n;
    double build_s, round_ms, explain_ms, status_ms, full_load_ms;
    int candidates, moves;
} row_t;

/* One size's catalog: the collection and its zone range. */
static cat_t *build(int n, char *path, size_t cap, row_t *r) {
    ms_error_t e = {0};
    cat_t *c;
    keys_pattern_t p;
    cat_coll_t coll;
    bool created;
    bson_t *key = bson_new(), *b = malloc(sizeof *b * (size_t)(n + 1));
    cat_chunk_plan_t *plan = malloc(sizeof *plan * (size_t)n);
    if (!b || !plan) abort();
    snprintf(path, cap, "%s/bal%d.db", t_tmpdir(), n);
    if (cat_open(path, &c, &e)) die("open", &e);
    for (int i = 0; i < NSH; i++) {
        char name[64], host[64];
        bool already;
        snprintf(host, sizeof host, "tcp://127.0.0.1:%d", 10000 + i);
        if (cat_shard_prepare(c, NULL, host, name, sizeof name, &already, &e) ||
            cat_shard_insert(c, name, host, 0, &e))
            die("add shard", &e);
    }
    if (cat_db_ensure(c, "bench", "shard0", &created, NULL, &e)) die("database", &e);
    BSON_APPEND_UTF8(key, "h", "hashed");
    memset(&p, 0, sizeof p);
    memset(&coll, 0, sizeof coll);
    if (keys_pattern_parse(key, &p, &e)) die("pattern", &e);
    cat_hashed_initial_bounds(&p, n, b);
    for (int i = 0; i < n; i++) plan[i] = (cat_chunk_plan_t){&b[i], &b[i + 1], names[(i / BLOCK) % NSH]};
    snprintf(coll.ns, sizeof coll.ns, "bench.c");
    bson_copy_to(key, &coll.key);
    bson_oid_init(&coll.epoch, NULL);
    if (cat_next_ts(c, &coll.ts, &e)) die("ts", &e);
    cat_uuid_new(coll.uuid);
    double t0 = b_now_ms();
    if (cat_coll_create(c, &coll, plan, n, &e)) die("create", &e);
    r->build_s = (b_now_ms() - t0) / 1e3;
    /* Zone Z over [0, 2^63 / 50): 1 % of the hashed key space, on every shard. */
    bson_t *zmin = bson_new(), *zmax = bson_new();
    BSON_APPEND_INT64(zmin, "h", 0);
    BSON_APPEND_INT64(zmax, "h", INT64_MAX / 50);
    for (int i = 0; i < NSH; i++)
        if (cat_zone_add_shard(c, names[i], "Z", &e)) die("zone", &e);
    if (cat_zone_update_range(c, "bench.c", zmin, zmax, "Z", NULL, &e)) die("zone range", &e);
    for (int i = 0; i <= n; i++) bson_destroy(&b[i]);
    free(b);
    free(plan);
    bson_destroy(zmin);
    bson_destroy(zmax);
    bson_destroy(key);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
    return c;
}

/* The shards as bal_snap_shards would give them: each carries Z. */
typedef struct cluster {
    bal_snap_shard_t rows[NSH];
    bal_shard_t sh[NSH];
    bal_snap_t sn;
} cluster_t;

static const char *const zone_z[] = {"Z"};

static void cluster_init(cluster_t *k) {
    memset(k, 0, sizeof *k);
    for (int s = 0; s < NSH; s++) {
        snprintf(k->rows[s].name, sizeof k->rows[s].name, "%s", names[s]);
        k->sh[s] = (bal_shard_t){.name = names[s], .zones = zone_z, .nzones = 1};
    }
    k->sn = (bal_snap_t){.rows = k->rows, .shards = k->sh, .nshards = NSH};
}

/* The summary a round reads, mapped to the shards; bc viewing it. */
static void summary(cat_t *c, cluster_t *k, cat_bal_data_t *d, bal_coll_t *bc) {
    ms_error_t e = {0};
    if (cat_bal_load_summary(c, "bench.c", d, &e)) die("summary", &e);
    bal_snap_map(&k->sn, d);
    *bc = (bal_coll_t){.ns = "bench.c", .chunk_size_bytes = 128 << 20};
    bal_coll_view(d, bc);
}

/* One of the three: 0 = a round's choice, 1 = explain, 2 = collection status. */
static double one(cat_t *c, int what, row_t *r) {
    cluster_t k;
    cat_bal_data_t d;
    bal_coll_t bc;
    bal_move_t mv[NSH];
    bson_t out = BSON_INITIALIZER;
    cluster_init(&k);
    double t0 = b_now_ms();
    summary(c, &k, &d, &bc);
    if (what == 0) r->moves = bal_choose(&bc, k.sh, NSH, BAL_POLICY_CHUNK_COUNT, mv, NSH);
    else if (what == 1) bal_explain(&bc, k.sh, NSH, BAL_POLICY_CHUNK_COUNT, &out);
    else (void)bal_compliance(&bc, k.sh, NSH, BAL_POLICY_CHUNK_COUNT);
    double ms = b_now_ms() - t0;
    r->candidates = d.nchunks;
    bson_destroy(&out);
    cat_bal_free(&d);
    return ms;
}

static void measure(cat_t *c, row_t *r) {
    double v[3][REPS];
    for (int k = 0; k < REPS; k++)
        for (int w = 0; w < 3; w++) v[w][k] = one(c, w, r);
    r->round_ms = b_pct(v[0], REPS, 0.5);
    r->explain_ms = b_pct(v[1], REPS, 0.5);
    r->status_ms = b_pct(v[2], REPS, 0.5);
    cat_bal_data_t d;
    ms_error_t e = {0};
    double t0 = b_now_ms();
    if (cat_bal_load(c, "bench.c", &d, &e)) die("full load", &e);
    r->full_load_ms = b_now_ms() - t0;
    cat_bal_free(&d);
}

int main(int argc, char **argv) {
    static const int sizes[] = {2000, 100000, 1000000};
    int nsizes = argc > 1 ? atoi(argv[1]) : 3;  /* a quick run: the first sizes only */
    row_t r[3];
    memset(r, 0, sizeof r);
    log_init("bench", LOG_WARN);
    if (nsizes < 1 || nsizes > 3) nsizes = 3;
    printf("%9s %8s | %9s %10s %9s | %10s | %s\n", "chunks", "build s", "round ms", "explain ms",
           "status ms", "candidates", "full load ms (before)");
    for (int i = 0; i < nsizes; i++) {
        char path[512];
        r[i].n = sizes[i];
        cat_t *c = build(sizes[i], path, sizeof path, &r[i]);
        measure(c, &r[i]);
        cat_close(c);
        remove(path);
        printf("%9d %8.1f | %9.2f %10.2f %9.2f | %10d | %.1f\n", r[i].n, r[i].build_s, r[i].round_ms,
               r[i].explain_ms, r[i].status_ms, r[i].candidates, r[i].full_load_ms);
        if (r[i].moves) fprintf(stderr, "bench_configsvr_balancer: the table is not balanced (%d moves)\n", r[i].moves);
    }
    const row_t *lo = &r[0], *hi = &r[nsizes - 1];
    printf("ratio %d vs %d chunks: round %.2f, explain %.2f, status %.2f (goal: each <= 100 ms at 1,000,000)\n",
           hi->n, lo->n, hi->round_ms / lo->round_ms, hi->explain_ms / lo->explain_ms,
           hi->status_ms / lo->status_ms);
    printf("BENCH_JSON {\"balancer_scale\": {");
    for (int i = 0; i < nsizes; i++)
        printf("\"round_ms_%d\": %.3f, \"explain_ms_%d\": %.3f, \"status_ms_%d\": %.3f, "
               "\"full_load_ms_%d\": %.1f, ",
               r[i].n, r[i].round_ms, r[i].n, r[i].explain_ms, r[i].n, r[i].status_ms, r[i].n,
               r[i].full_load_ms);
    printf("\"round_ratio\": %.2f, \"explain_ratio\": %.2f, \"status_ratio\": %.2f}}\n",
           hi->round_ms / lo->round_ms, hi->explain_ms / lo->explain_ms, hi->status_ms / lo->status_ms);
    return 0;
}
