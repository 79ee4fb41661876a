/*
 * rpc_server.h — the server side of the RPC layer (common/rpc_server.c), run by every
 * daemon: it accepts connections, reads requests, runs them on a fixed pool of worker
 * threads and sends the replies, so that no client, however slow, stuck or hostile,
 * can cost more than its own connection (limits in common/limits.h, "RPC server").
 */
#ifndef MS_RPC_SERVER_H
#define MS_RPC_SERVER_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

/* Handles one request. data/len are the raw bytes received (not yet validated: the
 * handler must check them); borrowed for the call only. reply is initialised empty by
 * the server; the handler fills it. Called concurrently from many worker threads;
 * op_conn() names the request's connection during the call. */
typedef void (*rpc_handler_fn)(void *arg, const uint8_t *data, size_t len, bson_t *reply);

typedef struct rpc_server rpc_server_t;

/* Why the server closed a connection (counted, and logged as reason=<name>). */
typedef enum rpc_close_reason {
    RPC_CLOSE_TOO_MANY_CONNECTIONS,  /* refused at accept: MS_RPC_CONNS_MAX open */
    RPC_CLOSE_BAD_HANDSHAKE,         /* not an SP REQ v0 peer */
    RPC_CLOSE_BAD_FRAME,             /* a message without a request id */
    RPC_CLOSE_MSG_TOO_LARGE,         /* announced length over MS_TRANSPORT_BYTES_MAX */
    RPC_CLOSE_RECV_BUDGET,           /* MS_RPC_RECV_BUDGET_BYTES reached: largest partial */
    RPC_CLOSE_RECV_TIMEOUT,          /* stalled mid-message or too slow overall */
    RPC_CLOSE_SEND_TIMEOUT,          /* the peer stopped reading its replies */
    RPC_CLOSE_NO_MEMORY,             /* an allocation failed */
    RPC_CLOSE_IDLE,                  /* wire: no message for the idle bound (idle_ms) */
    RPC_CLOSE_BAD_MESSAGE,           /* wire: a connection-fatal message (unknown opcode,
                                      * illegal flag, checksum mismatch...) */
    RPC_CLOSE_FAIL_COMMAND,          /* the handler asked for it (failCommand's
                                      * closeConnection, op_close_connection) */
    RPC_CLOSE_REASONS
} rpc_close_reason_t;

/* Listens on url (tcp://host:port or ipc://path) with nworkers threads.
 * *out set on success only. */
int rpc_server_start(const char *url, int nworkers, rpc_handler_fn fn, void *arg,
                     rpc_server_t **out, ms_error_t *err);

/* Tells whether a request is internal. data/len: the raw request body (unvalidated,
 * borrowed); must read only within len, and be cheap: it runs on NNG's thread under the
 * server's lock. */
typedef bool (*rpc_classify_fn)(void *arg, const uint8_t *data, size_t len);

typedef struct rpc_server_opts {
    int nworkers;            /* the ordinary pool; 0 = MS_RPC_WORKERS_DEFAULT */
    rpc_handler_fn fn;
    void *arg;
    /* Internal requests (is_internal true) run on internal_workers threads of their own
     * that ordinary requests never occupy; ordinary ones never wait for them either.
     * internal_workers 0 or is_internal NULL: one pool for everything. */
    int internal_workers;
    rpc_classify_fn is_internal;
    void *classify_arg;
    /* Speak MongoDB's wire protocol (common/wire.h) instead of SP on a tcp:// url: fn
     * gets the command decoded from each message and its reply is encoded back;
     * internal_workers and is_internal are ignored (one pool). */
    bool wire;
    /* wire only: a connection with no message for this long is closed (0 = never). */
    int idle_ms;
} rpc_server_opts_t;

/* rpc_server_start with the options above. */
int rpc_server_start_opts(const char *url, const rpc_server_opts_t *o, rpc_server_t **out,
                          ms_error_t *err);

/* The classifier of minishard's daemons: the command name (the first key of the BSON
 * body) starts with '_' (_migrateClone, _transferMods, _recvChunk*...). Reads two bytes,
 * bounded by len. */
bool rpc_internal_by_name(void *arg, const uint8_t *data, size_t len);
/* The control commands every SP server serves on MS_RPC_CONTROL_WORKERS threads of their
 * own, never behind ordinary or internal requests: ping, configureFailPoint,
 * serverStatus, currentOp, hello, isMaster. A hung operation — a failpoint's hang, a
 * request waiting on a lock — can take every ordinary worker; these still answer. (Not on
 * wire servers: a wire connection's messages run in order.) Bounded by len. */
bool rpc_control_by_name(void *arg, const uint8_t *data, size_t len);
/* Stops listening, closes every connection, lets running handlers finish (their
 * replies are dropped), joins the workers, frees. NULL-safe. */
void rpc_server_stop(rpc_server_t *s);
/* Shutdown's first step (MongoDB's quiesce mode): every parked request (an awaitable
 * hello, opctx.h op_await_t) runs again at once and from now on none parks; waits up to
 * wait_ms for the answers they give to be sent, so that waiting clients hear them before
 * rpc_server_stop closes their connections. Other requests are served as usual meanwhile.
 * NULL-safe. */
void rpc_server_quiesce(rpc_server_t *s, int wait_ms);
/* Requests served so far (for serverStatus). */
uint64_t rpc_server_requests(const rpc_server_t *s);
/* Connections open now and accepted since start (for serverStatus). */
void rpc_server_connections(const rpc_server_t *s, uint64_t *current, uint64_t *total);
/* Connections the server closed (or refused) for reason r since start. */
uint64_t rpc_server_closed(const rpc_server_t *s, rpc_close_reason_t r);
/* "send_timeout", ...: the name used in logs and serverStatus. */
const char *rpc_close_reason_name(rpc_close_reason_t r);

#endif
