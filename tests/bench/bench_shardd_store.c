/*
 * bench_shardd_store.c — the shard daemon's storage layer against raw SQLite, in one
 * process and one run (bin/shardd's store.c + exec.c called directly):
 *   1. bulk insert of ~200 B documents in batches of 1,000 through store_write_doc (two
 *      secondary indexes) vs raw SQLite doing the same work (id BLOB PRIMARY KEY + doc,
 *      two indexed columns, same pragmas), sequential and random _id → ratio (goal ≥ 60 %);
 *   2. point find by _id from 8 threads through exec_find (plan, cursor, batch) vs raw
 *      prepared point selects: ops/s, p50/p99 latency.
 * Prints a table and one `BENCH_JSON {"shardd": {...}}` line.
 */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "shardd/shardd.h"

#define NDOCS 100000
#define BATCH 1000
#define THREADS 8
#define LOOKUPS_PER_THREAD 20000

static char pad[160];
static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int64_t *make_ids(bool random_ids) {
    int64_t *ids = malloc(NDOCS * sizeof *ids);
    for (int i = 0; i < NDOCS; i++) ids[i] = random_ids ? (int64_t)(rnd() >> 2) : i;
    return ids;
}

static void make_doc(bson_t *d, int64_t id, int i) {
    bson_init(d);
    BSON_APPEND_INT64(d, "_id", id);
    BSON_APPEND_INT32(d, "a", i % 1000);
    BSON_APPEND_INT32(d, "b", (i * 7) % 5000);
    BSON_APPEND_UTF8(d, "pad", pad);
}

/* ---- ours ---------------------------------------------------------------------------- */

typedef struct ins_arg {
    const int64_t *ids;
    int from, n;
} ins_arg_t;

static int ins_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    ins_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, "bench.c");
    for (int i = a->from; i < a->from + a->n; i++) {
        bson_t d;
        int rc;
        make_doc(&d, a->ids[i], i);
        rc = store_write_doc(t, c, 0, NULL, &d, NULL, NULL, err);
        bson_destroy(&d);
        if (rc) return rc;
    }
    return 0;
}

static int setup_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    store_coll_t *c;
    bson_t s1, s2, k;
    bool ex;
    int rc;
    (void)arg;
    if ((rc = store_coll_create(t, "bench.c", NULL, &c, NULL, err)) != 0) return rc;
    bson_init(&s1);
    BSON_APPEND_DOCUMENT_BEGIN(&s1, "key", &k);
    BSON_APPEND_INT32(&k, "a", 1);
    bson_append_document_end(&s1, &k);
    bson_init(&s2);
    BSON_APPEND_DOCUMENT_BEGIN(&s2, "key", &k);
    BSON_APPEND_INT32(&k, "b", 1);
    bson_append_document_end(&s2, &k);
    rc = store_index_create(t, c, &s1, &ex, err);
    if (!rc) rc = store_index_create(t, c, &s2, &ex, err);
    bson_destroy(&s1);
    bson_destroy(&s2);
    return rc;
}

static double ours_insert(const char *dir, const int64_t *ids, store_t **keep) {
    store_t *st;
    ms_error_t e;
    store_opts_t so = {0};
    long long t0;
    if (store_open(dir, &so, &st, &e) || store_ddl(st, setup_fn, NULL, &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        exit(1);
    }
    t0 = time_mono_us();
    for (int i = 0; i < NDOCS; i += BATCH) {
        ins_arg_t a = {ids, i, BATCH};
        if (store_write(st, ins_fn, &a, &e)) {
            fprintf(stderr, "insert: %s\n", e.msg);
            exit(1);
        }
    }
    {
        double s = (time_mono_us() - t0) / 1e6;
        if (keep) *keep = st;
        else store_close(st);
        return NDOCS / s;
    }
}

/* ---- raw SQLite ---------------------------------------------------------------------- */

static sqlite3 *raw_open(const char *path) {
    sqlite3 *db;
    sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA temp_store=MEMORY;"
                 " PRAGMA cache_size=-65536;", NULL, NULL, NULL);
    return db;
}

static double raw_insert(const char *path, const int64_t *ids) {
    sqlite3 *db = raw_open(path);
    sqlite3_stmt *s;
    long long t0;
    sqlite3_exec(db, "CREATE TABLE t(id BLOB PRIMARY KEY, a INTEGER, b INTEGER, doc BLOB);"
                 "CREATE INDEX t_a ON t(a); CREATE INDEX t_b ON t(b);", NULL, NULL, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO t(id, a, b, doc) VALUES(?,?,?,?)", -1, &s, NULL);
    t0 = time_mono_us();
    for (int i = 0; i < NDOCS; i += BATCH) {
        sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        for (int j = i; j < i + BATCH; j++) {
            bson_t d;
            uint8_t key[9];
            uint64_t v = (uint64_t)ids[j] ^ (1ull << 63);
            key[0] = 0x10;
            for (int k = 0; k < 8; k++) key[1 + k] = (uint8_t)(v >> (56 - 8 * k));
            make_doc(&d, ids[j], j);
            sqlite3_bind_blob(s, 1, key, 9, SQLITE_STATIC);
            sqlite3_bind_int(s, 2, j % 1000);
            sqlite3_bind_int(s, 3, (j * 7) % 5000);
            sqlite3_bind_blob(s, 4, bson_get_data(&d), (int)d.len, SQLITE_STATIC);
            if (sqlite3_step(s) != SQLITE_DONE) {
                fprintf(stderr, "raw insert: %s\n", sqlite3_errmsg(db));
                exit(1);
            }
            sqlite3_reset(s);
            bson_destroy(&d);
        }
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    }
    {
        double secs = (time_mono_us() - t0) / 1e6;
        sqlite3_finalize(s);
        sqlite3_close(db);
        return NDOCS / secs;
    }
}

/* ---- point finds --------------------------------------------------------------------- */

typedef struct pf {
    store_t *st;
    cursors_t *cs;
    const char *raw_path;
    const int64_t *ids;
    int seed;
    long long *lat_us;
} pf_t;

static void *ours_finder(void *arg) {
    pf_t *p = arg;
    for (int i = 0; i < LOOKUPS_PER_THREAD; i++) {
        find_args_t fa;
        bson_t reply, f;
        ms_error_t e;
        long long t0 = time_mono_us();
        memset(&fa, 0, sizeof fa);
        fa.ns = "bench.c";
        fa.batch_size = -1;
        bson_init(&f);
        BSON_APPEND_INT64(&f, "_id", p->ids[(p->seed * 7919 + i * 104729) % NDOCS]);
        fa.filter = bson_copy(&f);
        query_compile(&f, &fa.q, &e);
        bson_destroy(&f);
        bson_init(&reply);
        if (exec_find(p->st, p->cs, &fa, &reply, &e) != 0) fprintf(stderr, "find: %s\n", e.msg);
        bson_destroy(&reply);
        p->lat_us[i] = time_mono_us() - t0;
    }
    return NULL;
}

static void *raw_finder(void *arg) {
    pf_t *p = arg;
    sqlite3 *db = raw_open(p->raw_path);
    sqlite3_stmt *s;
    sqlite3_prepare_v2(db, "SELECT doc FROM t WHERE id = ?", -1, &s, NULL);
    for (int i = 0; i < LOOKUPS_PER_THREAD; i++) {
        long long t0 = time_mono_us();
        uint8_t key[9];
        uint64_t v = (uint64_t)p->ids[(p->seed * 7919 + i * 104729) % NDOCS] ^ (1ull << 63);
        key[0] = 0x10;
        for (int k = 0; k < 8; k++) key[1 + k] = (uint8_t)(v >> (56 - 8 * k));
        sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        sqlite3_bind_blob(s, 1, key, 9, SQLITE_STATIC);
        if (sqlite3_step(s) == SQLITE_ROW) {
            bson_t d;
            if (bson_init_static(&d, sqlite3_column_blob(s, 0), (size_t)sqlite3_column_bytes(s, 0))) {
                bson_t copy;
                bson_copy_to(&d, &copy);  /* the shard copies the doc into its reply too */
                bson_destroy(&copy);
            }
        }
        sqlite3_reset(s);
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        p->lat_us[i] = time_mono_us() - t0;
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return NULL;
}

static int cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

static void run_finds(void *(*fn)(void *), pf_t *proto, double *ops, double *p50, double *p99) {
    pthread_t th[THREADS];
    pf_t p[THREADS];
    long long *all = malloc(sizeof(long long) * THREADS * LOOKUPS_PER_THREAD);
    long long t0 = time_mono_us();
    for (int i = 0; i < THREADS; i++) {
        p[i] = *proto;
        p[i].seed = i + 1;
        p[i].lat_us = all + (size_t)i * LOOKUPS_PER_THREAD;
        pthread_create(&th[i], NULL, fn, &p[i]);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    *ops = THREADS * LOOKUPS_PER_THREAD / ((time_mono_us() - t0) / 1e6);
    qsort(all, (size_t)THREADS * LOOKUPS_PER_THREAD, sizeof *all, cmp_ll);
    *p50 = (double)all[(size_t)THREADS * LOOKUPS_PER_THREAD / 2];
    *p99 = (double)all[(size_t)THREADS * LOOKUPS_PER_THREAD * 99 / 100];
    free(all);
}

int main(void) {
    char dir[256], p1[300], p2[300], p3[300], p4[300], r1[300], r2[300];
    int64_t *seq = make_ids(false), *rnd_ids = make_ids(true);
    store_t *st = NULL;
    cursors_t *cs = NULL;
    double o_seq, r_seq, o_rnd, r_rnd, o_ops, o_50, o_99, r_ops, r_50, r_99;
    memset(pad, 'x', sizeof pad - 1);
    log_init("bench", LOG_WARN);
    snprintf(dir, sizeof dir, "/tmp/ms-bench-shardd-%d", (int)getpid());
    snprintf(p1, sizeof p1, "%s/seq", dir);
    snprintf(p2, sizeof p2, "%s/rnd", dir);
    snprintf(r1, sizeof r1, "%s/raw-seq.sqlite", dir);
    snprintf(r2, sizeof r2, "%s/raw-rnd.sqlite", dir);
    snprintf(p3, sizeof p3, "mkdir -p %s", dir);
    if (system(p3) != 0) return 1;
    /* interleave ours and raw so machine noise hits both */
    r_seq = raw_insert(r1, seq);
    o_seq = ours_insert(p1, seq, &st);
    o_rnd = ours_insert(p2, rnd_ids, NULL);
    r_rnd = raw_insert(r2, rnd_ids);
    cursors_new(0, &cs);
    {
        pf_t proto = {st, cs, r1, seq, 0, NULL};
        run_finds(ours_finder, &proto, &o_ops, &o_50, &o_99);
        run_finds(raw_finder, &proto, &r_ops, &r_50, &r_99);
    }
    cursors_free(cs);
    store_close(st);
    snprintf(p4, sizeof p4, "rm -rf %s", dir);
    if (system(p4) != 0) fprintf(stderr, "could not remove %s\n", dir);
    printf("%-34s %12s %12s %8s\n", "figure", "shardd", "raw sqlite", "ratio");
    printf("%-34s %12.0f %12.0f %7.0f%%\n", "insert docs/s, sequential _id", o_seq, r_seq, 100 * o_seq / r_seq);
    printf("%-34s %12.0f %12.0f %7.0f%%\n", "insert docs/s, random _id", o_rnd, r_rnd, 100 * o_rnd / r_rnd);
    printf("%-34s %12.0f %12.0f %7.0f%%\n", "point find ops/s, 8 threads", o_ops, r_ops, 100 * o_ops / r_ops);
    printf("%-34s %12.0f %12.0f\n", "point find p50 us", o_50, r_50);
    printf("%-34s %12.0f %12.0f\n", "point find p99 us", o_99, r_99);
    printf("BENCH_JSON {\"shardd\": {\"insert_seq_docs_per_s\": %.0f, \"raw_insert_seq_docs_per_s\": %.0f, "
           "\"insert_seq_ratio\": %.3f, \"insert_rnd_docs_per_s\": %.0f, \"raw_insert_rnd_docs_per_s\": %.0f, "
           "\"insert_rnd_ratio\": %.3f, \"find_ops_per_s\": %.0f, \"raw_find_ops_per_s\": %.0f, "
           "\"find_ratio\": %.3f, \"find_p50_us\": %.0f, \"find_p99_us\": %.0f, \"raw_find_p50_us\": %.0f, "
           "\"raw_find_p99_us\": %.0f}}\n",
           o_seq, r_seq, o_seq / r_seq, o_rnd, r_rnd, o_rnd / r_rnd, o_ops, r_ops, o_ops / r_ops, o_50,
           o_99, r_50, r_99);
    free(seq);
    free(rnd_ids);
    return 0;
}
