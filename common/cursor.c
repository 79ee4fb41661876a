/*
 * cursor.c — the cursor registry of every daemon (bin/shardd, bin/router, bin/configsvr),
 * modelled on MongoDB's CursorManager / ClusterCursorManager; the rules are in cursor.h.
 *
 * The table is a singly linked list of the daemons' embedded curs_t: its sizes are capped
 * (at most MS_CURSORS_MAX entries), and the per-connection cap needs a walk anyway. One
 * mutex guards the list, the counters and every entry's registry fields; the daemon's
 * destroy_fn never runs under it (held_fn does, and only reads the cursor). Bytes are an
 * atomic sum so that a daemon may count what it buffers without the lock.
 */
#include "common/cursor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/bsonx.h"
#include "common/cmd.h"
#include "common/log.h"

/* The registry. Owned by the daemon that opened it; freed only by curs_reg_free. */
struct curs_reg {
    curs_opts_t o;               /* fixed after curs_reg_new */
    pthread_mutex_t mu;          /* guards head, n, seq, every entry's fields */
    curs_t *head;
    int n;
    uint64_t seq;                /* fallback ids when getrandom fails (splitmix64 state) */
    atomic_llong bytes;          /* sum of entries' held + curs_bytes_add */
    atomic_uint_fast64_t refused_conn, refused_total, refused_bytes, refused_client;
};

int curs_reg_new(const curs_opts_t *o, curs_reg_t **out) {
    curs_reg_t *r;
    if (!o || !o->destroy_fn || o->conn_max <= 0 || o->total_max <= 0) return MS_ERR_BAD_VALUE;
    if (!(r = calloc(1, sizeof *r))) return MS_ERR_EXCEEDED_MEMORY_LIMIT;
    r->o = *o;
    if (r->o.idle_ms <= 0) r->o.idle_ms = MS_CURSOR_IDLE_MS_MAX;
    if (!r->o.noun) r->o.noun = "cursors";
    if (!r->o.place) r->o.place = "on this process";
    if (!r->o.owner) r->o.owner = "process";
    pthread_mutex_init(&r->mu, NULL);
    r->seq = (uint64_t)time_now_ms() * 1000003u ^ (uint64_t)getpid() << 40 ^ (uint64_t)(uintptr_t)r;
    *out = r;
    return 0;
}

void curs_reg_free(curs_reg_t *r) {
    curs_t *c, *n;
    if (!r) return;
    for (c = r->head; c; c = n) {
        n = c->next;
        r->o.destroy_fn(r->o.arg, c);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static size_t held_of(const curs_reg_t *r, const curs_t *c) {
    return r->o.held_fn ? r->o.held_fn(c) : 0;
}

static curs_t *find_locked(curs_reg_t *r, int64_t id) {
    curs_t *c;
    for (c = r->head; c && c->id != id; c = c->next) {}
    return c;
}

/* Removes c from the list and its bytes from the total (lock held). */
static void unlink_locked(curs_reg_t *r, curs_t *c) {
    for (curs_t **pp = &r->head; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            c->next = NULL;
            r->n--;
            atomic_fetch_sub(&r->bytes, (long long)c->held);
            c->held = 0;
            return;
        }
}

/* The client address of the calling request: its peer ("127.0.0.1:51234",
 * "[::1]:51234") without the port; "" when unknown (no per-client cap applies then). */
static void client_key(char *dst, size_t cap) {
    const char *peer = op_peer();
    const char *colon = strrchr(peer, ':');
    size_t n = colon ? (size_t)(colon - peer) : 0;
    if (n >= cap) n = cap - 1;
    memcpy(dst, peer, n);
    dst[n] = '\0';
}

/* Per-connection, per-client and total caps (lock held); counts a refusal. */
static int check_caps_locked(curs_reg_t *r, uint32_t conn, const char *client, ms_error_t *err) {
    int mine = 0, client_n = 0;
    for (curs_t *c = r->head; c; c = c->next) {
        mine += c->conn == conn;
        client_n += client[0] && strcmp(c->client, client) == 0;
    }
    if (r->o.client_max > 0 && client_n >= r->o.client_max) {
        atomic_fetch_add(&r->refused_client, 1);
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT,
                       "too many open %s from client %s %s (limit %d per client address, "
                       "whatever its connections); exhaust or kill cursors", r->o.noun,
                       client, r->o.place, r->o.client_max);
    }
    if (mine >= r->o.conn_max) {
        atomic_fetch_add(&r->refused_conn, 1);
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT,
                       "too many open %s for this connection%s%s (limit %d); exhaust or kill "
                       "cursors", r->o.noun, r->o.conn_names_place ? " " : "",
                       r->o.conn_names_place ? r->o.place : "", r->o.conn_max);
    }
    if (r->n >= r->o.total_max) {
        atomic_fetch_add(&r->refused_total, 1);
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT,
                       "too many open %s %s for all connections (limit %d); exhaust or kill "
                       "cursors", r->o.noun, r->o.place, r->o.total_max);
    }
    return 0;
}

int curs_refuse_bytes(curs_reg_t *r, ms_error_t *err) {
    atomic_fetch_add(&r->refused_bytes, 1);
    return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT,
                   "%s cursors buffer %lld bytes, at the %s's limit of %lld bytes for all "
                   "cursors; exhaust or kill cursors", r->o.owner,
                   (long long)atomic_load(&r->bytes), r->o.owner, r->o.bytes_max);
}

int curs_admit(curs_reg_t *r, uint32_t conn, ms_error_t *err) {
    char client[MS_CLIENT_KEY_BYTES];
    int rc;
    client_key(client, sizeof client);
    pthread_mutex_lock(&r->mu);
    rc = check_caps_locked(r, conn, client, err);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A fresh id (lock held): random, so a client cannot guess another's cursors; positive
 * and nonzero (0 means "no cursor" in replies). 0 when 64 tries all clashed (~never). */
static int64_t fresh_id_locked(curs_reg_t *r) {
    for (int tries = 0; tries < 64; tries++) {
        uint64_t v;
        if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) v = splitmix64(&r->seq);
        int64_t id = (int64_t)(v & (uint64_t)INT64_MAX);
        if (id != 0 && !find_locked(r, id)) return id;
    }
    return 0;
}

int curs_add(curs_reg_t *r, curs_t *c, const char *ns, uint32_t conn, int64_t want_id,
             bool uncapped, int64_t *id, ms_error_t *err) {
    int rc = 0;
    size_t nslen = strlen(ns);
    if (nslen > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "namespace of %zu bytes: at most %d",
                       nslen, MS_NS_BYTES_MAX);
    memcpy(c->ns, ns, nslen + 1);
    c->conn = conn;
    c->pinned = c->killed = false;
    c->next = NULL;
    op_get_lsid(&c->lsid);
    client_key(c->client, sizeof c->client);
    pthread_mutex_lock(&r->mu);
    c->held = held_of(r, c);
    if (!uncapped && (rc = check_caps_locked(r, conn, c->client, err)) != 0) goto out;
    if (!uncapped && r->o.bytes_max > 0 &&
        atomic_load(&r->bytes) + (long long)c->held > r->o.bytes_max) {
        rc = curs_refuse_bytes(r, err);
        goto out;
    }
    if (want_id && find_locked(r, want_id)) {
        rc = err_set(err, MS_ERR_INTERNAL, "cursor id %lld is already open", (long long)want_id);
        goto out;
    }
    c->id = want_id ? want_id : fresh_id_locked(r);
    if (!c->id) {
        rc = err_set(err, MS_ERR_INTERNAL, "no free cursor id");
        goto out;
    }
    c->last_used_ms = time_mono_ms();
    atomic_fetch_add(&r->bytes, (long long)c->held);
    c->next = r->head;
    r->head = c;
    r->n++;
    *id = c->id;
out:
    if (rc) c->held = 0;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* MongoDB's validateLSID (getmore_cmd.cpp; mongos's cluster_getmore_cmd.cpp has the same
 * rule under its own codes): a cursor answers only the session that opened it, so one
 * session cannot read another's results by guessing or sharing a cursor id. */
static int check_session(const curs_reg_t *r, const curs_t *c, ms_error_t *err) {
    op_lsid_t now;
    char mine[64], theirs[64];
    bool rt = r->o.router_codes;
    op_get_lsid(&now);
    if (!now.has && !c->lsid.has) return 0;
    if (now.has && c->lsid.has && memcmp(now.id, c->lsid.id, sizeof now.id) == 0) return 0;
    op_lsid_text(&now, mine, sizeof mine);
    op_lsid_text(&c->lsid, theirs, sizeof theirs);
    if (!c->lsid.has)
        return err_set(err, rt ? MS_ERR_LOC_50799 : MS_ERR_LOC_50736,
                       "Cannot run getMore on cursor %lld, which was not created in a session, "
                       "in session %s", (long long)c->id, mine);
    if (!now.has)
        return err_set(err, rt ? MS_ERR_LOC_50800 : MS_ERR_LOC_50737,
                       "Cannot run getMore on cursor %lld, which was created in session %s, "
                       "without an lsid", (long long)c->id, theirs);
    return err_set(err, rt ? MS_ERR_LOC_50801 : MS_ERR_LOC_50738,
                   "Cannot run getMore on cursor %lld, which was created in session %s, in "
                   "session %s", (long long)c->id, theirs, mine);
}

int curs_pin(curs_reg_t *r, int64_t id, const char *ns, curs_t **out, ms_error_t *err) {
    int rc = 0;
    curs_t *c;
    pthread_mutex_lock(&r->mu);
    c = find_locked(r, id);
    if (!c || c->killed)
        rc = err_set(err, MS_ERR_CURSOR_NOT_FOUND, "cursor id %lld not found", (long long)id);
    else if (c->pinned)
        rc = err_set(err, MS_ERR_CURSOR_IN_USE, "cursor id %lld is already in use", (long long)id);
    else if (ns && strcmp(c->ns, ns) != 0)
        rc = err_set(err, MS_ERR_UNAUTHORIZED,
                     "Requested getMore on namespace '%s', but cursor belongs to a different "
                     "namespace %s", ns, c->ns);
    else if ((rc = check_session(r, c, err)) == 0)
        c->pinned = true;
    pthread_mutex_unlock(&r->mu);
    if (rc == 0) *out = c;
    return rc;
}

void curs_unpin(curs_reg_t *r, curs_t *c, bool done) {
    bool free_it;
    if (!c) return;
    pthread_mutex_lock(&r->mu);
    ASSERT(c->pinned);
    free_it = done || c->killed;
    if (free_it) {
        unlink_locked(r, c);
    } else {
        size_t held = held_of(r, c);   /* what the batch sent no longer counts */
        atomic_fetch_add(&r->bytes, (long long)held - (long long)c->held);
        c->held = held;
    }
    c->pinned = false;
    c->last_used_ms = time_mono_ms();
    pthread_mutex_unlock(&r->mu);
    if (free_it) r->o.destroy_fn(r->o.arg, c);
}

bool curs_kill(curs_reg_t *r, int64_t id) {
    curs_t *c;
    bool pinned = false;
    pthread_mutex_lock(&r->mu);
    c = find_locked(r, id);
    if (c && c->killed) c = NULL;   /* already being killed */
    if (c) {
        /* A pinned cursor belongs to its getMore until it ends (MongoDB marks it killed
         * and the operation using it disposes of it). */
        pinned = c->pinned;
        if (pinned) c->killed = true;
        else unlink_locked(r, c);
    }
    pthread_mutex_unlock(&r->mu);
    if (c && !pinned) r->o.destroy_fn(r->o.arg, c);
    return c != NULL;
}

void curs_kill_ids(curs_reg_t *r, bson_iter_t *ids, bool exact, bson_t *reply) {
    bson_t killed, notfound = BSON_INITIALIZER, empty;
    int nk = 0, nn = 0;
    BSON_APPEND_ARRAY_BEGIN(reply, "cursorsKilled", &killed);
    for (int i = 0; i < MS_CURSORS_MAX && bson_iter_next(ids); i++) {
        int64_t id;
        char idx[16];
        if (!(exact ? bsonx_as_int64_exact(ids, &id) : bsonx_as_int64(ids, &id))) continue;
        if (curs_kill(r, id)) {
            snprintf(idx, sizeof idx, "%d", nk++);
            BSON_APPEND_INT64(&killed, idx, id);
        } else {
            snprintf(idx, sizeof idx, "%d", nn++);
            BSON_APPEND_INT64(&notfound, idx, id);
        }
    }
    bson_append_array_end(reply, &killed);
    BSON_APPEND_ARRAY(reply, "cursorsNotFound", &notfound);
    bson_destroy(&notfound);
    BSON_APPEND_ARRAY_BEGIN(reply, "cursorsAlive", &empty);
    bson_append_array_end(reply, &empty);
    BSON_APPEND_ARRAY_BEGIN(reply, "cursorsUnknown", &empty);
    bson_append_array_end(reply, &empty);
}

bool curs_touch(curs_reg_t *r, int64_t id) {
    curs_t *c;
    pthread_mutex_lock(&r->mu);
    if ((c = find_locked(r, id)) != NULL) c->last_used_ms = time_mono_ms();
    pthread_mutex_unlock(&r->mu);
    return c != NULL;
}

int curs_reap(curs_reg_t *r) {
    curs_t *dead = NULL;
    long long now = time_mono_ms();
    int n = 0;
    pthread_mutex_lock(&r->mu);
    for (curs_t **pp = &r->head; *pp;) {
        curs_t *c = *pp;
        if (c->pinned || now - c->last_used_ms <= r->o.idle_ms) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        r->n--;
        atomic_fetch_sub(&r->bytes, (long long)c->held);
        c->held = 0;
        c->next = dead;
        dead = c;
        n++;
    }
    pthread_mutex_unlock(&r->mu);
    while (dead) {
        curs_t *nx = dead->next;
        log_info("cursor timed out id=%lld ns=%s", (long long)dead->id, log_str(dead->ns));
        r->o.destroy_fn(r->o.arg, dead);
        dead = nx;
    }
    return n;
}

int curs_list_ns(curs_reg_t *r, const char *ns, void (*fn)(void *arg, int64_t id), void *arg) {
    int n = 0;
    pthread_mutex_lock(&r->mu);
    for (curs_t *c = r->head; c; c = c->next) {
        if (strcmp(c->ns, ns) != 0) continue;
        n++;
        if (fn) fn(arg, c->id);
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

void curs_bytes_add(curs_reg_t *r, long long delta) {
    atomic_fetch_add(&r->bytes, delta);
}

long long curs_bytes(curs_reg_t *r) {
    return atomic_load(&r->bytes);
}

int curs_count(curs_reg_t *r) {
    int n;
    pthread_mutex_lock(&r->mu);
    n = r->n;
    pthread_mutex_unlock(&r->mu);
    return n;
}

void curs_stats(curs_reg_t *r, curs_stats_t *out) {
    out->open = curs_count(r);
    out->bytes = atomic_load(&r->bytes);
    out->refused_conn = (int64_t)atomic_load(&r->refused_conn);
    out->refused_total = (int64_t)atomic_load(&r->refused_total);
    out->refused_bytes = (int64_t)atomic_load(&r->refused_bytes);
    out->refused_client = (int64_t)atomic_load(&r->refused_client);
}

void curs_metrics_begin(curs_reg_t *r, const char *bytes_field, bson_t *metrics, bson_t *cur) {
    curs_stats_t s;
    bool capped = r->o.bytes_max > 0;
    curs_stats(r, &s);
    cmd_cursor_metrics_t m = {.open = s.open, .bytes = s.bytes, .bytes_field = bytes_field,
                              .refused_conn = s.refused_conn, .refused_total = s.refused_total,
                              .refused_bytes = capped ? s.refused_bytes : -1,
                              .limit_conn = r->o.conn_max, .limit_total = r->o.total_max,
                              .limit_bytes = capped ? r->o.bytes_max : -1,
                              .refused_client = r->o.client_max > 0 ? s.refused_client : -1,
                              .limit_client = r->o.client_max > 0 ? r->o.client_max : -1};
    cmd_cursor_metrics_begin(metrics, &m, cur);
}
