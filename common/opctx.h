/*
 * opctx.h — the operation running on the calling thread, used by every daemon.
 *
 * Every request is served start to finish on one RPC worker thread, so what belongs to
 * "this operation" is kept in thread-local storage rather than passed through every
 * call: the connection it arrived on (so caps can be per connection) and its deadline
 * (MongoDB's maxTimeMS). The RPC worker sets the connection before dispatch; dispatch
 * sets the deadline from the command's maxTimeMS field and clears it afterwards.
 *
 * Long loops (scans, sorts, regex matching, scatter/gather waits) call op_check(): it
 * costs one clock read and answers MaxTimeMSExpired (50) once the deadline has passed,
 * as MongoDB's interrupt checks do. Loops over documents call it every
 * MS_INTERRUPT_CHECK_DOCS documents. A thread that works for an operation on another
 * thread (a scatter helper) takes the deadline explicitly with op_deadline_ms().
 *
 * Two failpoints make tests deterministic, as in MongoDB: with maxTimeAlwaysTimeOut on,
 * an operation that has a deadline fails at its first check (dispatch checks once
 * before the handler runs) and every later one; with maxTimeNeverTimeOut on, a
 * deadline never expires. Operations without maxTimeMS are untouched by both.
 */
#ifndef MS_OPCTX_H
#define MS_OPCTX_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

/* The connection the current request arrived on (an NNG pipe id; 0 = none/unknown).
 * Set by the RPC server before a handler runs. */
void op_set_conn(uint32_t conn_id);
uint32_t op_conn(void);
/* The peer address of that connection ("127.0.0.1:51234"; "-" when unknown), for
 * whatsmyuri. Borrowed: the RPC server keeps the string alive while the request runs and
 * sets NULL afterwards; op_peer() answers "unknown" for NULL. */
void op_set_peer(const char *peer);
const char *op_peer(void);

/* The client of a wire connection, as the connection layer keeps it for the connection's
 * life: the application name of its first hello's client metadata (client.application.name,
 * at most OP_APP_NAME_MAX bytes as in MongoDB), which failCommand's appName matches.
 * op_client() is NULL for a request that came over NNG, the transport minishard's own
 * processes (and shardctl, and the test harness) speak: MongoDB's "internal client". */
#define OP_APP_NAME_MAX 128
typedef struct op_client {
    bool metadata_seen;                 /* a hello with client metadata has arrived */
    char app_name[OP_APP_NAME_MAX + 1]; /* "" when that hello named no application */
} op_client_t;
void op_set_client(op_client_t *client);
op_client_t *op_client(void);

/* failCommand's closeConnection: the handler of the current request asks the connection
 * layer to send no reply and close the connection. op_take_close() answers whether it was
 * asked, and clears the request (the RPC worker calls it after each request). */
void op_close_connection(void);
bool op_take_close(void);

/* The logical session of the current request: its lsid.id when that is a UUID (binary,
 * 16 bytes); has = false without one (or with an id of another shape, which names no
 * session). Dispatch sets it before the handler and clears it after; the cursor registry
 * records it when a cursor opens and compares it at getMore, MongoDB's rule that a cursor
 * belongs to the session that created it. */
typedef struct op_lsid {
    bool has;
    uint8_t id[16];
} op_lsid_t;
void op_set_lsid(const op_lsid_t *l);   /* NULL clears */
void op_get_lsid(op_lsid_t *out);
/* Reads a command's lsid into *out (has = false when absent or not a UUID id). */
void op_lsid_of(const bson_t *cmd, op_lsid_t *out);
/* "{ id: UUID(\"...\") }" (or "none"), MongoDB's way of printing a session, into dst. */
void op_lsid_text(const op_lsid_t *l, char *dst, size_t cap);
/* Appends lsid: {id: UUID} to cmd when the current request has a session: a router's
 * getMore to a shard carries its client's session, as mongos's does, since the shard's
 * cursor was opened with it. */
void op_append_lsid(bson_t *cmd);
/* ---- awaitable requests (hello's streaming protocol) ----
 * A request that must wait for an event — a hello waiting for a topology change, as
 * MongoDB's awaitable hello does — never sleeps on its worker: the handler asks the
 * connection layer (common/rpc_server.c) to park the request until a deadline, and
 * returns; the layer runs it again, marked woken, when the deadline passes or the server
 * wakes every parked request (shutdown), and the handler then answers at once. The
 * worker publishes one op_await_t for the request it runs; handlers only read its
 * inputs and write its outputs. */
typedef struct op_await {
    /* set by the connection layer before the handler runs */
    bool can_park;             /* this request may be parked (false: answer now) */
    bool woken;                /* the request was parked and is run again: answer now */
    bool exhaust_allowed;      /* OP_MSG flag exhaustAllowed was set on the request */
    /* set by the handler */
    long long park_until_ms;   /* > 0: park until then (time_mono_ms); the reply is dropped */
    bool stream;               /* the reply may go out with moreToCome and the command be
                                * run again with the reply's topologyVersion (exhaust) */
} op_await_t;
/* The current request's await state (borrowed; NULL clears); NULL when the request did not
 * come through a connection layer that parks (unit tests, peers' direct calls). */
void op_set_await(op_await_t *a);
op_await_t *op_await(void);

/* The deadline of the current operation on the monotonic clock (time_mono_ms), or 0
 * for none. op_set_deadline_ms(0) clears it. */
void op_set_deadline_ms(long long deadline_mono_ms);
long long op_deadline_ms(void);

/* Milliseconds left before the deadline (at least 1 while not expired, 0 once
 * expired); dflt_ms when there is no deadline, or the smaller of the two when
 * dflt_ms > 0 and both apply. Used to size the deadline of a call to a peer. */
long long op_time_left_ms(long long dflt_ms);

/* 0 while the deadline has not passed (or there is none); otherwise fills err with
 * MaxTimeMSExpired, "operation exceeded time limit", and returns its code. Once it has
 * answered MaxTimeMSExpired it keeps doing so for this operation (MongoDB marks the
 * operation killed). */
int op_check(ms_error_t *err);

/* The test failpoints above (common/failpoint.h). */
#define OP_FP_MAX_TIME_ALWAYS_TIME_OUT "maxTimeAlwaysTimeOut"
#define OP_FP_MAX_TIME_NEVER_TIME_OUT "maxTimeNeverTimeOut"
/* Declares both points; every daemon's command server calls it at start-up. */
void op_register_failpoints(void);

/* Parses a maxTimeMS value as MongoDB's parseMaxTimeMS does: a number (else "maxTimeMS
 * must be a number"), whose value truncated to an integer lies in [0, INT32_MAX] (else
 * "<n> value for maxTimeMS is out of range"), and, for a double, integral (else
 * "maxTimeMS has non-integral value"). 0 = no limit. On success *ms_out holds the value.
 * BadValue otherwise. */
int op_parse_max_time_ms(const bson_iter_t *it, long long *ms_out, ms_error_t *err);

#endif
