/*
 * cursor.h — the cursor registry every daemon keeps (bin/shardd, bin/router,
 * bin/configsvr): MongoDB's CursorManager (mongod) and ClusterCursorManager (mongos) in
 * one module.
 *
 * A registry holds the open cursors of one process (the router keeps two: its own and
 * the config cursors it relays). It knows of each cursor only its curs_t — id, namespace,
 * the connection that opened it, pin state, bytes held — which the daemon embeds in its
 * own cursor struct; what the cursor runs (a shard's plan and scan position, a router's
 * remote shard cursors, a config server's materialised result) is the daemon's, freed
 * through the destroy callback the registry was opened with.
 *
 * The rules, the same in every daemon:
 *   - ids: random, positive, unique among the open cursors (a relayed cursor may bring
 *     its own id: the config server's, counted at the router);
 *   - caps (common/limits.h): open cursors per connection, in all, and optionally bytes
 *     held by all; a refusal is ExceededMemoryLimit naming the cap, and is counted;
 *   - caps per client address (optional): the router's, so that a client with several
 *     connections still gets one share;
 *   - getMore pins its cursor (MongoDB's ClientCursorPin): absent or killed → CursorNotFound,
 *     pinned → CursorInUse, another namespace → Unauthorized, another session (the
 *     calling thread's op_lsid against the one recorded at curs_add) → MongoDB's
 *     validateLSID codes; unpin(done) frees it;
 *   - killCursors on a pinned cursor marks it killed; its getMore frees it at unpin;
 *   - idle cursors (not pinned, unused for idle_ms) die in curs_reap.
 */
#ifndef MS_CURSOR_H
#define MS_CURSOR_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/errors.h"
#include "common/limits.h"
#include "common/opctx.h"

/* The registry's part of a cursor: embed it in the daemon's cursor struct (curs_entry
 * gets back from it). Zero it before curs_add; every field is the registry's, written
 * under its lock. A daemon may read id and ns of a cursor it has pinned or not yet added. */
typedef struct curs {
    int64_t id;                  /* 0 until curs_add picks one */
    char ns[MS_NS_BYTES_MAX + 1];   /* "db.coll": a getMore must name it */
    uint32_t conn;               /* the connection that opened it (per-connection cap) */
    bool pinned;                 /* a getMore holds it: another gets CursorInUse */
    bool killed;                 /* killed while pinned: freed when its getMore unpins */
    long long last_used_ms;      /* monotonic */
    size_t held;                 /* bytes it keeps, as held_fn last said */
    op_lsid_t lsid;              /* the session that opened it (getMore must come from it) */
    char client[MS_CLIENT_KEY_BYTES];  /* its client's address without the port ("" = unknown) */
    struct curs *next;
} curs_t;

/* The daemon's cursor struct that embeds c as member. */
#define curs_entry(c, type, member) ((type *)(void *)((char *)(c) - offsetof(type, member)))

typedef struct curs_reg curs_reg_t;

typedef struct curs_opts {
    /* Refusal messages: "too many open <noun> for this connection[ <place>] (limit N)",
     * "too many open <noun> <place> for all connections (limit N)", "<owner> cursors
     * buffer N bytes, at the <owner>'s limit of M bytes for all cursors". */
    const char *noun;            /* "cursors", "config cursors" */
    const char *place;           /* "on this shard", "on this router", "on the config server" */
    bool conn_names_place;       /* the per-connection message names the place too */
    const char *owner;           /* "router", "config server" (the bytes cap's message) */
    int conn_max, total_max;     /* > 0 */
    /* > 0: open cursors per client address (the peer's IP, whatever its port), so one
     * client with many connections cannot take every cursor; 0 = no such cap. */
    int client_max;
    /* The getMore session rule's codes: mongos's (50799-50801) or mongod's (50736-50738). */
    bool router_codes;
    long long bytes_max;         /* 0 = no cap on bytes */
    int idle_ms;                 /* <= 0: MS_CURSOR_IDLE_MS_MAX */
    /* Bytes a cursor keeps between batches; NULL = 0. Called under the registry's lock at
     * curs_add and curs_unpin: it may only read the cursor. */
    size_t (*held_fn)(const curs_t *c);
    /* Frees the whole cursor (required). Never called under the lock; may block (the
     * router kills the shard cursors behind one). */
    void (*destroy_fn)(void *arg, curs_t *c);
    void *arg;                   /* destroy_fn's first argument (borrowed) */
} curs_opts_t;

/* o is copied; its strings are borrowed and must outlive the registry (literals). */
int curs_reg_new(const curs_opts_t *o, curs_reg_t **out);
/* Destroys every cursor (pinned ones too: call it when no request runs), then r.
 * NULL-safe. */
void curs_reg_free(curs_reg_t *r);

/* Refuses a cursor for conn when conn or the process is at its cap (counted), without
 * registering one: for work that checks before it starts (a config read). */
int curs_admit(curs_reg_t *r, uint32_t conn, ms_error_t *err);

/* Registers c (zeroed by the caller, then embedded) for ns and conn when the caps allow
 * (and bytes: the registry's total + c's held_fn <= bytes_max). want_id: 0 = a fresh
 * random one, else that id (a relayed cursor's; InternalError if already open). uncapped:
 * skip the caps (curs_admit ran first and the cursor already exists elsewhere). On success
 * the registry owns c — another thread may pin or kill it at once, so the caller reads
 * the id from *id, not c — and on failure c is still the caller's. */
int curs_add(curs_reg_t *r, curs_t *c, const char *ns, uint32_t conn, int64_t want_id,
             bool uncapped, int64_t *id, ms_error_t *err);

/* Pins cursor id for one getMore on ns (NULL = any namespace): CursorNotFound (absent or
 * killed), CursorInUse (pinned), Unauthorized (another namespace: not pinned), then the
 * session rule against the calling thread's op_lsid: a request in a session on a cursor
 * opened outside one (50736 / mongos 50799), without a session on a cursor opened in one
 * (50737 / 50800), in another session (50738 / 50801). *out is borrowed until curs_unpin. */
int curs_pin(curs_reg_t *r, int64_t id, const char *ns, curs_t **out, ms_error_t *err);
/* Ends a pin. done (exhausted or failed) or killed meanwhile: the cursor is removed and
 * destroyed. Otherwise its held bytes are re-read and its idle clock restarts. NULL-safe. */
void curs_unpin(curs_reg_t *r, curs_t *c, bool done);

/* killCursors for one id: true when it was open (destroyed now, or when its getMore
 * unpins it), false when unknown or already killed. */
bool curs_kill(curs_reg_t *r, int64_t id);
/* killCursors' work: kills each id ids iterates (the request's cursors array; at most
 * MS_CURSORS_MAX; exact: a fractional number is no id and is skipped, else truncated) and
 * appends MongoDB's reply lists to reply: cursorsKilled, cursorsNotFound, and cursorsAlive
 * and cursorsUnknown, always empty (a pinned cursor is killed too). */
void curs_kill_ids(curs_reg_t *r, bson_iter_t *ids, bool exact, bson_t *reply);
/* Marks id used now (a relayed cursor's getMore went through); false when unknown. */
bool curs_touch(curs_reg_t *r, int64_t id);
/* Destroys cursors idle longer than idle_ms (never a pinned one); returns how many. */
int curs_reap(curs_reg_t *r);

/* Counts the cursors open on ns (pinned ones and ones killed while pinned included: their
 * getMore may still be reading) and calls fn (when not NULL) with each one's id under the
 * lock: fn must not call back into the registry. */
int curs_list_ns(curs_reg_t *r, const char *ns, void (*fn)(void *arg, int64_t id), void *arg);

/* Bytes held outside the per-cursor held_fn (the router counts shard batches as they
 * arrive and leave, also for a cursor not yet added). delta may be negative; lock-free. */
void curs_bytes_add(curs_reg_t *r, long long delta);
long long curs_bytes(curs_reg_t *r);
/* ExceededMemoryLimit naming the bytes cap (counted): for a getMore that would fetch more
 * while the total is at the cap. */
int curs_refuse_bytes(curs_reg_t *r, ms_error_t *err);

typedef struct curs_stats {
    int64_t open, bytes;
    int64_t refused_conn, refused_total, refused_bytes, refused_client;
} curs_stats_t;
void curs_stats(curs_reg_t *r, curs_stats_t *out);
int curs_count(curs_reg_t *r);
/* Opens serverStatus metrics.cursor as *cur (common/cmd.h's shape: open.total, the bytes
 * under bytes_field, refusals per cap, the caps; no bytes entries without a bytes cap) —
 * the caller may add fields, then closes it with bson_append_document_end(metrics, cur). */
void curs_metrics_begin(curs_reg_t *r, const char *bytes_field, bson_t *metrics, bson_t *cur);

#endif
