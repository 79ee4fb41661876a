/*
 * lsess.c — the logical session cache of every daemon (lsess.h). A hash table of session
 * ids (the 16-byte UUID of lsid.id) → last use, under one mutex; at most
 * MS_LOGICAL_SESSIONS_MAX entries (startSession answers TooManyLogicalSessions past it, as
 * MongoDB's maxSessions). Entries not used for the timeout are dropped by a sweep that
 * runs at most once a second, from the commands themselves (no thread of its own).
 */
#include "common/lsess.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/limits.h"
#include "common/log.h"

#define LSESS_BUCKETS 4096   /* chains grow with the count; lookups stay short enough */

typedef struct lsent {
    uint8_t id[16];
    int64_t last_ms;
    struct lsent *next;
} lsent_t;

/* The cache: buckets, count and sweep time are guarded by mu; entries are owned by it. */
static struct {
    pthread_mutex_t mu;
    lsent_t *b[LSESS_BUCKETS];
    int64_t n;
    int64_t last_sweep_ms;
    int64_t timeout_ms;
} g_ls = {.mu = PTHREAD_MUTEX_INITIALIZER, .timeout_ms = MS_SESSION_TIMEOUT_MS};

void lsess_set_timeout_ms(int64_t ms) {
    pthread_mutex_lock(&g_ls.mu);
    g_ls.timeout_ms = ms > 0 ? ms : 1;
    pthread_mutex_unlock(&g_ls.mu);
}

int64_t lsess_timeout_ms(void) {
    pthread_mutex_lock(&g_ls.mu);
    int64_t v = g_ls.timeout_ms;
    pthread_mutex_unlock(&g_ls.mu);
    return v;
}

int64_t lsess_active(void) {
    pthread_mutex_lock(&g_ls.mu);
    int64_t v = g_ls.n;
    pthread_mutex_unlock(&g_ls.mu);
    return v;
}

static unsigned bucket_of(const uint8_t id[16]) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++) h = (h ^ id[i]) * 16777619u;
    return h % LSESS_BUCKETS;
}

/* The entry's link in its chain (lock held): *link is the entry, or NULL when absent. */
static lsent_t **find_link(const uint8_t id[16]) {
    lsent_t **l = &g_ls.b[bucket_of(id)];
    while (*l && memcmp((*l)->id, id, 16) != 0) l = &(*l)->next;
    return l;
}

/* Drops expired entries, at most once a second (lock held; bounded by the count). */
static void sweep(int64_t now) {
    if (now - g_ls.last_sweep_ms < 1000) return;
    g_ls.last_sweep_ms = now;
    for (int i = 0; i < LSESS_BUCKETS; i++)
        for (lsent_t **l = &g_ls.b[i]; *l;) {
            if (now - (*l)->last_ms > g_ls.timeout_ms) {
                lsent_t *gone = *l;
                *l = gone->next;
                free(gone);
                g_ls.n--;
            } else {
                l = &(*l)->next;
            }
        }
}

/* Marks id used now, adding it when new (lock held). TooManyLogicalSessions at the cap. */
static int touch(const uint8_t id[16], int64_t now, ms_error_t *err) {
    lsent_t **l = find_link(id);
    if (*l) {
        (*l)->last_ms = now;
        return 0;
    }
    if (g_ls.n >= MS_LOGICAL_SESSIONS_MAX)
        return err_set(err, MS_ERR_TOO_MANY_LOGICAL_SESSIONS, "Unable to add session into the "
                       "cache because the number of active sessions is too high");
    lsent_t *e = calloc(1, sizeof *e);
    if (!e) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "out of memory");
    memcpy(e->id, id, 16);
    e->last_ms = now;
    *l = e;
    g_ls.n++;
    return 0;
}

static void forget(const uint8_t id[16]) {
    lsent_t **l = find_link(id);
    if (!*l) return;
    lsent_t *gone = *l;
    *l = gone->next;
    free(gone);
    g_ls.n--;
}

/* The 16-byte UUID of a session id document {id: UUID, ...}; BadValue otherwise. */
static int lsid_uuid(bson_iter_t *elem, const char *cmd, uint8_t out[16], ms_error_t *err) {
    bson_iter_t d;
    bson_subtype_t sub;
    uint32_t len = 0;
    const uint8_t *data = NULL;
    if (!BSON_ITER_HOLDS_DOCUMENT(elem) || !bson_iter_recurse(elem, &d) ||
        !bson_iter_find(&d, "id") || !BSON_ITER_HOLDS_BINARY(&d))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "%s: each session must be {id: UUID}", cmd);
    bson_iter_binary(&d, &sub, &len, &data);
    if (sub != BSON_SUBTYPE_UUID || len != 16)
        return err_set(err, MS_ERR_BAD_VALUE, "%s: a session id must be a UUID (BinData 4, "
                       "16 bytes)", cmd);
    memcpy(out, data, 16);
    return 0;
}

typedef enum { LS_REFRESH, LS_END } ls_op_t;

/* refreshSessions / endSessions / killSessions: {<cmd>: [{id: UUID}, ...]}. Every id is
 * checked before any is applied, so a bad one changes nothing. */
static int each_lsid(cmd_ctx_t *ctx, ls_op_t op, ms_error_t *err) {
    bson_iter_t arr;
    uint8_t (*ids)[16] = NULL;
    int n = 0, rc = 0;
    if (!BSON_ITER_HOLDS_ARRAY(&ctx->arg) || !bson_iter_recurse(&ctx->arg, &arr))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "%s must be an array of sessions", ctx->name);
    ids = calloc(MS_SESSIONS_PER_CMD_MAX, sizeof *ids);
    if (!ids) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "out of memory");
    while (rc == 0 && bson_iter_next(&arr)) {
        if (n >= MS_SESSIONS_PER_CMD_MAX)
            rc = err_set(err, MS_ERR_BAD_VALUE, "%s takes at most %d sessions", ctx->name,
                         MS_SESSIONS_PER_CMD_MAX);
        else
            rc = lsid_uuid(&arr, ctx->name, ids[n++], err);
    }
    if (rc == 0) {
        int64_t now = time_mono_ms();   /* a wall-clock step expires nothing */
        pthread_mutex_lock(&g_ls.mu);
        sweep(now);
        for (int i = 0; i < n && rc == 0; i++) {
            if (op == LS_REFRESH) rc = touch(ids[i], now, err);
            else forget(ids[i]);
        }
        pthread_mutex_unlock(&g_ls.mu);
    }
    free(ids);
    return rc;
}

int lsess_cmd_start(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    uint8_t id[16];
    bson_t d;
    int rc;
    (void)ctx;
    if (getrandom(id, sizeof id, 0) != (ssize_t)sizeof id)
        return err_set(err, MS_ERR_INTERNAL, "startSession: no random bytes");
    id[6] = (uint8_t)((id[6] & 0x0f) | 0x40);   /* a version 4 UUID, as MongoDB makes */
    id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
    int64_t now = time_mono_ms();   /* a wall-clock step expires nothing */
    pthread_mutex_lock(&g_ls.mu);
    sweep(now);
    rc = touch(id, now, err);
    int64_t timeout = g_ls.timeout_ms;
    pthread_mutex_unlock(&g_ls.mu);
    if (rc) return rc;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "id", &d);
    BSON_APPEND_BINARY(&d, "id", BSON_SUBTYPE_UUID, id, sizeof id);
    bson_append_document_end(reply, &d);
    /* Whole minutes as MongoDB's reply has them; a test's shorter timeout shows as 0. */
    BSON_APPEND_INT32(reply, "timeoutMinutes", (int32_t)(timeout / 60000));
    return 0;
}

int lsess_cmd_refresh(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)reply;
    return each_lsid(ctx, LS_REFRESH, err);
}

int lsess_cmd_end(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)reply;
    return each_lsid(ctx, LS_END, err);
}

/* killSessions: the sessions leave the cache. MongoDB also kills their operations and
 * cursors; here a cursor remembers its session (common/cursor.c, for getMore's rule) but
 * is not killed with it: it ends when exhausted, killed or idle, as any cursor. */
int lsess_cmd_kill(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)reply;
    return each_lsid(ctx, LS_END, err);
}

/* killAllSessions: [{user, db}, ...] or [] (every user). Without authentication every
 * session belongs to no user, so any list kills them all. */
int lsess_cmd_kill_all(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)reply;
    if (!BSON_ITER_HOLDS_ARRAY(&ctx->arg))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "killAllSessions must be an array of users");
    pthread_mutex_lock(&g_ls.mu);
    for (int i = 0; i < LSESS_BUCKETS; i++)
        while (g_ls.b[i]) {
            lsent_t *gone = g_ls.b[i];
            g_ls.b[i] = gone->next;
            free(gone);
        }
    int64_t n = g_ls.n;
    g_ls.n = 0;
    pthread_mutex_unlock(&g_ls.mu);
    log_info("killAllSessions sessions=%lld", (long long)n);
    return 0;
}
