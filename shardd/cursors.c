/*
 * cursors.c — the shard daemon's cursor registry (bin/shardd), modelled on MongoDB's
 * CursorManager.
 *
 * Every find whose results outlast its first batch leaves a cursor here until a getMore
 * exhausts it, killCursors kills it or the reaper (main.c's thread, every second) times it
 * out after --cursor-timeout-ms idle. A getMore pins its cursor (MongoDB's ClientCursorPin)
 * so that a second getMore gets CursorInUse and killCursors only marks it: the pinning
 * getMore frees it when it ends. Registering is capped per connection and for the shard
 * (common/limits.h), with refusals counted for serverStatus. cursors_list_ns lists the
 * cursors open on a namespace, for work that must wait for them (the range deleter).
 *
 * The registry knows only each cursor's cursor_reg_t (id, namespace, connection, pin
 * state, bytes held); what a cursor runs is plan.c's, reached through the free/held
 * callbacks the cursor carries. One mutex guards the table; no callback into plan.c
 * (freeing a cursor) runs under it, except held_fn, which only reads the cursor.
 */
#include "shardd/shardd.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/log.h"

struct cursors {
    pthread_mutex_t mu;
    cursor_reg_t *head;
    int n;
    int idle_timeout_ms;
    long long bytes;             /* sum of held */
    uint64_t refused_conn, refused_total;
};

/* cursor_t begins with its cursor_reg_t (shardd.h), so the two pointers convert. */
static cursor_reg_t *reg_of(cursor_t *cur) {
    return (cursor_reg_t *)(void *)cur;
}

static cursor_t *cur_of(cursor_reg_t *r) {
    return (cursor_t *)(void *)r;
}

static void cursor_free(cursor_reg_t *r) {
    if (r) r->free_fn(cur_of(r));
}

/* What a cursor keeps between batches (plan.c's cursor_held). */
static size_t cursor_held(cursor_reg_t *r) {
    return r->held_fn(cur_of(r));
}

int cursors_new(int idle_timeout_ms, cursors_t **out) {
    cursors_t *cs = calloc(1, sizeof *cs);
    if (!cs) return MS_ERR_INTERNAL;
    pthread_mutex_init(&cs->mu, NULL);
    cs->idle_timeout_ms = idle_timeout_ms > 0 ? idle_timeout_ms : MS_CURSOR_IDLE_MS_MAX;
    *out = cs;
    return 0;
}

void cursors_free(cursors_t *cs) {
    cursor_reg_t *c, *n;
    if (!cs) return;
    for (c = cs->head; c; c = n) {
        n = c->next;
        cursor_free(c);
    }
    pthread_mutex_destroy(&cs->mu);
    free(cs);
}

int cursors_reap(cursors_t *cs) {
    cursor_reg_t **pp, *dead = NULL;
    long long now = time_mono_ms();
    int n = 0;
    pthread_mutex_lock(&cs->mu);
    for (pp = &cs->head; *pp;) {
        cursor_reg_t *c = *pp;
        if (!c->in_use && now - c->last_used_ms > cs->idle_timeout_ms) {
            *pp = c->next;
            c->next = dead;
            dead = c;
            cs->n--;
            cs->bytes -= (long long)c->held;
            n++;
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&cs->mu);
    while (dead) {
        cursor_reg_t *nx = dead->next;
        log_info("cursor timed out id=%lld ns=%s", (long long)dead->id, log_str(dead->ns));
        cursor_free(dead);
        dead = nx;
    }
    return n;
}

int cursors_count(cursors_t *cs) {
    int n;
    pthread_mutex_lock(&cs->mu);
    n = cs->n;
    pthread_mutex_unlock(&cs->mu);
    return n;
}

void cursors_metrics(cursors_t *cs, bson_t *metrics) {
    cmd_cursor_metrics_t m = {.bytes_field = "bytesHeld", .refused_bytes = -1,
                              .limit_conn = MS_CURSORS_PER_CONN_MAX, .limit_total = MS_CURSORS_MAX,
                              .limit_bytes = -1};
    bson_t cur;
    pthread_mutex_lock(&cs->mu);
    m.open = cs->n;
    m.bytes = cs->bytes;
    m.refused_conn = (int64_t)cs->refused_conn;
    m.refused_total = (int64_t)cs->refused_total;
    pthread_mutex_unlock(&cs->mu);
    cmd_cursor_metrics_begin(metrics, &m, &cur);
    bson_append_document_end(metrics, &cur);
}

int cursors_add(cursors_t *cs, cursor_t *cursor, ms_error_t *err) {
    cursor_reg_t *cur = reg_of(cursor);
    int64_t id;
    int mine = 0;
    pthread_mutex_lock(&cs->mu);
    for (cursor_reg_t *c = cs->head; c; c = c->next) mine += c->conn == cur->conn;
    if (mine >= MS_CURSORS_PER_CONN_MAX) {
        cs->refused_conn++;
        pthread_mutex_unlock(&cs->mu);
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT,
                       "too many open cursors for this connection (limit %d); exhaust or kill "
                       "cursors", MS_CURSORS_PER_CONN_MAX);
    }
    if (cs->n >= MS_CURSORS_MAX) {
        cs->refused_total++;
        pthread_mutex_unlock(&cs->mu);
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT,
                       "too many open cursors on this shard for all connections (limit %d); "
                       "exhaust or kill cursors", MS_CURSORS_MAX);
    }
    if (!cur->id) {
        for (;;) {
            bool dup = false;
            if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) id = time_mono_us();
            id &= INT64_MAX;
            if (!id) continue;
            for (cursor_reg_t *c = cs->head; c; c = c->next)
                if (c->id == id) dup = true;
            if (!dup) break;
        }
        cur->id = id;
    }
    cur->last_used_ms = time_mono_ms();
    cur->held = cursor_held(cur);
    cs->bytes += (long long)cur->held;
    cur->next = cs->head;
    cs->head = cur;
    cs->n++;
    pthread_mutex_unlock(&cs->mu);
    return 0;
}

/* Unlinks cur from the table (mutex held). */
static void cursors_unlink_locked(cursors_t *cs, cursor_reg_t *cur) {
    for (cursor_reg_t **pp = &cs->head; *pp; pp = &(*pp)->next)
        if (*pp == cur) {
            *pp = cur->next;
            cs->n--;
            cs->bytes -= (long long)cur->held;
            cur->held = 0;
            return;
        }
}

int cursors_pin(cursors_t *cs, int64_t id, cursor_t **out, ms_error_t *err) {
    int rc = 0;
    cursor_reg_t *c;
    pthread_mutex_lock(&cs->mu);
    for (c = cs->head; c && c->id != id; c = c->next) {}
    if (!c || c->killed)
        rc = err_set(err, MS_ERR_CURSOR_NOT_FOUND, "cursor id %lld not found", (long long)id);
    else if (c->in_use)
        rc = err_set(err, MS_ERR_CURSOR_IN_USE, "cursor id %lld is already in use", (long long)id);
    else
        c->in_use = true;
    pthread_mutex_unlock(&cs->mu);
    if (rc == 0) *out = cur_of(c);
    return rc;
}

void cursors_unpin(cursors_t *cs, cursor_t *cursor, bool done) {
    cursor_reg_t *cur;
    bool free_it;
    if (!cursor) return;
    cur = reg_of(cursor);
    pthread_mutex_lock(&cs->mu);
    free_it = done || cur->killed;
    cs->bytes -= (long long)cur->held;   /* what the batch sent no longer counts */
    cur->held = cursor_held(cur);
    cs->bytes += (long long)cur->held;
    if (free_it) cursors_unlink_locked(cs, cur);
    cur->in_use = false;
    cur->last_used_ms = time_mono_ms();
    pthread_mutex_unlock(&cs->mu);
    if (free_it) cursor_free(cur);
}

bool cursors_kill(cursors_t *cs, int64_t id) {
    cursor_reg_t *c;
    bool pinned = false;
    pthread_mutex_lock(&cs->mu);
    for (c = cs->head; c && c->id != id; c = c->next) {}
    if (c && c->killed) c = NULL;   /* already being killed */
    if (c) {
        /* A pinned cursor belongs to its getMore until it ends (MongoDB marks it killed
         * and the getMore's owner disposes of it). */
        pinned = c->in_use;
        if (pinned) c->killed = true;
        else cursors_unlink_locked(cs, c);
    }
    pthread_mutex_unlock(&cs->mu);
    if (c && !pinned) cursor_free(c);
    return c != NULL;
}

int cursors_list_ns(cursors_t *cs, const char *ns, void (*fn)(void *arg, int64_t id), void *arg) {
    int n = 0;
    pthread_mutex_lock(&cs->mu);
    for (cursor_reg_t *c = cs->head; c; c = c->next) {
        if (strcmp(c->ns, ns) != 0) continue;
        n++;
        if (fn) fn(arg, c->id);
    }
    pthread_mutex_unlock(&cs->mu);
    return n;
}
