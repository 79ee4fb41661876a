/*
 * test_common_rpcclient.c — the client side of common/rpc.c against a dead, a lost and
 * a hung peer (issue 10 item 3): a call to a port nobody listens on fails with
 * HostUnreachable after the connection wait (not its deadline) and the next one at
 * once; the peer coming up later is reached again; a connection lost mid-call is
 * HostUnreachable; the per-peer share cap refuses a call over it with ExceededTimeLimit
 * and counts it in rpc_peers_append_status; rpc_call_op takes the operation's maxTimeMS.
 * Real sockets on 127.0.0.1 (ports from t_free_port), nothing mocked.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "common/limits.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/rpc.h"
#include "tests/unit/t.h"

/* ---- helpers --------------------------------------------------------------------- */

/* {sleep: ms} sleeps, then answers {ok: 1}. */
static void sleepy_handler(void *arg, const uint8_t *data, size_t len, bson_t *reply) {
    bson_t req;
    bson_iter_t it;
    (void)arg;
    if (bson_init_static(&req, data, len) && bson_iter_init_find(&it, &req, "sleep"))
        t_sleep_ms((long)bson_iter_as_int64(&it));
    BSON_APPEND_DOUBLE(reply, "ok", 1.0);
}

static int call_ping(rpc_client_t *c, int timeout_ms, ms_error_t *err) {
    bson_t cmd = BSON_INITIALIZER, reply;
    int rc;
    BSON_APPEND_INT32(&cmd, "ping", 1);
    rc = rpc_call(c, &cmd, timeout_ms, &reply, err);
    if (rc == 0) bson_destroy(&reply);
    bson_destroy(&cmd);
    return rc;
}

typedef struct sleeper {
    rpc_client_t *c;
    int sleep_ms;
    int timeout_ms;
    int rc;
    long long ms;
    ms_error_t err;
} sleeper_t;

static void *sleeper_main(void *p) {
    sleeper_t *a = p;
    bson_t cmd = BSON_INITIALIZER, reply;
    long long t0 = time_mono_ms();
    BSON_APPEND_INT32(&cmd, "sleep", a->sleep_ms);
    a->rc = rpc_call(a->c, &cmd, a->timeout_ms, &reply, &a->err);
    a->ms = time_mono_ms() - t0;
    if (a->rc == 0) bson_destroy(&reply);
    bson_destroy(&cmd);
    return NULL;
}

/* The int64/int32/bool field `name` of url's entry in serverStatus.peers; -1 if absent. */
static long long peer_stat(const char *url, const char *name) {
    bson_t st = BSON_INITIALIZER;
    bson_iter_t it, arr, one, f;
    long long v = -1;
    rpc_peers_append_status(&st);
    if (bson_iter_init_find(&it, &st, "peers") && bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            bool mine = false;
            if (!bson_iter_recurse(&arr, &one)) continue;
            f = one;
            if (bson_iter_find(&f, "url") && BSON_ITER_HOLDS_UTF8(&f))
                mine = strcmp(bson_iter_utf8(&f, NULL), url) == 0;
            if (mine && bson_iter_find(&one, name))
                v = BSON_ITER_HOLDS_BOOL(&one) ? bson_iter_bool(&one) : bson_iter_as_int64(&one);
        }
    }
    bson_destroy(&st);
    return v;
}

/* ---- tests ----------------------------------------------------------------------- */

/* Nobody listens: HostUnreachable after the connection wait, far inside the 20 s
 * deadline; the next call fails at once; a server that comes up later is reached. */
static void nobody_listening_then_up(void) {
    rpc_client_t *c = NULL;
    rpc_server_t *s = NULL;
    ms_error_t err = {0};
    char url[64];
    long long t0, ms;
    int rc = -1;
    t_tcp_url(url, sizeof url, 0);
    CHECK_INT(rpc_peer(url, &c, &err), 0);
    if (!c) return;
    t0 = time_mono_ms();
    CHECK_INT(call_ping(c, 20000, &err), MS_ERR_HOST_UNREACHABLE);
    ms = time_mono_ms() - t0;
    printf("  nobody listening: HostUnreachable after %lld ms: %s\n", ms, err.msg);
    CHECK_MSG(ms >= MS_RPC_CONNECT_WAIT_MS - 50 && ms < 5000, "first call took %lld ms", ms);
    CHECK_MSG(strstr(err.msg, url) != NULL, "errmsg names the peer: %s", err.msg);
    /* Marked unreachable: the next call does not wait for a connection again. */
    t0 = time_mono_ms();
    CHECK_INT(call_ping(c, 20000, &err), MS_ERR_HOST_UNREACHABLE);
    ms = time_mono_ms() - t0;
    CHECK_MSG(ms < MS_RPC_CONNECT_WAIT_MS, "second call took %lld ms", ms);
    CHECK(peer_stat(url, "callsFailedFast") >= 2);
    CHECK_INT(peer_stat(url, "connected"), 0);

    /* It comes up: NNG redials every half connection wait, and calls succeed again. */
    CHECK_INT(rpc_server_start(url, 2, sleepy_handler, NULL, &s, &err), 0);
    t0 = time_mono_ms();
    for (int i = 0; i < 100 && rc != 0; i++) {   /* bounded: 100 x >= 50 ms */
        rc = call_ping(c, 2000, &err);
        if (rc) t_sleep_ms(50);
    }
    CHECK_INT(rc, 0);
    printf("  peer came up: reached after %lld ms\n", time_mono_ms() - t0);
    CHECK_INT(peer_stat(url, "connected"), 1);
    rpc_server_stop(s);
}

/* The connection drops while the peer works on the request: HostUnreachable, well before
 * the deadline (resends are off, so the request is not run twice). */
static void connection_lost_mid_call(void) {
    rpc_client_t *c = NULL;
    rpc_server_t *s = NULL;
    ms_error_t err = {0};
    sleeper_t a = {0};
    pthread_t th;
    char url[64];
    t_tcp_url(url, sizeof url, 1);
    CHECK_INT(rpc_server_start(url, 2, sleepy_handler, NULL, &s, &err), 0);
    CHECK_INT(rpc_client_open(url, &c, &err), 0);
    if (!s || !c) goto out;
    a = (sleeper_t){.c = c, .sleep_ms = 500, .timeout_ms = 20000};
    pthread_create(&th, NULL, sleeper_main, &a);
    t_sleep_ms(150);        /* the request is in the handler */
    rpc_server_stop(s);   /* the reply is never sent; the connection closes */
    s = NULL;
    pthread_join(th, NULL);
    printf("  connection lost mid-call: code %d after %lld ms: %s\n", a.rc, a.ms, a.err.msg);
    CHECK_INT(a.rc, MS_ERR_HOST_UNREACHABLE);
    CHECK_MSG(a.ms < 10000, "call took %lld ms with a 20 s deadline", a.ms);
out:
    rpc_client_close(c);
    rpc_server_stop(s);
}

/* A peer that holds every call (a hung shard, here a handler that sleeps): calls over
 * the share cap are refused with ExceededTimeLimit instead of joining the wait. */
static void share_cap(void) {
    enum { WORKERS = 4, CAP = WORKERS * MS_RPC_PEER_SHARE_PCT / 100 };
    rpc_client_t *c = NULL;
    rpc_server_t *s = NULL;
    ms_error_t err = {0};
    sleeper_t a[CAP];
    pthread_t th[CAP];
    char url[64];
    long long t0, ms;
    t_tcp_url(url, sizeof url, 2);
    rpc_client_set_workers(WORKERS);
    CHECK_INT(rpc_server_start(url, CAP + 2, sleepy_handler, NULL, &s, &err), 0);
    CHECK_INT(rpc_peer(url, &c, &err), 0);
    if (!s || !c) goto out;
    CHECK_INT(call_ping(c, 5000, &err), 0);   /* connected */
    for (int i = 0; i < CAP; i++) {
        a[i] = (sleeper_t){.c = c, .sleep_ms = 1500, .timeout_ms = 10000};
        pthread_create(&th[i], NULL, sleeper_main, &a[i]);
    }
    for (int i = 0; i < 200 && peer_stat(url, "callsInFlight") < CAP; i++) t_sleep_ms(10);
    CHECK_INT(peer_stat(url, "callsInFlight"), CAP);
    CHECK_INT(peer_stat(url, "callsInFlightMax"), CAP);
    t0 = time_mono_ms();
    CHECK_INT(call_ping(c, 10000, &err), MS_ERR_EXCEEDED_TIME_LIMIT);
    ms = time_mono_ms() - t0;
    printf("  over the share cap (%d): refused after %lld ms: %s\n", CAP, ms, err.msg);
    CHECK_MSG(ms < 1500, "refusal took %lld ms (slot wait %d ms)", ms, MS_RPC_PEER_SLOT_WAIT_MS);
    CHECK_INT(peer_stat(url, "callsOverShareCap"), 1);
    for (int i = 0; i < CAP; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT(a[i].rc, 0);
    }
    CHECK_INT(peer_stat(url, "callsInFlight"), 0);
    CHECK_INT(call_ping(c, 5000, &err), 0);   /* slots are back */
out:
    rpc_client_set_workers(0);
    rpc_server_stop(s);
}

/* rpc_call_op: the operation's maxTimeMS bounds the call (MaxTimeMSExpired); an already
 * expired operation does not call at all; without one the default applies. */
static void call_op_deadline(void) {
    rpc_client_t *c = NULL;
    rpc_server_t *s = NULL;
    ms_error_t err = {0};
    bson_t cmd = BSON_INITIALIZER, reply;
    char url[64];
    long long t0, ms;
    t_tcp_url(url, sizeof url, 3);
    CHECK_INT(rpc_server_start(url, 2, sleepy_handler, NULL, &s, &err), 0);
    CHECK_INT(rpc_client_open(url, &c, &err), 0);
    if (!s || !c) goto out;
    BSON_APPEND_INT32(&cmd, "sleep", 1000);
    op_set_deadline_ms(time_mono_ms() + 300);
    t0 = time_mono_ms();
    CHECK_INT(rpc_call_op(c, &cmd, 20000, &reply, &err), MS_ERR_MAX_TIME_MS_EXPIRED);
    ms = time_mono_ms() - t0;
    CHECK_MSG(ms < 900, "maxTimeMS 300 call took %lld ms", ms);
    op_set_deadline_ms(time_mono_ms() - 1);
    CHECK_INT(rpc_call_op(c, &cmd, 20000, &reply, &err), MS_ERR_MAX_TIME_MS_EXPIRED);
    op_set_deadline_ms(0);
    CHECK_INT(rpc_call_op(c, &cmd, 20000, &reply, &err), 0);
    bson_destroy(&reply);
out:
    op_set_deadline_ms(0);
    bson_destroy(&cmd);
    rpc_client_close(c);
    rpc_server_stop(s);
}

T_MAIN(T_CASE(nobody_listening_then_up), T_CASE(connection_lost_mid_call), T_CASE(share_cap),
       T_CASE(call_op_deadline))
