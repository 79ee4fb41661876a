/*
 * bench_common_rpc.c — what our RPC stack costs over bare NNG. A ~100-byte ping goes
 * through rpc_call → REP worker → cmd_dispatch (size, BSON validation, lookup, field
 * checks, failCommand check) → the ping handler → reply with ok: 1; the baseline is a
 * bare NNG REQ/REP echo of the same bytes (REP contexts driven by the same number of
 * threads, one REQ context per client thread). Both on tcp://127.0.0.1, measured in the
 * same run with interleaved rounds: median and p99 round trip of one client, and ops/s
 * of 8 concurrent clients. Prints a table and one BENCH_JSON line.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cmd.h"
#include "common/log.h"
#include "common/rpc.h"
#include "tests/unit/t.h"  /* t_free_port */

#define ROUNDS 10
#define CALLS_PER_ROUND 2000   /* 20k calls per side for the latency medians */
#define CONC_THREADS 8
#define CONC_CALLS 1000        /* per thread per round */
#define CONC_ROUNDS 8
#define WORKERS 8


/* ---- the bare NNG echo server ---------------------------------------------------- */

typedef struct bare_worker {
    nng_ctx ctx;
    nng_aio *aio;
    pthread_t th;
} bare_worker_t;

static void *bare_worker_main(void *p) {
    bare_worker_t *w = p;
    for (;;) {
        nng_msg *m;
        nng_ctx_recv(w->ctx, w->aio);
        nng_aio_wait(w->aio);
        if (nng_aio_result(w->aio) != 0) break;
        m = nng_aio_get_msg(w->aio);
        nng_aio_set_msg(w->aio, m);
        nng_ctx_send(w->ctx, w->aio);
        nng_aio_wait(w->aio);
        if (nng_aio_result(w->aio) != 0) {
            nng_msg_free(m);
            break;
        }
    }
    return NULL;
}

/* ---- clients --------------------------------------------------------------------- */

typedef struct side {
    const char *name;
    bool ours;
    rpc_client_t *rpc;    /* ours */
    nng_socket req;       /* bare */
} side_t;

static bson_t ping_cmd;   /* ~100 bytes */

typedef struct bare_client {
    nng_ctx ctx;
    nng_aio *aio;
} bare_client_t;

static int bare_client_open(side_t *s, bare_client_t *bc) {
    if (nng_ctx_open(&bc->ctx, s->req) != 0 || nng_aio_alloc(&bc->aio, NULL, NULL) != 0) return -1;
    nng_aio_set_timeout(bc->aio, 10000);
    return 0;
}

static void bare_client_close(bare_client_t *bc) {
    nng_ctx_close(bc->ctx);
    nng_aio_free(bc->aio);
}

/* One round trip; 0 on success. */
static int one_call(side_t *s, bare_client_t *bc) {
    if (s->ours) {
        bson_t reply;
        ms_error_t err;
        if (rpc_call(s->rpc, &ping_cmd, 10000, &reply, &err) != 0) return -1;
        bson_destroy(&reply);
        return 0;
    }
    nng_msg *m;
    if (nng_msg_alloc(&m, ping_cmd.len) != 0) return -1;
    memcpy(nng_msg_body(m), bson_get_data(&ping_cmd), ping_cmd.len);
    nng_aio_set_msg(bc->aio, m);
    nng_ctx_send(bc->ctx, bc->aio);
    nng_aio_wait(bc->aio);
    if (nng_aio_result(bc->aio) != 0) {
        nng_msg_free(m);
        return -1;
    }
    nng_ctx_recv(bc->ctx, bc->aio);
    nng_aio_wait(bc->aio);
    if (nng_aio_result(bc->aio) != 0) return -1;
    nng_msg_free(nng_aio_get_msg(bc->aio));
    return 0;
}

static int cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

typedef struct conc_arg {
    side_t *s;
    int failures;
} conc_arg_t;

static void *conc_main(void *p) {
    conc_arg_t *a = p;
    bare_client_t bc = {0};
    if (!a->s->ours && bare_client_open(a->s, &bc) != 0) {
        a->failures = CONC_CALLS;
        return NULL;
    }
    for (int i = 0; i < CONC_CALLS; i++)
        if (one_call(a->s, &bc) != 0) a->failures++;
    if (!a->s->ours) bare_client_close(&bc);
    return NULL;
}

/* ops/s of CONC_THREADS clients doing CONC_CALLS calls each. */
static double run_concurrent(side_t *s, int *failures) {
    pthread_t th[CONC_THREADS];
    conc_arg_t args[CONC_THREADS];
    long long t0 = time_mono_us(), us;
    for (int i = 0; i < CONC_THREADS; i++) {
        args[i] = (conc_arg_t){s, 0};
        pthread_create(&th[i], NULL, conc_main, &args[i]);
    }
    for (int i = 0; i < CONC_THREADS; i++) {
        pthread_join(th[i], NULL);
        *failures += args[i].failures;
    }
    us = time_mono_us() - t0;
    return (double)CONC_THREADS * CONC_CALLS * 1e6 / (double)us;
}

int main(void) {
    char bare_url[64], ours_url[64];
    nng_socket rep;
    bare_worker_t bw[WORKERS];
    cmd_server_t *srv = NULL;
    side_t sides[2] = {{.name = "bare nng", .ours = false}, {.name = "ours", .ours = true}};
    static long long lat[2][ROUNDS * CALLS_PER_ROUND];
    double ops[2] = {0, 0};
    int failures = 0;
    ms_error_t err = {0};

    log_init("bench", LOG_WARN);
    snprintf(bare_url, sizeof bare_url, "tcp://127.0.0.1:%d", t_free_port(0));
    snprintf(ours_url, sizeof ours_url, "tcp://127.0.0.1:%d", t_free_port(1));

    /* the ~100-byte command */
    bson_init(&ping_cmd);
    BSON_APPEND_INT32(&ping_cmd, "ping", 1);
    BSON_APPEND_UTF8(&ping_cmd, "$db", "admin");
    BSON_APPEND_UTF8(&ping_cmd, "comment", "a hundred bytes of command, give or take a few..");

    /* servers */
    if (nng_rep0_open(&rep) != 0) return 1;
    for (int i = 0; i < WORKERS; i++) {
        if (nng_ctx_open(&bw[i].ctx, rep) != 0 || nng_aio_alloc(&bw[i].aio, NULL, NULL) != 0) return 1;
        pthread_create(&bw[i].th, NULL, bare_worker_main, &bw[i]);
    }
    if (nng_listen(rep, bare_url, NULL, 0) != 0) {
        fprintf(stderr, "cannot listen on %s\n", bare_url);
        return 1;
    }
    {
        cmd_server_opts_t o = {.process = "bench", .url = ours_url, .workers = WORKERS};
        if (cmd_server_start(&o, &srv, &err) != 0) {
            fprintf(stderr, "cmd_server_start: %s\n", err.msg);
            return 1;
        }
    }
    /* clients */
    if (nng_req0_open(&sides[0].req) != 0 || nng_dial(sides[0].req, bare_url, NULL, 0) != 0) return 1;
    if (rpc_client_open(ours_url, &sides[1].rpc, &err) != 0) return 1;

    /* warm up both (connections, allocator, caches) */
    {
        bare_client_t bc;
        if (bare_client_open(&sides[0], &bc) != 0) return 1;
        for (int i = 0; i < 500; i++) failures += one_call(&sides[0], &bc) != 0;
        for (int i = 0; i < 500; i++) failures += one_call(&sides[1], NULL) != 0;
        bare_client_close(&bc);
    }

    /* latency: interleaved rounds */
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < 2; k++) {
            int side = (r & 1) ? 1 - k : k;  /* alternate which side goes first */
            bare_client_t bc = {0};
            if (side == 0 && bare_client_open(&sides[0], &bc) != 0) return 1;
            for (int i = 0; i < CALLS_PER_ROUND; i++) {
                long long t0 = time_mono_us();
                if (one_call(&sides[side], &bc) != 0) failures++;
                lat[side][r * CALLS_PER_ROUND + i] = time_mono_us() - t0;
            }
            if (side == 0) bare_client_close(&bc);
        }
    }
    /* throughput: interleaved rounds, best of each (least disturbed by the machine) */
    for (int r = 0; r < CONC_ROUNDS; r++) {
        for (int k = 0; k < 2; k++) {
            int side = (r & 1) ? 1 - k : k;
            double v = run_concurrent(&sides[side], &failures);
            if (v > ops[side]) ops[side] = v;
        }
    }

    {
        const int n = ROUNDS * CALLS_PER_ROUND;
        long long p50[2], p99[2];
        for (int s = 0; s < 2; s++) {
            qsort(lat[s], (size_t)n, sizeof lat[s][0], cmp_ll);
            p50[s] = lat[s][n / 2];
            p99[s] = lat[s][(n * 99) / 100];
        }
        double ratio = (double)p50[1] / (double)(p50[0] ? p50[0] : 1);
        double conc_ratio = ops[0] / (ops[1] > 0 ? ops[1] : 1);
        printf("RPC round trip, %u-byte command, tcp://127.0.0.1, %d calls per side, %d workers\n",
               ping_cmd.len, n, WORKERS);
        printf("%-10s %10s %10s %16s\n", "side", "p50 us", "p99 us", "8 clients ops/s");
        for (int s = 0; s < 2; s++)
            printf("%-10s %10lld %10lld %16.0f\n", sides[s].name, p50[s], p99[s], ops[s]);
        printf("ours/bare p50 ratio %.3f, bare/ours throughput ratio %.3f, failures %d\n", ratio,
               conc_ratio, failures);
        printf("BENCH_JSON {\"rpc\": {\"msg_bytes\": %u, \"calls\": %d, \"ours_us_p50\": %lld, "
               "\"bare_us_p50\": %lld, \"ours_us_p99\": %lld, \"bare_us_p99\": %lld, "
               "\"ratio\": %.3f, \"ours_ops_s_8\": %.0f, \"bare_ops_s_8\": %.0f, "
               "\"ops_ratio\": %.3f, \"failures\": %d}}\n",
               ping_cmd.len, n, p50[1], p50[0], p99[1], p99[0], ratio, ops[1], ops[0], conc_ratio,
               failures);
    }

    rpc_client_close(sides[1].rpc);
    nng_close(sides[0].req);
    cmd_server_stop(srv);
    nng_close(rep);
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(bw[i].th, NULL);
        nng_aio_free(bw[i].aio);
    }
    bson_destroy(&ping_cmd);
    return failures ? 1 : 0;
}
