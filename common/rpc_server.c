/*
 * rpc_server.c — the server side of the RPC layer (see rpc_server.h), run by every
 * daemon (configsvr, shardd, router) to serve its command table.
 *
 * It speaks NNG's SP-over-TCP (and -IPC) framing itself on top of nng_stream, instead of
 * using an NNG REP socket, because a REP socket cannot bound what a peer costs: NNG
 * allocates a whole message as soon as it reads a length header, has no process-wide
 * bound on half-received messages, no deadline on a send to a peer that stopped reading
 * and no cap on requests in flight per peer. Our clients (rpc.c, shardctl, tests) are
 * plain NNG REQ sockets and see no difference.
 *
 * Four parts:
 * - framing (rpc_framing_t): the greeting, the message head and the request envelope
 *   echoed in the reply. SP over TCP: an 8-byte greeting each way (00 'S' 'P' 00, the
 *   16-bit protocol, 00 00; we are REP v0 = 0x31 and the peer must be REQ v0 = 0x30),
 *   then each message is an 8-byte big-endian length and the payload. A REQ payload
 *   starts with its backtrace, 4-byte words up to the first with the top bit set (the
 *   request id); the reply is that backtrace followed by the reply body. SP over IPC is
 *   the same with a 1-byte message type (1) before the length. MongoDB's wire protocol
 *   (daemons' --wire-port) is a third framing over the same connection layer:
 *   no greeting, a 16-byte little-endian header that is part of the message, an opcode
 *   we do not serve closing the connection at its header; its workers decode each
 *   message with common/wire.c, run the command through the same handler and encode the
 *   reply (none for OP_MSG moreToCome). Wire connections idle longer than the server's
 *   idle_ms are closed (drivers' abandoned pooled connections); SP ones never are.
 * - connections: each reads its messages incrementally into a buffer that grows as bytes
 *   really arrive, charged to one server-wide budget; queues complete requests; sends its
 *   replies from its own queue, in order of completion (REQ matches them by request id),
 *   each send with a no-progress deadline. NNG runs the callbacks on its own threads; they
 *   never block (one short mutex).
 * - workers: a fixed pool of threads runs the handlers. Connections with queued requests
 *   wait in a round-robin ready list, and one connection never has more than a share of
 *   the pool at once, so a client pipelining slow requests leaves workers to the others.
 *   Optionally a second, small pool serves only the requests a classifier calls internal
 *   (shardd: command names starting with '_', the migration's peer calls), so user
 *   requests blocked on a critical section cannot take every worker the migration needs
 *   to finish (docs/hostile-clients.md "Internal workers").
 *
 * - awaitable requests: a handler that must wait (MongoDB's awaitable hello) parks its
 *   request on its connection instead of sleeping on a worker; an await thread runs it
 *   again at its deadline, rpc_server_quiesce at shutdown. OP_MSG exhaustAllowed streams
 *   the replies of such a request (see "awaitable requests" below).
 *
 * What a client costs is bounded (limits.h, "RPC server"): connections (MS_RPC_CONNS_MAX),
 * request bytes held across all connections (MS_RPC_RECV_BUDGET_BYTES: the connection with
 * the largest partial message is closed), requests in flight per connection
 * (MS_RPC_CONN_INFLIGHT_MAX) and queued reply bytes (MS_RPC_CONN_REPLY_BYTES_MAX): past
 * either, the connection is simply not read until its replies drain; a send that stalls
 * (MS_RPC_SEND_STALL_MS) and a message that stalls or trickles (MS_RPC_RECV_STALL_MS,
 * MS_RPC_RECV_MSG_MS) close the connection. Every close for a reason is counted and
 * logged as `connection closed conn=N reason=...`.
 *
 * A connection's memory is freed by a reaper thread once NNG has finished every callback
 * on it (an aio cannot be freed from its own callback).
 */
#include "common/rpc_server.h"

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/limits.h"
#include "common/lclock.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/sp.h"
#include "common/wire.h"

/* ---- framing ----------------------------------------------------------------------- */

#define RPC_HELLO_BYTES SP_HELLO_BYTES
#define RPC_HEAD_BYTES_MAX 16
/* NNG's REP socket drops a request whose backtrace has more hops than its TTL (8). */
#define RPC_SP_HOPS_MAX 8
#define RPC_ENV_BYTES_MAX (4 * RPC_SP_HOPS_MAX)
#define RPC_TX_HEAD_BYTES_MAX (RPC_HEAD_BYTES_MAX + RPC_ENV_BYTES_MAX)
/* rpc_server_quiesce looks this often whether the answers it woke have gone out. */
#define RPC_QUIESCE_POLL_MS 5


typedef struct rpc_framing {
    const char *name;
    size_t hello_len;  /* greeting each way before any message (0: none) */
    void (*hello_write)(uint8_t *out);
    bool (*hello_check)(const uint8_t *in);
    size_t head_len;   /* fixed bytes in front of each message */
    /* Reads the payload length from a message head; returns NULL, or when the head is
     * malformed what is wrong with it ("what=..." for the close log line). */
    const char *(*head_parse)(const uint8_t *head, uint64_t *payload_len);
    uint64_t len_max;  /* a longer announced payload closes the connection */
    /* The head is part of the message the worker gets (its payload length counts it). */
    bool head_in_msg;
    /* Requests are MongoDB wire messages: the worker decodes them (common/wire.c), runs
     * the command and encodes the reply itself, instead of echoing an envelope. */
    bool wire;
    /* Bytes at the start of a request payload that the reply echoes; false = malformed. */
    bool (*envelope)(const uint8_t *payload, size_t len, size_t *env_len);
    /* Writes head + envelope of a reply whose body is body_len bytes; returns their size. */
    size_t (*reply_head)(uint8_t *out, const uint8_t *env, size_t env_len, size_t body_len);
} rpc_framing_t;

static void sp_hello_write(uint8_t *out) { sp_hello(out, SP_REP0); }

static bool sp_hello_check(const uint8_t *in) { return sp_hello_is(in, SP_REQ0); }

static const char *sp_tcp_head_parse(const uint8_t *head, uint64_t *len) {
    *len = sp_get_be64(head);
    return NULL;
}

static const char *sp_ipc_head_parse(const uint8_t *head, uint64_t *len) {
    *len = sp_get_be64(head + 1);
    return head[0] == 1 ? NULL : "what=message_type";  /* NNG's IPC type: 1 = user message */
}

static bool sp_envelope(const uint8_t *payload, size_t len, size_t *env_len) {
    for (size_t hop = 0; hop < RPC_SP_HOPS_MAX && 4 * hop + 4 <= len; hop++) {
        if (payload[4 * hop] & 0x80) {
            *env_len = 4 * hop + 4;
            return true;
        }
    }
    return false;
}

static size_t sp_tcp_reply_head(uint8_t *out, const uint8_t *env, size_t env_len,
                                size_t body_len) {
    sp_put_be64(out, (uint64_t)(env_len + body_len));
    memcpy(out + 8, env, env_len);
    return 8 + env_len;
}

static size_t sp_ipc_reply_head(uint8_t *out, const uint8_t *env, size_t env_len,
                                size_t body_len) {
    out[0] = 1;
    sp_put_be64(out + 1, (uint64_t)(env_len + body_len));
    memcpy(out + 9, env, env_len);
    return 9 + env_len;
}

static const rpc_framing_t rpc_sp_tcp = {
    "sp-tcp", RPC_HELLO_BYTES, sp_hello_write, sp_hello_check, 8, sp_tcp_head_parse,
    MS_TRANSPORT_BYTES_MAX, false, false, sp_envelope, sp_tcp_reply_head};
static const rpc_framing_t rpc_sp_ipc = {
    "sp-ipc", RPC_HELLO_BYTES, sp_hello_write, sp_hello_check, 9, sp_ipc_head_parse,
    MS_TRANSPORT_BYTES_MAX, false, false, sp_envelope, sp_ipc_reply_head};

/* MongoDB's wire protocol: no greeting; the 16-byte header {messageLength, requestID,
 * responseTo, opCode} is part of the message (messageLength counts it). An opcode we do
 * not serve closes the connection at once, as MongoDB does, before its bytes are read. */
static const char *wire_head_parse(const uint8_t *head, uint64_t *len) {
    wire_header_t h;
    wire_header_read(head, &h);
    if (h.length < WIRE_HEADER_BYTES) return "what=message_length";
    if (!wire_opcode_known(h.opcode)) return "what=opcode";
    *len = (uint64_t)h.length;
    return NULL;
}

static bool wire_envelope(const uint8_t *payload, size_t len, size_t *env_len) {
    (void)payload;
    (void)len;
    *env_len = 0;  /* the worker reads the requestID from the header itself */
    return true;
}

static const rpc_framing_t rpc_wire = {"wire", 0, NULL, NULL, WIRE_HEADER_BYTES,
                                       wire_head_parse, MS_WIRE_MSG_BYTES_MAX, true, true,
                                       wire_envelope, NULL};

/* ---- state ------------------------------------------------------------------------- */

/* The worker pools: ordinary requests; internal ones (rpc_server_opts_t is_internal) on
 * workers of their own that ordinary requests never occupy; and the control commands
 * (rpc_control_by_name: ping, configureFailPoint, serverStatus, currentOp, hello) on
 * MS_RPC_CONTROL_WORKERS of their own, so they are served while every ordinary worker
 * waits behind a hung operation (a failpoint never freezes a daemon). */
enum { RPC_POOL_USER = 0, RPC_POOL_INTERNAL = 1, RPC_POOL_CONTROL = 2, RPC_POOLS = 3 };

/* A complete request waiting for (or held by) a worker. */
typedef struct rpc_req {
    struct rpc_req *next;
    uint8_t *buf;    /* the payload: envelope, then body; owned */
    size_t len;
    size_t env_len;
    size_t charged;  /* bytes counted in the server's receive budget */
    int pool;        /* the pool it is queued for (RPC_POOL_*) */
    bool woken;      /* was parked and runs again: the handler answers at once */
    bool exhaust;    /* the next invocation of an exhaust stream (not sent by the client) */
} rpc_req_t;

/* Bytes queued for sending: the greeting or one reply. */
typedef struct rpc_tx {
    struct rpc_tx *next;
    uint8_t head[RPC_TX_HEAD_BYTES_MAX];
    size_t head_len;
    uint8_t *body;   /* bson_malloc'd (a stolen reply buffer); owned */
    size_t body_len;
    size_t sent;     /* of head_len + body_len */
    bool is_reply;   /* counts in the connection's in-flight requests */
} rpc_tx_t;

/* A connection's requests for one pool. */
typedef struct rpc_cq {
    rpc_req_t *head, *tail;     /* complete requests not yet taken by a worker */
    int active;                 /* workers of the pool running this connection's requests */
    bool in_ready;              /* in the pool's ready list */
    struct rpc_conn *next_ready;
} rpc_cq_t;

typedef struct rpc_conn {
    rpc_server_t *srv;
    struct rpc_conn *prev, *next;  /* the server's list of connections not yet reaped */
    struct rpc_conn *next_dead;    /* the dead list */
    nng_stream *stream;
    nng_aio *rx_aio;
    nng_aio *tx_aio;
    uint32_t id;
    char peer[64];
    /* wire: the client as its first hello described it (failCommand's appName). Only the
     * connection's running request touches it: a wire connection runs one at a time. */
    op_client_t client;
    /* All below guarded by the server's mutex. */
    bool closed;
    bool rx_busy, tx_busy;   /* an aio is with NNG: its callback has not run yet */
    bool rx_paused;          /* not reading: too much in flight (back-pressure) */
    bool dead;               /* handed to the reaper */
    bool hello_done;
    uint8_t hello[RPC_HELLO_BYTES];
    size_t hello_got;
    uint8_t head[RPC_HEAD_BYTES_MAX];
    size_t head_got;
    long long msg_deadline_ms;  /* the current message (or greeting) must be in by then */
    uint8_t *rx_buf;            /* the message being received (NULL while reading a head) */
    size_t rx_len, rx_got, rx_cap;
    size_t rx_charged;          /* budget bytes held by rx_buf */
    rpc_cq_t cq[RPC_POOLS];     /* per pool: queued requests, workers held, ready link */
    int inflight;               /* requests received and not yet answered or dropped */
    rpc_tx_t *tx_head, *tx_tail;
    size_t tx_bytes;            /* unsent bytes queued */
    /* An awaitable request parked here (a hello waiting for a topology change) instead of
     * on a worker; on a wire connection nothing behind it runs before it is answered. */
    rpc_req_t *parked;
    long long park_until_ms;       /* time_mono_ms at which it runs again */
    struct rpc_conn *park_prev, *park_next;  /* the server's parked list */
    bool await_flush;           /* woken by rpc_server_quiesce: its reply must go out */
} rpc_conn_t;

/* A pool of workers and its round-robin list of connections with requests for it. */
typedef struct rpc_pool {
    pthread_cond_t cv;       /* its workers: the ready list gained a connection, or stopping */
    rpc_conn_t *ready_head, *ready_tail;
    int nworkers;
    int share;               /* its workers one connection may hold at once */
} rpc_pool_t;

struct rpc_server {
    pthread_mutex_t mu;
    pthread_cond_t reap_cv;  /* reaper: the dead list gained a connection, or stopping */
    const rpc_framing_t *framing;
    nng_stream_listener *listener;
    nng_aio *accept_aio;
    nng_aio *retry_aio;      /* re-arms accept after a transient failure */
    rpc_handler_fn fn;
    void *arg;
    rpc_classify_fn is_internal;  /* NULL: every request is ordinary */
    void *classify_arg;
    rpc_pool_t pool[RPC_POOLS];
    pthread_t *workers;
    int nstarted;
    pthread_t reaper;
    bool reaper_started;
    bool stopping;
    rpc_conn_t *conns;       /* every connection not yet reaped */
    rpc_conn_t *dead;        /* closed, every callback done: for the reaper */
    size_t budget_used;      /* bytes of received requests held (partial and complete) */
    uint64_t nopen;          /* connections accepted and not closed */
    long long refused_log_ms;
    atomic_uint_fast64_t requests;
    atomic_uint_fast32_t wire_next_id;  /* requestIDs of our wire replies */
    int idle_ms;             /* wire: idle bound between messages (0 = none) */
    atomic_uint_fast64_t conns_total;
    atomic_uint_fast64_t closed_count[RPC_CLOSE_REASONS];
    char url[MS_URL_BYTES_MAX];
    /* Parked requests (see "awaitable requests" below), guarded by mu. */
    rpc_conn_t *parked;      /* connections with a parked request */
    pthread_cond_t await_cv; /* the await thread: a request parked, or stopping */
    pthread_t await_thread;
    bool await_started;
    bool quiescing;          /* rpc_server_quiesce ran: nothing parks any more */
};

/* No reason to report: the peer closed, or the server is stopping. */
#define RPC_CLOSE_QUIET RPC_CLOSE_REASONS

static const char *const rpc_reason_names[RPC_CLOSE_REASONS] = {
    [RPC_CLOSE_TOO_MANY_CONNECTIONS] = "too_many_connections",
    [RPC_CLOSE_BAD_HANDSHAKE] = "bad_handshake",
    [RPC_CLOSE_BAD_FRAME] = "bad_frame",
    [RPC_CLOSE_MSG_TOO_LARGE] = "msg_too_large",
    [RPC_CLOSE_RECV_BUDGET] = "recv_budget",
    [RPC_CLOSE_RECV_TIMEOUT] = "recv_timeout",
    [RPC_CLOSE_SEND_TIMEOUT] = "send_timeout",
    [RPC_CLOSE_NO_MEMORY] = "no_memory",
    [RPC_CLOSE_IDLE] = "idle",
    [RPC_CLOSE_BAD_MESSAGE] = "bad_message",
    [RPC_CLOSE_FAIL_COMMAND] = "fail_command",
};

const char *rpc_close_reason_name(rpc_close_reason_t r) {
    return (unsigned)r < RPC_CLOSE_REASONS ? rpc_reason_names[r] : "none";
}

/* Connection ids are unique in the process (op_conn() keys per-connection caps on them)
 * and never 0, which means "no connection". */
static atomic_uint_fast32_t rpc_next_conn_id;

static uint32_t rpc_new_conn_id(void) {
    uint32_t id;
    do id = (uint32_t)atomic_fetch_add(&rpc_next_conn_id, 1) + 1;
    while (id == 0);
    return id;
}

/* ---- connections (all with s->mu held) -------------------------------------------- */

static void rpc_rx_start(rpc_conn_t *c);
static void rpc_tx_start(rpc_conn_t *c);
static void rpc_rx_maybe_resume(rpc_conn_t *c);
static void rpc_await_drop(rpc_conn_t *c);

static void rpc_ready_push(rpc_server_t *s, rpc_conn_t *c, int k) {
    rpc_pool_t *p = &s->pool[k];
    c->cq[k].in_ready = true;
    c->cq[k].next_ready = NULL;
    if (p->ready_tail) p->ready_tail->cq[k].next_ready = c;
    else p->ready_head = c;
    p->ready_tail = c;
    pthread_cond_signal(&p->cv);
}

/* Puts c in each pool's ready list where it has queued requests, room in its worker
 * share, and fewer reply bytes waiting to be sent than its cap: a client that does not
 * read its replies has its requests wait (cheaply, already charged to the budget)
 * instead of making us build replies nobody takes. */
static void rpc_ready_maybe(rpc_conn_t *c) {
    /* A wire connection's messages run in order: none while one is parked. */
    if (c->parked && c->srv->framing->wire) return;
    /* An exhaust stream's next reply is built once the last one is sent, as MongoDB
     * sends each before running the next invocation: a client that stops reading holds
     * one reply here, not a queue of them. */
    if (c->cq[RPC_POOL_USER].head && c->cq[RPC_POOL_USER].head->exhaust && c->tx_head) return;
    for (int k = 0; k < RPC_POOLS; k++)
        if (!c->closed && !c->cq[k].in_ready && c->cq[k].head &&
            c->cq[k].active < c->srv->pool[k].share &&
            c->tx_bytes < (size_t)MS_RPC_CONN_REPLY_BYTES_MAX)
            rpc_ready_push(c->srv, c, k);
}

/* Hands c to the reaper once nothing refers to it any more. */
static void rpc_conn_maybe_dead(rpc_conn_t *c) {
    rpc_server_t *s = c->srv;
    if (c->dead || !c->closed || c->rx_busy || c->tx_busy)
        return;
    for (int k = 0; k < RPC_POOLS; k++)
        if (c->cq[k].active > 0 || c->cq[k].in_ready) return;
    c->dead = true;
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->next_dead = s->dead;
    s->dead = c;
    pthread_cond_signal(&s->reap_cv);
}

static void rpc_conn_close(rpc_conn_t *c, int reason, const char *detail) {
    rpc_server_t *s = c->srv;
    if (c->closed) return;
    c->closed = true;
    s->nopen--;
    if (reason != RPC_CLOSE_QUIET) {
        atomic_fetch_add(&s->closed_count[reason], 1);
        log_warn("connection closed conn=%u peer=%s reason=%s url=%s%s%s", c->id, c->peer,
                 rpc_close_reason_name((rpc_close_reason_t)reason), s->url,
                 detail ? " " : "", detail ? detail : "");
    } else {
        log_debug("connection closed conn=%u peer=%s url=%s", c->id, c->peer, s->url);
    }
    /* The budget is released now; the memory is freed by the reaper, after NNG is done
     * with the buffers (a receive may still be pending on rx_buf). */
    s->budget_used -= c->rx_charged;
    c->rx_charged = 0;
    for (int k = 0; k < RPC_POOLS; k++)
        for (rpc_req_t *r = c->cq[k].head; r; r = r->next) {
            s->budget_used -= r->charged;
            r->charged = 0;
        }
    if (c->parked) rpc_await_drop(c);
    nng_stream_close(c->stream);  /* pending callbacks run with NNG_ECLOSED */
    rpc_conn_maybe_dead(c);
}

/* Charges need more bytes for c's partial message. Over the budget, the connection with
 * the largest partial message (c's own counted as it would grow) is closed, until the
 * bytes fit; false when that was c. */
static bool rpc_rx_charge(rpc_conn_t *c, size_t need) {
    rpc_server_t *s = c->srv;
    while (s->budget_used + need > (size_t)MS_RPC_RECV_BUDGET_BYTES) {
        rpc_conn_t *victim = c;
        size_t most = c->rx_charged + need;
        char detail[128];
        for (rpc_conn_t *o = s->conns; o; o = o->next)
            if (!o->closed && o->rx_charged > most) {
                victim = o;
                most = o->rx_charged;
            }
        snprintf(detail, sizeof detail, "held_bytes=%zu budget_used=%zu budget_bytes=%d", most,
                 s->budget_used + need, MS_RPC_RECV_BUDGET_BYTES);
        rpc_conn_close(victim, RPC_CLOSE_RECV_BUDGET, detail);
        if (victim == c) return false;
    }
    s->budget_used += need;
    c->rx_charged += need;
    return true;
}

/* Reading is paused while the connection has as many requests in flight or reply bytes
 * queued as it may: the client's own writes then wait in its socket (back-pressure). */
static bool rpc_conn_may_read(const rpc_conn_t *c) {
    return c->inflight < MS_RPC_CONN_INFLIGHT_MAX &&
           c->tx_bytes < (size_t)MS_RPC_CONN_REPLY_BYTES_MAX;
}

static void rpc_rx_maybe_resume(rpc_conn_t *c) {
    if (!c->closed && c->rx_paused && rpc_conn_may_read(c)) {
        c->rx_paused = false;
        rpc_rx_start(c);
    }
}

/* Time allowed for the next read: between messages unbounded for SP (an idle pooled
 * connection is legitimate, and our own peers keep theirs) and the idle bound for the
 * wire (drivers' abandoned connections), otherwise the stall limit capped by the
 * message's deadline. */
static nng_duration rpc_rx_timeout(const rpc_conn_t *c, bool mid_message) {
    long long left;
    if (!mid_message)
        return c->srv->idle_ms > 0 ? (nng_duration)c->srv->idle_ms : NNG_DURATION_INFINITE;
    left = c->msg_deadline_ms - time_mono_ms();
    if (left > MS_RPC_RECV_STALL_MS) left = MS_RPC_RECV_STALL_MS;
    return left < 1 ? 1 : (nng_duration)left;
}

static void rpc_rx_start(rpc_conn_t *c) {
    const rpc_framing_t *f = c->srv->framing;
    nng_iov iov;
    bool mid = true;
    if (!c->hello_done) {
        iov.iov_buf = c->hello + c->hello_got;
        iov.iov_len = f->hello_len - c->hello_got;
    } else if (!c->rx_buf) {
        iov.iov_buf = c->head + c->head_got;
        iov.iov_len = f->head_len - c->head_got;
        mid = c->head_got > 0;
    } else {
        iov.iov_buf = c->rx_buf + c->rx_got;
        iov.iov_len = c->rx_cap - c->rx_got;
    }
    nng_aio_set_iov(c->rx_aio, 1, &iov);
    nng_aio_set_timeout(c->rx_aio, rpc_rx_timeout(c, mid));
    c->rx_busy = true;
    nng_stream_recv(c->stream, c->rx_aio);
}

/* A message arrived whole: it becomes a request for the workers. */
static void rpc_rx_complete(rpc_conn_t *c) {
    rpc_req_t *r = calloc(1, sizeof *r);
    rpc_cq_t *q;
    size_t env_len;
    if (!r) {
        rpc_conn_close(c, RPC_CLOSE_NO_MEMORY, NULL);
        return;
    }
    if (!c->srv->framing->envelope(c->rx_buf, c->rx_len, &env_len)) {
        free(r);
        rpc_conn_close(c, RPC_CLOSE_BAD_FRAME, "what=no_request_id");
        return;
    }
    r->buf = c->rx_buf;
    r->len = c->rx_len;
    r->env_len = env_len;
    r->charged = c->rx_charged;
    c->rx_buf = NULL;
    c->rx_charged = 0;
    c->rx_len = c->rx_got = c->rx_cap = 0;
    c->head_got = 0;
    /* The classifiers read only the first bytes of the body, each within r->len. */
    q = &c->cq[c->srv->pool[RPC_POOL_CONTROL].nworkers > 0 &&
                       rpc_control_by_name(NULL, r->buf + env_len, r->len - env_len)
                   ? RPC_POOL_CONTROL
               : c->srv->is_internal &&
                       c->srv->is_internal(c->srv->classify_arg, r->buf + env_len,
                                           r->len - env_len)
                   ? RPC_POOL_INTERNAL
                   : RPC_POOL_USER];
    r->pool = (int)(q - c->cq);
    if (q->tail) q->tail->next = r;
    else q->head = r;
    q->tail = r;
    c->inflight++;
    /* A client that sends anything ends its exhaust stream (it waits for this reply now). */
    if (c->parked && c->parked->exhaust) rpc_await_drop(c);
    rpc_ready_maybe(c);
}

/* A message head arrived: check the announced length and take the first chunk. */
static void rpc_rx_head(rpc_conn_t *c) {
    const rpc_framing_t *f = c->srv->framing;
    uint64_t len = 0;
    size_t first;
    char detail[96];
    const char *bad = f->head_parse(c->head, &len);
    if (bad) {
        if (f->wire) {
            wire_header_t h;
            wire_header_read(c->head, &h);
            snprintf(detail, sizeof detail, "%s messageLength=%d opCode=%d", bad, h.length,
                     h.opcode);
            bad = detail;
        }
        rpc_conn_close(c, f->wire ? RPC_CLOSE_BAD_MESSAGE : RPC_CLOSE_BAD_FRAME, bad);
        return;
    }
    if (len > f->len_max) {
        snprintf(detail, sizeof detail, "bytes=%llu limit=%llu", (unsigned long long)len,
                 (unsigned long long)f->len_max);
        rpc_conn_close(c, RPC_CLOSE_MSG_TOO_LARGE, detail);
        return;
    }
    if (len < 4) {
        rpc_conn_close(c, RPC_CLOSE_BAD_FRAME, "what=no_request_id");
        return;
    }
    first = len < MS_RPC_RECV_CHUNK_BYTES ? (size_t)len : MS_RPC_RECV_CHUNK_BYTES;
    if (!rpc_rx_charge(c, first)) return;
    c->rx_buf = malloc(first);
    if (!c->rx_buf) {
        rpc_conn_close(c, RPC_CLOSE_NO_MEMORY, NULL);
        return;
    }
    c->rx_len = (size_t)len;
    c->rx_cap = first;
    c->rx_got = 0;
    if (f->head_in_msg) {  /* first >= head_len: head_parse refused shorter lengths */
        memcpy(c->rx_buf, c->head, f->head_len);
        c->rx_got = f->head_len;
    }
}

/* The buffer is full but the message is not: double it (up to the announced length),
 * so memory follows the bytes that really arrived. */
static void rpc_rx_grow(rpc_conn_t *c) {
    size_t cap = c->rx_cap * 2 < c->rx_len ? c->rx_cap * 2 : c->rx_len;
    uint8_t *p;
    if (!rpc_rx_charge(c, cap - c->rx_cap)) return;
    p = realloc(c->rx_buf, cap);
    if (!p) {
        rpc_conn_close(c, RPC_CLOSE_NO_MEMORY, NULL);
        return;
    }
    c->rx_buf = p;
    c->rx_cap = cap;
}

static void rpc_rx_cb(void *arg) {
    rpc_conn_t *c = arg;
    rpc_server_t *s = c->srv;
    const rpc_framing_t *f = s->framing;
    int rv = nng_aio_result(c->rx_aio);
    size_t n = nng_aio_count(c->rx_aio);

    pthread_mutex_lock(&s->mu);
    c->rx_busy = false;
    if (c->closed) goto out;
    if (rv != 0) {
        if (rv == NNG_ETIMEDOUT && c->hello_done && !c->rx_buf && c->head_got == 0 &&
            c->inflight > 0) {
            /* Not idle: the client waits for a reply to a command still running (a long
             * moveChunk) or still being sent. Keep waiting for its next message. */
            rpc_rx_start(c);
            goto out;
        }
        if (rv == NNG_ETIMEDOUT && c->hello_done && !c->rx_buf && c->head_got == 0) {
            char detail[48];
            snprintf(detail, sizeof detail, "idle_ms=%d", s->idle_ms);
            rpc_conn_close(c, RPC_CLOSE_IDLE, detail);
        } else {
            rpc_conn_close(c, rv == NNG_ETIMEDOUT ? RPC_CLOSE_RECV_TIMEOUT : RPC_CLOSE_QUIET,
                           rv == NNG_ETIMEDOUT
                               ? (c->hello_done ? "what=message" : "what=handshake")
                               : NULL);
        }
        goto out;
    }
    if (!c->hello_done) {
        c->hello_got += n;
        if (c->hello_got == f->hello_len) {
            if (!f->hello_check(c->hello)) {
                rpc_conn_close(c, RPC_CLOSE_BAD_HANDSHAKE, NULL);
                goto out;
            }
            c->hello_done = true;
        }
    } else if (!c->rx_buf) {
        if (c->head_got == 0 && n > 0) c->msg_deadline_ms = time_mono_ms() + MS_RPC_RECV_MSG_MS;
        c->head_got += n;
        if (c->head_got == f->head_len) {
            rpc_rx_head(c);
            /* A message that is all head (wire) is complete already. */
            if (!c->closed && c->rx_buf && c->rx_got == c->rx_len) {
                rpc_rx_complete(c);
                if (!c->closed && !rpc_conn_may_read(c)) {
                    c->rx_paused = true;
                    goto out;
                }
            }
        }
    } else {
        c->rx_got += n;
        if (c->rx_got == c->rx_len) {
            rpc_rx_complete(c);
            if (!c->closed && !rpc_conn_may_read(c)) {
                c->rx_paused = true;
                goto out;
            }
        } else if (c->rx_got == c->rx_cap) {
            rpc_rx_grow(c);
        }
    }
    if (!c->closed) rpc_rx_start(c);
out:
    rpc_conn_maybe_dead(c);
    pthread_mutex_unlock(&s->mu);
}

static void rpc_tx_free(rpc_tx_t *t) {
    if (!t) return;
    bson_free(t->body);
    free(t);
}

static void rpc_tx_push(rpc_conn_t *c, rpc_tx_t *t) {
    if (c->tx_tail) c->tx_tail->next = t;
    else c->tx_head = t;
    c->tx_tail = t;
    c->tx_bytes += t->head_len + t->body_len;
    if (!c->tx_busy) rpc_tx_start(c);
}

/* Sends what is left of the first queued item; each send must make progress within
 * MS_RPC_SEND_STALL_MS (a stream send completes as soon as some bytes went out). */
static void rpc_tx_start(rpc_conn_t *c) {
    rpc_tx_t *t = c->tx_head;
    nng_iov iov[2];
    unsigned n = 0;
    if (t->sent < t->head_len) {
        iov[n].iov_buf = t->head + t->sent;
        iov[n++].iov_len = t->head_len - t->sent;
        if (t->body_len) {
            iov[n].iov_buf = t->body;
            iov[n++].iov_len = t->body_len;
        }
    } else {
        iov[n].iov_buf = t->body + (t->sent - t->head_len);
        iov[n++].iov_len = t->body_len - (t->sent - t->head_len);
    }
    nng_aio_set_iov(c->tx_aio, n, iov);
    nng_aio_set_timeout(c->tx_aio, MS_RPC_SEND_STALL_MS);
    c->tx_busy = true;
    nng_stream_send(c->stream, c->tx_aio);
}

static void rpc_tx_cb(void *arg) {
    rpc_conn_t *c = arg;
    rpc_server_t *s = c->srv;
    int rv = nng_aio_result(c->tx_aio);
    size_t n = nng_aio_count(c->tx_aio);
    rpc_tx_t *done = NULL;

    pthread_mutex_lock(&s->mu);
    c->tx_busy = false;
    if (c->closed) goto out;
    if (rv != 0) {
        char detail[64];
        snprintf(detail, sizeof detail, "unsent_bytes=%zu", c->tx_bytes);
        rpc_conn_close(c, rv == NNG_ETIMEDOUT ? RPC_CLOSE_SEND_TIMEOUT : RPC_CLOSE_QUIET,
                       rv == NNG_ETIMEDOUT ? detail : NULL);
        goto out;
    }
    c->tx_head->sent += n;
    c->tx_bytes -= n;
    if (c->tx_head->sent == c->tx_head->head_len + c->tx_head->body_len) {
        done = c->tx_head;
        c->tx_head = done->next;
        if (!c->tx_head) c->tx_tail = NULL;
        if (done->is_reply) c->inflight--;
        rpc_rx_maybe_resume(c);
        rpc_ready_maybe(c);
    }
    if (!c->closed && c->tx_head) rpc_tx_start(c);
out:
    rpc_conn_maybe_dead(c);
    pthread_mutex_unlock(&s->mu);
    rpc_tx_free(done);
}

/* Frees a connection nobody refers to any more (reaper thread, without s->mu: freeing
 * an aio waits for its callback to return). */
static void rpc_conn_free(rpc_conn_t *c) {
    nng_aio_free(c->rx_aio);  /* NULL-safe */
    nng_aio_free(c->tx_aio);
    if (c->stream) nng_stream_free(c->stream);
    free(c->rx_buf);
    for (int k = 0; k < RPC_POOLS; k++)
        while (c->cq[k].head) {
            rpc_req_t *r = c->cq[k].head;
            c->cq[k].head = r->next;
            free(r->buf);
            free(r);
        }
    while (c->tx_head) {
        rpc_tx_t *t = c->tx_head;
        c->tx_head = t->next;
        rpc_tx_free(t);
    }
    free(c);
}

static void rpc_peer_name(nng_stream *st, char *buf, size_t cap) {
    nng_sockaddr sa;
    snprintf(buf, cap, "-");
    if (nng_stream_get_addr(st, NNG_OPT_REMADDR, &sa) != 0) return;
    if (sa.s_family == NNG_AF_INET) {
        const uint8_t *a = (const uint8_t *)&sa.s_in.sa_addr;
        const uint8_t *p = (const uint8_t *)&sa.s_in.sa_port;
        snprintf(buf, cap, "%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3], (unsigned)(p[0] << 8 | p[1]));
    } else if (sa.s_family == NNG_AF_INET6) {
        /* "[xxxx:...:xxxx]:port", uncompressed: the router keys its per-client cursor cap
         * on what precedes the last ':'. */
        const uint8_t *a = sa.s_in6.sa_addr;
        const uint8_t *p = (const uint8_t *)&sa.s_in6.sa_port;
        size_t n = (size_t)snprintf(buf, cap, "[");
        for (int i = 0; i < 16 && n < cap; i += 2)
            n += (size_t)snprintf(buf + n, cap - n, "%s%x", i ? ":" : "", (unsigned)(a[i] << 8 | a[i + 1]));
        if (n < cap) snprintf(buf + n, cap - n, "]:%u", (unsigned)(p[0] << 8 | p[1]));
    } else if (sa.s_family == NNG_AF_IPC) {
        snprintf(buf, cap, "ipc");
    }
}

/* Takes ownership of st (freed on failure). */
static void rpc_conn_accept(rpc_server_t *s, nng_stream *st) {
    rpc_conn_t *c = NULL;
    rpc_tx_t *hello = NULL;
    long long now = time_mono_ms();

    if (s->nopen >= MS_RPC_CONNS_MAX) {
        atomic_fetch_add(&s->closed_count[RPC_CLOSE_TOO_MANY_CONNECTIONS], 1);
        /* A flood would otherwise write one line per attempt. */
        if (now - s->refused_log_ms >= 1000) {
            s->refused_log_ms = now;
            log_warn("connection refused reason=too_many_connections open=%llu limit=%d "
                     "refused_total=%llu url=%s",
                     (unsigned long long)s->nopen, MS_RPC_CONNS_MAX,
                     (unsigned long long)atomic_load(
                         &s->closed_count[RPC_CLOSE_TOO_MANY_CONNECTIONS]),
                     s->url);
        }
        nng_stream_free(st);
        return;
    }
    c = calloc(1, sizeof *c);
    hello = calloc(1, sizeof *hello);
    if (!c || !hello || nng_aio_alloc(&c->rx_aio, rpc_rx_cb, c) != 0 ||
        nng_aio_alloc(&c->tx_aio, rpc_tx_cb, c) != 0) {
        atomic_fetch_add(&s->closed_count[RPC_CLOSE_NO_MEMORY], 1);
        log_warn("connection refused reason=no_memory url=%s", s->url);
        if (c) {
            nng_aio_free(c->rx_aio);
            nng_aio_free(c->tx_aio);
        }
        free(c);
        free(hello);
        nng_stream_free(st);
        return;
    }
    c->srv = s;
    c->stream = st;
    c->id = rpc_new_conn_id();
    rpc_peer_name(st, c->peer, sizeof c->peer);
    c->msg_deadline_ms = now + MS_RPC_RECV_STALL_MS;  /* for the greeting */
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->nopen++;
    atomic_fetch_add(&s->conns_total, 1);
    log_debug("connection accepted conn=%u peer=%s url=%s", c->id, c->peer, s->url);

    if (s->framing->hello_len) {
        s->framing->hello_write(hello->head);
        hello->head_len = s->framing->hello_len;
        rpc_tx_push(c, hello);
    } else {
        c->hello_done = true;
        free(hello);
    }
    rpc_rx_start(c);
}

static void rpc_accept_cb(void *arg) {
    rpc_server_t *s = arg;
    int rv = nng_aio_result(s->accept_aio);
    nng_stream *st = rv == 0 ? nng_aio_get_output(s->accept_aio, 0) : NULL;

    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        if (st) nng_stream_free(st);
        return;
    }
    if (rv == 0) {
        rpc_conn_accept(s, st);
        nng_stream_listener_accept(s->listener, s->accept_aio);
    } else if (rv != NNG_ECLOSED) {
        /* Out of descriptors or memory: wait a little rather than spin. */
        log_warn("accept failed url=%s err=\"%s\"", s->url, nng_strerror(rv));
        nng_sleep_aio(100, s->retry_aio);
    }
    pthread_mutex_unlock(&s->mu);
}

static void rpc_retry_cb(void *arg) {
    rpc_server_t *s = arg;
    pthread_mutex_lock(&s->mu);
    if (!s->stopping) nng_stream_listener_accept(s->listener, s->accept_aio);
    pthread_mutex_unlock(&s->mu);
}

/* ---- awaitable requests (all with s->mu held, but the thread) ------------------------
 *
 * MongoDB's awaitable hello waits up to maxAwaitTimeMS for a topology change before it
 * answers. A driver keeps one such request waiting per server it monitors, and mongosh
 * and pooled applications open many; a worker sleeping for each would let a handful of
 * monitors take the whole pool. So the handler never sleeps: it asks for its request to
 * be parked (opctx.h, op_await_t), the worker goes back to the pool, and the request waits
 * here on its connection, costing no thread. One await thread per server runs a parked
 * request again when its deadline passes; rpc_server_quiesce runs them all at once
 * (shutdown). A request run again is marked woken, goes back to the head of its
 * connection's queue, and its handler answers at once.
 *
 * Exhaust (OP_MSG exhaustAllowed, the streaming protocol): the worker queues the next
 * invocation itself after each streamed reply (rpc_exhaust_queue); it parks like any
 * awaitable request. The stream ends when a reply is an error, or when the client
 * sends anything or closes. */

static bool rpc_conn_has_queued(const rpc_conn_t *c) {
    for (int k = 0; k < RPC_POOLS; k++)
        if (c->cq[k].head) return true;
    return false;
}

static void rpc_await_unlink(rpc_conn_t *c) {
    rpc_server_t *s = c->srv;
    if (c->park_prev) c->park_prev->park_next = c->park_next;
    else s->parked = c->park_next;
    if (c->park_next) c->park_next->park_prev = c->park_prev;
    c->park_prev = c->park_next = NULL;
}

/* Frees a request the connection no longer waits for (closed, or it sent something else
 * while streaming): it is answered never, as a request on a closed connection. */
static void rpc_req_discard(rpc_conn_t *c, rpc_req_t *r) {
    c->srv->budget_used -= r->charged;
    c->inflight--;
    free(r->buf);
    free(r);
    rpc_rx_maybe_resume(c);
}

static void rpc_await_drop(rpc_conn_t *c) {
    rpc_req_t *r = c->parked;
    rpc_await_unlink(c);
    c->parked = NULL;
    rpc_req_discard(c, r);
}

/* Runs c's parked request again, first in its connection's queue. flush: the server is
 * quiescing and waits for this reply to be sent. */
static void rpc_await_wake(rpc_conn_t *c, bool flush) {
    rpc_req_t *r = c->parked;
    rpc_cq_t *q = &c->cq[r->pool];
    rpc_await_unlink(c);
    c->parked = NULL;
    r->woken = true;
    r->next = q->head;
    q->head = r;
    if (!q->tail) q->tail = r;
    c->await_flush = c->await_flush || flush;
    rpc_ready_maybe(c);
}

/* A worker's handler asked for r to wait until until_ms. Quiescing: it runs again at
 * once. A stream's own next invocation is dropped instead when the client has sent
 * something meanwhile (the stream has ended). */
static void rpc_await_park(rpc_conn_t *c, rpc_req_t *r, long long until_ms) {
    rpc_server_t *s = c->srv;
    if (c->closed || (r->exhaust && rpc_conn_has_queued(c))) {
        rpc_req_discard(c, r);
        return;
    }
    ASSERT(!c->parked);  /* one request of a connection runs at a time on the wire */
    c->parked = r;
    c->park_until_ms = until_ms;
    c->park_prev = NULL;
    c->park_next = s->parked;
    if (s->parked) s->parked->park_prev = c;
    s->parked = c;
    if (s->quiescing) rpc_await_wake(c, true);
    else pthread_cond_signal(&s->await_cv);
}

/* The await thread: runs each parked request again once its deadline has passed. */
static void *rpc_await_main(void *p) {
    rpc_server_t *s = p;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        long long now = time_mono_ms(), next_ms = -1;
        for (rpc_conn_t *c = s->parked, *n; c; c = n) {
            n = c->park_next;  /* a wake unlinks c */
            if (c->park_until_ms <= now) rpc_await_wake(c, false);
            else if (next_ms < 0 || c->park_until_ms < next_ms) next_ms = c->park_until_ms;
        }
        if (next_ms < 0) pthread_cond_wait(&s->await_cv, &s->mu);
        else (void)time_cond_wait_ms(&s->await_cv, &s->mu, next_ms - now);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Whether a connection woken by rpc_server_quiesce still has its answer to send. */
static bool rpc_flush_pending(const rpc_server_t *s) {
    for (const rpc_conn_t *c = s->conns; c; c = c->next) {
        if (c->closed || !c->await_flush) continue;
        if (c->parked || c->tx_head || rpc_conn_has_queued(c)) return true;
        for (int k = 0; k < RPC_POOLS; k++)
            if (c->cq[k].active > 0) return true;
    }
    return false;
}

/* Queues next, the next invocation of an exhaust stream, on c (the reply that asked for
 * it has just been queued): unless the client has sent something meanwhile. */
static void rpc_exhaust_queue(rpc_conn_t *c, rpc_req_t *next) {
    rpc_cq_t *q = &c->cq[RPC_POOL_USER];
    c->inflight++;
    if (c->closed || rpc_conn_has_queued(c)) {
        rpc_req_discard(c, next);
        return;
    }
    next->pool = RPC_POOL_USER;
    q->head = q->tail = next;
}

/* ---- workers and reaper ------------------------------------------------------------ */

/* Builds the reply to r (its envelope, then the body stolen from reply). NULL when out
 * of memory. */
static rpc_tx_t *rpc_reply_make(const rpc_framing_t *f, const rpc_req_t *r, bson_t *reply) {
    rpc_tx_t *t = calloc(1, sizeof *t);
    uint32_t len = 0;
    uint8_t *body = bson_destroy_with_steal(reply, true, &len);
    if (!t || !body) {
        free(t);
        bson_free(body);
        return NULL;
    }
    t->body = body;
    t->body_len = len;
    t->head_len = f->reply_head(t->head, r->buf, r->env_len, len);
    t->is_reply = true;
    return t;
}

/* What serving one message asks of the connection. */
typedef enum rpc_outcome {
    RPC_OUT_REPLY,      /* send the reply built */
    RPC_OUT_NO_REPLY,   /* moreToCome: the client expects nothing */
    RPC_OUT_CLOSE,      /* a connection-fatal message */
    RPC_OUT_NO_MEMORY,
    RPC_OUT_PARK,       /* the handler parked the request (op_await_t): no reply yet */
    RPC_OUT_CLOSE_ASKED, /* the handler asked to close without a reply (op_close_connection) */
} rpc_outcome_t;

static void rpc_log_refused(const rpc_conn_t *c, const ms_error_t *err) {
    log_warn("wire message refused conn=%u peer=%s code=%d codeName=%s errmsg=%s", c->id,
             c->peer, err->code, err_code_name(err->code), log_str(err->msg));
}

/* The next invocation of an exhaust stream, when req asked for one (exhaustAllowed), its
 * handler allowed it (op_await_t stream: an awaitable hello) and it succeeded (MongoDB
 * streams only ok replies): the same command with the reply's topologyVersion, whose
 * requestID is the reply's own (reply_id). NULL: the stream ends with this reply. */
static rpc_req_t *rpc_exhaust_next(const wire_request_t *req, const op_await_t *aw,
                                   const bson_t *reply, int32_t reply_id) {
    bson_iter_t it;
    bson_t tv;
    uint32_t tv_len;
    const uint8_t *tv_data;
    uint8_t *bytes;
    size_t len = 0;
    rpc_req_t *r;

    if (!aw->stream || !req->exhaust_allowed || req->reply_opcode != WIRE_OP_MSG) return NULL;
    if (!bson_iter_init_find(&it, reply, "ok") || !bson_iter_as_bool(&it)) return NULL;
    if (!bson_iter_init_find(&it, reply, "topologyVersion") || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return NULL;
    bson_iter_document(&it, &tv_len, &tv_data);
    if (!bson_init_static(&tv, tv_data, tv_len)) return NULL;
    if (!(bytes = wire_exhaust_next(req, &tv, reply_id, &len))) return NULL;
    r = calloc(1, sizeof *r);
    if (r && (r->buf = malloc(len)) != NULL) {
        memcpy(r->buf, bytes, len);
        r->len = len;
        r->exhaust = true;
    } else {
        free(r);
        r = NULL;
    }
    bson_free(bytes);
    return r;
}

/* Serves one wire message r (the whole message, header included): decodes it, runs the
 * command through the handler (cmd_dispatch: the same as over SP), encodes the reply.
 * Runs on a worker without the lock. *out: the reply to send (RPC_OUT_REPLY only);
 * *next: an exhaust stream's next invocation (with RPC_OUT_REPLY), or NULL. */
static rpc_outcome_t rpc_wire_serve(rpc_server_t *s, const rpc_conn_t *c, const rpc_req_t *r,
                                    op_await_t *aw, rpc_tx_t **out, rpc_req_t **next) {
    wire_request_t req;
    ms_error_t err = {0};
    bson_t reply;
    rpc_tx_t *t;
    size_t len = 0;
    int32_t reply_id;
    wire_rc_t rc = wire_request_decode(r->buf, r->len, &req, &err);

    *out = NULL;
    *next = NULL;
    if (rc == WIRE_CLOSE) {
        rpc_log_refused(c, &err);
        wire_request_free(&req);
        return RPC_OUT_CLOSE;
    }
    aw->exhaust_allowed = req.exhaust_allowed;
    bson_init(&reply);
    if (rc == WIRE_OK) {
        s->fn(s->arg, bson_get_data(&req.cmd), req.cmd.len, &reply);
    } else {
        rpc_log_refused(c, &err);
        wire_error_doc(&req, &err, &reply);
        lclock_reply_out(&reply);  /* as every reply dispatch makes (common/lclock.h) */
    }
    if (req.more_to_come || aw->park_until_ms > 0) {
        bool no_reply = req.more_to_come;
        bson_destroy(&reply);
        wire_request_free(&req);
        return no_reply ? RPC_OUT_NO_REPLY : RPC_OUT_PARK;
    }
    reply_id = (int32_t)(atomic_fetch_add(&s->wire_next_id, 1) + 1);
    *next = rpc_exhaust_next(&req, aw, &reply, reply_id);
    req.reply_more_to_come = *next != NULL;
    t = calloc(1, sizeof *t);
    if (t) t->body = wire_reply_encode(&req, reply_id, &reply, &len);
    bson_destroy(&reply);
    wire_request_free(&req);
    if (!t || !t->body) {
        free(t);
        if (*next) free((*next)->buf);
        free(*next);
        *next = NULL;
        return RPC_OUT_NO_MEMORY;
    }
    t->body_len = len;
    t->is_reply = true;
    *out = t;
    return RPC_OUT_REPLY;
}

/* Serves one SP request r: the handler, then the reply with r's envelope. (Nothing parks
 * on SP: a connection's requests run side by side there, and no driver speaks it.) */
static rpc_outcome_t rpc_sp_serve(rpc_server_t *s, const rpc_req_t *r, rpc_tx_t **out) {
    bson_t reply;
    bson_init(&reply);
    s->fn(s->arg, r->buf + r->env_len, r->len - r->env_len, &reply);
    *out = rpc_reply_make(s->framing, r, &reply);
    return *out ? RPC_OUT_REPLY : RPC_OUT_NO_MEMORY;
}

/* Runs r on the calling worker, without the lock: the request's connection, peer and
 * await state are published to its handler (opctx.h) for the call. */
static rpc_outcome_t rpc_serve(rpc_server_t *s, rpc_conn_t *c, const rpc_req_t *r,
                               op_await_t *aw, rpc_tx_t **t, rpc_req_t **next) {
    rpc_outcome_t outcome;
    op_set_conn(c->id);
    op_set_peer(c->peer);   /* c outlives the request: it holds q->active */
    op_set_client(s->framing->wire ? &c->client : NULL);  /* NULL: an NNG peer */
    op_set_await(aw);
    *next = NULL;
    if (s->framing->wire) outcome = rpc_wire_serve(s, c, r, aw, t, next);
    else outcome = rpc_sp_serve(s, r, t);
    if (op_take_close()) {
        /* failCommand's closeConnection: nothing goes out, not even a parked or
         * streamed reply. */
        rpc_tx_free(*t);
        *t = NULL;
        if (*next) free((*next)->buf);
        free(*next);
        *next = NULL;
        outcome = RPC_OUT_CLOSE_ASKED;
    }
    op_set_await(NULL);
    op_set_conn(0);
    op_set_peer(NULL);
    op_set_client(NULL);
    return outcome;
}

/* After r was served (with the lock): the reply t goes out, or the connection learns
 * why not; an exhaust stream's next invocation takes over r's budget charge. */
static void rpc_served(rpc_conn_t *c, rpc_req_t *r, rpc_outcome_t outcome, rpc_tx_t *t,
                       rpc_req_t *next) {
    rpc_server_t *s = c->srv;
    atomic_fetch_add(&s->requests, 1);
    if (next) {
        next->charged = r->charged;  /* read under the lock: a close zeroes queued ones only */
        r->charged = 0;
    }
    s->budget_used -= r->charged;
    free(r->buf);
    free(r);
    if (c->closed || !t) {
        c->inflight--;
        if (outcome == RPC_OUT_NO_MEMORY) rpc_conn_close(c, RPC_CLOSE_NO_MEMORY, "what=reply");
        if (outcome == RPC_OUT_CLOSE) rpc_conn_close(c, RPC_CLOSE_BAD_MESSAGE, "what=message");
        if (outcome == RPC_OUT_CLOSE_ASKED) rpc_conn_close(c, RPC_CLOSE_FAIL_COMMAND, NULL);
        rpc_tx_free(t);
        rpc_rx_maybe_resume(c);
    } else {
        rpc_tx_push(c, t);
    }
    if (next) rpc_exhaust_queue(c, next);
}

/* A worker of pool k: serves only the requests queued for that pool. */
static void rpc_worker_loop(rpc_server_t *s, int k) {
    rpc_pool_t *p = &s->pool[k];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        rpc_conn_t *c;
        rpc_cq_t *q;
        rpc_req_t *r, *next;
        rpc_tx_t *t;
        op_await_t aw;
        rpc_outcome_t outcome;

        while (!s->stopping && !p->ready_head) pthread_cond_wait(&p->cv, &s->mu);
        if (s->stopping) break;
        c = p->ready_head;
        q = &c->cq[k];
        p->ready_head = q->next_ready;
        if (!p->ready_head) p->ready_tail = NULL;
        q->in_ready = false;
        if (c->closed || !q->head) {
            rpc_conn_maybe_dead(c);
            continue;
        }
        r = q->head;
        q->head = r->next;
        if (!q->head) q->tail = NULL;
        r->next = NULL;
        q->active++;
        memset(&aw, 0, sizeof aw);
        aw.can_park = s->framing->wire && !s->quiescing;  /* one at a time: see rpc_sp_serve */
        aw.woken = r->woken;
        rpc_ready_maybe(c);  /* round robin: back at the tail while it has work and room */
        pthread_mutex_unlock(&s->mu);

        outcome = rpc_serve(s, c, r, &aw, &t, &next);

        pthread_mutex_lock(&s->mu);
        q->active--;
        if (outcome == RPC_OUT_PARK) rpc_await_park(c, r, aw.park_until_ms);
        else rpc_served(c, r, outcome, t, next);
        rpc_ready_maybe(c);
        rpc_conn_maybe_dead(c);
    }
    pthread_mutex_unlock(&s->mu);
}

static void *rpc_worker_main(void *p) {
    rpc_worker_loop(p, RPC_POOL_USER);
    return NULL;
}

static void *rpc_iworker_main(void *p) {
    rpc_worker_loop(p, RPC_POOL_INTERNAL);
    return NULL;
}

static void *rpc_cworker_main(void *p) {
    rpc_worker_loop(p, RPC_POOL_CONTROL);
    return NULL;
}

static void *rpc_reaper_main(void *p) {
    rpc_server_t *s = p;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        rpc_conn_t *dead;
        while (!s->dead && !(s->stopping && !s->conns)) pthread_cond_wait(&s->reap_cv, &s->mu);
        if (!s->dead) break;  /* stopping, and every connection is gone */
        dead = s->dead;
        s->dead = NULL;
        pthread_mutex_unlock(&s->mu);
        while (dead) {
            rpc_conn_t *next = dead->next_dead;
            rpc_conn_free(dead);
            dead = next;
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- API --------------------------------------------------------------------------- */

static const rpc_framing_t *rpc_framing_for(const char *url) {
    if (strncmp(url, "tcp://", 6) == 0 || strncmp(url, "tcp4://", 7) == 0 ||
        strncmp(url, "tcp6://", 7) == 0)
        return &rpc_sp_tcp;
    if (strncmp(url, "ipc://", 6) == 0) return &rpc_sp_ipc;
    return NULL;
}

int rpc_server_start(const char *url, int nworkers, rpc_handler_fn fn, void *arg,
                     rpc_server_t **out, ms_error_t *err) {
    rpc_server_opts_t o = {.nworkers = nworkers, .fn = fn, .arg = arg};
    return rpc_server_start_opts(url, &o, out, err);
}

/* Workers one connection may hold at once in a pool of n. */
static int rpc_share(int n) {
    int share = n * MS_RPC_CONN_WORKERS_PCT / 100;
    return share < 1 ? 1 : share;
}

int rpc_server_start_opts(const char *url, const rpc_server_opts_t *o, rpc_server_t **out,
                          ms_error_t *err) {
    rpc_server_t *s = NULL;
    const rpc_framing_t *framing;
    int nworkers = o->nworkers, ninternal = o->is_internal ? o->internal_workers : 0;
    int ncontrol = MS_RPC_CONTROL_WORKERS;
    int rv, rc = 0;

    if (!url || strlen(url) >= MS_URL_BYTES_MAX)
        return err_set(err, MS_ERR_BAD_VALUE, "listen url missing or longer than %d bytes",
                       MS_URL_BYTES_MAX - 1);
    if (!(framing = rpc_framing_for(url)))
        return err_set(err, MS_ERR_BAD_VALUE, "%s: a server listens on tcp:// or ipc:// only",
                       url);
    if (o->wire) {
        if (framing != &rpc_sp_tcp)
            return err_set(err, MS_ERR_BAD_VALUE, "%s: the wire protocol listens on tcp:// only",
                           url);
        if (o->idle_ms < 0)
            return err_set(err, MS_ERR_BAD_VALUE, "idle_ms %d is negative", o->idle_ms);
        framing = &rpc_wire;
        ninternal = 0;  /* one pool: clients' commands only */
        ncontrol = 0;   /* a wire connection's messages run in order, one at a time */
    }
    if (nworkers <= 0) nworkers = MS_RPC_WORKERS_DEFAULT;
    if (nworkers > MS_RPC_WORKERS_MAX)
        return err_set(err, MS_ERR_BAD_VALUE, "workers %d over the limit %d", nworkers,
                       MS_RPC_WORKERS_MAX);
    if (ninternal < 0 || ninternal > MS_RPC_WORKERS_MAX)
        return err_set(err, MS_ERR_BAD_VALUE, "internal workers %d outside [0, %d]", ninternal,
                       MS_RPC_WORKERS_MAX);

    s = calloc(1, sizeof *s);
    if (!s) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "rpc server: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    for (int k = 0; k < RPC_POOLS; k++) pthread_cond_init(&s->pool[k].cv, NULL);
    pthread_cond_init(&s->reap_cv, NULL);
    pthread_cond_init(&s->await_cv, NULL);
    snprintf(s->url, sizeof s->url, "%s", url);
    s->framing = framing;
    s->fn = o->fn;
    s->arg = o->arg;
    s->is_internal = ninternal > 0 ? o->is_internal : NULL;
    s->idle_ms = o->wire ? o->idle_ms : 0;
    s->classify_arg = o->classify_arg;
    s->pool[RPC_POOL_USER].nworkers = nworkers;
    /* A wire connection's messages run one at a time, in order, as MongoDB runs them: a
     * driver sends an unacknowledged (moreToCome) write and then reads, on the same
     * connection, and must see the write. (SP clients match replies by id and our own
     * peers pipeline independent requests.) */
    s->pool[RPC_POOL_USER].share = framing == &rpc_wire ? 1 : rpc_share(nworkers);
    s->pool[RPC_POOL_INTERNAL].nworkers = ninternal;
    s->pool[RPC_POOL_INTERNAL].share = rpc_share(ninternal);
    s->pool[RPC_POOL_CONTROL].nworkers = ncontrol;
    s->pool[RPC_POOL_CONTROL].share = 1;   /* one connection cannot take them all */
    atomic_init(&s->requests, 0);
    atomic_init(&s->wire_next_id, 0);
    atomic_init(&s->conns_total, 0);
    for (int i = 0; i < RPC_CLOSE_REASONS; i++) atomic_init(&s->closed_count[i], 0);

    s->workers = calloc((size_t)(nworkers + ninternal + ncontrol), sizeof *s->workers);
    if (!s->workers) {
        rc = err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "rpc server: out of memory");
        goto out;
    }
    if ((rv = nng_aio_alloc(&s->accept_aio, rpc_accept_cb, s)) != 0 ||
        (rv = nng_aio_alloc(&s->retry_aio, rpc_retry_cb, s)) != 0) {
        rc = err_from_nng(err, rv, "accept aio");
        goto out;
    }
    for (int i = 0; i < nworkers + ninternal + ncontrol; i++) {
        void *(*main_fn)(void *) = i < nworkers               ? rpc_worker_main
                                   : i < nworkers + ninternal ? rpc_iworker_main
                                                              : rpc_cworker_main;
        if (pthread_create(&s->workers[i], NULL, main_fn, s) != 0) {
            rc = err_set(err, MS_ERR_INTERNAL, "rpc server: cannot start worker thread");
            goto out;
        }
        s->nstarted++;
    }
    if (pthread_create(&s->reaper, NULL, rpc_reaper_main, s) != 0) {
        rc = err_set(err, MS_ERR_INTERNAL, "rpc server: cannot start reaper thread");
        goto out;
    }
    s->reaper_started = true;
    if (pthread_create(&s->await_thread, NULL, rpc_await_main, s) != 0) {
        rc = err_set(err, MS_ERR_INTERNAL, "rpc server: cannot start await thread");
        goto out;
    }
    s->await_started = true;
    if ((rv = nng_stream_listener_alloc(&s->listener, url)) == 0 &&
        (framing == &rpc_sp_tcp || framing == &rpc_wire))
        (void)nng_stream_listener_set_bool(s->listener, NNG_OPT_TCP_NODELAY, true);  /* as NNG */
    if (rv != 0 || (rv = nng_stream_listener_listen(s->listener)) != 0) {
        rc = err_from_nng(err, rv, "listen");
        err_prefix(err, "%s", url);
        goto out;
    }
    pthread_mutex_lock(&s->mu);
    nng_stream_listener_accept(s->listener, s->accept_aio);
    pthread_mutex_unlock(&s->mu);
out:
    if (rc != 0) {
        rpc_server_stop(s);
        return rc;
    }
    *out = s;
    return 0;
}

void rpc_server_stop(rpc_server_t *s) {
    if (!s) return;
    /* Order: no new connection (stopping is seen by the accept callback under the lock,
     * then the accept aio is stopped); close every connection (their pending callbacks
     * run with NNG_ECLOSED); let running handlers finish (workers exit, their replies
     * are dropped); the reaper frees connections as their last callback returns and
     * exits when none is left. */
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (int k = 0; k < RPC_POOLS; k++) pthread_cond_broadcast(&s->pool[k].cv);
    pthread_cond_broadcast(&s->reap_cv);
    pthread_cond_broadcast(&s->await_cv);
    pthread_mutex_unlock(&s->mu);
    if (s->await_started) pthread_join(s->await_thread, NULL);
    if (s->listener) nng_stream_listener_close(s->listener);
    nng_aio_stop(s->accept_aio);  /* NULL-safe */
    nng_aio_stop(s->retry_aio);
    pthread_mutex_lock(&s->mu);
    for (rpc_conn_t *c = s->conns, *next; c; c = next) {
        next = c->next;  /* a close may move c to the dead list */
        rpc_conn_close(c, RPC_CLOSE_QUIET, NULL);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nstarted; i++) pthread_join(s->workers[i], NULL);
    /* Workers leave without draining the ready list; what is left there is closed. */
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < RPC_POOLS; k++) {
        rpc_pool_t *p = &s->pool[k];
        while (p->ready_head) {
            rpc_conn_t *c = p->ready_head;
            p->ready_head = c->cq[k].next_ready;
            c->cq[k].in_ready = false;
            rpc_conn_maybe_dead(c);
        }
        p->ready_tail = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    if (s->reaper_started) {
        pthread_join(s->reaper, NULL);
    } else {
        while (s->dead) {  /* no reaper ran: nothing was ever accepted, but be exact */
            rpc_conn_t *next = s->dead->next_dead;
            rpc_conn_free(s->dead);
            s->dead = next;
        }
    }
    if (s->listener) nng_stream_listener_free(s->listener);
    nng_aio_free(s->accept_aio);
    nng_aio_free(s->retry_aio);
    free(s->workers);
    for (int k = 0; k < RPC_POOLS; k++) pthread_cond_destroy(&s->pool[k].cv);
    pthread_cond_destroy(&s->reap_cv);
    pthread_cond_destroy(&s->await_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void rpc_server_quiesce(rpc_server_t *s, int wait_ms) {
    const struct timespec poll = {0, RPC_QUIESCE_POLL_MS * 1000000L};
    long long deadline;
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->quiescing = true;
    while (s->parked) rpc_await_wake(s->parked, true);
    deadline = time_mono_ms() + wait_ms;
    /* Bounded: a client that does not read its answer costs the stop wait_ms at most. */
    while (rpc_flush_pending(s) && time_mono_ms() < deadline) {
        pthread_mutex_unlock(&s->mu);
        nanosleep(&poll, NULL);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

/* A BSON document starts with its int32 length, then the first element: a type byte and
 * the key as a C string. The bytes are unvalidated, so only the two bytes needed are
 * read, and only when the message has them. */
bool rpc_internal_by_name(void *arg, const uint8_t *data, size_t len) {
    (void)arg;
    return len >= 6 && data[4] != 0 && data[5] == '_';
}

bool rpc_control_by_name(void *arg, const uint8_t *data, size_t len) {
    static const char *const names[] = {"ping", "configureFailPoint", "serverStatus",
                                        "currentOp", "hello", "isMaster", "ismaster"};
    (void)arg;
    if (len < 6 || data[4] == 0) return false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i]);
        /* the key and its NUL, within len */
        if (5 + n < len && memcmp(data + 5, names[i], n) == 0 && data[5 + n] == 0) return true;
    }
    return false;
}

uint64_t rpc_server_requests(const rpc_server_t *s) {
    return s ? atomic_load(&((rpc_server_t *)s)->requests) : 0;
}

void rpc_server_connections(const rpc_server_t *s, uint64_t *current, uint64_t *total) {
    rpc_server_t *m = (rpc_server_t *)s;
    *current = 0;
    *total = 0;
    if (!s) return;
    pthread_mutex_lock(&m->mu);
    *current = m->nopen;
    pthread_mutex_unlock(&m->mu);
    *total = atomic_load(&m->conns_total);
}

uint64_t rpc_server_closed(const rpc_server_t *s, rpc_close_reason_t r) {
    if (!s || (unsigned)r >= RPC_CLOSE_REASONS) return 0;
    return atomic_load(&((rpc_server_t *)s)->closed_count[r]);
}
