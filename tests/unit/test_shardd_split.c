/*
 * test_shardd_split.c — unit tests of the shard daemon's split-point rules (shardd/split.c,
 * split_compute and split_args_check) on real SQLite files: splitVector (half a chunk of
 * keys, maxChunkObjects, maxSplitPoints, never the first key, repeated keys skipped, low
 * cardinality, force = median, a collection under the chunk size) and autoSplitVector
 * (a full chunk of keys, limit computing limit+1, the 80 % tail rule spreading the last
 * chunks or, under ~67 %, dropping the last point), and the [1 MB, 1024 MB] size bounds.
 *
 * Every document is exactly 1,024 bytes, so avg = 1024 and a 1 MB chunk is 1,024
 * documents: splitVector splits every 512 keys (points at 512, 1025, 1538, ...: the
 * counter restarts after each point), autoSplitVector every 1,024 (1024, 2048, ...).
 * Expectations are worked out by hand from MongoDB's rules (notes §6.1, §6.2).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardd/shardd.h"
#include "tests/unit/t.h"

#define DOC_BYTES 1024
#define MB (1024 * 1024)
#define PAD_LEN (DOC_BYTES - 31)   /* {_id: int32, k: int32, pad: string} framing is 31 */

enum key_shape { DISTINCT, ZEROS_THEN_DISTINCT, ALL_EQUAL };

typedef struct fill {
    const char *ns;
    int n;
    enum key_shape shape;
} fill_t;

static int key_of(enum key_shape shape, int i) {
    switch (shape) {
    case ZEROS_THEN_DISTINCT: return i < 1200 ? 0 : i;
    case ALL_EQUAL: return 7;
    default: return i;
    }
}

/* ns with n documents {_id: i, k: key_of(i), pad} and an index {k: 1}. */
static int fill_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    fill_t *f = arg;
    store_coll_t *c;
    bson_t spec = BSON_INITIALIZER, key;
    char pad[PAD_LEN + 1];
    bool existed;
    int rc = store_coll_create(t, f->ns, NULL, &c, NULL, err);
    BSON_APPEND_DOCUMENT_BEGIN(&spec, "key", &key);
    BSON_APPEND_INT32(&key, "k", 1);
    bson_append_document_end(&spec, &key);
    if (rc == 0) rc = store_index_create(t, c, &spec, &existed, err);
    bson_destroy(&spec);
    memset(pad, 'p', PAD_LEN);
    pad[PAD_LEN] = '\0';
    for (int i = 0; rc == 0 && i < f->n; i++) {
        bson_t d = BSON_INITIALIZER;
        BSON_APPEND_INT32(&d, "_id", i);
        BSON_APPEND_INT32(&d, "k", key_of(f->shape, i));
        BSON_APPEND_UTF8(&d, "pad", pad);
        if (d.len != DOC_BYTES) rc = err_set(err, MS_ERR_INTERNAL, "doc is %u bytes", d.len);
        else rc = store_write_doc(t, c, 0, NULL, &d, NULL, NULL, err);
        bson_destroy(&d);
    }
    return rc;
}

/* One table row: a collection shape, the arguments, the expected k of each split point. */
typedef struct split_case {
    const char *name;
    int ndocs;
    enum key_shape shape;
    bool auto_mode, force;
    int64_t chunk_bytes, max_objects, max_points, limit;
    int nexpect;
    int expect[8];
} split_case_t;

static const split_case_t CASES[] = {
    /* splitVector: half a chunk (512 keys) per point; the counter restarts after a point */
    {"sv_distinct", 2000, DISTINCT, false, false, MB, 0, 0, 0, 3, {512, 1025, 1538}},
    {"sv_under_chunk", 1000, DISTINCT, false, false, MB, 0, 0, 0, 0, {0}},
    {"sv_max_objects", 2000, DISTINCT, false, false, MB, 300, 0, 0, 6, {300, 601, 902, 1203, 1504, 1805}},
    {"sv_max_points", 2000, DISTINCT, false, false, MB, 0, 2, 0, 2, {512, 1025}},
    /* keys equal to the first (the sentinel) are never split points: the first one lands
     * at the first new key, and counting restarts there */
    {"sv_repeated", 2000, ZEROS_THEN_DISTINCT, false, false, MB, 0, 0, 0, 2, {1200, 1713}},
    {"sv_low_cardinality", 2000, ALL_EQUAL, false, false, MB, 0, 0, 0, 0, {0}},
    {"sv_force_median", 2000, DISTINCT, false, true, 0, 0, 0, 0, 1, {1000}},
    {"sv_two_mb_chunks", 5000, DISTINCT, false, false, 2 * MB, 0, 0, 0, 4, {1024, 2049, 3074, 4099}},
    /* autoSplitVector: a full chunk (1,024 keys) per point */
    {"asv_tail_big_enough", 3000, DISTINCT, true, false, MB, 0, 0, 0, 2, {1024, 2048}},
    /* tail 452 < 80 % of 1024: 2500 keys over 3 chunks of 833 (≥ 67 %) */
    {"asv_tail_spread", 2500, DISTINCT, true, false, MB, 0, 0, 0, 2, {833, 1666}},
    {"asv_tail_spread_700", 2100, DISTINCT, true, false, MB, 0, 0, 0, 2, {700, 1400}},
    /* tail 2: spreading gives 683 < 67 % of 1024 → drop the last point */
    {"asv_tail_drop", 2050, DISTINCT, true, false, MB, 0, 0, 0, 1, {1024}},
    /* limit 1 computes 2 points and returns the first (no tail fix) */
    {"asv_limit", 3000, DISTINCT, true, false, MB, 0, 0, 1, 1, {1024}},
    {"asv_limit_short_tail", 2050, DISTINCT, true, false, MB, 0, 0, 2, 2, {1024, 2048}},
    {"asv_under_chunk", 1000, DISTINCT, true, false, MB, 0, 0, 0, 0, {0}},
    /* the first point waits for the first new key (1200); tail 776 < 80 % → respread over
     * 3000 keys in chunks of 1000, again skipping keys equal to the first */
    {"asv_repeated", 3000, ZEROS_THEN_DISTINCT, true, false, MB, 0, 0, 0, 2, {1200, 2200}},
};

/* The k values of the split keys ({k: v} documents). */
static int split_ks(const bson_t *arr, int *ks, int max) {
    bson_iter_t it, d;
    int n = 0;
    if (!bson_iter_init(&it, arr)) return -1;
    while (bson_iter_next(&it)) {
        if (n >= max || !bson_iter_recurse(&it, &d) || !bson_iter_find(&d, "k")) return -1;
        ks[n++] = bson_iter_int32(&d);
    }
    return n;
}

static void run_case(store_t *st, const split_case_t *sc) {
    char ns[64];
    fill_t f = {ns, sc->ndocs, sc->shape};
    split_args_t a;
    bson_t kp = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    bool cont = true;
    int got[SHARDD_SPLIT_POINTS_MAX < 64 ? SHARDD_SPLIT_POINTS_MAX : 64], n;
    ms_error_t e;
    snprintf(ns, sizeof ns, "db.%s", sc->name);
    CHECK_MSG(store_write(st, fill_fn, &f, &e) == 0, "%s: fill: %s", sc->name, e.msg);
    BSON_APPEND_INT32(&kp, "k", 1);
    memset(&a, 0, sizeof a);
    a.ns = ns;
    a.key_pattern = kp;
    bson_init(&a.min);
    bson_init(&a.max);
    a.max_chunk_bytes = sc->chunk_bytes;
    a.max_chunk_objects = sc->max_objects;
    a.max_split_points = sc->max_points;
    a.limit = sc->limit;
    a.force = sc->force;
    a.auto_mode = sc->auto_mode;
    CHECK_MSG(split_args_check(&a, &e) == 0, "%s: %s", sc->name, e.msg);
    CHECK_MSG(split_compute(st, &a, &arr, &cont, &e) == 0, "%s: %s", sc->name, e.msg);
    CHECK_MSG(!cont, "%s: continuation", sc->name);
    n = split_ks(&arr, got, (int)(sizeof got / sizeof got[0]));
    CHECK_MSG(n == sc->nexpect, "%s: %d split points, want %d", sc->name, n, sc->nexpect);
    for (int i = 0; i < n && i < sc->nexpect; i++)
        CHECK_MSG(got[i] == sc->expect[i], "%s: point %d is k=%d, want %d", sc->name, i, got[i],
                  sc->expect[i]);
    bson_destroy(&arr);
    bson_destroy(&kp);
}

static store_t *open_store(const char *name) {
    char dir[512];
    store_t *st = NULL;
    store_opts_t so = {0};
    ms_error_t e;
    snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
    if (store_open(dir, &so, &st, &e) != 0) t_fail(__FILE__, __LINE__, "open: %s", e.msg);
    return st;
}

static void test_split_rules(void) {
    store_t *st = open_store("split");
    for (size_t i = 0; st && i < sizeof CASES / sizeof CASES[0]; i++) run_case(st, &CASES[i]);
    store_close(st);
}

/* A range [min, max) restricts the keys scanned; sizes still come from the collection. */
static void test_split_range(void) {
    store_t *st = open_store("range");
    fill_t f = {"db.r", 3000, DISTINCT};
    split_args_t a;
    bson_t kp = BSON_INITIALIZER, arr = BSON_INITIALIZER;
    int got[8];
    bool cont;
    ms_error_t e;
    CHECK_INT(store_write(st, fill_fn, &f, &e), 0);
    BSON_APPEND_INT32(&kp, "k", 1);
    memset(&a, 0, sizeof a);
    a.ns = "db.r";
    a.key_pattern = kp;
    bson_init(&a.min);
    BSON_APPEND_INT32(&a.min, "k", 1000);
    bson_init(&a.max);
    BSON_APPEND_INT32(&a.max, "k", 2500);
    a.max_chunk_bytes = MB;
    CHECK_INT(split_compute(st, &a, &arr, &cont, &e), 0);
    /* keys 1000..2499: the 513th key of the range is 1512, then 2025 */
    CHECK_INT(split_ks(&arr, got, 8), 2);
    CHECK_INT(got[0], 1512);
    CHECK_INT(got[1], 2025);
    bson_destroy(&arr);
    bson_destroy(&a.min);
    bson_destroy(&a.max);
    bson_destroy(&kp);
    store_close(st);
}

/* maxChunkSizeBytes must lie in [1 MB, 1024 MB]; force needs no size. */
static void test_split_bounds(void) {
    static const struct {
        int64_t bytes;
        bool force;
        int rc;
    } rows[] = {
        {MB - 1, false, MS_ERR_INVALID_OPTIONS}, {MB, false, 0},
        {1024LL * MB, false, 0},                 {1024LL * MB + 1, false, MS_ERR_INVALID_OPTIONS},
        {0, false, MS_ERR_INVALID_OPTIONS},      {-5, false, MS_ERR_INVALID_OPTIONS},
        {0, true, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        split_args_t a;
        ms_error_t e;
        memset(&a, 0, sizeof a);
        a.max_chunk_bytes = rows[i].bytes;
        a.force = rows[i].force;
        CHECK_MSG(split_args_check(&a, &e) == rows[i].rc, "row %zu: bytes %lld", i,
                  (long long)rows[i].bytes);
    }
}

T_MAIN(T_CASE(test_split_rules), T_CASE(test_split_range), T_CASE(test_split_bounds))
