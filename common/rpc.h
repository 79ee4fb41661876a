/*
 * rpc.h — request/reply over NNG REQ/REP, used by every process.
 *
 * A message is one BSON document each way. The server (rpc_server.h) runs a fixed
 * pool of worker threads, so a handler may block (a failpoint hang, a migration
 * critical section, a call to another daemon) without stalling NNG's own threads.
 * A client talks to one peer URL. To a tcp:// peer each call runs on a pooled TCP
 * connection of its own, driven by the calling thread (NNG's SP framing, no NNG threads
 * between the caller and the reply: see rpc.c, "client transport"); to other URLs
 * (inproc://, ipc://) through an NNG REQ socket, each call on its own context. Either
 * way calls from many threads run at once, each call has an explicit deadline, and a
 * peer that is down is redialed.
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

/* Opens a client of url (the peer may not be up yet: a tcp:// client dials on its first
 * call, others dial in the background). *out set on success only. */
int rpc_client_open(const char *url, rpc_client_t **out, ms_error_t *err);
void rpc_client_close(rpc_client_t *c);  /* NULL-safe */
const char *rpc_client_url(const rpc_client_t *c);

/* Sends cmd and waits at most timeout_ms (<= 0: MS_RPC_TIMEOUT_MS_DEFAULT) for the reply
 * document. On success *reply is initialised (caller owns it) and holds whatever the peer
 * answered, {ok: 0} included. Errors, each message naming the peer's URL:
 *   HostUnreachable (6)   no connection to the peer appeared within MS_RPC_CONNECT_WAIT_MS
 *                         (peer down or unreachable), or the connection was lost before
 *                         the reply; nothing is retried (the command may have run).
 *   NetworkTimeout (89)   the deadline passed (peer slow or hung).
 *   ExceededTimeLimit (262) this process already has its share of calls in flight to
 *                         this peer (rpc_client_set_workers) and none ended within
 *                         MS_RPC_PEER_SLOT_WAIT_MS: the request was not sent.
 *   InvalidBSON (22)      the reply is not BSON. */
int rpc_call(rpc_client_t *c, const bson_t *cmd, int timeout_ms, bson_t *reply,
             ms_error_t *err);

/* rpc_call on behalf of the operation running on this thread (common/opctx.h): the
 * deadline is the operation's time left (its maxTimeMS), or dflt_ms when it has none.
 * When that time runs out before or during the call the error is MaxTimeMSExpired (50),
 * as MongoDB answers for an operation whose maxTimeMS expired while waiting on a shard. */
int rpc_call_op(rpc_client_t *c, const bson_t *cmd, int dflt_ms, bson_t *reply,
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

/* Sets the process's share cap from its number of request workers: calls in flight to
 * any one peer are capped at MS_RPC_PEER_SHARE_PCT of nworkers (at least 1). Until it is
 * called the cap derives from MS_RPC_WORKERS_DEFAULT. Applies to every client. */
void rpc_client_set_workers(int nworkers);

/* A process-wide cache of clients, one per URL, created on first use and kept for the
 * process's life (thread-safe). The returned client is borrowed. */
int rpc_peer(const char *url, rpc_client_t **out, ms_error_t *err);
void rpc_peers_close_all(void);

/* Appends `peers`: an array with one document per cached peer (url, connected,
 * connections, callsInFlight, callsInFlightMax, calls, callsFailedFast,
 * callsOverShareCap, callsTimedOut, callsConnectionLost), for serverStatus. */
void rpc_peers_append_status(bson_t *out);

#endif
