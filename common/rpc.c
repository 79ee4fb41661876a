/*
 * rpc.c — request/reply over NNG REQ/REP (see rpc.h), used by every process: each
 * daemon serves its command table through rpc_server_*, and every process calls its
 * peers through rpc_client_* / rpc_peer.
 *
 * Server: common/rpc_server.c.
 *
 * Client: one REQ socket per peer URL, dialed in the background; every call runs on
 * its own nng_ctx (taken from a small per-client pool, so calls from many threads are
 * in flight together) and gives each step the time left of one deadline.
 *
 * Resends: NNG's REQ socket re-sends a request that has waited NNG_OPT_REQ_RESENDTIME
 * (60 s by default) without a reply, and re-sends on a new connection a request whose
 * connection dropped. We switch resending off (NNG_DURATION_INFINITE): commands like
 * insert or _recvChunkCommit are not idempotent, and a slow handler must never run
 * twice because the client grew impatient. With resends off, NNG fails a call whose
 * connection drops before the reply with ECONNRESET (HostUnreachable to our callers),
 * at once instead of at the deadline. A request not yet sent waits for a connection
 * until its deadline (NetworkTimeout). A caller that knows a command is safe to repeat
 * retries it itself, as MongoDB's retryable reads do.
 */
#include "common/rpc.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/opctx.h"

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

struct rpc_client {
    nng_socket sock;
    pthread_mutex_t mu;   /* guards the idle list */
    rpc_slot_t *idle;
    int nidle;
    char url[MS_URL_BYTES_MAX];
};

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
    int rv, rc = 0;
    bool sock_open = false;

    if (!url || strlen(url) >= MS_URL_BYTES_MAX)
        return err_set(err, MS_ERR_BAD_VALUE, "peer url missing or longer than %d bytes",
                       MS_URL_BYTES_MAX - 1);
    c = calloc(1, sizeof *c);
    if (!c) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "rpc client: out of memory");
    snprintf(c->url, sizeof c->url, "%s", url);
    pthread_mutex_init(&c->mu, NULL);
    if ((rv = nng_req0_open(&c->sock)) != 0) {
        rc = err_from_nng(err, rv, "req socket open");
        goto out;
    }
    sock_open = true;
    /* Redial quickly at first (a daemon restarting in a test or a demo), backing off to
     * one attempt a second for a peer that stays down. */
    if ((rv = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, MS_TRANSPORT_BYTES_MAX)) != 0 ||
        (rv = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
        (rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 20)) != 0 ||
        (rv = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 1000)) != 0) {
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
        pthread_mutex_destroy(&c->mu);
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void rpc_client_close(rpc_client_t *c) {
    if (!c) return;
    nng_close(c->sock);
    while (c->idle) {
        rpc_slot_t *next = c->idle->next;
        rpc_slot_free(c->idle);
        c->idle = next;
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const char *rpc_client_url(const rpc_client_t *c) { return c->url; }

/* Milliseconds left before deadline_ms (monotonic), at least 1 so NNG still waits. */
static nng_duration rpc_left_ms(long long deadline_ms) {
    long long left = deadline_ms - time_mono_ms();
    return left < 1 ? 1 : (nng_duration)(left > INT32_MAX ? INT32_MAX : left);
}

int rpc_call_raw(rpc_client_t *c, const void *data, size_t len, int timeout_ms,
                 bson_t *reply, ms_error_t *err) {
    rpc_slot_t *slot = NULL;
    nng_msg *msg = NULL;
    bson_t view;
    long long deadline_ms;
    int rv, rc = 0;

    if (timeout_ms <= 0) timeout_ms = MS_RPC_TIMEOUT_MS_DEFAULT;
    deadline_ms = time_mono_ms() + timeout_ms;

    if ((rv = nng_msg_alloc(&msg, len)) != 0) {
        rc = err_from_nng(err, rv, "request alloc");
        goto out;
    }
    if (len) memcpy(nng_msg_body(msg), data, len);
    if ((rc = rpc_slot_get(c, &slot, err)) != 0) goto out;

    nng_aio_set_timeout(slot->aio, rpc_left_ms(deadline_ms));
    nng_aio_set_msg(slot->aio, msg);
    nng_ctx_send(slot->ctx, slot->aio);
    nng_aio_wait(slot->aio);
    if ((rv = nng_aio_result(slot->aio)) != 0) {
        /* Not taken: the message is still ours (msg) and freed at out. */
        rc = err_from_nng(err, rv, "send");
        goto out;
    }
    msg = NULL;  /* the context owns it now */

    nng_aio_set_timeout(slot->aio, rpc_left_ms(deadline_ms));
    nng_ctx_recv(slot->ctx, slot->aio);
    nng_aio_wait(slot->aio);
    if ((rv = nng_aio_result(slot->aio)) != 0) {
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
    if (slot) {
        if (rc == 0) rpc_slot_put(c, slot);
        else rpc_slot_free(slot);  /* a failed call's context is not reused */
    }
    if (msg) nng_msg_free(msg);
    if (rc != 0) err_prefix(err, "call to %s", c->url);
    return rc;
}

int rpc_call(rpc_client_t *c, const bson_t *cmd, int timeout_ms, bson_t *reply,
             ms_error_t *err) {
    return rpc_call_raw(c, bson_get_data(cmd), cmd->len, timeout_ms, reply, err);
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
