/*
 * rpc.h — request/reply over NNG REQ/REP, used by every process.
 *
 * A message is one BSON document each way. The server (rpc_server.h) runs a fixed
 * pool of worker threads, so a handler may block (a failpoint hang, a migration
 * critical section, a call to another daemon) without stalling NNG's own threads. A client is one REQ socket per peer URL; each
 * call runs on its own context, so calls from many threads run at once, and each call
 * has an explicit deadline. Dialing is non-blocking and NNG redials a lost peer.
 *
 * Ownership (NNG's rule): on success the reply document is the caller's; on failure
 * nothing is written to it.
 */
#ifndef MS_RPC_H
#define MS_RPC_H

#include <bson/bson.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

/* ---- server: common/rpc_server.h ---------------------------------------------- */

#include "rpc_server.h"

/* ---- client ---------------------------------------------------------------------- */

typedef struct rpc_client rpc_client_t;

/* Opens a REQ socket that dials url in the background (the peer may not be up yet).
 * *out set on success only. */
int rpc_client_open(const char *url, rpc_client_t **out, ms_error_t *err);
void rpc_client_close(rpc_client_t *c);  /* NULL-safe */
const char *rpc_client_url(const rpc_client_t *c);

/* Sends cmd and waits at most timeout_ms for the reply document. On success *reply is
 * initialised (caller owns it) and holds whatever the peer answered, {ok: 0} included.
 * Errors: NetworkTimeout when the deadline passes (peer slow, gone, or never there),
 * HostUnreachable when the socket is closed, InvalidBSON when the reply is not BSON. */
int rpc_call(rpc_client_t *c, const bson_t *cmd, int timeout_ms, bson_t *reply,
             ms_error_t *err);

/* Like rpc_call, and an {ok: 0} reply becomes an error: its code and errmsg go to *err
 * and the code is returned; *reply is still initialised then (caller destroys) so that
 * extra fields (StaleConfig's vWanted...) can be read. On transport errors *reply is
 * not initialised. */
int rpc_command(rpc_client_t *c, const bson_t *cmd, int timeout_ms, bson_t *reply,
                ms_error_t *err);

/* Sends raw bytes (tests: garbage, oversized messages). Same reply rules as rpc_call. */
int rpc_call_raw(rpc_client_t *c, const void *data, size_t len, int timeout_ms,
                 bson_t *reply, ms_error_t *err);

/* A process-wide cache of clients, one per URL, created on first use and kept for the
 * process's life (thread-safe). The returned client is borrowed. */
int rpc_peer(const char *url, rpc_client_t **out, ms_error_t *err);
void rpc_peers_close_all(void);

#endif
