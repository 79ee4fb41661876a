/*
 * test_common_lclock.c — the cluster time (common/lclock.c): ticks, gossip and its rate
 * limiter, the high-water mark across a restart, the afterClusterTime wait, and the
 * $clusterTime / operationTime of replies, also from several threads at once. The clock
 * is process state, so the cases run in order and each builds on what the one before left.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "common/lclock.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/opctx.h"
#include "tests/unit/t.h"

static char dir_a[512], dir_b[512];

static uint32_t mark_of(const char *dir) {
    char path[600];
    unsigned v = 0;
    snprintf(path, sizeof path, "%s/%s", dir, LCLOCK_FILE);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (fscanf(f, "%u", &v) != 1) v = 0;
    fclose(f);
    return v;
}

static uint32_t wall(void) { return (uint32_t)time(NULL); }

static void lclock_ticks(void) {
    ms_error_t err = {0};
    lclock_ts_t a, b;
    snprintf(dir_a, sizeof dir_a, "%s/lclock_a", t_tmpdir());
    mkdir(dir_a, 0755);
    lclock_init(LCLOCK_DATA);
    CHECK_INT(lclock_open(dir_a, &err), 0);
    /* A fresh process starts at its wall clock, and the mark is ahead of it. */
    CHECK(lclock_now().secs >= wall() - 1);
    CHECK(mark_of(dir_a) > lclock_now().secs);
    CHECK_INT(lclock_write_begin(&a, &err), 0);
    lclock_write_end(a, true);
    CHECK_INT(lclock_write_begin(&b, &err), 0);
    lclock_write_end(b, false);
    CHECK(lclock_cmp(a, b) < 0);
    CHECK(lclock_cmp(lclock_now(), b) == 0);
    /* The committed write is applied and the operation's time; the rolled back one not. */
    CHECK(lclock_cmp(lclock_applied(), a) == 0);
    CHECK(lclock_cmp(lclock_op_time(), a) == 0);
    lclock_op_reset();
    CHECK(lclock_is_null(lclock_op_time()));
}

static void lclock_gossip(void) {
    ms_error_t err = {0};
    lclock_ts_t now = lclock_now(), t;
    lclock_ts_t ahead = {now.secs + 1000, 5};
    CHECK_INT(lclock_advance(ahead, &err), 0);
    CHECK(lclock_cmp(lclock_now(), ahead) == 0);
    /* Behind: nothing moves. */
    CHECK_INT(lclock_advance((lclock_ts_t){now.secs, 1}, &err), 0);
    CHECK(lclock_cmp(lclock_now(), ahead) == 0);
    /* The next tick follows the gossiped time (the hybrid clock is ahead of the wall). */
    CHECK_INT(lclock_write_begin(&t, &err), 0);
    lclock_write_end(t, true);
    CHECK_INT(t.secs, ahead.secs);
    CHECK_INT(t.inc, 6);
    /* The mark was saved past every time handed out. */
    CHECK(mark_of(dir_a) > t.secs);
    /* maxAcceptableLogicalClockDriftSecs: one year past the wall clock is refused. */
    CHECK_INT(lclock_advance((lclock_ts_t){wall() + MS_CLOCK_DRIFT_SECS_MAX + 10, 1}, &err),
              MS_ERR_CLUSTER_TIME_FAILS_RATE_LIMITER);
    CHECK_INT(lclock_advance((lclock_ts_t){now.secs, 0x80000000u}, &err), 40484);
    CHECK(lclock_cmp(lclock_now(), t) == 0);
}

static void lclock_restart(void) {
    ms_error_t err = {0};
    char path[600];
    uint32_t mark = wall() + 50000;
    snprintf(dir_b, sizeof dir_b, "%s/lclock_b", t_tmpdir());
    mkdir(dir_b, 0755);
    snprintf(path, sizeof path, "%s/%s", dir_b, LCLOCK_FILE);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fprintf(f, "%u\n", mark);
    fclose(f);
    /* What a restart finds: the clock starts at the mark, past anything handed out. */
    CHECK_INT(lclock_open(dir_b, &err), 0);
    CHECK_INT(lclock_now().secs, mark);
    CHECK(lclock_cmp(lclock_applied(), lclock_now()) == 0);
    CHECK(mark_of(dir_b) > mark);
    /* A malformed mark is an error, never a zero. */
    f = fopen(path, "w");
    if (f) {
        fputs("12x\n", f);
        fclose(f);
    }
    CHECK_INT(lclock_open(dir_b, &err), MS_ERR_INTERNAL);
}

typedef struct {
    lclock_ts_t t;
} ender_t;

static void *end_later(void *p) {
    ender_t *e = p;
    t_sleep_ms(30);
    lclock_write_end(e->t, true);
    return NULL;
}

static void lclock_wait(void) {
    ms_error_t err = {0};
    lclock_ts_t t, now;
    pthread_t th;
    ender_t e;
    CHECK_INT(lclock_write_begin(&t, &err), 0);
    /* A write at t is pending: a read after t waits, and its maxTimeMS ends the wait. */
    op_set_deadline_ms(time_mono_ms() + 50);
    long long t0 = time_mono_ms();
    CHECK_INT(lclock_wait_reached(t, &err), MS_ERR_MAX_TIME_MS_EXPIRED);
    CHECK(time_mono_ms() - t0 >= 45);
    op_set_deadline_ms(0);
    /* Ahead of the clock: InvalidOptions at once. */
    now = lclock_now();
    CHECK_INT(lclock_wait_reached((lclock_ts_t){now.secs + 1, 0}, &err), MS_ERR_INVALID_OPTIONS);
    /* The write commits while a read waits: the read goes on. */
    e.t = t;
    CHECK_INT(pthread_create(&th, NULL, end_later, &e), 0);
    op_set_deadline_ms(time_mono_ms() + 5000);
    CHECK_INT(lclock_wait_reached(t, &err), 0);
    op_set_deadline_ms(0);
    pthread_join(th, NULL);
    CHECK(lclock_cmp(lclock_applied(), t) >= 0);
    /* Gossip moved the clock past every write: the read reaches it (the noop write). */
    CHECK_INT(lclock_advance((lclock_ts_t){now.secs + 5, 0}, &err), 0);
    CHECK_INT(lclock_wait_reached((lclock_ts_t){now.secs + 5, 0}, &err), 0);
    CHECK_INT(lclock_applied().secs, now.secs + 5);
}

static bool ts_at(const bson_t *doc, const char *path, lclock_ts_t *out) {
    bson_iter_t it;
    if (!bson_iter_init(&it, doc) || !bson_iter_find_descendant(&it, path, &it) ||
        !BSON_ITER_HOLDS_TIMESTAMP(&it))
        return false;
    bson_iter_timestamp(&it, &out->secs, &out->inc);
    return true;
}

static void lclock_replies(void) {
    bson_t reply = BSON_INITIALIZER, peer = BSON_INITIALIZER;
    lclock_ts_t ct, op, now = lclock_now();
    bson_iter_t it;
    /* A data-bearing node without a write of its own answers its applied time; a reply
     * that carried a peer's fields gets this process's instead (no duplicate keys). */
    lclock_op_reset();
    BSON_APPEND_INT32(&reply, "ok", 1);
    BSON_APPEND_TIMESTAMP(&reply, "operationTime", 1, 1);
    lclock_append_signed(&reply, "$clusterTime", (lclock_ts_t){1, 1});
    lclock_reply_out(&reply);
    CHECK(ts_at(&reply, "$clusterTime.clusterTime", &ct));
    CHECK(ts_at(&reply, "operationTime", &op));
    CHECK(lclock_cmp(ct, now) == 0);
    CHECK(lclock_cmp(op, lclock_applied()) == 0);
    CHECK(bson_iter_init(&it, &reply) && bson_iter_find_descendant(&it, "$clusterTime.signature.keyId", &it));
    int n = 0;
    bson_iter_init(&it, &reply);
    while (bson_iter_next(&it)) n++;
    CHECK_INT(n, 3);
    bson_destroy(&reply);
    /* A router notes the operationTime of a peer's reply; gossip in moves its clock. */
    lclock_init(LCLOCK_ROUTER);
    lclock_append_signed(&peer, "$clusterTime", (lclock_ts_t){now.secs + 7, 3});
    BSON_APPEND_TIMESTAMP(&peer, "operationTime", now.secs + 7, 2);
    lclock_gossip_reply(&peer);
    CHECK_INT(lclock_now().secs, now.secs + 7);
    CHECK_INT(lclock_op_time().inc, 2);
    bson_destroy(&peer);
    lclock_op_reset();
}

/* What a peer call sends: our time in place of a lower one; a higher one, or one that is
 * no time at all, as the caller wrote it (the peer judges it); nothing added to {}. */
static void lclock_gossip_out_rules(void) {
    bson_t cmd = BSON_INITIALIZER, out, empty = BSON_INITIALIZER;
    lclock_ts_t now = lclock_now(), got;
    BSON_APPEND_INT32(&cmd, "ping", 1);
    lclock_append_signed(&cmd, "$clusterTime", (lclock_ts_t){1, 1});
    lclock_gossip_out(&cmd, &out);
    CHECK(ts_at(&out, "$clusterTime.clusterTime", &got) && lclock_cmp(got, now) == 0);
    bson_destroy(&out);
    bson_reinit(&cmd);
    BSON_APPEND_INT32(&cmd, "ping", 1);
    lclock_append_signed(&cmd, "$clusterTime", (lclock_ts_t){now.secs + 9, 0});
    lclock_gossip_out(&cmd, &out);
    CHECK(ts_at(&out, "$clusterTime.clusterTime", &got) && got.secs == now.secs + 9);
    bson_destroy(&out);
    bson_reinit(&cmd);
    BSON_APPEND_INT32(&cmd, "ping", 1);
    BSON_APPEND_INT32(&cmd, "$clusterTime", 5);
    lclock_gossip_out(&cmd, &out);
    CHECK(out.len == cmd.len);
    bson_destroy(&out);
    lclock_gossip_out(&empty, &out);
    CHECK(bson_empty(&out));
    bson_destroy(&out);
    bson_destroy(&cmd);
}

/* Threads ticking, gossiping and answering at once (the published times are read without
 * the lock): each thread's ticks only grow, every reply's operationTime is at most its
 * $clusterTime, and a reply's $clusterTime is never behind a tick its thread saw. */
#define RACE_THREADS 4
#define RACE_ITERS 5000

static void *race_main(void *p) {
    int *bad = p;
    lclock_ts_t last = {0, 0};
    for (int i = 0; i < RACE_ITERS; i++) {
        lclock_ts_t t, ct, op;
        ms_error_t e = {0};
        bson_t reply = BSON_INITIALIZER;
        lclock_op_reset();
        if (lclock_write_begin(&t, &e) != 0 || lclock_cmp(t, last) <= 0) (*bad)++;
        last = t;
        lclock_write_end(t, true);
        if (i % 7 == 0) {
            lclock_ts_t ahead = {t.secs, t.inc + 2};
            if (lclock_advance(ahead, &e) != 0) (*bad)++;
        }
        lclock_op_reset();   /* no write of its own: the applied time, bounded */
        lclock_reply_out(&reply);
        if (!ts_at(&reply, "$clusterTime.clusterTime", &ct) ||
            !ts_at(&reply, "operationTime", &op) || lclock_cmp(op, ct) > 0 ||
            lclock_cmp(ct, last) < 0)
            (*bad)++;
        bson_destroy(&reply);
    }
    return NULL;
}

static void lclock_concurrent(void) {
    pthread_t th[RACE_THREADS];
    int bad[RACE_THREADS] = {0};
    lclock_init(LCLOCK_DATA);
    for (int i = 0; i < RACE_THREADS; i++)
        CHECK_INT(pthread_create(&th[i], NULL, race_main, &bad[i]), 0);
    for (int i = 0; i < RACE_THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT(bad[i], 0);
    }
    CHECK(lclock_cmp(lclock_applied(), lclock_now()) <= 0);
}

T_MAIN(T_CASE(lclock_ticks), T_CASE(lclock_gossip), T_CASE(lclock_restart), T_CASE(lclock_wait),
       T_CASE(lclock_replies), T_CASE(lclock_gossip_out_rules), T_CASE(lclock_concurrent))
