/*
 * mongoc_client.c — a small libmongoc (Debian's libmongoc-dev 1.23) client of minishard,
 * speaking MongoDB's wire protocol to a router or a shard. Not a
 * daemon: tests/integration/test_mongoc.py and tests/bench/bench_wire.py run it.
 *
 *   mongoc_client test  URL DB COLL N       drop, insert N docs with insert_many, find
 *                                           {g: 3} sorted in batches of 50, count_documents
 *   mongoc_client bench-ping   URL ITERS              one `ping` per round trip
 *   mongoc_client bench-find   URL DB COLL ID ITERS   find {_id: ID} limit 1, singleBatch
 *   mongoc_client bench-insert URL DB COLL N          one unordered insert_many of N docs
 *
 * `test` prints key=value lines (inserted, found, getmores, ordered, count) and `MONGOC OK`;
 * the bench modes print `p50_us= p99_us=` (per round trip, after a warm-up) or `secs=`.
 * tests/clients/nng_client.c takes the same bench arguments and sends the same commands
 * over NNG, so the two compare one transport with the other. Exit 1 on any error.
 */
#include <mongoc/mongoc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/clients/bench_docs.h"

static int die(const char *what, const bson_error_t *e) {
    fprintf(stderr, "mongoc_client: %s: %s (domain %u code %u)\n", what, e ? e->message : "",
            e ? e->domain : 0, e ? e->code : 0);
    return 1;
}

static int g_getmores;

/* APM: counts the getMore commands libmongoc sends, so the test sees the cursor really
 * went across several batches. */
static void on_started(const mongoc_apm_command_started_t *ev) {
    if (strcmp(mongoc_apm_command_started_get_command_name(ev), "getMore") == 0) g_getmores++;
}

static int run_test(mongoc_client_t *cl, const char *db, const char *coll, int n) {
    bson_error_t e;
    mongoc_collection_t *c = mongoc_client_get_collection(cl, db, coll);
    bson_t **docs = calloc((size_t)n, sizeof *docs);
    int rc = 1;
    if (!docs) return 1;
    /* The collection may be sharded by the caller beforehand: delete, don't drop. */
    if (!mongoc_collection_delete_many(c, &(bson_t)BSON_INITIALIZER, NULL, NULL, &e)) {
        rc = die("delete_many", &e);
        goto out;
    }
    for (int i = 0; i < n; i++)
        docs[i] = BCON_NEW("_id", BCON_INT32(i), "k", BCON_INT32(i), "g", BCON_INT32(i % 10),
                           "s", BCON_UTF8("libmongoc"));
    bson_t reply;
    if (!mongoc_collection_insert_many(c, (const bson_t **)docs, (size_t)n, NULL, &reply, &e)) {
        bson_destroy(&reply);
        rc = die("insert_many", &e);
        goto out;
    }
    bson_iter_t it;
    if (bson_iter_init_find(&it, &reply, "insertedCount"))
        printf("inserted=%d\n", (int)bson_iter_as_int64(&it));
    bson_destroy(&reply);

    bson_t *filter = BCON_NEW("g", BCON_INT32(3));
    bson_t *opts = BCON_NEW("sort", "{", "_id", BCON_INT32(1), "}", "batchSize", BCON_INT32(50));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, filter, opts, NULL);
    const bson_t *d;
    int found = 0, last = -1, ordered = 1;
    g_getmores = 0;
    while (mongoc_cursor_next(cur, &d)) {
        if (!bson_iter_init_find(&it, d, "_id") || bson_iter_as_int64(&it) % 10 != 3) ordered = 0;
        int id = (int)bson_iter_as_int64(&it);
        if (id <= last) ordered = 0;
        last = id;
        found++;
    }
    bool cur_err = mongoc_cursor_error(cur, &e);
    mongoc_cursor_destroy(cur);
    bson_destroy(opts);
    if (cur_err) {
        bson_destroy(filter);
        rc = die("cursor", &e);
        goto out;
    }
    printf("found=%d\ngetmores=%d\nordered=%d\n", found, g_getmores, ordered);
    int64_t cnt = mongoc_collection_count_documents(c, filter, NULL, NULL, NULL, &e);
    bson_destroy(filter);
    if (cnt < 0) {
        rc = die("count_documents", &e);
        goto out;
    }
    printf("count=%lld\n", (long long)cnt);
    printf("MONGOC OK\n");
    rc = 0;
out:
    for (int i = 0; i < n; i++) bson_destroy(docs[i]);
    free(docs);
    mongoc_collection_destroy(c);
    return rc;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* One round trip of the bench modes: `ping` on admin or a point find. */
static int one_call(mongoc_client_t *cl, mongoc_collection_t *c, int64_t id) {
    bson_error_t e;
    if (!c) {
        bson_t *cmd = BCON_NEW("ping", BCON_INT32(1));
        bool ok = mongoc_client_command_simple(cl, "admin", cmd, NULL, NULL, &e);
        bson_destroy(cmd);
        return ok ? 0 : die("ping", &e);
    }
    bson_t *filter = BCON_NEW("_id", BCON_INT64(id));
    bson_t *opts = BCON_NEW("limit", BCON_INT64(1), "singleBatch", BCON_BOOL(true));
    mongoc_cursor_t *cur = mongoc_collection_find_with_opts(c, filter, opts, NULL);
    const bson_t *d;
    int got = mongoc_cursor_next(cur, &d) ? 1 : 0;
    bool err = mongoc_cursor_error(cur, &e);
    mongoc_cursor_destroy(cur);
    bson_destroy(filter);
    bson_destroy(opts);
    if (err) return die("find", &e);
    return got == 1 ? 0 : die("find: no document", NULL);
}

static int bench_calls(mongoc_client_t *cl, mongoc_collection_t *c, int64_t id, int iters) {
    double *t = calloc((size_t)iters, sizeof *t);
    if (!t) return 1;
    for (int i = 0; i < BENCH_WARMUP; i++)
        if (one_call(cl, c, id)) return 1;
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        if (one_call(cl, c, id)) return 1;
        t[i] = now_us() - t0;
    }
    bench_print_latency(t, iters);
    free(t);
    return 0;
}

static int bench_insert(mongoc_client_t *cl, mongoc_collection_t *c, int n) {
    bson_t **docs = calloc((size_t)n, sizeof *docs);
    bson_error_t e;
    if (!docs) return 1;
    for (int i = 0; i < n; i++) docs[i] = bench_doc(i);
    bson_t *opts = BCON_NEW("ordered", BCON_BOOL(false));
    if (one_call(cl, NULL, 0)) return 1;   /* connect and handshake outside the timing */
    double t0 = now_us();
    bool ok = mongoc_collection_insert_many(c, (const bson_t **)docs, (size_t)n, opts, NULL, &e);
    double secs = (now_us() - t0) / 1e6;
    for (int i = 0; i < n; i++) bson_destroy(docs[i]);
    free(docs);
    bson_destroy(opts);
    if (!ok) return die("insert_many", &e);
    printf("secs=%.4f\n", secs);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: mongoc_client test|bench-ping|bench-find|bench-insert URL ...\n");
        return 2;
    }
    const char *mode = argv[1];
    mongoc_init();
    bson_error_t e;
    mongoc_uri_t *uri = mongoc_uri_new_with_error(argv[2], &e);
    if (!uri) return die("uri", &e);
    mongoc_client_t *cl = mongoc_client_new_from_uri(uri);
    mongoc_client_set_error_api(cl, MONGOC_ERROR_API_VERSION_2);
    mongoc_client_set_appname(cl, "minishard-mongoc-client");
    mongoc_apm_callbacks_t *cbs = mongoc_apm_callbacks_new();
    mongoc_apm_set_command_started_cb(cbs, on_started);
    mongoc_client_set_apm_callbacks(cl, cbs, NULL);
    int rc = 2;
    if (!strcmp(mode, "test") && argc == 6) {
        rc = run_test(cl, argv[3], argv[4], atoi(argv[5]));
    } else if (!strcmp(mode, "bench-ping") && argc == 4) {
        rc = bench_calls(cl, NULL, 0, atoi(argv[3]));
    } else if (!strcmp(mode, "bench-find") && argc == 7) {
        mongoc_collection_t *c = mongoc_client_get_collection(cl, argv[3], argv[4]);
        rc = bench_calls(cl, c, atoll(argv[5]), atoi(argv[6]));
        mongoc_collection_destroy(c);
    } else if (!strcmp(mode, "bench-insert") && argc == 6) {
        mongoc_collection_t *c = mongoc_client_get_collection(cl, argv[3], argv[4]);
        rc = bench_insert(cl, c, atoi(argv[5]));
        mongoc_collection_destroy(c);
    } else {
        fprintf(stderr, "mongoc_client: bad arguments for %s\n", mode);
    }
    mongoc_client_destroy(cl);
    mongoc_apm_callbacks_destroy(cbs);
    mongoc_uri_destroy(uri);
    mongoc_cleanup();
    return rc;
}
