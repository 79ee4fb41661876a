/*
 * bench_common_rtable.c — the routing table (common/rtable.c) at 2,000, 100,000 and
 * 1,000,000 chunks over {x: 1}, built in memory from getRoutingTable replies: the
 * incremental refresh after one moveChunk (the moved chunk, the donor's control chunk
 * and the chunk at the old collection version), a full load of the same table (what an
 * incremental refresh cost before, when it rebuilt the table), rtable_find on random
 * keys, and the heap the table holds per chunk (mallinfo2, after the reply is freed)
 * and per incremental refresh (the new table's own blocks and index). Figures are
 * ratios against the 2,000-chunk row measured in the same run. Prints a table and one
 * final `BENCH_JSON {"rtable": {...}}` line.
 */
#include <bson/bson.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/mem.h"
#include "common/rtable.h"
#include "tests/unit/t_rtable.h"

#define SIZES 3
#define MOVES 200       /* incremental refreshes timed per size */
#define LOOKUPS 200000  /* rtable_find calls timed per size */

static const char *const shard_names[] = {"shard0", "shard1", "shard2", "shard3"};

typedef struct row {
    int nchunks;
    double full_ms, incr_us, find_ns, bytes_per_chunk, incr_bytes;
} row_t;

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t heap_in_use(void) {
    return mallinfo2().uordblks;
}

/* n chunks [i*100, (i+1)*100) round-robin over four shards, lastmod (1, i). */
static ch_t *catalog(int n) {
    ch_t *c = calloc((size_t)n, sizeof *c);
    if (!c) abort();
    for (int i = 0; i < n; i++)
        c[i] = (ch_t){.min = i == 0 ? MINK : (int64_t)i * 100,
                      .max = i == n - 1 ? MAXK : (int64_t)(i + 1) * 100,
                      .shard = shard_names[i % 4], .major = 1, .minor = (uint32_t)i};
    return c;
}

/* The incremental reply to sinceVersion (1, n-1) after chunk k moved to the next shard:
 * k at (2, 0), the donor's next chunk k+4 at (2, 1), and chunk n-1 still at (1, n-1). */
static void move_reply(bson_t *r, const bson_oid_t *epoch, const ch_t *c, int n, int k) {
    ch_t f[3] = {c[k], c[k + 4], c[n - 1]};
    f[0].shard = shard_names[(k + 1) % 4];
    f[0].major = 2, f[0].minor = 0;
    f[1].major = 2, f[1].minor = 1;
    reply_of(r, epoch, 1, false, f, k + 4 == n - 1 ? 2 : 3);
}

static void measure(int n, row_t *row, const bson_oid_t *epoch) {
    ch_t *c = catalog(n);
    bson_t full;
    ms_error_t err = {0};
    bool nf;
    uint64_t seed = 42;
    rtable_t *base = mem_calloc_aligned(1, sizeof *base), *next = mem_calloc_aligned(1, sizeof *next);
    row->nchunks = n;

    /* Full load; the heap it holds once the reply is gone. */
    size_t heap0 = heap_in_use();
    reply_of(&full, epoch, 1, true, c, n);
    long long t0 = time_mono_us();
    if (rtable_from_reply(&full, NULL, base, &nf, &err) || nf) abort();
    row->full_ms = (double)(time_mono_us() - t0) / 1000.0;
    bson_destroy(&full);
    row->bytes_per_chunk = (double)(heap_in_use() - heap0) / n;

    /* Incremental refreshes after one move each, at random places, into the same base. */
    bson_t *moves = calloc(MOVES, sizeof *moves);
    for (int m = 0; m < MOVES; m++) move_reply(&moves[m], epoch, c, n, (int)(rng(&seed) % (uint64_t)(n - 5)));
    double us = 0, bytes = 0;
    for (int m = 0; m < MOVES; m++) {
        size_t h = heap_in_use();
        t0 = time_mono_us();
        if (rtable_from_reply(&moves[m], base, next, &nf, &err) || nf) abort();
        us += (double)(time_mono_us() - t0);
        bytes += (double)(heap_in_use() - h);
        rtable_clear(next);
        bson_destroy(&moves[m]);
    }
    row->incr_us = us / MOVES;
    row->incr_bytes = bytes / MOVES;
    free(moves);

    /* Lookups of random keys (encoded beforehand). */
    buf_t *keys = calloc(1024, sizeof *keys);
    for (int i = 0; i < 1024; i++) {
        bson_t d = BSON_INITIALIZER;
        BSON_APPEND_INT64(&d, "x", (int64_t)(rng(&seed) % ((uint64_t)n * 100)));
        if (keys_extract(&base->pattern, &d, NULL, &keys[i], &err)) abort();
        bson_destroy(&d);
    }
    volatile long sink = 0;
    t0 = time_mono_us();
    for (int i = 0; i < LOOKUPS; i++) sink += rtable_find_chunk(base, keys[i & 1023].data, keys[i & 1023].len)->shard;
    row->find_ns = (double)(time_mono_us() - t0) * 1000.0 / LOOKUPS;
    (void)sink;
    for (int i = 0; i < 1024; i++) buf_free(&keys[i]);
    free(keys);
    rtable_clear(base);
    free(base);
    free(next);
    free(c);
}

int main(void) {
    static const int sizes[SIZES] = {2000, 100000, 1000000};
    row_t rows[SIZES];
    bson_oid_t epoch;
    bson_oid_init(&epoch, NULL);
    for (int i = 0; i < SIZES; i++) measure(sizes[i], &rows[i], &epoch);

    printf("%-10s %12s %14s %10s %12s %12s %14s %16s\n", "chunks", "full load", "incr. refresh",
           "x 2,000", "full / incr", "find", "bytes/chunk", "bytes/refresh");
    for (int i = 0; i < SIZES; i++)
        printf("%-10d %9.1f ms %11.1f us %10.1f %12.0f %9.0f ns %14.0f %16.0f\n", rows[i].nchunks,
               rows[i].full_ms, rows[i].incr_us, rows[i].incr_us / rows[0].incr_us,
               rows[i].full_ms * 1000.0 / rows[i].incr_us, rows[i].find_ns,
               rows[i].bytes_per_chunk, rows[i].incr_bytes);
    printf("BENCH_JSON {\"rtable\": {");
    for (int i = 0; i < SIZES; i++)
        printf("%s\"chunks_%d\": {\"full_load_ms\": %.1f, \"incremental_refresh_us\": %.1f, "
               "\"incremental_vs_2000\": %.2f, \"full_vs_incremental\": %.0f, \"find_ns\": %.0f, "
               "\"bytes_per_chunk\": %.0f, \"bytes_per_refresh\": %.0f}",
               i ? ", " : "", rows[i].nchunks, rows[i].full_ms, rows[i].incr_us,
               rows[i].incr_us / rows[0].incr_us, rows[i].full_ms * 1000.0 / rows[i].incr_us,
               rows[i].find_ns, rows[i].bytes_per_chunk, rows[i].incr_bytes);
    printf("}}\n");
    return 0;
}
