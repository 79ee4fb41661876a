/*
 * bench_shardd_store.c — the shard daemon's storage layer against raw SQLite, in one
 * process and one run (bin/shardd's store.c + plan.c called directly):
 *   1. bulk insert of ~200 B documents in batches of 1,000 through store_write_doc (two
 *      secondary indexes) vs raw SQLite doing the same work in the same schema shape
 *      (collection table with the unique _id key blob, partial sk index and doc blob, two
 *      WITHOUT ROWID side tables, same pragmas and transaction size), sequential and
 *      random _id → ratio (goal ≥ 60 %); also vs the cheapest SQLite shape (index fields as
 *      indexed integer columns of one table) so the side tables' own price stays visible.
 *      Median of 3 interleaved rounds;
 *   2. the whole path over the wire: the same bulk insert as insert commands through NNG
 *      (tcp://127.0.0.1) into an in-process shardd (its command table and dispatch) vs the
 *      store layer alone, so the RPC/dispatch overhead is visible;
 *   3. point find by _id from 8 threads through plan_find (plan, cursor, batch) vs raw
 *      prepared point selects: ops/s, p50/p99 latency.
 * Prints a table and one `BENCH_JSON {"shardd": {...}}` line.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/rpc.h"
#include "shardd/shardd.h"
#include "tests/unit/t.h"  /* t_free_port */

#define NDOCS 100000
#define BATCH 1000
#define THREADS 8
#define LOOKUPS_PER_THREAD 20000
#define ROUNDS 3

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

/* A number as an 11-byte order-preserving key (the length keys.h gives numbers). */
static void raw_key(uint8_t key[11], int64_t v) {
    uint64_t u = (uint64_t)v ^ (1ull << 63);
    key[0] = 0x14;
    for (int k = 0; k < 8; k++) key[1 + k] = (uint8_t)(u >> (56 - 8 * k));
    key[9] = key[10] = 0;
}

/* The store's schema shape (docs/storage.md): the collection table with the unique _id
 * key blob, the partial shard-key index and the document, plus one WITHOUT ROWID side
 * table per secondary index — three inserts per document, as store_write_doc does. */
static double raw_insert(const char *path, const int64_t *ids) {
    sqlite3 *db = raw_open(path);
    sqlite3_stmt *s, *sa, *sb;
    long long t0;
    sqlite3_exec(db, "CREATE TABLE c(rid INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, sk BLOB,"
                 " doc BLOB NOT NULL); CREATE INDEX c_sk ON c(sk) WHERE sk IS NOT NULL;"
                 "CREATE TABLE ia(k BLOB NOT NULL, rid INTEGER NOT NULL, PRIMARY KEY(k, rid))"
                 " WITHOUT ROWID;"
                 "CREATE TABLE ib(k BLOB NOT NULL, rid INTEGER NOT NULL, PRIMARY KEY(k, rid))"
                 " WITHOUT ROWID;", NULL, NULL, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO c(id, sk, doc) VALUES(?,NULL,?)", -1, &s, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO ia(k, rid) VALUES(?,?)", -1, &sa, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO ib(k, rid) VALUES(?,?)", -1, &sb, NULL);
    t0 = time_mono_us();
    for (int i = 0; i < NDOCS; i += BATCH) {
        sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        for (int j = i; j < i + BATCH; j++) {
            bson_t d;
            uint8_t key[11], ka[11], kb[11];
            int64_t rid;
            raw_key(key, ids[j]);
            raw_key(ka, j % 1000);
            raw_key(kb, (j * 7) % 5000);
            make_doc(&d, ids[j], j);
            sqlite3_bind_blob(s, 1, key, sizeof key, SQLITE_STATIC);
            sqlite3_bind_blob(s, 2, bson_get_data(&d), (int)d.len, SQLITE_STATIC);
            if (sqlite3_step(s) != SQLITE_DONE) {
                fprintf(stderr, "raw insert: %s\n", sqlite3_errmsg(db));
                exit(1);
            }
            sqlite3_reset(s);
            rid = sqlite3_last_insert_rowid(db);
            sqlite3_bind_blob(sa, 1, ka, sizeof ka, SQLITE_STATIC);
            sqlite3_bind_int64(sa, 2, rid);
            sqlite3_bind_blob(sb, 1, kb, sizeof kb, SQLITE_STATIC);
            sqlite3_bind_int64(sb, 2, rid);
            if (sqlite3_step(sa) != SQLITE_DONE || sqlite3_step(sb) != SQLITE_DONE) {
                fprintf(stderr, "raw index insert: %s\n", sqlite3_errmsg(db));
                exit(1);
            }
            sqlite3_reset(sa);
            sqlite3_reset(sb);
            bson_destroy(&d);
        }
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    }
    {
        double secs = (time_mono_us() - t0) / 1e6;
        sqlite3_finalize(s);
        sqlite3_finalize(sa);
        sqlite3_finalize(sb);
        sqlite3_close(db);
        return NDOCS / secs;
    }
}

/* The cheapest shape SQLite allows for the same data: the index fields as integer columns
 * of the document table with ordinary SQLite indexes (no side tables, one insert per
 * document). Not the goal's baseline (the store cannot index arrays this way, see
 * docs/storage.md); printed so the price of the side-table design stays visible. */
static double raw_insert_columns(const char *path, const int64_t *ids) {
    sqlite3 *db = raw_open(path);
    sqlite3_stmt *s;
    long long t0;
    sqlite3_exec(db, "CREATE TABLE t(rid INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, a INTEGER,"
                 " b INTEGER, doc BLOB NOT NULL); CREATE INDEX t_a ON t(a); CREATE INDEX t_b ON t(b);",
                 NULL, NULL, NULL);
    sqlite3_prepare_v2(db, "INSERT INTO t(id, a, b, doc) VALUES(?,?,?,?)", -1, &s, NULL);
    t0 = time_mono_us();
    for (int i = 0; i < NDOCS; i += BATCH) {
        sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        for (int j = i; j < i + BATCH; j++) {
            bson_t d;
            uint8_t key[11];
            raw_key(key, ids[j]);
            make_doc(&d, ids[j], j);
            sqlite3_bind_blob(s, 1, key, sizeof key, SQLITE_STATIC);
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

/* ---- the whole path over the wire --------------------------------------------------- */

/* A free loopback port (MS_TEST_PORT overrides, as in the other benches). */

static void wire_command(rpc_client_t *cl, const bson_t *cmd, int64_t want_n) {
    bson_t reply;
    bson_iter_t it;
    ms_error_t e;
    if (rpc_command(cl, cmd, 60000, &reply, &e) != 0) {
        fprintf(stderr, "wire: %s\n", e.msg);
        exit(1);
    }
    if (want_n >= 0 && !(bson_iter_init_find(&it, &reply, "n") && bson_iter_as_int64(&it) == want_n)) {
        char *js = bson_as_relaxed_extended_json(&reply, NULL);
        fprintf(stderr, "wire: unexpected reply %s\n", js);
        exit(1);
    }
    bson_destroy(&reply);
}

/* {insert: "c", $db: "bench", documents: [the batch's documents]}, built before timing:
 * the figure is what the server side and the transport cost (what a router pays). */
static bson_t *insert_command(const int64_t *ids, int from) {
    bson_t *cmd = bson_new(), arr;
    BSON_APPEND_UTF8(cmd, "insert", "c");
    BSON_APPEND_UTF8(cmd, "$db", "bench");
    BSON_APPEND_ARRAY_BEGIN(cmd, "documents", &arr);
    for (int i = from; i < from + BATCH; i++) {
        bson_t d;
        char key[16];
        make_doc(&d, ids[i], i);
        snprintf(key, sizeof key, "%d", i - from);
        BSON_APPEND_DOCUMENT(&arr, key, &d);
        bson_destroy(&d);
    }
    bson_append_array_end(cmd, &arr);
    return cmd;
}

/* Bulk insert through NNG into an in-process shardd (its real command table and
 * dispatch on tcp://127.0.0.1), one batch of 1,000 per insert command, the same two
 * indexes created by createIndexes first. */
static double wire_insert(const char *dir, const int64_t *ids) {
    shardd_t app;
    store_opts_t so = {0};
    cmd_server_t *srv = NULL;
    rpc_client_t *cl = NULL;
    char url[64];
    ms_error_t e;
    bson_t *cmds[NDOCS / BATCH], *ci;
    long long t0;
    double secs;
    memset(&app, 0, sizeof app);
    app.name = "bench";
    if (store_open(dir, &so, &app.st, &e) || shv_open(&app.shv, &e) ||
        plan_cursors_new(600000, &app.cursors)) {
        fprintf(stderr, "wire setup: %s\n", e.msg);
        exit(1);
    }
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", t_free_port(0));
    {
        cmd_server_opts_t o = {.process = "shardd", .url = url, .table = shardd_cmd_table,
                               .table_len = shardd_cmd_table_len, .app = &app};
        if (cmd_server_start(&o, &srv, &e) != 0 || rpc_client_open(url, &cl, &e) != 0) {
            fprintf(stderr, "wire start: %s\n", e.msg);
            exit(1);
        }
    }
    ci = BCON_NEW("createIndexes", "c", "$db", "bench", "indexes", "[",
                  "{", "key", "{", "a", BCON_INT32(1), "}", "name", "a_1", "}",
                  "{", "key", "{", "b", BCON_INT32(1), "}", "name", "b_1", "}", "]");
    wire_command(cl, ci, -1);
    bson_destroy(ci);
    for (int b = 0; b < NDOCS / BATCH; b++) cmds[b] = insert_command(ids, b * BATCH);
    t0 = time_mono_us();
    for (int b = 0; b < NDOCS / BATCH; b++) wire_command(cl, cmds[b], BATCH);
    secs = (time_mono_us() - t0) / 1e6;
    for (int b = 0; b < NDOCS / BATCH; b++) bson_destroy(cmds[b]);
    rpc_client_close(cl);
    cmd_server_stop(srv);
    curs_reg_free(app.cursors);
    shv_close(app.shv);
    store_close(app.st);
    return NDOCS / secs;
}

/* ---- point finds --------------------------------------------------------------------- */

typedef struct pf {
    store_t *st;
    curs_reg_t *cs;
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
        if (plan_find(p->st, p->cs, &fa, &reply, &e) != 0) fprintf(stderr, "find: %s\n", e.msg);
        bson_destroy(&reply);
        p->lat_us[i] = time_mono_us() - t0;
    }
    return NULL;
}

static void *raw_finder(void *arg) {
    pf_t *p = arg;
    sqlite3 *db = raw_open(p->raw_path);
    sqlite3_stmt *s;
    sqlite3_prepare_v2(db, "SELECT doc FROM c WHERE id = ?", -1, &s, NULL);
    for (int i = 0; i < LOOKUPS_PER_THREAD; i++) {
        long long t0 = time_mono_us();
        uint8_t key[11];
        raw_key(key, p->ids[(p->seed * 7919 + i * 104729) % NDOCS]);
        sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        sqlite3_bind_blob(s, 1, key, sizeof key, SQLITE_STATIC);
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

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return v[n / 2];
}

static void path_in(char *out, size_t sz, const char *dir, const char *what, int round) {
    snprintf(out, sz, "%s/%s-%d", dir, what, round);
}

int main(void) {
    char dir[256], cmd[300], path[300], find_raw[300];
    int64_t *seq = make_ids(false), *rnd_ids = make_ids(true);
    store_t *st = NULL;
    curs_reg_t *cs = NULL;
    double o_seq[ROUNDS], r_seq[ROUNDS], o_rnd[ROUNDS], r_rnd[ROUNDS], c_seq[ROUNDS], c_rnd[ROUNDS];
    double w_seq[ROUNDS], w_rnd[ROUNDS];
    double os, rs, orn, rrn, cs_, cr, ws, wr, o_ops, o_50, o_99, r_ops, r_50, r_99;
    memset(pad, 'x', sizeof pad - 1);
    log_init("bench", LOG_WARN);
    snprintf(dir, sizeof dir, "/tmp/ms-bench-shardd-%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 1;
    /* Rounds interleave ours and raw so machine noise hits both; medians are reported. */
    for (int r = 0; r < ROUNDS; r++) {
        bool last = r == ROUNDS - 1;
        path_in(path, sizeof path, dir, "raw-seq", r);
        r_seq[r] = raw_insert(path, seq);
        if (last) snprintf(find_raw, sizeof find_raw, "%s", path);
        path_in(path, sizeof path, dir, "seq", r);
        o_seq[r] = ours_insert(path, seq, last ? &st : NULL);
        path_in(path, sizeof path, dir, "col-seq", r);
        c_seq[r] = raw_insert_columns(path, seq);
        path_in(path, sizeof path, dir, "rnd", r);
        o_rnd[r] = ours_insert(path, rnd_ids, NULL);
        path_in(path, sizeof path, dir, "raw-rnd", r);
        r_rnd[r] = raw_insert(path, rnd_ids);
        path_in(path, sizeof path, dir, "col-rnd", r);
        c_rnd[r] = raw_insert_columns(path, rnd_ids);
        path_in(path, sizeof path, dir, "wire-seq", r);
        w_seq[r] = wire_insert(path, seq);
        path_in(path, sizeof path, dir, "wire-rnd", r);
        w_rnd[r] = wire_insert(path, rnd_ids);
    }
    os = median(o_seq, ROUNDS);
    rs = median(r_seq, ROUNDS);
    orn = median(o_rnd, ROUNDS);
    rrn = median(r_rnd, ROUNDS);
    cs_ = median(c_seq, ROUNDS);
    cr = median(c_rnd, ROUNDS);
    ws = median(w_seq, ROUNDS);
    wr = median(w_rnd, ROUNDS);
    plan_cursors_new(0, &cs);
    {
        pf_t proto = {st, cs, find_raw, seq, 0, NULL};
        run_finds(ours_finder, &proto, &o_ops, &o_50, &o_99);
        run_finds(raw_finder, &proto, &r_ops, &r_50, &r_99);
    }
    curs_reg_free(cs);
    store_close(st);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    printf("%-34s %12s %12s %8s\n", "figure (median of 3)", "shardd", "raw sqlite", "ratio");
    printf("%-34s %12.0f %12.0f %7.0f%%\n", "insert docs/s, sequential _id", os, rs, 100 * os / rs);
    printf("%-34s %12.0f %12.0f %7.0f%%\n", "insert docs/s, random _id", orn, rrn, 100 * orn / rrn);
    printf("%-34s %12.0f %12.0f %7.0f%%\n", "  vs index columns, sequential", os, cs_, 100 * os / cs_);
    printf("%-34s %12.0f %12.0f %7.0f%%\n", "  vs index columns, random", orn, cr, 100 * orn / cr);
    printf("%-34s %12s %12s %8s\n", "whole path over NNG", "wire", "store alone", "ratio");
    printf("%-34s %12.0f %12.0f %7.0f%%\n", "insert docs/s, sequential _id", ws, os, 100 * ws / os);
    printf("%-34s %12.0f %12.0f %7.0f%%\n", "insert docs/s, random _id", wr, orn, 100 * wr / orn);
    printf("%-34s %12.0f %12.0f %7.0f%%\n", "point find ops/s, 8 threads", o_ops, r_ops, 100 * o_ops / r_ops);
    printf("%-34s %12.0f %12.0f\n", "point find p50 us", o_50, r_50);
    printf("%-34s %12.0f %12.0f\n", "point find p99 us", o_99, r_99);
    printf("BENCH_JSON {\"shardd\": {\"insert_seq_docs_per_s\": %.0f, \"raw_insert_seq_docs_per_s\": %.0f, "
           "\"insert_seq_ratio\": %.3f, \"insert_rnd_docs_per_s\": %.0f, \"raw_insert_rnd_docs_per_s\": %.0f, "
           "\"insert_rnd_ratio\": %.3f, \"raw_columns_insert_seq_docs_per_s\": %.0f, "
           "\"raw_columns_insert_rnd_docs_per_s\": %.0f, \"insert_seq_ratio_vs_columns\": %.3f, "
           "\"insert_rnd_ratio_vs_columns\": %.3f, \"wire_insert_seq_docs_per_s\": %.0f, "
           "\"wire_insert_rnd_docs_per_s\": %.0f, \"wire_vs_store_seq_ratio\": %.3f, "
           "\"wire_vs_store_rnd_ratio\": %.3f, \"wire_vs_raw_seq_ratio\": %.3f, "
           "\"wire_vs_raw_rnd_ratio\": %.3f, \"find_ops_per_s\": %.0f, \"raw_find_ops_per_s\": %.0f, "
           "\"find_ratio\": %.3f, \"find_p50_us\": %.0f, \"find_p99_us\": %.0f, \"raw_find_p50_us\": %.0f, "
           "\"raw_find_p99_us\": %.0f}}\n",
           os, rs, os / rs, orn, rrn, orn / rrn, cs_, cr, os / cs_, orn / cr, ws, wr, ws / os, wr / orn,
           ws / rs, wr / rrn, o_ops, r_ops, o_ops / r_ops,
           o_50, o_99, r_50, r_99);
    free(seq);
    free(rnd_ids);
    return 0;
}
