/*
 * rpc.c — request/reply over NNG REQ/REP (see rpc.h), used by every process: each
 * daemon serves its command table through rpc_server_*, and every process calls its
 * peers through rpc_client_* / rpc_peer.
 *
 * Server: common/rpc_server.c.
 *
 * Client: to a tcp:// peer, every call runs on a pooled connection of its own, written
 * and read by the calling thread (the "client transport" section says why); to any
 * other URL, one REQ socket per peer, dialed in the background, every call on its own
 * nng_ctx (from a small per-client pool). Either way calls from many threads are in
 * flight together and each step gets the time left of one deadline.
 *
 * Resends: NNG's REQ socket re-sends a request that has waited NNG_OPT_REQ_RESENDTIME
 * (60 s by default) without a reply, and re-sends on a new connection a request whose
 * connection dropped. We switch resending off (NNG_DURATION_INFINITE): commands like
 * insert or _recvChunkCommit are not idempotent, and a slow handler must never run
 * twice because the client grew impatient. With resends off, NNG fails a call whose
 * connection drops before the reply with ECONNRESET (HostUnreachable to our callers),
 * at once instead of at the deadline; the tcp:// transport never resends either. A
 * request with no connection to go on fails with HostUnreachable after
 * MS_RPC_CONNECT_WAIT_MS (see the client section). A caller that knows a command is safe
 * to repeat retries it itself, as MongoDB's retryable reads do.
 */
#include "common/rpc.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/bsonx.h"
#include "common/lclock.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/sp.h"

/* ---- client ---------------------------------------------------------------------- */

/* A request context with its aio, kept between calls: opening a context and
 * allocating an aio per call cost a third of the throughput of 8 concurrent callers
 * (bench_common_rpc). A slot goes back to the pool only after a clean call, so a
 * context never carries state from a failed one. */
typedef struct rpc_slot {
    nng_ctx ctx;
    nng_aio *aio;
    struct rpc_slot *next;
} rpc_slot_t;

/* Idle slots kept per client; more concurrent callers than this get fresh ones. */
#define RPC_IDLE_SLOTS_MAX 64

/* Why a call to a dead or hung peer ends early.
 *
 * NNG's REQ context hands a request to a connection ("pipe") that is ready; with none,
 * the send waits in the socket's queue until its aio times out, so a call to a peer that
 * is down used to wait its whole deadline (30 s) holding the caller's thread. We count
 * live connections (pipe ADD_POST / REM_POST) and a call with none waits at most
 * MS_RPC_CONNECT_WAIT_MS for one (a first dial, a daemon restarting) before failing with
 * HostUnreachable; the send step itself is bounded the same way and re-checked, because
 * the last connection can drop between the check and the send. Once a wait has expired
 * the peer is marked unreachable and later calls fail at once, without waiting, until a
 * connection comes up again (NNG redials every MS_RPC_CONNECT_WAIT_MS / 2) — as mongos
 * answers HostUnreachable at once for a host its pool has just failed to reach.
 *
 * A hung peer keeps its connection and never answers, so its calls do wait for their
 * deadline; the share cap bounds how many of them there can be at once, so the threads
 * (request workers) waiting on it are a bounded share of the process's. */
static atomic_int rpc_calls_per_peer_max =
    MS_RPC_WORKERS_DEFAULT * MS_RPC_PEER_SHARE_PCT / 100;

/* A connection of a tcp:// peer's pool (the client transport section). */
typedef struct rpc_conn {
    int fd;
    uint32_t next_id;
    struct rpc_conn *next;
} rpc_conn_t;

/* Splits "tcp://host:port" (host may be [v6]); false when url is not tcp://. */
static bool rpc_tcp_url(const char *url, char *host, size_t hostsz, char *port, size_t portsz) {
    const char *p, *colon;
    size_t hl;
    if (strncmp(url, "tcp://", 6) != 0) return false;
    p = url + 6;
    colon = strrchr(p, ':');
    if (!colon || !colon[1] || strlen(colon + 1) >= portsz) return false;
    hl = (size_t)(colon - p);
    if (hl >= 2 && p[0] == '[' && p[hl - 1] == ']') {
        p++;
        hl -= 2;
    }
    if (hl == 0 || hl >= hostsz) return false;
    memcpy(host, p, hl);
    host[hl] = '\0';
    snprintf(port, portsz, "%s", colon + 1);
    return true;
}

struct rpc_client {
    nng_socket sock;
    pthread_mutex_t mu;   /* guards everything below */
    pthread_cond_t cv;    /* a connection came up, or a call ended (a share slot freed) */
    rpc_slot_t *idle;
    int nidle;
    int pipes;            /* live connections to the peer now */
    int inflight;         /* calls admitted under the share cap and not yet ended */
    bool unreachable;     /* a connection wait expired and no connection came up since */
    uint64_t calls, failed_fast, over_cap, timed_out, conn_lost;
    char url[MS_URL_BYTES_MAX];
    /* tcp:// peers: calls on pooled connections of their own (see "client transport"
     * below); pipes counts those connections. Otherwise the REQ socket above. */
    bool direct;
    char host[MS_URL_BYTES_MAX], port[16];
    struct rpc_conn *idle_conns;
    int nidle_conns;
    long long last_probe_ms;  /* last dial while unreachable */
};

/* NNG's pipe callback (runs on an NNG thread, never while we hold mu and wait on NNG). */
static void rpc_client_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg) {
    rpc_client_t *c = arg;
    (void)p;
    pthread_mutex_lock(&c->mu);
    if (ev == NNG_PIPE_EV_ADD_POST) {
        c->pipes++;
        c->unreachable = false;
        pthread_cond_broadcast(&c->cv);
    } else if (ev == NNG_PIPE_EV_REM_POST && c->pipes > 0) {
        c->pipes--;
    }
    pthread_mutex_unlock(&c->mu);
}

/* Waits on c->cv until until_ms (monotonic). Caller holds c->mu. */
static void rpc_client_wait(rpc_client_t *c, long long until_ms) {
    struct timespec ts;
    ts.tv_sec = (time_t)(until_ms / 1000);
    ts.tv_nsec = (long)(until_ms % 1000) * 1000000L;
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

void rpc_client_set_workers(int nworkers) {
    int n = nworkers > 0 ? nworkers : MS_RPC_WORKERS_DEFAULT;
    n = n * MS_RPC_PEER_SHARE_PCT / 100;
    atomic_store(&rpc_calls_per_peer_max, n < 1 ? 1 : n);
}

static void rpc_slot_free(rpc_slot_t *slot) {
    if (!slot) return;
    nng_ctx_close(slot->ctx);
    nng_aio_free(slot->aio);
    free(slot);
}

static int rpc_slot_get(rpc_client_t *c, rpc_slot_t **out, ms_error_t *err) {
    rpc_slot_t *slot;
    int rv;
    pthread_mutex_lock(&c->mu);
    slot = c->idle;
    if (slot) {
        c->idle = slot->next;
        c->nidle--;
    }
    pthread_mutex_unlock(&c->mu);
    if (!slot) {
        slot = calloc(1, sizeof *slot);
        if (!slot) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "rpc: out of memory");
        if ((rv = nng_aio_alloc(&slot->aio, NULL, NULL)) != 0) {
            free(slot);
            return err_from_nng(err, rv, "request aio");
        }
        if ((rv = nng_ctx_open(&slot->ctx, c->sock)) != 0) {
            nng_aio_free(slot->aio);
            free(slot);
            return err_from_nng(err, rv, "request context");
        }
    }
    *out = slot;
    return 0;
}

static void rpc_slot_put(rpc_client_t *c, rpc_slot_t *slot) {
    pthread_mutex_lock(&c->mu);
    if (c->nidle < RPC_IDLE_SLOTS_MAX) {
        slot->next = c->idle;
        c->idle = slot;
        c->nidle++;
        slot = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    rpc_slot_free(slot);
}

int rpc_client_open(const char *url, rpc_client_t **out, ms_error_t *err) {
    rpc_client_t *c;
    pthread_condattr_t ca;
    int rv, rc = 0;
    bool sock_open = false;

    if (!url || strlen(url) >= MS_URL_BYTES_MAX)
        return err_set(err, MS_ERR_BAD_VALUE, "peer url missing or longer than %d bytes",
                       MS_URL_BYTES_MAX - 1);
    c = calloc(1, sizeof *c);
    if (!c) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "rpc client: out of memory");
    snprintf(c->url, sizeof c->url, "%s", url);
    pthread_mutex_init(&c->mu, NULL);
    /* Waits are against the monotonic clock, as every deadline here is. */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rpc_tcp_url(url, c->host, sizeof c->host, c->port, sizeof c->port)) {
        c->direct = true;  /* no socket: each call dials or reuses a connection */
        goto out;
    }
    if ((rv = nng_req0_open(&c->sock)) != 0) {
        rc = err_from_nng(err, rv, "req socket open");
        goto out;
    }
    sock_open = true;
    /* Redial quickly at first (a daemon restarting in a test or a demo), backing off to
     * one attempt per half connection wait for a peer that stays down: a peer that comes
     * back is then reconnected well within the MS_RPC_CONNECT_WAIT_MS a call waits for it.
     * Pipe events before the dial, so the first connection is counted. */
    if ((rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, MS_TRANSPORT_BYTES_MAX)) != 0 ||
        (rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
        (rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 20)) != 0 ||
        (rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, MS_RPC_CONNECT_WAIT_MS / 2)) != 0 ||
        (rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_POST, rpc_client_pipe_event, c)) != 0 ||
        (rv = nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, rpc_client_pipe_event, c)) != 0) {
        rc = err_from_nng(err, rv, "req socket options");
        goto out;
    }
    /* Non-blocking: the peer may not be up yet; NNG keeps redialing in the background. */
    if ((rv = nng_dial(c->sock, url, NULL, NNG_FLAG_NONBLOCK)) != 0) {
        rc = err_from_nng(err, rv, "dial");
        err_prefix(err, "%s", url);
        goto out;
    }
out:
    if (rc != 0) {
        if (sock_open) nng_close(c->sock);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void rpc_client_close(rpc_client_t *c) {
    if (!c) return;
    while (c->idle_conns) {
        struct rpc_conn *next = c->idle_conns->next;
        close(c->idle_conns->fd);
        free(c->idle_conns);
        c->idle_conns = next;
    }
    if (!c->direct) nng_close(c->sock);  /* returns after the last pipe callback */
    while (c->idle) {
        rpc_slot_t *next = c->idle->next;
        rpc_slot_free(c->idle);
        c->idle = next;
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const char *rpc_client_url(const rpc_client_t *c) { return c->url; }

/* Milliseconds left before deadline_ms (monotonic), at least 1 so NNG still waits. */
static nng_duration rpc_left_ms(long long deadline_ms) {
    long long left = deadline_ms - time_mono_ms();
    return left < 1 ? 1 : (nng_duration)(left > INT32_MAX ? INT32_MAX : left);
}

static long long rpc_min_ll(long long a, long long b) { return a < b ? a : b; }


/* Takes a share slot: waits at most MS_RPC_PEER_SLOT_WAIT_MS while calls to this peer
 * are at the cap. A burst right after the client opens (before its first connection)
 * waits like any other; when the peer still has no connection at the end the error is
 * HostUnreachable, as the calls holding the slots will get. */
static int rpc_share_take(rpc_client_t *c, long long deadline_ms, int timeout_ms,
                          ms_error_t *err) {
    int max = atomic_load(&rpc_calls_per_peer_max), rc = 0;
    long long until = rpc_min_ll(deadline_ms, time_mono_ms() + MS_RPC_PEER_SLOT_WAIT_MS);
    pthread_mutex_lock(&c->mu);
    c->calls++;
    while (c->inflight >= max && !(c->pipes == 0 && c->unreachable) && time_mono_ms() < until)
        rpc_client_wait(c, until);
    if (c->inflight < max) {
        c->inflight++;
    } else if (c->pipes == 0) {
        c->failed_fast++;
        rc = err_set(err, MS_ERR_HOST_UNREACHABLE,
                     "no connection to the peer (and %d calls already waiting for one)", max);
    } else if (until >= deadline_ms) {
        c->timed_out++;
        rc = err_set(err, MS_ERR_NETWORK_TIMEOUT, "deadline of %d ms passed waiting for one of "
                     "the %d calls in flight to end", timeout_ms, max);
    } else {
        c->over_cap++;
        rc = err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT, "%d calls in flight to the peer already "
                     "(the share cap, %d%% of the workers) and none ended within %d ms",
                     max, MS_RPC_PEER_SHARE_PCT, MS_RPC_PEER_SLOT_WAIT_MS);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void rpc_share_give(rpc_client_t *c) {
    pthread_mutex_lock(&c->mu);
    c->inflight--;
    pthread_cond_broadcast(&c->cv);   /* the cv is shared with connection waiters */
    pthread_mutex_unlock(&c->mu);
}

/* Why a call found no connection to its peer, for both transports. */
typedef enum {
    RPC_NOCONN_SINCE,     /* marked unreachable earlier and nothing came up since */
    RPC_NOCONN_DEADLINE,  /* the call's own deadline came before the connection wait ended */
    RPC_NOCONN_WAITED,    /* a whole connection wait passed: mark the peer unreachable */
} rpc_noconn_t;

/* Counts the outcome and sets *err (HostUnreachable, or NetworkTimeout for the call's own
 * deadline); RPC_NOCONN_WAITED marks the peer unreachable and wakes the calls waiting, who
 * need not wait longer. Caller holds c->mu. Returns the error code. */
static int rpc_noconn_locked(rpc_client_t *c, rpc_noconn_t why, int timeout_ms, ms_error_t *err) {
    switch (why) {
    case RPC_NOCONN_SINCE:
        c->failed_fast++;
        return err_set(err, MS_ERR_HOST_UNREACHABLE, "no connection to the peer (down or "
                       "unreachable: none for %d ms and none since)", MS_RPC_CONNECT_WAIT_MS);
    case RPC_NOCONN_DEADLINE:
        c->timed_out++;
        return err_set(err, MS_ERR_NETWORK_TIMEOUT,
                       "no connection to the peer within the deadline of %d ms", timeout_ms);
    case RPC_NOCONN_WAITED:
    default:
        c->failed_fast++;
        c->unreachable = true;
        c->last_probe_ms = time_mono_ms();
        pthread_cond_broadcast(&c->cv);
        return err_set(err, MS_ERR_HOST_UNREACHABLE,
                       "no connection to the peer within %d ms (down or unreachable)",
                       MS_RPC_CONNECT_WAIT_MS);
    }
}

/* Waits (bounded by MS_RPC_CONNECT_WAIT_MS and the deadline) until the peer has a live
 * connection. 0 when it has one; HostUnreachable when none came in time; NetworkTimeout
 * when the call's own deadline came first. */
static int rpc_await_connection(rpc_client_t *c, long long deadline_ms, int timeout_ms,
                                ms_error_t *err) {
    long long until = rpc_min_ll(deadline_ms, time_mono_ms() + MS_RPC_CONNECT_WAIT_MS);
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    while (c->pipes == 0 && !c->unreachable && time_mono_ms() < until)
        rpc_client_wait(c, until);
    if (c->pipes == 0)
        rc = rpc_noconn_locked(c, c->unreachable ? RPC_NOCONN_SINCE
                                  : until >= deadline_ms ? RPC_NOCONN_DEADLINE : RPC_NOCONN_WAITED,
                               timeout_ms, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Hands msg to a connection. On success the context owns msg; on failure it is still
 * the caller's. A send waits in NNG's queue while no connection is ready, so each
 * attempt is bounded by MS_RPC_CONNECT_WAIT_MS and, when it times out, we look again:
 * no connection left -> HostUnreachable; connected but busy (the peer is not reading)
 * -> keep waiting until the deadline. Bounded: each turn waits at least until the
 * deadline or MS_RPC_CONNECT_WAIT_MS has passed. */
static int rpc_send(rpc_client_t *c, rpc_slot_t *slot, nng_msg *msg, long long deadline_ms,
                    int timeout_ms, ms_error_t *err) {
    for (;;) {
        int rv;
        nng_aio_set_timeout(slot->aio, (nng_duration)rpc_min_ll(rpc_left_ms(deadline_ms),
                                                                MS_RPC_CONNECT_WAIT_MS));
        nng_aio_set_msg(slot->aio, msg);
        nng_ctx_send(slot->ctx, slot->aio);
        nng_aio_wait(slot->aio);
        rv = nng_aio_result(slot->aio);
        if (rv == 0) return 0;
        nng_aio_set_msg(slot->aio, NULL);
        if (rv != NNG_ETIMEDOUT) return err_from_nng(err, rv, "send");
        if (time_mono_ms() >= deadline_ms) {
            pthread_mutex_lock(&c->mu);
            c->timed_out++;
            pthread_mutex_unlock(&c->mu);
            return err_set(err, MS_ERR_NETWORK_TIMEOUT,
                           "request not sent within the deadline of %d ms", timeout_ms);
        }
        pthread_mutex_lock(&c->mu);
        bool gone = c->pipes == 0;
        if (gone) c->failed_fast++;
        pthread_mutex_unlock(&c->mu);
        if (gone)
            return err_set(err, MS_ERR_HOST_UNREACHABLE,
                           "connection to the peer lost before the request was sent");
    }
}

/* ---- client transport for tcp:// peers: one blocking connection per call ------------
 *
 * Why not NNG's REQ socket for tcp://: a call through a REQ context
 * crosses threads four times — the caller hands the request to NNG, NNG's poller sees
 * the reply, NNG's task threads read its head and then its body, and the caller is woken
 * — and on a small machine each hand-off is a scheduler wake-up costing about as much as
 * the loopback round trip itself. A router answering a point find spent two thirds of
 * its time in those hand-offs. Here the calling thread does the whole call itself on a
 * TCP connection it holds for the call: write the request, poll until the reply is
 * there, read it — one wake-up, by the kernel, when the reply arrives.
 *
 * The bytes are NNG's own SP-over-TCP framing (rpc_server.c describes it): the 8-byte
 * greeting each way on a new connection, then an 8-byte big-endian length, the 4-byte
 * request id with its top bit set, and the body; the reply echoes the id. Servers see a
 * REQ v0 peer, as before. Connections are pooled per peer (at most MS_RPC_IDLE_CONNS_MAX
 * idle); a call takes one, so calls from many threads run at once, each on its own
 * connection, and the share cap bounds how many there are. A connection that failed a
 * call (timeout, loss, a reply that does not match) is closed, never reused: a late
 * reply can never be taken for the next call's. An idle connection the peer has closed
 * (it restarted) is noticed before it is used and dropped, so a restart costs no call.
 *
 * The rules are the REQ socket's (rpc.h): nothing is resent; a call with no connection
 * dials, redialling every MS_RPC_REDIAL_MS, for at most MS_RPC_CONNECT_WAIT_MS, then fails
 * with HostUnreachable and marks the peer unreachable; while it is, calls fail at once,
 * except one dial attempt per MS_RPC_CONNECT_WAIT_MS / 2 (NNG's redial period here) to
 * notice the peer is back. Other URL schemes (inproc://, ipc://) keep the REQ socket. */



/* How an I/O step ended: done, the deadline passed, or the connection is gone. */
enum { RPC_IO_OK = 0, RPC_IO_TIMEOUT = 1, RPC_IO_LOST = 2 };

/* Waits until fd is ready for events or deadline_ms (monotonic) passes. */
static int rpc_io_wait(int fd, short events, long long deadline_ms) {
    for (;;) {
        long long left = deadline_ms - time_mono_ms();
        if (left <= 0) return RPC_IO_TIMEOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)rpc_min_ll(left, INT32_MAX));
        if (n > 0) return (p.revents & (events | POLLHUP | POLLERR)) ? RPC_IO_OK : RPC_IO_LOST;
        if (n < 0 && errno != EINTR) return RPC_IO_LOST;
    }
}

/* Writes the iovecs whole before deadline_ms. */
static int rpc_io_write(int fd, struct iovec *iov, int niov, long long deadline_ms) {
    while (niov > 0) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) return RPC_IO_LOST;
            int w = rpc_io_wait(fd, POLLOUT, deadline_ms);
            if (w != RPC_IO_OK) return w;
            continue;
        }
        while (niov > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
            iov++;
            niov--;
        }
        if (niov > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return RPC_IO_OK;
}

/* Reads exactly len bytes before deadline_ms; the peer closing first is a loss. */
static int rpc_io_read(int fd, void *buf, size_t len, long long deadline_ms) {
    size_t got = 0;
    while (got < len) {
        ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        if (n == 0) return RPC_IO_LOST;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return RPC_IO_LOST;
        int w = rpc_io_wait(fd, POLLIN, deadline_ms);
        if (w != RPC_IO_OK) return w;
    }
    return RPC_IO_OK;
}

static void rpc_conn_close(rpc_client_t *c, rpc_conn_t *k) {
    if (!k) return;
    close(k->fd);
    free(k);
    pthread_mutex_lock(&c->mu);
    if (c->pipes > 0) c->pipes--;
    pthread_mutex_unlock(&c->mu);
}

static void rpc_count(rpc_client_t *c, uint64_t *counter) {
    pthread_mutex_lock(&c->mu);
    (*counter)++;
    pthread_mutex_unlock(&c->mu);
}

/* One attempt: connect before until_ms, then exchange greetings before deadline_ms.
 * The greeting gets the call's whole deadline: a peer whose kernel took the connection
 * is there, and one that is hung (stopped, overloaded) must cost the caller a
 * NetworkTimeout at its deadline, as a call on an open connection would, not mark the
 * peer unreachable. *out set on RPC_IO_OK; RPC_IO_LOST means no connection (redial). */
static int rpc_dial_once(rpc_client_t *c, long long until_ms, long long deadline_ms,
                         rpc_conn_t **out) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    uint8_t hello[SP_HELLO_BYTES];
    uint8_t back[SP_HELLO_BYTES];
    struct iovec iov = {.iov_base = hello, .iov_len = sizeof hello};
    int fd = -1, one = 1, soerr = 0, io = RPC_IO_LOST;
    sp_hello(hello, SP_REQ0);
    bool counted = false;
    socklen_t sl = sizeof soerr;

    if (getaddrinfo(c->host, c->port, &hints, &ai) != 0 || !ai) goto fail;
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) goto fail;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) goto fail;
        if (rpc_io_wait(fd, POLLOUT, until_ms) != RPC_IO_OK) goto fail;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) goto fail;
    }
    /* Connected: counted from here, so calls over the share cap tell a hung peer (its
     * kernel still takes connections) from a dead one (none). */
    pthread_mutex_lock(&c->mu);
    c->pipes++;
    pthread_mutex_unlock(&c->mu);
    counted = true;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if ((io = rpc_io_write(fd, &iov, 1, deadline_ms)) != RPC_IO_OK) goto fail;
    if ((io = rpc_io_read(fd, back, sizeof back, deadline_ms)) != RPC_IO_OK) goto fail;
    io = RPC_IO_LOST;
    if (!sp_hello_is(back, SP_REP0)) goto fail;  /* not a REP v0 server: as NNG, no connection */
    *out = calloc(1, sizeof **out);
    if (!*out) goto fail;
    (*out)->fd = fd;
    (*out)->next_id = (uint32_t)random();
    freeaddrinfo(ai);
    return RPC_IO_OK;
fail:
    if (counted) {
        pthread_mutex_lock(&c->mu);
        c->pipes--;
        pthread_mutex_unlock(&c->mu);
    }
    if (fd >= 0) close(fd);
    if (ai) freeaddrinfo(ai);
    return io;
}

/* A connection for one call: an idle one the peer has not closed, else a new one. */
static int rpc_conn_get(rpc_client_t *c, long long deadline_ms, int timeout_ms,
                        rpc_conn_t **out, ms_error_t *err) {
    rpc_conn_t *k = NULL;
    long long now, until;
    bool probe;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        k = c->idle_conns;
        if (k) {
            c->idle_conns = k->next;
            c->nidle_conns--;
        }
        pthread_mutex_unlock(&c->mu);
        if (!k) break;
        /* Idle, it has nothing to read: readable means closed (or garbage): drop it. */
        struct pollfd p = {.fd = k->fd, .events = POLLIN};
        if (poll(&p, 1, 0) == 0) {
            *out = k;
            return 0;
        }
        rpc_conn_close(c, k);
    }
    now = time_mono_ms();
    pthread_mutex_lock(&c->mu);
    probe = c->unreachable;
    if (probe && now - c->last_probe_ms < MS_RPC_CONNECT_WAIT_MS / 2) {
        int rc = rpc_noconn_locked(c, RPC_NOCONN_SINCE, timeout_ms, err);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    if (probe) c->last_probe_ms = now;
    pthread_mutex_unlock(&c->mu);
    until = rpc_min_ll(deadline_ms, now + MS_RPC_CONNECT_WAIT_MS);
    for (;;) {
        int io = rpc_dial_once(c, until, deadline_ms, &k);
        if (io == RPC_IO_TIMEOUT) {
            rpc_count(c, &c->timed_out);
            return err_set(err, MS_ERR_NETWORK_TIMEOUT, "connected, but the peer did not "
                           "answer the greeting within the deadline of %d ms", timeout_ms);
        }
        if (k || probe) break;
        now = time_mono_ms();
        if (now >= until) break;
        struct timespec ts = {0, (long)rpc_min_ll(MS_RPC_REDIAL_MS, until - now) * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&c->mu);
    if (k) {
        c->unreachable = false;
        pthread_mutex_unlock(&c->mu);
        *out = k;
        return 0;
    }
    int rc = rpc_noconn_locked(c, !probe && until >= deadline_ms ? RPC_NOCONN_DEADLINE
                                                                 : RPC_NOCONN_WAITED,
                               timeout_ms, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void rpc_conn_put(rpc_client_t *c, rpc_conn_t *k) {
    pthread_mutex_lock(&c->mu);
    if (c->nidle_conns < MS_RPC_IDLE_CONNS_MAX) {
        k->next = c->idle_conns;
        c->idle_conns = k;
        c->nidle_conns++;
        k = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    rpc_conn_close(c, k);
}

/* One call on a connection of its own: send, wait, read the reply into *reply. */
static int rpc_call_direct(rpc_client_t *c, const void *data, size_t len,
                           long long deadline_ms, int timeout_ms, bson_t *reply,
                           ms_error_t *err) {
    rpc_conn_t *k = NULL;
    uint8_t head[SP_TCP_HEAD_BYTES + SP_ID_BYTES], *body = NULL;
    uint64_t rlen = 0;
    uint32_t id;
    bson_t view;
    int io, rc;

    if ((rc = rpc_conn_get(c, deadline_ms, timeout_ms, &k, err)) != 0) return rc;
    id = (k->next_id++) | SP_ID_FLAG;
    sp_put_be64(head, (uint64_t)len + SP_ID_BYTES);
    sp_put_be32(head + SP_TCP_HEAD_BYTES, id);
    struct iovec iov[2] = {{.iov_base = head, .iov_len = sizeof head},
                           {.iov_base = (void *)data, .iov_len = len}};
    io = rpc_io_write(k->fd, iov, len ? 2 : 1, deadline_ms);
    if (io == RPC_IO_TIMEOUT) {
        rpc_count(c, &c->timed_out);
        rc = err_set(err, MS_ERR_NETWORK_TIMEOUT,
                     "request not sent within the deadline of %d ms", timeout_ms);
        goto out;
    }
    if (io == RPC_IO_OK) io = rpc_io_read(k->fd, head, sizeof head, deadline_ms);
    if (io == RPC_IO_OK) {
        rlen = sp_get_be64(head);
        if (rlen < SP_ID_BYTES || rlen - SP_ID_BYTES > MS_TRANSPORT_BYTES_MAX ||
            sp_get_be32(head + SP_TCP_HEAD_BYTES) != id) {
            rpc_count(c, &c->conn_lost);
            rc = err_set(err, MS_ERR_HOST_UNREACHABLE, "malformed reply (length %llu, or "
                         "not the request's id): connection dropped", (unsigned long long)rlen);
            goto out;
        }
        rlen -= SP_ID_BYTES;
        body = malloc(rlen ? rlen : 1);
        if (!body) {
            rc = err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "reply of %llu bytes: out of "
                         "memory", (unsigned long long)rlen);
            goto out;
        }
        io = rpc_io_read(k->fd, body, rlen, deadline_ms);
    }
    if (io == RPC_IO_TIMEOUT) {
        rpc_count(c, &c->timed_out);
        rc = err_set(err, MS_ERR_NETWORK_TIMEOUT, "no reply within the deadline of %d ms",
                     timeout_ms);
        goto out;
    }
    if (io == RPC_IO_LOST) {
        /* Resends are off: the request may have run; the caller decides. */
        rpc_count(c, &c->conn_lost);
        rc = err_set(err, MS_ERR_HOST_UNREACHABLE, "connection to the peer lost before the "
                     "reply");
        goto out;
    }
    rc = bsonx_view(body, (size_t)rlen, &view, err);
    if (rc != 0) {
        if (err) err->code = rc = MS_ERR_INVALID_BSON;
        err_prefix(err, "reply");
        goto out;
    }
    bson_copy_to(&view, reply);
out:
    free(body);
    if (rc == 0) rpc_conn_put(c, k);
    else rpc_conn_close(c, k);
    return rc;
}

int rpc_call_raw(rpc_client_t *c, const void *data, size_t len, int timeout_ms,
                 bson_t *reply, ms_error_t *err) {
    rpc_slot_t *slot = NULL;
    nng_msg *msg = NULL;
    bson_t view;
    long long deadline_ms;
    bool shared = false;
    int rv, rc = 0;

    if (timeout_ms <= 0) timeout_ms = MS_RPC_TIMEOUT_MS_DEFAULT;
    deadline_ms = time_mono_ms() + timeout_ms;

    if ((rc = rpc_share_take(c, deadline_ms, timeout_ms, err)) != 0) goto out;
    shared = true;
    if (c->direct) {
        rc = rpc_call_direct(c, data, len, deadline_ms, timeout_ms, reply, err);
        goto out;
    }
    if ((rc = rpc_await_connection(c, deadline_ms, timeout_ms, err)) != 0) goto out;
    if ((rv = nng_msg_alloc(&msg, len)) != 0) {
        rc = err_from_nng(err, rv, "request alloc");
        goto out;
    }
    if (len) memcpy(nng_msg_body(msg), data, len);
    if ((rc = rpc_slot_get(c, &slot, err)) != 0) goto out;
    if ((rc = rpc_send(c, slot, msg, deadline_ms, timeout_ms, err)) != 0) goto out;
    msg = NULL;  /* the context owns it now */

    nng_aio_set_timeout(slot->aio, rpc_left_ms(deadline_ms));
    nng_ctx_recv(slot->ctx, slot->aio);
    nng_aio_wait(slot->aio);
    if ((rv = nng_aio_result(slot->aio)) != 0) {
        pthread_mutex_lock(&c->mu);
        if (rv == NNG_ETIMEDOUT) c->timed_out++;
        else c->conn_lost++;
        pthread_mutex_unlock(&c->mu);
        if (rv == NNG_ETIMEDOUT)
            rc = err_set(err, MS_ERR_NETWORK_TIMEOUT, "no reply within the deadline of %d ms",
                         timeout_ms);
        else if (rv == NNG_ECONNRESET)
            /* Resends are off: the request may have run; the caller decides. */
            rc = err_set(err, MS_ERR_HOST_UNREACHABLE,
                         "connection to the peer lost before the reply");
        else
            rc = err_from_nng(err, rv, "reply");
        goto out;
    }
    msg = nng_aio_get_msg(slot->aio);
    nng_aio_set_msg(slot->aio, NULL);
    rc = bsonx_view(nng_msg_body(msg), nng_msg_len(msg), &view, err);
    if (rc != 0) {
        if (err) err->code = rc = MS_ERR_INVALID_BSON;
        err_prefix(err, "reply");
        goto out;
    }
    bson_copy_to(&view, reply);
out:
    if (shared) rpc_share_give(c);
    if (slot) {
        if (rc == 0) rpc_slot_put(c, slot);
        else rpc_slot_free(slot);  /* a failed call's context is not reused */
    }
    if (msg) nng_msg_free(msg);
    if (rc != 0) err_prefix(err, "call to %s", c->url);
    return rc;
}

/* Every call gossips this process's cluster time and takes the peer's from its reply, as
 * MongoDB's egress metadata hooks do (common/lclock.h). */
int rpc_call(rpc_client_t *c, const bson_t *cmd, int timeout_ms, bson_t *reply,
             ms_error_t *err) {
    bson_t sent;
    int rc;
    lclock_gossip_out(cmd, &sent);
    rc = rpc_call_raw(c, bson_get_data(&sent), sent.len, timeout_ms, reply, err);
    bson_destroy(&sent);
    if (rc == 0) lclock_gossip_reply(reply);
    return rc;
}

int rpc_call_op(rpc_client_t *c, const bson_t *cmd, int dflt_ms, bson_t *reply,
                ms_error_t *err) {
    long long left = op_time_left_ms(dflt_ms);
    int rc;
    if (left <= 0)
        return err_set(err, MS_ERR_MAX_TIME_MS_EXPIRED,
                       "operation exceeded time limit before the call to %s", c->url);
    /* Whether the call's timeout is what is left of the operation's maxTimeMS (not the
     * default): then a timeout is the operation's, even when the transport's clock fired
     * a millisecond before ours would say the deadline passed. */
    bool op_bound = op_deadline_ms() > 0 && (dflt_ms <= 0 || left < dflt_ms);
    rc = rpc_call(c, cmd, (int)rpc_min_ll(left, INT32_MAX), reply, err);
    if (rc == MS_ERR_NETWORK_TIMEOUT && op_bound) {
        if (err) err->code = MS_ERR_MAX_TIME_MS_EXPIRED;
        err_prefix(err, "operation exceeded time limit");
        rc = MS_ERR_MAX_TIME_MS_EXPIRED;
    }
    return rc;
}

int rpc_command(rpc_client_t *c, const bson_t *cmd, int timeout_ms, bson_t *reply,
                ms_error_t *err) {
    bson_iter_t it;
    int rc = rpc_call(c, cmd, timeout_ms, reply, err);
    if (rc != 0) return rc;
    if (bson_iter_init_find(&it, reply, "ok") && bsonx_truthy(&it)) return 0;
    /* {ok: 0}: the peer's code and text become ours; the reply stays for the caller. */
    {
        int code = MS_ERR_UNKNOWN_ERROR;
        const char *msg = "reply without ok: 1";
        int64_t v;
        if (bson_iter_init_find(&it, reply, "code") && bsonx_as_int64(&it, &v) && v > 0 &&
            v <= INT32_MAX)
            code = (int)v;
        if (bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
            msg = bson_iter_utf8(&it, NULL);
        return err_set(err, code, "%s", msg);
    }
}

/* ---- peer cache ------------------------------------------------------------------ */

/* Clients live for the process's life, so a borrowed pointer never dangles; the list
 * is bounded because the cluster's URLs are (shards, config server, routers). */
#define RPC_PEERS_MAX 1024

static pthread_mutex_t rpc_peers_mu = PTHREAD_MUTEX_INITIALIZER;
static rpc_client_t *rpc_peers[RPC_PEERS_MAX];
static int rpc_npeers;

int rpc_peer(const char *url, rpc_client_t **out, ms_error_t *err) {
    rpc_client_t *c = NULL;
    int rc = 0;
    pthread_mutex_lock(&rpc_peers_mu);
    for (int i = 0; i < rpc_npeers; i++) {
        if (strcmp(rpc_peers[i]->url, url) == 0) {
            c = rpc_peers[i];
            goto out;
        }
    }
    if (rpc_npeers >= RPC_PEERS_MAX) {
        rc = err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "more than %d peers", RPC_PEERS_MAX);
        goto out;
    }
    if ((rc = rpc_client_open(url, &c, err)) != 0) goto out;
    rpc_peers[rpc_npeers++] = c;
out:
    pthread_mutex_unlock(&rpc_peers_mu);
    if (rc == 0) *out = c;
    return rc;
}

void rpc_peers_close_all(void) {
    pthread_mutex_lock(&rpc_peers_mu);
    for (int i = 0; i < rpc_npeers; i++) {
        rpc_client_close(rpc_peers[i]);
        rpc_peers[i] = NULL;
    }
    rpc_npeers = 0;
    pthread_mutex_unlock(&rpc_peers_mu);
}

void rpc_peers_append_status(bson_t *out) {
    bson_t arr, one;
    char key[16];
    int max = atomic_load(&rpc_calls_per_peer_max);
    BSON_APPEND_ARRAY_BEGIN(out, "peers", &arr);
    pthread_mutex_lock(&rpc_peers_mu);
    for (int i = 0; i < rpc_npeers; i++) {
        rpc_client_t *c = rpc_peers[i];
        snprintf(key, sizeof key, "%d", i);
        bson_append_document_begin(&arr, key, -1, &one);
        pthread_mutex_lock(&c->mu);
        BSON_APPEND_UTF8(&one, "url", c->url);
        BSON_APPEND_BOOL(&one, "connected", c->pipes > 0);
        BSON_APPEND_INT32(&one, "connections", c->pipes);
        BSON_APPEND_INT32(&one, "callsInFlight", c->inflight);
        BSON_APPEND_INT32(&one, "callsInFlightMax", max);
        BSON_APPEND_INT64(&one, "calls", (int64_t)c->calls);
        BSON_APPEND_INT64(&one, "callsFailedFast", (int64_t)c->failed_fast);
        BSON_APPEND_INT64(&one, "callsOverShareCap", (int64_t)c->over_cap);
        BSON_APPEND_INT64(&one, "callsTimedOut", (int64_t)c->timed_out);
        BSON_APPEND_INT64(&one, "callsConnectionLost", (int64_t)c->conn_lost);
        pthread_mutex_unlock(&c->mu);
        bson_append_document_end(&arr, &one);
    }
    pthread_mutex_unlock(&rpc_peers_mu);
    bson_append_array_end(out, &arr);
}
