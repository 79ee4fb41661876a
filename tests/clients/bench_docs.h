/*
 * bench_docs.h — what tests/clients/mongoc_client.c and nng_client.c share for the wire
 * bench (tests/bench/bench_wire.py): the same ~110-byte document for bulk inserts and the
 * same latency summary, so the two clients differ only in their transport.
 */
#ifndef MS_BENCH_DOCS_H
#define MS_BENCH_DOCS_H
#include <bson/bson.h>
#include <stdio.h>
#include <stdlib.h>

#define BENCH_WARMUP 200   /* calls before timing: connection, handshake, caches */

/* A new document (caller owns): {_id: i, k: i, s: 80 chars}. */
static inline bson_t *bench_doc(int i) {
    static const char pad[] =
        "minishard-wire-bench-minishard-wire-bench-minishard-wire-bench-minishard-wire-be";
    return BCON_NEW("_id", BCON_INT64(i), "k", BCON_INT64(i), "s", BCON_UTF8(pad));
}

static inline int bench_dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Prints `p50_us=X p99_us=Y` of n round-trip times in µs (sorts t). */
static inline void bench_print_latency(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, bench_dbl_cmp);
    printf("p50_us=%.1f p99_us=%.1f\n", t[n / 2], t[(int)(n * 0.99)]);
}
#endif
