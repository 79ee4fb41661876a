/*
 * nng_client.c — the NNG counterpart of tests/clients/mongoc_client.c's bench modes, for
 * tests/bench/bench_wire.py: the same commands (ping, a point find with
 * limit 1 and singleBatch, one unordered insert of N documents built by bench_docs.h) sent
 * over minishard's own transport with common/rpc.c, one BSON command each way, as
 * shardctl and every daemon send them. Not a daemon.
 *
 *   nng_client bench-ping   URL ITERS
 *   nng_client bench-find   URL DB COLL ID ITERS
 *   nng_client bench-insert URL DB COLL N
 *
 * Prints `p50_us= p99_us=` or `secs=`; exit 1 on any error or {ok: 0} reply.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/rpc.h"
#include "tests/clients/bench_docs.h"

#define CALL_TIMEOUT_MS 120000   /* a 100,000-document insert on a busy 2-core machine */

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int call(rpc_client_t *cl, const bson_t *cmd, const char *what) {
    bson_t reply;
    ms_error_t err;
    int rc = rpc_command(cl, cmd, CALL_TIMEOUT_MS, &reply, &err);
    if (rc == 0) {
        bson_destroy(&reply);
        return 0;
    }
    fprintf(stderr, "nng_client: %s: code %d %s\n", what, rc, err.msg);
    return 1;
}

/* One round trip: `ping`, or the find libmongoc sends for find_with_opts({_id: id},
 * {limit: 1, singleBatch: true}). */
static int one_call(rpc_client_t *cl, const char *db, const char *coll, int64_t id) {
    bson_t *cmd;
    if (!coll)
        cmd = BCON_NEW("ping", BCON_INT32(1), "$db", BCON_UTF8("admin"));
    else
        cmd = BCON_NEW("find", BCON_UTF8(coll), "filter", "{", "_id", BCON_INT64(id), "}",
                       "limit", BCON_INT64(1), "singleBatch", BCON_BOOL(true), "$db",
                       BCON_UTF8(db));
    int rc = call(cl, cmd, coll ? "find" : "ping");
    bson_destroy(cmd);
    return rc;
}

static int bench_calls(rpc_client_t *cl, const char *db, const char *coll, int64_t id, int iters) {
    double *t = calloc((size_t)iters, sizeof *t);
    if (!t) return 1;
    for (int i = 0; i < BENCH_WARMUP; i++)
        if (one_call(cl, db, coll, id)) return 1;
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        if (one_call(cl, db, coll, id)) return 1;
        t[i] = now_us() - t0;
    }
    bench_print_latency(t, iters);
    free(t);
    return 0;
}

static int bench_insert(rpc_client_t *cl, const char *db, const char *coll, int n) {
    bson_t **docs = calloc((size_t)n, sizeof *docs);
    if (!docs) return 1;
    for (int i = 0; i < n; i++) docs[i] = bench_doc(i);
    if (one_call(cl, NULL, NULL, 0)) return 1;   /* connected before the timing */
    double t0 = now_us();
    /* Built inside the timing, as libmongoc builds its OP_MSG inside insert_many. */
    bson_t cmd, arr;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "insert", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &arr);
    char key[16];
    for (int i = 0; i < n; i++) {
        const char *k;
        bson_uint32_to_string((uint32_t)i, &k, key, sizeof key);
        bson_append_document(&arr, k, -1, docs[i]);
    }
    bson_append_array_end(&cmd, &arr);
    BSON_APPEND_BOOL(&cmd, "ordered", false);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    int rc = call(cl, &cmd, "insert");
    double secs = (now_us() - t0) / 1e6;
    bson_destroy(&cmd);
    for (int i = 0; i < n; i++) bson_destroy(docs[i]);
    free(docs);
    if (rc) return rc;
    printf("secs=%.4f\n", secs);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: nng_client bench-ping|bench-find|bench-insert URL ...\n");
        return 2;
    }
    log_init("nng_client", LOG_WARN);
    rpc_client_t *cl;
    ms_error_t err;
    if (rpc_client_open(argv[2], &cl, &err) != 0) {
        fprintf(stderr, "nng_client: open %s: %s\n", argv[2], err.msg);
        return 1;
    }
    int rc = 2;
    if (!strcmp(argv[1], "bench-ping") && argc == 4)
        rc = bench_calls(cl, NULL, NULL, 0, atoi(argv[3]));
    else if (!strcmp(argv[1], "bench-find") && argc == 7)
        rc = bench_calls(cl, argv[3], argv[4], atoll(argv[5]), atoi(argv[6]));
    else if (!strcmp(argv[1], "bench-insert") && argc == 6)
        rc = bench_insert(cl, argv[3], argv[4], atoi(argv[5]));
    else
        fprintf(stderr, "nng_client: bad arguments for %s\n", argv[1]);
    rpc_client_close(cl);
    return rc;
}
