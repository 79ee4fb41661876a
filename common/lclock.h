/*
 * lclock.h — the cluster time: one hybrid logical clock per process (every daemon).
 *
 * MongoDB's LogicalClock (now the clusterTime component of its VectorClock): a Timestamp
 * (seconds, increment) that only grows. A write takes a tick — the next time, with the
 * wall clock's seconds when they are ahead of the clock, else the clock's seconds and the
 * next increment — as a primary's oplog entry takes its timestamp. Gossip moves it too:
 * every request and every reply between processes, and every driver request, may carry
 * `$clusterTime {clusterTime, signature}`; the receiver advances its clock to it unless it
 * is more than MS_CLOCK_DRIFT_SECS_MAX ahead of its wall clock (ClusterTimeFailsRateLimiter,
 * MongoDB's maxAcceptableLogicalClockDriftSecs). Every reply of a command carries
 * `$clusterTime` and `operationTime` (lclock_reply_out).
 *
 * Roles: a data-bearing process (shard, config server) answers a read's operationTime
 * with the time of its last committed write (MongoDB's lastApplied) and makes a read with
 * readConcern.afterClusterTime wait until every write with a time at or before it has
 * committed (lclock_wait_reached); a router answers with the largest operationTime of the
 * replies it received from peers for the operation (mongos's OperationTimeTracker), or the
 * cluster time when it asked none.
 *
 * Durability: a data-bearing process keeps a high-water mark of the clock's seconds in a
 * file (lclock_open): no time at or past it is handed out or gossiped before a mark past it
 * is fsync'd, and after a restart the clock starts at the mark, so the clock never goes
 * back across kill -9.
 *
 * The signature is zero-filled and never checked (minishard has no authentication and so
 * no admin.system.keys; docs/cluster-time.md).
 *
 * Thread safety: the clock is process-global state behind one mutex (lclock.c); the
 * operation's noted time is thread-local, like common/opctx.h's deadline.
 */
#ifndef MS_LCLOCK_H
#define MS_LCLOCK_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "errors.h"

/* A cluster time: BSON Timestamp(secs, inc). {0, 0} is "none". */
typedef struct lclock_ts {
    uint32_t secs;
    uint32_t inc;
} lclock_ts_t;

typedef enum lclock_role {
    LCLOCK_ROUTER = 0,  /* operationTime from the peers' replies */
    LCLOCK_DATA = 1,    /* shard or config server: operationTime from its own writes */
} lclock_role_t;

int lclock_cmp(lclock_ts_t a, lclock_ts_t b);
bool lclock_is_null(lclock_ts_t t);

/* Sets the process's role and starts the clock at the wall clock's second. Once, before
 * serving. */
void lclock_init(lclock_role_t role);

/* A data-bearing process: keeps the clock's high-water mark in <dbpath>/LCLOCK_FILE
 * (created if missing; a missing file is a fresh process) and starts the clock at the
 * mark. Errors: the file is unreadable or malformed (a corrupt mark must not be taken as
 * zero), or the first mark cannot be written. */
#define LCLOCK_FILE "cluster_time"
int lclock_open(const char *dbpath, ms_error_t *err);

/* The clock's current time. */
lclock_ts_t lclock_now(void);
/* The time of the last committed write (or of the point a read after a cluster time moved
 * it to): MongoDB's lastApplied. A data-bearing process's reads answer with it. */
lclock_ts_t lclock_applied(void);

/* A write takes its time: the next tick, pending until lclock_write_end (which the caller
 * must call, whatever happens). Errors only when the high-water mark cannot be persisted
 * (the write must not go on: its time would not survive a restart). At most
 * MS_CLOCK_PENDING_MAX are pending at once; more wait here for one to end. */
int lclock_write_begin(lclock_ts_t *out, ms_error_t *err);
/* The write committed (its time becomes applied and the operation's time) or rolled back. */
void lclock_write_end(lclock_ts_t t, bool committed);

/* Gossip in: advances the clock to t when t is ahead. ClusterTimeFailsRateLimiter (205)
 * when t is more than MS_CLOCK_DRIFT_SECS_MAX ahead of the wall clock, 40484 when its
 * increment is past the largest one MongoDB allows. */
int lclock_advance(lclock_ts_t t, ms_error_t *err);

/* readConcern.afterClusterTime: waits until no write with a time <= t is pending, then
 * moves applied (and the clock) up to t, as a primary's noop write does. Bounded by the
 * operation's maxTimeMS (MaxTimeMSExpired) or MS_CLOCK_WAIT_MS_DEFAULT (ExceededTimeLimit).
 * InvalidOptions when t is ahead of the clock (MongoDB: "readConcern afterClusterTime value
 * must not be greater than the current clusterTime"). */
int lclock_wait_reached(lclock_ts_t t, ms_error_t *err);

/* ---- the operation's time (thread-local) ------------------------------------------ */

void lclock_op_reset(void);
/* Raises the operation's time to t (a write's own time; on a router, a peer's reply). */
void lclock_op_note(lclock_ts_t t);
lclock_ts_t lclock_op_time(void);

/* ---- commands ----------------------------------------------------------------------- */

/* Dispatch, before the handler: gossips in the request's $clusterTime (TypeMismatch or
 * NoSuchKey for a malformed one; the rate limiter's error) and, on a data-bearing process,
 * waits for readConcern.afterClusterTime (already checked by dispatch's session arguments).
 * req is borrowed. */
int lclock_request_in(const bson_t *req, ms_error_t *err);

/* readConcern's afterClusterTime rules (MongoDB's ReadConcernArgs): it is a Timestamp, not
 * null, not beside afterOpTime, and only with level local, majority or snapshot (level is
 * NULL when absent). rc is the readConcern document. */
int lclock_check_read_concern(const bson_t *rc, const char *level, ms_error_t *err);

/* Dispatch, on every reply (ok or error): replaces any $clusterTime and operationTime the
 * reply holds with this process's. reply is initialised and finished (caller owns). */
void lclock_reply_out(bson_t *reply);

/* Peer calls (common/rpc.c): the request with this process's $clusterTime in place of any
 * it had (out: initialised here, caller destroys) ... */
void lclock_gossip_out(const bson_t *cmd, bson_t *out);
/* ... and a peer's reply gossiped in: its $clusterTime advances the clock (a refusal is
 * logged, not returned: the reply is still the caller's), and on a router its
 * operationTime is noted for the operation. */
void lclock_gossip_reply(const bson_t *reply);

/* Appends {clusterTime, signature: {hash: BinData(0, 20 zero bytes), keyId: 0}}. */
void lclock_append_signed(bson_t *doc, const char *key, lclock_ts_t t);

#endif
