/*
 * test_common_rpcclient.c — the client side of common/rpc.c against a dead, a lost and
 * a hung peer: a call to a port nobody listens on fails with
 * HostUnreachable after the connection wait (not its deadline) and the next one at
 * once; the peer coming up later is reached again; a connection lost mid-call is
 * HostUnreachable; the per-peer share cap refuses a call over it with ExceededTimeLimit
 * and counts it in rpc_peers_append_status; rpc_call_op takes the operation's maxTimeMS.
 * The tcp:// transport's own rules (calls on pooled connections driven
 * by the calling thread): a peer that takes the connection but never greets costs a
 * NetworkTimeout at the deadline, not HostUnreachable; a peer that is not REP v0, or
 * answers with another request's id or an announced length over the cap, is dropped
 * with HostUnreachable; a pooled connection whose peer restarted is dropped before use,
 * so the first call after the restart succeeds; many threads call at once.
 * Real sockets on 127.0.0.1 (ports from t_free_port), nothing mocked.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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

/* ---- the tcp:// transport against raw peers ------------------------------------- */

/* A raw TCP peer on 127.0.0.1: accepts one connection and behaves as `mode` says. */
enum { RAW_SILENT, RAW_BAD_GREETING, RAW_WRONG_ID, RAW_HUGE_LEN };
typedef struct raw_peer {
    int lfd, mode, port;
    pthread_t th;
} raw_peer_t;

static int raw_read(int fd, uint8_t *buf, size_t len) {
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, buf + got, len - got, 0);
        if (n <= 0) return -1;
        got += (size_t)n;
    }
    return 0;
}

static void *raw_peer_main(void *p) {
    raw_peer_t *r = p;
    uint8_t hello[8] = {0, 'S', 'P', 0, 0, 0x31, 0, 0}, in[64], head[12];
    int fd = accept(r->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    if (r->mode == RAW_SILENT) {
        t_sleep_ms(1500);   /* longer than the call's deadline */
    } else if (r->mode == RAW_BAD_GREETING) {
        /* a PAIR v1 peer, not REP, to every dial for 1.5 s (the client redials) */
        long long until = time_mono_ms() + 1500;
        hello[5] = 0x21;
        while (fd >= 0) {
            (void)!write(fd, hello, sizeof hello);
            close(fd);
            fd = -1;
            struct pollfd pf = {.fd = r->lfd, .events = POLLIN};
            long long left = until - time_mono_ms();
            if (left > 0 && poll(&pf, 1, (int)left) == 1) fd = accept(r->lfd, NULL, NULL);
        }
        return NULL;
    } else if (raw_read(fd, in, 8) == 0 && write(fd, hello, sizeof hello) == 8 &&
               raw_read(fd, head, sizeof head) == 0) {
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len = len << 8 | head[i];
        if (len <= sizeof in + 4) (void)!raw_read(fd, in, (size_t)len - 4);
        if (r->mode == RAW_WRONG_ID) {
            head[11] ^= 1;                       /* another request's id */
            memset(head, 0, 8);
            head[7] = 4 + 5;                     /* and an empty document */
            uint8_t doc[5] = {5, 0, 0, 0, 0};
            (void)!write(fd, head, sizeof head);
            (void)!write(fd, doc, sizeof doc);
        } else {
            memset(head, 0xff, 8);               /* 2^64 - 1 bytes announced */
            (void)!write(fd, head, sizeof head);
        }
        t_sleep_ms(300);
    }
    close(fd);
    return NULL;
}

static int raw_peer_start(raw_peer_t *r, int mode, char *url, size_t cap) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    r->mode = mode;
    r->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(r->lfd, 4) != 0 || getsockname(r->lfd, (struct sockaddr *)&a, &al) != 0)
        return -1;
    r->port = ntohs(a.sin_port);
    snprintf(url, cap, "tcp://127.0.0.1:%d", r->port);
    return pthread_create(&r->th, NULL, raw_peer_main, r);
}

static void raw_peer_stop(raw_peer_t *r) {
    pthread_join(r->th, NULL);
    close(r->lfd);
}

/* Connected but never greeted (a stopped process's kernel takes connections): the call
 * waits for its deadline and says NetworkTimeout; the peer is not marked unreachable. */
static void tcp_silent_peer_times_out(void) {
    raw_peer_t r;
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    char url[64];
    long long t0, ms;
    if (raw_peer_start(&r, RAW_SILENT, url, sizeof url) != 0) {
        CHECK_MSG(0, "raw peer");
        return;
    }
    CHECK_INT(rpc_client_open(url, &c, &err), 0);
    t0 = time_mono_ms();
    CHECK_INT(call_ping(c, 600, &err), MS_ERR_NETWORK_TIMEOUT);
    ms = time_mono_ms() - t0;
    printf("  silent peer: code %d after %lld ms: %s\n", err.code, ms, err.msg);
    CHECK_MSG(ms >= 550 && ms < 1400, "deadline 600 ms, call took %lld ms", ms);
    rpc_client_close(c);
    raw_peer_stop(&r);
}

/* Not a REP v0 server, a reply to another request, a length over the cap: each drops the
 * connection with HostUnreachable, at once rather than at the deadline. */
static void tcp_bad_peers_dropped(void) {
    const int modes[] = {RAW_BAD_GREETING, RAW_WRONG_ID, RAW_HUGE_LEN};
    const char *names[] = {"bad greeting", "wrong request id", "huge length"};
    for (int i = 0; i < 3; i++) {
        raw_peer_t r;
        rpc_client_t *c = NULL;
        ms_error_t err = {0};
        char url[64];
        long long t0, ms;
        if (raw_peer_start(&r, modes[i], url, sizeof url) != 0) {
            CHECK_MSG(0, "raw peer");
            return;
        }
        CHECK_INT(rpc_client_open(url, &c, &err), 0);
        t0 = time_mono_ms();
        CHECK_INT(call_ping(c, 10000, &err), MS_ERR_HOST_UNREACHABLE);
        ms = time_mono_ms() - t0;
        printf("  %s: code %d after %lld ms: %s\n", names[i], err.code, ms, err.msg);
        CHECK_MSG(ms < 5000, "%s: took %lld ms of a 10 s deadline", names[i], ms);
        rpc_client_close(c);
        raw_peer_stop(&r);
    }
}

/* The peer restarts between two calls: the pooled connection it closed is dropped
 * before use, and the first call after the restart succeeds. */
static void tcp_pooled_connection_after_restart(void) {
    rpc_client_t *c = NULL;
    rpc_server_t *s = NULL;
    ms_error_t err = {0};
    char url[64];
    t_tcp_url(url, sizeof url, 4);
    CHECK_INT(rpc_server_start(url, 2, sleepy_handler, NULL, &s, &err), 0);
    CHECK_INT(rpc_client_open(url, &c, &err), 0);
    if (!s || !c) goto out;
    CHECK_INT(call_ping(c, 5000, &err), 0);
    rpc_server_stop(s);
    s = NULL;
    CHECK_INT(rpc_server_start(url, 2, sleepy_handler, NULL, &s, &err), 0);
    t_sleep_ms(50);   /* the old connection's close has reached us */
    CHECK_INT(call_ping(c, 5000, &err), 0);
    if (err.code) printf("  after restart: %s\n", err.msg);
out:
    rpc_client_close(c);
    rpc_server_stop(s);
}

/* Many threads at once on one client: each call on a connection of its own, all answered. */
static void tcp_many_threads(void) {
    enum { N = 12 };
    rpc_client_t *c = NULL;
    rpc_server_t *s = NULL;
    ms_error_t err = {0};
    sleeper_t a[N];
    pthread_t th[N];
    char url[64];
    t_tcp_url(url, sizeof url, 5);
    CHECK_INT(rpc_server_start(url, N, sleepy_handler, NULL, &s, &err), 0);
    CHECK_INT(rpc_client_open(url, &c, &err), 0);
    if (!s || !c) goto out;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            a[i] = (sleeper_t){.c = c, .sleep_ms = 20, .timeout_ms = 10000};
            pthread_create(&th[i], NULL, sleeper_main, &a[i]);
        }
        for (int i = 0; i < N; i++) {
            pthread_join(th[i], NULL);
            CHECK_INT(a[i].rc, 0);
        }
    }
out:
    rpc_client_close(c);
    rpc_server_stop(s);
}

T_MAIN(T_CASE(nobody_listening_then_up), T_CASE(connection_lost_mid_call), T_CASE(share_cap),
       T_CASE(call_op_deadline), T_CASE(tcp_silent_peer_times_out), T_CASE(tcp_bad_peers_dropped),
       T_CASE(tcp_pooled_connection_after_restart), T_CASE(tcp_many_threads))
