/*
 * rt_send.c — sending commands to shards, run by bin/router: copies of the client's
 * command with the shard's version attached (MongoDB's appendShardVersion), parallel
 * scatter/gather (one thread per extra target; the caller's thread takes the first, so a
 * targeted operation costs no thread), reply status, and the stale-retry log line.
 *
 * maxTimeMS (as mongos does): a forwarded command carries the time the client's
 * maxTimeMS has left when it is built, never the original value; a call is not sent once
 * that time is up, and a call that fails after it is up answers MaxTimeMSExpired (50).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/lclock.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/rpc.h"
#include "router/router.h"

int rt_reply_status(const bson_t *reply, ms_error_t *err) {
    bson_iter_t it;
    double ok = 0;
    if (bson_iter_init_find(&it, reply, "ok")) {
        if (BSON_ITER_HOLDS_DOUBLE(&it)) ok = bson_iter_double(&it);
        else if (BSON_ITER_HOLDS_INT32(&it)) ok = bson_iter_int32(&it);
        else if (BSON_ITER_HOLDS_INT64(&it)) ok = (double)bson_iter_int64(&it);
        else if (BSON_ITER_HOLDS_BOOL(&it)) ok = bson_iter_bool(&it);
    }
    if (ok == 1) return 0;
    int code = MS_ERR_UNKNOWN_ERROR;
    const char *msg = "command failed";
    if (bson_iter_init_find(&it, reply, "code") && BSON_ITER_HOLDS_INT32(&it))
        code = bson_iter_int32(&it);
    if (bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
        msg = bson_iter_utf8(&it, NULL);
    return err_set(err, code ? code : MS_ERR_UNKNOWN_ERROR, "%s", msg);
}

void rt_copy_cmd(bson_t *dst, const bson_t *src, const char *const *skip) {
    bson_iter_t it;
    if (!bson_iter_init(&it, src)) return;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bool drop = strcmp(k, "shardVersion") == 0 || strcmp(k, "databaseVersion") == 0 ||
                    strcmp(k, "maxTimeMS") == 0;
        for (int i = 0; skip && skip[i] && !drop; i++) drop = strcmp(k, skip[i]) == 0;
        if (!drop) bson_append_iter(dst, k, -1, &it);
    }
    /* The remaining time, at least 1 ms (0 would mean no limit); an expired operation
     * is stopped by rt_shard_call before this is sent. */
    if (op_deadline_ms() > 0) {
        long long left = op_time_left_ms(0);
        BSON_APPEND_INT32(dst, "maxTimeMS", (int32_t)(left > 0 ? left : 1));
    }
}

void rt_append_version(bson_t *cmd, const rt_table_t *t, int shard) {
    rtable_version_t v;
    if (t && t->sharded) rtable_shard_version(&t->rt, shard, &v);
    else rtable_version_unsharded(&v);
    rtable_version_append(cmd, "shardVersion", &v);
}

void rt_append_db_version(bson_t *cmd, const rt_db_version_t *v) {
    rtable_dbv_append(cmd, "databaseVersion", v);
}

void rt_note_stale_db(router_t *r, const char *db, const char *shard, const bson_t *reply) {
    bson_iter_t it;
    const char *why = "";
    if (reply && bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
        why = bson_iter_utf8(&it, NULL);
    atomic_fetch_add(&r->stale_db_retries, 1);
    rt_db_invalidate(r, db);
    log_info("stale db version retry db=%s shard=%s errmsg=%.200s", log_str(db), log_str(shard),
             log_str(why));
}

void rt_note_stale(router_t *r, const char *ns, const char *shard, const bson_t *reply) {
    bson_iter_t it;
    uint32_t rm = 0, rn = 0, wm = 0, wn = 0;
    if (reply && bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "vReceived.v", &it) &&
        BSON_ITER_HOLDS_TIMESTAMP(&it))
        bson_iter_timestamp(&it, &rm, &rn);
    if (reply && bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "vWanted.v", &it) &&
        BSON_ITER_HOLDS_TIMESTAMP(&it))
        bson_iter_timestamp(&it, &wm, &wn);
    const char *why = "";
    if (reply && bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
        why = bson_iter_utf8(&it, NULL);
    atomic_fetch_add(&r->stale_retries, 1);
    log_info("stale config retry ns=%s shard=%s received=%u|%u wanted=%u|%u errmsg=%.200s",
             log_str(ns), log_str(shard), rm, rn, wm, wn, log_str(why));
}

/* killCursors cleans up after an operation, also after its time ran out (mongos kills
 * remote cursors outside the operation's deadline): it is sent without one. */
static bool is_cleanup(const bson_t *cmd) {
    bson_iter_t it;
    return bson_iter_init(&it, cmd) && bson_iter_next(&it) &&
           strcmp(bson_iter_key(&it), "killCursors") == 0;
}

int rt_shard_call(router_t *r, const char *shard, const bson_t *cmd, bson_t *reply,
                  ms_error_t *err) {
    char url[MS_URL_BYTES_MAX];
    rpc_client_t *c;
    long long deadline = op_deadline_ms();
    bool cleanup = deadline > 0 && is_cleanup(cmd);
    int rc = rt_shard_url(r, shard, url, sizeof url, err);
    if (rc) return rc;
    if ((rc = rpc_peer(url, &c, err)) != 0) return rc;
    if (cleanup) op_set_deadline_ms(0);
    else if ((rc = op_check(err)) != 0) return rc;
    /* The operation's maxTimeMS bounds the call when it has one (MaxTimeMSExpired once it
     * runs out); a network failure (HostUnreachable, NetworkTimeout, ExceededTimeLimit)
     * names the shard. */
    rc = rpc_call_op(c, cmd, r->peer_timeout_ms, reply, err);
    if (cleanup) op_set_deadline_ms(deadline);
    if (rc) err_prefix(err, "shard %s", shard);
    return rc;
}

void rt_kill_shard_cursor(router_t *r, const char *shard, const char *db, const char *coll,
                          int64_t id) {
    bson_t cmd, rep, arr;
    if (!id) return;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "killCursors", coll);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &arr);
    BSON_APPEND_INT64(&arr, "0", id);
    bson_append_array_end(&cmd, &arr);
    if (rt_shard_call(r, shard, &cmd, &rep, NULL) == 0) bson_destroy(&rep);
    bson_destroy(&cmd);
}

typedef struct send_arg {
    router_t *r;
    rt_req_t *q;
    long long deadline_ms;   /* the operation's (op_deadline_ms), carried to helper threads */
    lclock_ts_t op_time;     /* the shard's operationTime, carried back (common/lclock.h) */
} send_arg_t;

static void *send_one(void *p) {
    send_arg_t *a = p;
    long long own = op_deadline_ms();
    lclock_ts_t own_time = lclock_op_time();
    op_set_deadline_ms(a->deadline_ms);   /* thread-local: a helper thread has none */
    lclock_op_reset();
    memset(&a->q->err, 0, sizeof a->q->err);
    a->q->rc = rt_shard_call(a->r, a->q->shard, &a->q->cmd, &a->q->reply, &a->q->err);
    a->op_time = lclock_op_time();
    op_set_deadline_ms(own);
    lclock_op_reset();
    lclock_op_note(own_time);
    return NULL;
}

void rt_send_all(router_t *r, rt_req_t *reqs, int n) {
    pthread_t th[MS_SHARDS_MAX];
    send_arg_t args[MS_SHARDS_MAX];
    bool started[MS_SHARDS_MAX] = {0};
    long long deadline_ms = op_deadline_ms();
    ASSERT(n <= MS_SHARDS_MAX);
    for (int i = 1; i < n; i++) {
        args[i] = (send_arg_t){r, &reqs[i], deadline_ms, {0, 0}};
        started[i] = pthread_create(&th[i], NULL, send_one, &args[i]) == 0;
        if (!started[i]) send_one(&args[i]);   /* no thread: do it here, still correct */
    }
    if (n > 0) {
        args[0] = (send_arg_t){r, &reqs[0], deadline_ms, {0, 0}};
        send_one(&args[0]);
    }
    for (int i = 1; i < n; i++)
        if (started[i]) pthread_join(th[i], NULL);
    /* mongos's operationTime: the latest of the shards' it used. */
    for (int i = 0; i < n; i++) lclock_op_note(args[i].op_time);
}

void rt_req_clear(rt_req_t *q) {
    bson_destroy(&q->cmd);
    if (q->rc == 0) bson_destroy(&q->reply);
    q->rc = -1;
}
