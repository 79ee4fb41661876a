/*
 * lclock.c — the cluster time of one process (every daemon, and shardctl's peer calls):
 * MongoDB's LogicalClock / VectorClock clusterTime component, its $clusterTime gossip,
 * operationTime, and the wait of readConcern.afterClusterTime. Contract in lclock.h; how
 * it relates to MongoDB's in docs/cluster-time.md.
 */
#include "common/lclock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bsonx.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/opctx.h"

/* MongoDB's largest component time: both parts at most INT32_MAX (error 40484). */
#define LCLOCK_PART_MAX ((uint32_t)INT32_MAX)
#define LCLOCK_ERR_MAX_TIME 40484
#define LCLOCK_SIGNATURE_BYTES 20
#define LCLOCK_MARK_TEXT_MAX 32

/* The process's clock. Owned by this file; every field under mu. now and applied are also
 * published in atomics (below), stored under mu together with their field, and role lives
 * only there: the gossip on every request and reply reads them without taking mu, and
 * only a tick (a write) or a move of the clock locks. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* a pending write ended (signalled under mu) */
    lclock_ts_t now;              /* the cluster time; {0,0} until first used */
    lclock_ts_t applied;          /* the last committed write's time (MongoDB's lastApplied) */
    lclock_ts_t pending[MS_CLOCK_PENDING_MAX];
    int npending;
    bool durable;                 /* lclock_open succeeded: marks go to path */
    char path[4096];
    uint32_t mark;                /* persisted: every time handed out has secs < mark */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* The published copies: a time packed as secs << 32 | inc (the order of lclock_cmp). */
static atomic_uint_fast64_t now_pub, applied_pub;
static atomic_int role_pub;

static uint64_t ts_pack(lclock_ts_t t) { return (uint64_t)t.secs << 32 | t.inc; }
static lclock_ts_t ts_unpack(uint64_t v) {
    return (lclock_ts_t){(uint32_t)(v >> 32), (uint32_t)v};
}

static void now_set_locked(lclock_ts_t t) {
    g.now = t;
    atomic_store(&now_pub, ts_pack(t));
}

static void applied_set_locked(lclock_ts_t t) {
    g.applied = t;
    atomic_store(&applied_pub, ts_pack(t));
}

/* The operation's time (lclock_op_note): per RPC worker thread, reset by dispatch. */
static _Thread_local lclock_ts_t op_time;

int lclock_cmp(lclock_ts_t a, lclock_ts_t b) {
    if (a.secs != b.secs) return a.secs < b.secs ? -1 : 1;
    if (a.inc != b.inc) return a.inc < b.inc ? -1 : 1;
    return 0;
}

bool lclock_is_null(lclock_ts_t t) { return t.secs == 0 && t.inc == 0; }

static lclock_ts_t ts_max(lclock_ts_t a, lclock_ts_t b) { return lclock_cmp(a, b) >= 0 ? a : b; }

static uint32_t wall_secs(void) {
    time_t t = time(NULL);
    return t < 0 ? 0 : (t > (time_t)LCLOCK_PART_MAX ? LCLOCK_PART_MAX : (uint32_t)t);
}

/* A process that never called lclock_init (shardctl) still gossips a sensible time. */
static void started_locked(void) {
    if (lclock_is_null(g.now)) now_set_locked((lclock_ts_t){wall_secs(), 0});
}

void lclock_init(lclock_role_t role) {
    pthread_mutex_lock(&g.mu);
    atomic_store(&role_pub, (int)role);
    started_locked();
    pthread_mutex_unlock(&g.mu);
}

/* ---- the high-water mark -------------------------------------------------------------- */

/* Writes the mark to path (temp file, fsync, rename, fsync of the directory), so that a
 * crash leaves the old mark or the new one, never a torn one. */
static int mark_write(uint32_t mark, ms_error_t *err) {
    char tmp[sizeof g.path + 8], text[LCLOCK_MARK_TEXT_MAX], dir[sizeof g.path];
    const char *step = "open";
    int fd, n = snprintf(text, sizeof text, "%u\n", mark);
    snprintf(tmp, sizeof tmp, "%s.tmp", g.path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        step = "write";
        if (write(fd, text, (size_t)n) == n && (step = "fsync", fsync(fd) == 0)) step = NULL;
        close(fd);
    }
    if (!step && rename(tmp, g.path) != 0) step = "rename";
    if (!step) {
        char *slash;
        snprintf(dir, sizeof dir, "%s", g.path);
        slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
        if ((fd = open(slash && !dir[0] ? "/" : dir, O_RDONLY | O_CLOEXEC)) >= 0) {
            if (fsync(fd) != 0) step = "fsync dir";
            close(fd);
        }
    }
    if (step) {
        log_error("cluster time mark not saved step=%s path=%s errno=%d", step, log_str(g.path),
                  errno);
        return err_set(err, MS_ERR_INTERNAL, "cluster time high-water mark not saved (%s of "
                       "%s: %s)", step, g.path, strerror(errno));
    }
    return 0;
}

/* Moves the clock to t (>= now), persisting a mark past it first when t reaches the mark. */
static int set_locked(lclock_ts_t t, ms_error_t *err) {
    if (g.durable && t.secs >= g.mark) {
        uint32_t mark = t.secs > LCLOCK_PART_MAX - MS_CLOCK_RESERVE_SECS
                            ? LCLOCK_PART_MAX : t.secs + MS_CLOCK_RESERVE_SECS;
        int rc = mark_write(mark, err);
        if (rc != 0) return rc;
        g.mark = mark;
    }
    now_set_locked(t);
    return 0;
}

/* The mark file: one decimal number. Missing = a fresh process. */
static int mark_read(const char *path, uint32_t *out, ms_error_t *err) {
    char text[LCLOCK_MARK_TEXT_MAX] = {0};
    char *end;
    unsigned long v;
    FILE *f = fopen(path, "re");
    *out = 0;
    if (!f) {
        if (errno == ENOENT) return 0;
        return err_set(err, MS_ERR_INTERNAL, "cannot read the cluster time mark %s: %s", path,
                       strerror(errno));
    }
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    errno = 0;
    v = strtoul(text, &end, 10);
    if (end == text || (*end && *end != '\n') || errno || v > LCLOCK_PART_MAX)
        return err_set(err, MS_ERR_INTERNAL, "cluster time mark %s is malformed", path);
    *out = (uint32_t)v;
    return 0;
}

int lclock_open(const char *dbpath, ms_error_t *err) {
    char path[sizeof g.path];
    uint32_t mark;
    int rc;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dbpath, LCLOCK_FILE) >= sizeof path)
        return err_set(err, MS_ERR_BAD_VALUE, "cluster time mark path too long");
    if ((rc = mark_read(path, &mark, err)) != 0) return rc;
    pthread_mutex_lock(&g.mu);
    snprintf(g.path, sizeof g.path, "%s", path);
    g.durable = true;
    g.mark = mark;
    started_locked();
    /* Every time handed out before the restart had secs < mark: start at it. */
    lclock_ts_t start = ts_max(g.now, (lclock_ts_t){mark, 0});
    g.mark = 0;  /* forces a new mark past start */
    rc = set_locked(start, err);
    if (rc != 0) g.mark = mark;
    applied_set_locked(ts_max(g.applied, start));
    pthread_mutex_unlock(&g.mu);
    if (rc == 0) log_info("cluster time restored mark=%u clusterTime=%u|%u", mark, start.secs,
                          start.inc);
    return rc;
}

/* ---- reading and ticking -------------------------------------------------------------- */

lclock_ts_t lclock_now(void) {
    lclock_ts_t t = ts_unpack(atomic_load(&now_pub));
    if (!lclock_is_null(t)) return t;
    pthread_mutex_lock(&g.mu);   /* the first use: the clock starts */
    started_locked();
    t = g.now;
    pthread_mutex_unlock(&g.mu);
    return t;
}

lclock_ts_t lclock_applied(void) { return ts_unpack(atomic_load(&applied_pub)); }

static lclock_role_t role_get(void) { return (lclock_role_t)atomic_load(&role_pub); }

/* The next tick: the wall clock's second when it is ahead (the hybrid part), else the
 * next increment of the clock's second (rolling into the next second at the maximum). */
static lclock_ts_t next_locked(void) {
    uint32_t wall = wall_secs();
    if (wall > g.now.secs) return (lclock_ts_t){wall, 1};
    if (g.now.inc >= LCLOCK_PART_MAX) return (lclock_ts_t){g.now.secs + 1, 1};
    return (lclock_ts_t){g.now.secs, g.now.inc + 1};
}

int lclock_write_begin(lclock_ts_t *out, ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&g.mu);
    started_locked();
    /* A slot frees when a pending write ends, which never waits on anything but its
     * own transaction. */
    while (g.npending == MS_CLOCK_PENDING_MAX) pthread_cond_wait(&g.cv, &g.mu);
    lclock_ts_t t = next_locked();
    if ((rc = set_locked(t, err)) == 0) {
        g.pending[g.npending++] = t;
        *out = t;
    }
    pthread_mutex_unlock(&g.mu);
    return rc;
}

void lclock_write_end(lclock_ts_t t, bool committed) {
    pthread_mutex_lock(&g.mu);
    for (int i = 0; i < g.npending; i++) {
        if (lclock_cmp(g.pending[i], t) != 0) continue;
        g.pending[i] = g.pending[--g.npending];
        break;
    }
    if (committed) applied_set_locked(ts_max(g.applied, t));
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    if (committed) lclock_op_note(t);
}

/* ---- gossip --------------------------------------------------------------------------- */

/* MongoDB's rate limiter (VectorClock::_ensurePassesRateLimiter) and its maximum. */
static int check_advance(lclock_ts_t t, ms_error_t *err) {
    uint32_t wall = wall_secs();
    if (t.secs > wall && t.secs - wall > MS_CLOCK_DRIFT_SECS_MAX)
        return err_set(err, MS_ERR_CLUSTER_TIME_FAILS_RATE_LIMITER,
                       "New cluster time, %u, is too far from this node's wall clock time, %u.",
                       t.secs, wall);
    if (t.secs > LCLOCK_PART_MAX || t.inc > LCLOCK_PART_MAX)
        return err_set(err, LCLOCK_ERR_MAX_TIME,
                       "cluster time cannot be advanced beyond its maximum value");
    return 0;
}

int lclock_advance(lclock_ts_t t, ms_error_t *err) {
    int rc;
    if ((rc = check_advance(t, err)) != 0) return rc;
    /* Most gossip carries a time this clock has reached already: no lock for it. The
     * clock only moves forward, so a time at or behind a published one stays behind. */
    if (lclock_cmp(t, lclock_now()) <= 0) return 0;
    pthread_mutex_lock(&g.mu);
    started_locked();
    if (lclock_cmp(t, g.now) > 0) rc = set_locked(t, err);
    pthread_mutex_unlock(&g.mu);
    return rc;
}

/* Reads {clusterTime: Timestamp, signature: {...}}, the field as MongoDB's
 * LogicalTimeMetadata reads it (the signature's content is not verified). */
static int parse_signed(const bson_iter_t *field, lclock_ts_t *out, ms_error_t *err) {
    bson_iter_t sub;
    bson_t doc;
    if (!BSON_ITER_HOLDS_DOCUMENT(field) || !bsonx_view_container(field, &doc))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field '$clusterTime' is the wrong type "
                       "'%s', expected type 'object'", bsonx_type_name(bson_iter_type(field)));
    if (!bson_iter_init_find(&sub, &doc, "clusterTime"))
        return err_set(err, MS_ERR_NO_SUCH_KEY, "Missing expected field \"clusterTime\"");
    if (!BSON_ITER_HOLDS_TIMESTAMP(&sub))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "\"clusterTime\" had the wrong type. Expected "
                       "timestamp, found %s", bsonx_type_name(bson_iter_type(&sub)));
    bson_iter_timestamp(&sub, &out->secs, &out->inc);
    if (bson_iter_init_find(&sub, &doc, "signature") && !BSON_ITER_HOLDS_DOCUMENT(&sub))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "\"signature\" had the wrong type. Expected "
                       "object, found %s", bsonx_type_name(bson_iter_type(&sub)));
    return 0;
}

void lclock_append_signed(bson_t *doc, const char *key, lclock_ts_t t) {
    static const uint8_t zero[LCLOCK_SIGNATURE_BYTES];
    bson_t ct, sig;
    BSON_APPEND_DOCUMENT_BEGIN(doc, key, &ct);
    BSON_APPEND_TIMESTAMP(&ct, "clusterTime", t.secs, t.inc);
    BSON_APPEND_DOCUMENT_BEGIN(&ct, "signature", &sig);
    BSON_APPEND_BINARY(&sig, "hash", BSON_SUBTYPE_BINARY, zero, sizeof zero);
    BSON_APPEND_INT64(&sig, "keyId", 0);
    bson_append_document_end(&ct, &sig);
    bson_append_document_end(doc, &ct);
}

/* Copies src without the named top-level fields. */
static void copy_without(const bson_t *src, bson_t *dst, const char *a, const char *b) {
    bson_iter_t it;
    if (!bson_iter_init(&it, src)) return;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, a) != 0 && (!b || strcmp(k, b) != 0)) bson_append_iter(dst, k, -1, &it);
    }
}

void lclock_gossip_out(const bson_t *cmd, bson_t *out) {
    bson_iter_t it;
    lclock_ts_t theirs, now = lclock_now();
    ms_error_t e;
    bson_init(out);
    /* A command that already carries a time at least ours, or one that is no time at all
     * (shardctl passing on what its user typed: the peer judges it), goes as it is; so
     * does an empty document, which names no command (the peer refuses it). A router
     * has refused a malformed one from its client already. */
    if (bson_empty(cmd) || (bson_iter_init_find(&it, cmd, "$clusterTime") &&
                            (parse_signed(&it, &theirs, &e) != 0 ||
                             lclock_cmp(theirs, now) >= 0))) {
        bson_concat(out, cmd);
        return;
    }
    copy_without(cmd, out, "$clusterTime", NULL);
    lclock_append_signed(out, "$clusterTime", now);
}

void lclock_gossip_reply(const bson_t *reply) {
    bson_iter_t it;
    lclock_ts_t t = {0, 0};
    ms_error_t e = {0};
    lclock_role_t role;
    if (!bson_iter_init_find(&it, reply, "$clusterTime")) return;
    if (parse_signed(&it, &t, &e) != 0 || lclock_advance(t, &e) != 0) {
        log_warn("peer's $clusterTime not taken code=%d errmsg=%s", e.code, log_str(e.msg));
        return;
    }
    role = role_get();
    /* mongos's OperationTimeTracker: the operation's time is the latest of its shards'. */
    if (role == LCLOCK_ROUTER && bson_iter_init_find(&it, reply, "operationTime") &&
        BSON_ITER_HOLDS_TIMESTAMP(&it)) {
        bson_iter_timestamp(&it, &t.secs, &t.inc);
        lclock_op_note(t);
    }
}

/* ---- the operation's time ------------------------------------------------------------- */

void lclock_op_reset(void) { op_time = (lclock_ts_t){0, 0}; }
void lclock_op_note(lclock_ts_t t) { op_time = ts_max(op_time, t); }
lclock_ts_t lclock_op_time(void) { return op_time; }

/* ---- readConcern.afterClusterTime ----------------------------------------------------- */

static bool pending_at_or_before_locked(lclock_ts_t t) {
    for (int i = 0; i < g.npending; i++)
        if (lclock_cmp(g.pending[i], t) <= 0) return true;
    return false;
}

/* Waits on the condition until mono_deadline_ms, at most 100 ms at a time so that the
 * operation's own deadline is checked again often. */
static void wait_locked(long long mono_deadline_ms) {
    long long left = mono_deadline_ms - time_mono_ms();
    if (left > 0) time_cond_wait_ms(&g.cv, &g.mu, left > 100 ? 100 : left);
}

int lclock_wait_reached(lclock_ts_t t, ms_error_t *err) {
    long long bound_ms = time_mono_ms() + MS_CLOCK_WAIT_MS_DEFAULT;
    int rc = 0;
    pthread_mutex_lock(&g.mu);
    started_locked();
    if (lclock_cmp(t, g.now) > 0) {
        rc = err_set(err, MS_ERR_INVALID_OPTIONS, "readConcern afterClusterTime value must not "
                     "be greater than the current clusterTime. Requested clusterTime: "
                     "Timestamp(%u, %u); current clusterTime: Timestamp(%u, %u)",
                     t.secs, t.inc, g.now.secs, g.now.inc);
        goto out;
    }
    while (pending_at_or_before_locked(t)) {
        long long deadline = op_deadline_ms();
        if (deadline > 0) {
            if ((rc = op_check(err)) != 0) goto out;
        } else if (time_mono_ms() >= bound_ms) {
            rc = err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT, "waiting %d ms for the writes before "
                         "afterClusterTime Timestamp(%u, %u) to commit", MS_CLOCK_WAIT_MS_DEFAULT,
                         t.secs, t.inc);
            goto out;
        }
        wait_locked(deadline > 0 ? deadline : bound_ms);
    }
    /* Nothing at or before t is in flight: this node has reached t (a primary would
     * write a noop to get there; one writer needs nothing more). */
    applied_set_locked(ts_max(g.applied, t));
out:
    pthread_mutex_unlock(&g.mu);
    return rc;
}

int lclock_check_read_concern(const bson_t *rc, const char *level, ms_error_t *err) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, rc, "afterClusterTime")) return 0;
    if (!BSON_ITER_HOLDS_TIMESTAMP(&it))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'readConcern.afterClusterTime' is "
                       "the wrong type '%s', expected type 'timestamp'",
                       bsonx_type_name(bson_iter_type(&it)));
    if (bson_iter_init_find(&it, rc, "afterOpTime"))
        return err_set(err, MS_ERR_INVALID_OPTIONS,
                       "Can not specify both afterClusterTime and afterOpTime");
    if (level && strcmp(level, "local") != 0 && strcmp(level, "majority") != 0 &&
        strcmp(level, "snapshot") != 0)
        return err_set(err, MS_ERR_INVALID_OPTIONS, "afterClusterTime field can be set only if "
                       "level is equal to majority, local, or snapshot");
    bson_iter_init_find(&it, rc, "afterClusterTime");
    lclock_ts_t t;
    bson_iter_timestamp(&it, &t.secs, &t.inc);
    if (lclock_is_null(t))
        return err_set(err, MS_ERR_INVALID_OPTIONS, "afterClusterTime cannot be a null timestamp");
    return 0;
}

/* ---- commands ------------------------------------------------------------------------- */

int lclock_request_in(const bson_t *req, ms_error_t *err) {
    bson_iter_t it;
    lclock_ts_t t;
    int rc;
    if (bson_iter_init_find(&it, req, "$clusterTime")) {
        if ((rc = parse_signed(&it, &t, err)) != 0) return rc;
        if ((rc = lclock_advance(t, err)) != 0) return rc;
    }
    lclock_role_t role = role_get();
    /* A router passes readConcern to the shards, which wait (mongos does not wait). */
    if (role != LCLOCK_DATA || !bson_iter_init(&it, req) ||
        !bson_iter_find_descendant(&it, "readConcern.afterClusterTime", &it) ||
        !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return 0;
    bson_iter_timestamp(&it, &t.secs, &t.inc);
    return lclock_wait_reached(t, err);
}

void lclock_reply_out(bson_t *reply) {
    lclock_ts_t now = lclock_now(), op = lclock_op_time(), applied = lclock_applied();
    /* Without an own write (or, on a router, a peer's reply): a data-bearing node's last
     * applied write, as mongod's computeOperationTime; a router's cluster time. applied,
     * read after now, may have passed it since: the bound below keeps the order. */
    if (lclock_is_null(op)) op = role_get() == LCLOCK_DATA && !lclock_is_null(applied) ? applied
                                                                                      : now;
    if (lclock_cmp(op, now) > 0) op = now;  /* operationTime <= $clusterTime, always */
    if (bson_has_field(reply, "$clusterTime") || bson_has_field(reply, "operationTime")) {
        bson_t copy = BSON_INITIALIZER;
        copy_without(reply, &copy, "$clusterTime", "operationTime");
        bson_destroy(reply);
        bson_steal(reply, &copy);
    }
    lclock_append_signed(reply, "$clusterTime", now);
    BSON_APPEND_TIMESTAMP(reply, "operationTime", op.secs, op.inc);
}
