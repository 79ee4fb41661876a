/*
 * bench_configsvr_catalog.c — the cost of one chunk change in the config server's catalog
 * (bin/configsvr's cat_chunk_split, cat_chunk_merge, cat_migration_commit called directly
 * on a catalog file, each its own SQLite transaction with synchronous=FULL, as the
 * commands run them) against the size of the collection: 2,000, 100,000 and 1,000,000
 * chunks. Each change checks the tiling of the range it changes (O(log n)); the goal is a
 * flat curve: each change at 1,000,000 chunks ≤ 10 ms and ≤ 3 × its cost at 2,000.
 *
 * The table is built the way shardCollection builds a pre-split one — cat_coll_create,
 * every row in one transaction — with the chunks of a hashed key over two shards in
 * blocks of four (so a block's chunks can merge). Building it by splits would be
 * quadratic before this change and is what the bench measures one step of. The
 * command-level numInitialChunks cap (8,192 per shard, MongoDB's rule) is not the
 * catalog's: the bench bypasses the command, not the catalog.
 *
 * Per size: OPS splits (of chunks chosen at random over the key space), OPS merges (of
 * two chunks of one block) and OPS migration commits (a whole chunk to the other shard),
 * each timed alone, median and p99, the sizes' rounds interleaved (the three catalogs are
 * built first and stay open); the whole-collection tiling scan (what each change
 * used to run under the catalog lock) once, for comparison; the config server's side of
 * a shard's refresh after one change (an incremental getRoutingTable), and whether the
 * full getRoutingTable still fits one message (MS_MSG_BYTES_MAX). Prints a table and one
 * `BENCH_JSON {"catalog_scale": {...}}` line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "configsvr/configsvr.h"
#include "tests/bench/b_stats.h"
#include "tests/unit/t.h"

#define OPS 150  /* 3 blocks each: 450 of the 500 blocks of 2,000 chunks */
#define BLOCK 4  /* chunks per owner run */

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

typedef struct row {
    int n;
    double build_s, scan_ms, split_p50, split_p99, merge_p50, merge_p99, commit_p50, commit_p99;
    double refresh_ms;     /* an incremental getRoutingTable after one commit */
    int full_rc;           /* the full getRoutingTable: 0 or its error code */
    double full_mb;        /* its size (0 when refused) */
    double full_ms;        /* the time it took, the refusal's too */
} row_t;

static void die(const char *what, const ms_error_t *e) {
    fprintf(stderr, "bench_configsvr_catalog: %s: %s\n", what, e->msg);
    exit(1);
}

/* Blocks (of BLOCK chunks) in random order, none of the first two (chunk 0 is MinKey's
 * and the donors' control chunks are their lowest ones). */
static int *block_order(int nblocks) {
    int *o = malloc(sizeof *o * (size_t)nblocks);
    if (!o) abort();
    for (int i = 0; i < nblocks; i++) o[i] = i;
    for (int i = nblocks - 1; i > 2; i--) {
        int j = 2 + (int)(rnd() % (uint64_t)(i - 1));
        int t = o[i];
        o[i] = o[j];
        o[j] = t;
    }
    return o;
}

/* The whole table as a full refresh reads it: page after page (each its own catalog
 * lock), resuming after the highest lastmod of the page before. Its megabytes in *mb. */
static int full_table(cat_t *c, double *mb, ms_error_t *e) {
    cat_version_t after = {0};
    bool more = true;
    int rc = 0;
    *mb = 0;
    for (int page = 0; more && rc == 0; page++) {
        bson_t reply = BSON_INITIALIZER;
        bson_iter_t it, ch;
        rc = cat_routing_page(c, "bench.c", NULL, page ? &after : NULL, &reply, e);
        if (rc == 0) {
            *mb += reply.len / 1e6;
            more = bson_iter_init_find(&it, &reply, "more") && bson_iter_as_bool(&it);
            if (bson_iter_init_find(&it, &reply, "chunks") && bson_iter_recurse(&it, &it))
                while (bson_iter_next(&it))
                    if (bson_iter_recurse(&it, &ch) && bson_iter_find(&ch, "lastmod")) {
                        uint32_t m, n;
                        bson_iter_timestamp(&ch, &m, &n);
                        if (m > after.major || (m == after.major && n > after.minor))
                            after.major = m, after.minor = n;
                    }
        }
        bson_destroy(&reply);
    }
    return rc;
}

/* The config server's side of a shard's refresh: incremental after one more commit (the
 * chunks changed since the version before it), and the full table (in pages). */
static void routing(cat_t *c, row_t *r) {
    cat_version_t before;
    cat_chunk_info_t ci;
    ms_error_t e = {0};
    bson_t reply = BSON_INITIALIZER;
    if (cat_coll_version(c, "bench.c", &before, &e)) die("version", &e);
    bson_t *lo = bson_new();
    BSON_APPEND_INT64(lo, "h", 0);
    if (cat_chunk_for_range(c, "bench.c", lo, NULL, &ci, &e)) die("chunk", &e);
    const bson_t *pts[1];
    bson_t *mid = bson_new();
    BSON_APPEND_INT64(mid, "h", 1);
    pts[0] = mid;
    if (cat_chunk_split(c, "bench.c", &ci.min, &ci.max, pts, 1, NULL, &e)) die("split", &e);
    double t0 = b_now_ms();
    if (cat_routing_table(c, "bench.c", &before, &reply, &e)) die("incremental", &e);
    r->refresh_ms = b_now_ms() - t0;
    bson_destroy(&reply);
    t0 = b_now_ms();
    r->full_rc = full_table(c, &r->full_mb, &e);
    r->full_ms = b_now_ms() - t0;
    if (r->full_rc) log_warn("full routing table refused: %s", e.msg);
    bson_destroy(&ci.min);
    bson_destroy(&ci.max);
    bson_destroy(lo);
    bson_destroy(mid);
}

/* One size's catalog, built and ready for the changes. */
typedef struct scale {
    int n;
    char path[512];
    cat_t *c;
    cat_coll_t coll;
    bson_t *b;      /* the n + 1 initial bounds */
    int *order;     /* blocks in random order */
    double split[OPS], merge[OPS], commit[OPS];
} scale_t;

static void setup(scale_t *s, int n, row_t *r) {
    ms_error_t e = {0};
    keys_pattern_t p;
    bson_t *key = bson_new();
    cat_chunk_plan_t *plan = malloc(sizeof *plan * (size_t)n);
    bool created;
    s->n = r->n = n;
    s->b = malloc(sizeof *s->b * (size_t)(n + 1));
    if (!s->b || !plan) abort();
    snprintf(s->path, sizeof s->path, "%s/scale%d.db", t_tmpdir(), n);
    if (cat_open(s->path, &s->c, &e)) die("open", &e);
    for (int i = 0; i < 2; i++) {
        char name[64], host[64];
        bool already;
        snprintf(host, sizeof host, "tcp://127.0.0.1:%d", 10000 + i);
        if (cat_shard_prepare(s->c, NULL, host, name, sizeof name, &already, &e) ||
            cat_shard_insert(s->c, name, host, 0, &e))
            die("add shard", &e);
    }
    if (cat_db_ensure(s->c, "bench", "shard0", &created, NULL, &e)) die("database", &e);
    BSON_APPEND_UTF8(key, "h", "hashed");
    memset(&p, 0, sizeof p);
    memset(&s->coll, 0, sizeof s->coll);
    if (keys_pattern_parse(key, &p, &e)) die("pattern", &e);
    cat_hashed_initial_bounds(&p, n, s->b);
    for (int i = 0; i < n; i++)
        plan[i] = (cat_chunk_plan_t){&s->b[i], &s->b[i + 1], (i / BLOCK) % 2 ? "shard1" : "shard0"};
    snprintf(s->coll.ns, sizeof s->coll.ns, "bench.c");
    bson_copy_to(key, &s->coll.key);
    bson_oid_init(&s->coll.epoch, NULL);
    if (cat_next_ts(s->c, &s->coll.ts, &e)) die("ts", &e);
    cat_uuid_new(s->coll.uuid);
    double t0 = b_now_ms();
    if (cat_coll_create(s->c, &s->coll, plan, n, &e)) die("create", &e);
    r->build_s = (b_now_ms() - t0) / 1e3;
    t0 = b_now_ms();
    if (cat_verify_tiling(s->c, "bench.c", &e)) die("tiling", &e);
    r->scan_ms = b_now_ms() - t0;
    s->order = block_order(n / BLOCK);
    free(plan);
    bson_destroy(key);
    keys_pattern_free(&p);
}

/* Round k: one split, one merge, one commit, each in a block of its own (never the same
 * block twice): the split of the block's chunk 1, the merge of its chunks 2 and 3, the
 * move of its chunk 0 to the other shard. */
static void round_k(scale_t *s, int k) {
    ms_error_t e = {0};
    const bson_t *b = s->b;
    int bs = s->order[3 * k] * BLOCK + 1, bm = s->order[3 * k + 1] * BLOCK + 2,
        bc = s->order[3 * k + 2] * BLOCK;
    bson_iter_t lo, hi;
    bson_t mid = BSON_INITIALIZER;
    if (!bson_iter_init_find(&lo, &b[bs], "h") || !bson_iter_init_find(&hi, &b[bs + 1], "h")) abort();
    BSON_APPEND_INT64(&mid, "h", bson_iter_int64(&lo) / 2 + bson_iter_int64(&hi) / 2);
    const bson_t *pts[] = {&mid};
    double t0 = b_now_ms();
    if (cat_chunk_split(s->c, "bench.c", &b[bs], &b[bs + 1], pts, 1, NULL, &e)) die("split", &e);
    s->split[k] = b_now_ms() - t0;
    bson_destroy(&mid);

    t0 = b_now_ms();
    if (cat_chunk_merge(s->c, "bench.c", &b[bm], &b[bm + 2], NULL, &e)) die("merge", &e);
    s->merge[k] = b_now_ms() - t0;

    cat_chunk_info_t ci;
    cat_mig_commit_t m;
    cat_version_t donor;
    if (cat_chunk_for_range(s->c, "bench.c", &b[bc], &b[bc + 1], &ci, &e)) die("chunk", &e);
    memset(&m, 0, sizeof m);
    m.ns = "bench.c";
    m.from = ci.shard;
    m.to = strcmp(ci.shard, "shard0") == 0 ? "shard1" : "shard0";
    m.min = &b[bc];
    m.max = &b[bc + 1];
    m.chunk_major = ci.major;
    m.chunk_minor = ci.minor;
    bson_oid_copy(&s->coll.epoch, &m.epoch);
    m.ts = s->coll.ts;
    t0 = b_now_ms();
    if (cat_migration_commit(s->c, &m, &donor, &e)) die("commit", &e);
    s->commit[k] = b_now_ms() - t0;
    bson_destroy(&ci.min);
    bson_destroy(&ci.max);
}

static void finish(scale_t *s, row_t *r) {
    ms_error_t e = {0};
    if (cat_verify_tiling(s->c, "bench.c", &e)) die("tiling after", &e);
    routing(s->c, r);
    r->split_p50 = b_pct(s->split, OPS, 0.5);
    r->split_p99 = b_pct(s->split, OPS, 0.99);
    r->merge_p50 = b_pct(s->merge, OPS, 0.5);
    r->merge_p99 = b_pct(s->merge, OPS, 0.99);
    r->commit_p50 = b_pct(s->commit, OPS, 0.5);
    r->commit_p99 = b_pct(s->commit, OPS, 0.99);
    free(s->order);
    for (int i = 0; i <= s->n; i++) bson_destroy(&s->b[i]);
    free(s->b);
    cat_coll_free(&s->coll);
    cat_close(s->c);
    remove(s->path);
}

int main(int argc, char **argv) {
    static const int sizes[] = {2000, 100000, 1000000};
    int nsizes = argc > 1 ? atoi(argv[1]) : 3;  /* a quick run: the first sizes only */
    row_t r[3];
    memset(r, 0, sizeof r);
    log_init("bench", LOG_WARN);
    if (nsizes < 1 || nsizes > 3) nsizes = 3;
    printf("%9s %8s %9s | %-15s | %-15s | %-15s | %10s | %s\n", "chunks", "build s", "scan ms",
           "split p50/p99", "merge p50/p99", "commit p50/p99", "refresh ms", "full table");
    /* Build every size first, then interleave the rounds (2,000, 100,000, 1,000,000, then
     * again): the machine's load drifts, and each size sees the same drift. */
    static scale_t sc[3];
    for (int i = 0; i < nsizes; i++) setup(&sc[i], sizes[i], &r[i]);
    for (int k = 0; k < OPS; k++)
        for (int i = 0; i < nsizes; i++) round_k(&sc[i], k);
    for (int i = 0; i < nsizes; i++) {
        finish(&sc[i], &r[i]);
        char full[64];
        if (r[i].full_rc)
            snprintf(full, sizeof full, "refused (%s), %.0f ms", err_code_name(r[i].full_rc), r[i].full_ms);
        else
            snprintf(full, sizeof full, "%.1f MB, %.0f ms", r[i].full_mb, r[i].full_ms);
        printf("%9d %8.1f %9.1f | %6.2f / %6.2f | %6.2f / %6.2f | %6.2f / %6.2f | %10.2f | %s\n",
               r[i].n, r[i].build_s, r[i].scan_ms, r[i].split_p50, r[i].split_p99, r[i].merge_p50,
               r[i].merge_p99, r[i].commit_p50, r[i].commit_p99, r[i].refresh_ms, full);
    }
    const row_t *lo = &r[0], *hi = &r[nsizes - 1];
    printf("ratio %d vs %d chunks (p50): split %.2f, merge %.2f, commit %.2f (goal <= 3)\n", hi->n,
           lo->n, hi->split_p50 / lo->split_p50, hi->merge_p50 / lo->merge_p50,
           hi->commit_p50 / lo->commit_p50);
    printf("BENCH_JSON {\"catalog_scale\": {");
    for (int i = 0; i < nsizes; i++)
        printf("\"split_ms_p50_%d\": %.3f, \"merge_ms_p50_%d\": %.3f, \"commit_ms_p50_%d\": %.3f, "
               "\"split_ms_p99_%d\": %.3f, \"merge_ms_p99_%d\": %.3f, \"commit_ms_p99_%d\": %.3f, "
               "\"build_s_%d\": %.2f, \"tiling_scan_ms_%d\": %.1f, \"refresh_ms_%d\": %.3f, "
               "\"full_table_code_%d\": %d, ",
               r[i].n, r[i].split_p50, r[i].n, r[i].merge_p50, r[i].n, r[i].commit_p50, r[i].n,
               r[i].split_p99, r[i].n, r[i].merge_p99, r[i].n, r[i].commit_p99, r[i].n,
               r[i].build_s, r[i].n, r[i].scan_ms, r[i].n, r[i].refresh_ms, r[i].n, r[i].full_rc);
    printf("\"split_ratio\": %.2f, \"merge_ratio\": %.2f, \"commit_ratio\": %.2f}}\n",
           hi->split_p50 / lo->split_p50, hi->merge_p50 / lo->merge_p50,
           hi->commit_p50 / lo->commit_p50);
    return 0;
}
