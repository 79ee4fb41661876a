/*
 * bench_router_target.c — what targeting a query costs in the router (router/rt_target.c)
 * at 2,000, 100,000 and 1,000,000 chunks over {x: 1}, tables built in memory (chunks
 * [i*100, (i+1)*100) round-robin over four shards, as a hashed pre-split places them):
 *   point    rt_target_filter of {x: k} (one binary search);
 *   all      rt_target_filter of {} (every owning shard, from the per-shard counts);
 *   wide     rt_target_filter of {x: {$gte: half}} (half the table: the walk stops once
 *            every owning shard is marked);
 *   walk     rt_target_chunks of the same wide range with a visitor that does nothing:
 *            a visit of every chunk in the range, which is what the wide mask cost before
 *            the walk stopped early (and what a multi-write that needs each chunk pays);
 *   narrow   rt_target_chunks of a 10-chunk range.
 * Figures are ns per call and ratios against the 2,000-chunk row of the same run. Prints
 * a table and one final `BENCH_JSON {"router_target": {...}}` line.
 */
#include <bson/bson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/mem.h"
#include "router/router.h"
#include "tests/unit/t_rtable.h"

#define SIZES 3
#define CALLS 20000       /* calls timed per figure (walk: fewer, see walk_calls) */

static const char *const shard_names[] = {"shard0", "shard1", "shard2", "shard3"};

typedef struct row {
    int nchunks;
    double point_ns, all_ns, wide_ns, walk_ns, narrow_ns;
} row_t;

static rt_table_t *table_of(int n, const bson_oid_t *epoch) {
    ch_t *c = calloc((size_t)n, sizeof *c);
    rt_table_t *t = mem_calloc_aligned(1, sizeof *t);
    bson_t reply;
    bool nf;
    ms_error_t err = {0};
    if (!c || !t) abort();
    for (int i = 0; i < n; i++)
        c[i] = (ch_t){.min = i == 0 ? MINK : (int64_t)i * 100,
                      .max = i == n - 1 ? MAXK : (int64_t)(i + 1) * 100,
                      .shard = shard_names[i % 4], .major = 1, .minor = (uint32_t)i};
    atomic_init(&t->refs, 1);
    t->sharded = true;
    reply_of(&reply, epoch, 1, true, c, n);
    if (rtable_from_reply(&reply, NULL, &t->rt, &nf, &err) || nf) abort();
    bson_destroy(&reply);
    free(c);
    return t;
}

static void ignore(void *arg, int i, const rtable_chunk_t *c) {
    (void)i;
    (void)c;
    (*(long *)arg)++;
}

/* ns per rt_target_filter (chunks == false) or rt_target_chunks call on filter f. */
static double time_calls(const rt_table_t *t, const bson_t *f, bool chunks, int calls) {
    uint64_t mask;
    bool point;
    long visits = 0;
    ms_error_t err = {0};
    long long t0 = time_mono_us();
    for (int i = 0; i < calls; i++) {
        int rc = chunks ? rt_target_chunks(t, f, ignore, &visits, &err)
                        : rt_target_filter(t, f, &mask, &point, &err);
        if (rc) abort();
    }
    return (double)(time_mono_us() - t0) * 1000.0 / calls;
}

static void range_filter(bson_t *f, int64_t lo, int64_t hi) {
    bson_t op;
    bson_init(f);
    BSON_APPEND_DOCUMENT_BEGIN(f, "x", &op);
    BSON_APPEND_INT64(&op, "$gte", lo);
    if (hi >= 0) BSON_APPEND_INT64(&op, "$lt", hi);
    bson_append_document_end(f, &op);
}

static void measure(int n, row_t *row, const bson_oid_t *epoch) {
    rt_table_t *t = table_of(n, epoch);
    bson_t point = BSON_INITIALIZER, all = BSON_INITIALIZER, wide, narrow;
    BSON_APPEND_INT64(&point, "x", (int64_t)n * 37);
    range_filter(&wide, (int64_t)n * 50, -1);
    range_filter(&narrow, (int64_t)n * 50, (int64_t)n * 50 + 1000);
    int walk_calls = n >= 1000000 ? 20 : n >= 100000 ? 200 : 2000;
    row->nchunks = n;
    row->point_ns = time_calls(t, &point, false, CALLS);
    row->all_ns = time_calls(t, &all, false, CALLS);
    row->wide_ns = time_calls(t, &wide, false, CALLS);
    row->walk_ns = time_calls(t, &wide, true, walk_calls);
    row->narrow_ns = time_calls(t, &narrow, true, CALLS);
    bson_destroy(&point);
    bson_destroy(&all);
    bson_destroy(&wide);
    bson_destroy(&narrow);
    rt_table_release(t);
}

int main(void) {
    static const int sizes[SIZES] = {2000, 100000, 1000000};
    row_t rows[SIZES];
    bson_oid_t epoch;
    bson_oid_init(&epoch, NULL);
    for (int i = 0; i < SIZES; i++) measure(sizes[i], &rows[i], &epoch);

    printf("%-10s %12s %12s %12s %14s %12s %12s\n", "chunks", "point ns", "all ns", "wide ns",
           "walk ns", "narrow ns", "wide x2,000");
    for (int i = 0; i < SIZES; i++)
        printf("%-10d %12.0f %12.0f %12.0f %14.0f %12.0f %12.2f\n", rows[i].nchunks,
               rows[i].point_ns, rows[i].all_ns, rows[i].wide_ns, rows[i].walk_ns,
               rows[i].narrow_ns, rows[i].wide_ns / rows[0].wide_ns);
    printf("BENCH_JSON {\"router_target\": {");
    for (int i = 0; i < SIZES; i++)
        printf("%s\"chunks_%d\": {\"point_ns\": %.0f, \"all_ns\": %.0f, \"wide_ns\": %.0f, "
               "\"walk_ns\": %.0f, \"narrow_ns\": %.0f, \"point_vs_2000\": %.2f, "
               "\"all_vs_2000\": %.2f, \"wide_vs_2000\": %.2f, \"narrow_vs_2000\": %.2f}",
               i ? ", " : "", rows[i].nchunks, rows[i].point_ns, rows[i].all_ns, rows[i].wide_ns,
               rows[i].walk_ns, rows[i].narrow_ns, rows[i].point_ns / rows[0].point_ns,
               rows[i].all_ns / rows[0].all_ns, rows[i].wide_ns / rows[0].wide_ns,
               rows[i].narrow_ns / rows[0].narrow_ns);
    printf("}}\n");
    return 0;
}
