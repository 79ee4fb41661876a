/*
 * failpoint.c — named failpoints, MongoDB style (see failpoint.h), in every daemon.
 *
 * Points live in one fixed table, registered at start-up and never removed, so a
 * lookup needs no lock (entries are complete before the count that publishes them).
 * Mode, counters and data change under one mutex; one condition variable wakes both
 * hung threads (when their point is turned off) and waitForFailPoint callers (when a
 * point is entered). Like MongoDB's FailPoint, `timesEntered` counts the evaluations
 * that fired and never resets, so a test reads `count` from configureFailPoint and
 * waits for count + 1.
 *
 * A point whose place is inside a lock other requests need is split in two (fp_eval_early
 * before the lock, fp_late at its place): the hang happens in the first half, error and
 * crash in the second, so a hang never holds such a lock (data.holdLocks: true
 * is the test instrument that keeps the hang inside).
 */
#include "common/failpoint.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bsonx.h"
#include "common/limits.h"
#include "common/log.h"

enum fp_mode { FP_OFF, FP_ALWAYS_ON, FP_TIMES, FP_SKIP, FP_RANDOM };
enum fp_action { FP_HANG, FP_ERROR, FP_CRASH };

typedef struct fp {
    const char *name;      /* static string given to fp_register */
    atomic_bool on;        /* mode != off, readable without the lock */
    enum fp_mode mode;
    int64_t n;             /* firings left (times) or evaluations to skip (skip) */
    double prob;           /* activationProbability: the chance each evaluation fires */
    uint64_t entered;      /* evaluations that fired, ever */
    uint64_t off_gen;      /* bumped each time the point is turned off: releases hangs */
    enum fp_action action;
    int code;              /* for action error */
    bson_t data;
} fp_t;

static fp_t fp_table[MS_FAILPOINTS_MAX];
static atomic_int fp_count;
static pthread_mutex_t fp_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fp_cv;
static pthread_once_t fp_once = PTHREAD_ONCE_INIT;

/* Default for waitForFailPoint's maxTimeMS, and its ceiling. */
#define FP_WAIT_MS_DEFAULT 30000
#define FP_WAIT_MS_MAX (24LL * 3600 * 1000)

static void fp_init_once(void) {
    pthread_condattr_t a;
    /* Monotonic, so a wall-clock jump cannot stretch or cut a maxTimeMS wait. */
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&fp_cv, &a);
    pthread_condattr_destroy(&a);
}

static fp_t *fp_find(const char *name) {
    int n = atomic_load_explicit(&fp_count, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (strcmp(fp_table[i].name, name) == 0) return &fp_table[i];
    return NULL;
}

void fp_register(const char *name) {
    pthread_once(&fp_once, fp_init_once);
    pthread_mutex_lock(&fp_mu);
    if (!fp_find(name)) {
        int n = atomic_load(&fp_count);
        ASSERT(n < MS_FAILPOINTS_MAX);  /* our own declarations, a fixed set */
        fp_t *p = &fp_table[n];
        p->name = name;
        atomic_init(&p->on, false);
        p->mode = FP_OFF;
        p->action = FP_HANG;
        p->code = MS_ERR_FAIL_POINT_ENABLED;
        bson_init(&p->data);
        atomic_store_explicit(&fp_count, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&fp_mu);
}

static const char *fp_mode_name(enum fp_mode m) {
    switch (m) {
    case FP_ALWAYS_ON: return "alwaysOn";
    case FP_TIMES: return "times";
    case FP_SKIP: return "skip";
    case FP_RANDOM: return "activationProbability";
    default: return "off";
    }
}

static const char *fp_action_name(enum fp_action a) {
    switch (a) {
    case FP_ERROR: return "error";
    case FP_CRASH: return "crash";
    default: return "hang";
    }
}

/* activationProbability's draws: xorshift64*, under fp_mu, seeded once from the clock (a
 * test needs the ratio, not a sequence it could replay). */
static uint64_t fp_rand_state;

static double fp_rand_locked(void) {
    if (!fp_rand_state) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        fp_rand_state = ((uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec) | 1;
    }
    fp_rand_state ^= fp_rand_state >> 12;
    fp_rand_state ^= fp_rand_state << 25;
    fp_rand_state ^= fp_rand_state >> 27;
    return (double)((fp_rand_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static void fp_set_off_locked(fp_t *p) {
    p->mode = FP_OFF;
    atomic_store(&p->on, false);
}

/* Decides whether this evaluation fires and advances the mode's counter, as
 * MongoDB's FailPoint::shouldFail does for {times} and {skip}. */
static bool fp_fire_locked(fp_t *p) {
    switch (p->mode) {
    case FP_ALWAYS_ON: return true;
    case FP_TIMES:
        if (p->n <= 0) {
            fp_set_off_locked(p);
            return false;
        }
        if (--p->n == 0) fp_set_off_locked(p);  /* exhausted; a hang still holds */
        return true;
    case FP_SKIP:
        if (p->n > 0) {
            p->n--;
            return false;
        }
        return true;
    case FP_RANDOM: return fp_rand_locked() < p->prob;
    default: return false;
    }
}

bool fp_active(const char *name) {
    fp_t *p = fp_find(name);
    return p && atomic_load_explicit(&p->on, memory_order_relaxed);
}

/* Sets a caller's heldAt slot under its own lock (never with fp_mu held). */
static void fp_publish_held(const fp_held_t *held, const char *name) {
    pthread_mutex_lock(held->mu);
    *held->slot = name;
    pthread_mutex_unlock(held->mu);
}

/* fp_eval_data and fp_eval_held: held, when non-NULL, is told while a hang holds us. */
static int fp_eval_impl(const char *name, bson_t *data_out, bool *fired, const fp_held_t *held,
                        ms_error_t *err) {
    fp_t *p = fp_find(name);
    enum fp_action action;
    char errmsg[MS_ERRMSG_BYTES];
    int code;
    uint64_t gen;
    bson_iter_t it;

    if (fired) *fired = false;
    if (!p || !atomic_load_explicit(&p->on, memory_order_relaxed)) return 0;

    pthread_mutex_lock(&fp_mu);
    if (!fp_fire_locked(p)) {
        pthread_mutex_unlock(&fp_mu);
        return 0;
    }
    action = p->action;
    code = p->code;
    gen = p->off_gen;   /* a turn-off from here on releases the hang below */
    if (bson_iter_init_find(&it, &p->data, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(errmsg, sizeof errmsg, "%s", bson_iter_utf8(&it, NULL));
    else
        snprintf(errmsg, sizeof errmsg, "Failing command due to failpoint '%s'", name);
    if (data_out) bson_copy_to(&p->data, data_out);
    if (fired) *fired = true;
    if (action == FP_HANG && held) {
        /* Published before the point counts as entered, so whoever waitForFailPoint
         * wakes already sees where we are held. */
        pthread_mutex_unlock(&fp_mu);
        fp_publish_held(held, p->name);
        pthread_mutex_lock(&fp_mu);
    }
    p->entered++;
    pthread_cond_broadcast(&fp_cv);  /* waitForFailPoint callers */
    if (action == FP_HANG) {
        /* MongoDB's pauseWhileSet: hold here until a configureFailPoint turns it off. */
        log_info("failpoint hang name=%s entered=%llu", name, (unsigned long long)p->entered);
        while (p->off_gen == gen) pthread_cond_wait(&fp_cv, &fp_mu);
        log_info("failpoint released name=%s", name);
    }
    pthread_mutex_unlock(&fp_mu);
    if (action == FP_HANG && held) fp_publish_held(held, NULL);

    if (action == FP_CRASH) {
        log_error("failpoint crash name=%s pid=%d signal=SIGKILL", name, (int)getpid());
        kill(getpid(), SIGKILL);
        abort();  /* not reached: SIGKILL cannot be caught */
    }
    if (action == FP_ERROR) return err_set(err, code, "%s", errmsg);
    return 0;
}

int fp_eval_data(const char *name, bson_t *data_out, bool *fired, ms_error_t *err) {
    return fp_eval_impl(name, data_out, fired, NULL, err);
}

int fp_eval_held(const char *name, const fp_held_t *held, ms_error_t *err) {
    return fp_eval_impl(name, NULL, NULL, held, err);
}

int fp_eval(const char *name, ms_error_t *err) { return fp_eval_data(name, NULL, NULL, err); }

void fp_eval_early(const char *name, fp_early_t *e) {
    fp_t *p = fp_find(name);
    bson_iter_t it;
    memset(e, 0, sizeof *e);
    e->name = name;
    if (!p || !atomic_load_explicit(&p->on, memory_order_relaxed)) return;
    pthread_mutex_lock(&fp_mu);
    if (!fp_fire_locked(p)) {
        pthread_mutex_unlock(&fp_mu);
        return;
    }
    p->entered++;
    pthread_cond_broadcast(&fp_cv);  /* waitForFailPoint callers */
    e->action = (int)p->action;
    e->code = p->code;
    e->hold = bson_iter_init_find(&it, &p->data, "holdLocks") && bsonx_truthy(&it);
    if (bson_iter_init_find(&it, &p->data, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
        snprintf(e->errmsg, sizeof e->errmsg, "%s", bson_iter_utf8(&it, NULL));
    else
        snprintf(e->errmsg, sizeof e->errmsg, "Failing command due to failpoint '%s'", name);
    if (p->action == FP_HANG && e->hold) {
        e->gen = p->off_gen;   /* fp_late hangs, with the caller's locks (test instrument) */
        e->fired = true;
    } else if (p->action == FP_HANG) {
        /* Here, before the caller takes its locks: the hang holds this operation only. */
        uint64_t gen = p->off_gen;
        log_info("failpoint hang name=%s entered=%llu where=beforeLocks", name,
                 (unsigned long long)p->entered);
        while (p->off_gen == gen) pthread_cond_wait(&fp_cv, &fp_mu);
        log_info("failpoint released name=%s", name);
    } else {
        e->fired = true;
    }
    pthread_mutex_unlock(&fp_mu);
}

int fp_late(const fp_early_t *e, ms_error_t *err) {
    if (!e->fired) return 0;
    if (e->action == FP_HANG) {   /* holdLocks: true */
        pthread_mutex_lock(&fp_mu);
        fp_t *p = fp_find(e->name);
        log_info("failpoint hang name=%s where=holdingLocks", e->name);
        while (p && p->off_gen == e->gen) pthread_cond_wait(&fp_cv, &fp_mu);
        log_info("failpoint released name=%s", e->name);
        pthread_mutex_unlock(&fp_mu);
        return 0;
    }
    if (e->action == FP_CRASH) {
        log_error("failpoint crash name=%s pid=%d signal=SIGKILL", e->name, (int)getpid());
        kill(getpid(), SIGKILL);
        abort();  /* not reached: SIGKILL cannot be caught */
    }
    return err_set(err, e->code, "%s", e->errmsg);
}

bool fp_check(const char *name, bool (*pred)(const bson_t *data, void *arg), void *arg,
              bson_t *data_out) {
    fp_t *p = fp_find(name);
    bool fire = false;
    if (!p || !atomic_load_explicit(&p->on, memory_order_relaxed)) return false;
    pthread_mutex_lock(&fp_mu);
    if (p->mode != FP_OFF && (!pred || pred(&p->data, arg)) && fp_fire_locked(p)) {
        fire = true;
        p->entered++;
        pthread_cond_broadcast(&fp_cv);
        if (data_out) bson_copy_to(&p->data, data_out);
    }
    pthread_mutex_unlock(&fp_mu);
    return fire;
}

/* Reads the point name (the command's first value). */
static int fp_cmd_point(const bson_t *cmd, fp_t **out, ms_error_t *err) {
    bson_iter_t it;
    const char *name;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "empty failpoint command");
    if (!BSON_ITER_HOLDS_UTF8(&it))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "'%s' must name a failpoint (a string)",
                       bson_iter_key(&it));
    name = bson_iter_utf8(&it, NULL);
    *out = fp_find(name);
    if (!*out) return err_set(err, MS_ERR_BAD_VALUE, "Cannot find failpoint %s", name);
    return 0;
}

/* {activationProbability: p}: a number in [0, 1], as MongoDB's FailPoint::parseBSON. */
static int fp_parse_probability(const bson_iter_t *sub, double *prob, ms_error_t *err) {
    if (!BSON_ITER_HOLDS_NUMBER(sub))
        return err_set(err, MS_ERR_TYPE_MISMATCH,
                       "'activationProbability' option to 'mode' must be a double");
    *prob = bson_iter_as_double(sub);
    if (!(*prob >= 0.0 && *prob <= 1.0))
        return err_set(err, MS_ERR_BAD_VALUE,
                       "activationProbability must be between 0.0 and 1.0");
    return 0;
}

static int fp_parse_mode(const bson_t *cmd, enum fp_mode *mode, int64_t *n, double *prob,
                         ms_error_t *err) {
    bson_iter_t it, sub;
    if (!bson_iter_init_find(&it, cmd, "mode"))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "configureFailPoint: missing 'mode'");
    if (BSON_ITER_HOLDS_UTF8(&it)) {
        const char *m = bson_iter_utf8(&it, NULL);
        *n = 0;
        if (strcmp(m, "alwaysOn") == 0) *mode = FP_ALWAYS_ON;
        else if (strcmp(m, "off") == 0) *mode = FP_OFF;
        else
            return err_set(err, MS_ERR_BAD_VALUE,
                           "unknown failpoint mode '%s' (alwaysOn, off, {times}, {skip}, {activationProbability})", m);
        return 0;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &sub) || !bson_iter_next(&sub))
        return err_set(err, MS_ERR_BAD_VALUE,
                       "failpoint mode must be \"alwaysOn\", \"off\", {times: N}, {skip: N} or "
                       "{activationProbability: P}");
    if (strcmp(bson_iter_key(&sub), "activationProbability") == 0) {
        *mode = FP_RANDOM;
        return fp_parse_probability(&sub, prob, err);
    }
    if (strcmp(bson_iter_key(&sub), "times") == 0) *mode = FP_TIMES;
    else if (strcmp(bson_iter_key(&sub), "skip") == 0) *mode = FP_SKIP;
    else
        return err_set(err, MS_ERR_BAD_VALUE, "unknown failpoint mode '%s'", bson_iter_key(&sub));
    if (!bsonx_as_int64_exact(&sub, n) || *n < 0)
        return err_set(err, MS_ERR_BAD_VALUE, "failpoint mode %s needs a non-negative integer",
                       bson_iter_key(&sub));
    if (*mode == FP_TIMES && *n == 0) *mode = FP_OFF;
    return 0;
}

static int fp_parse_data(const bson_t *cmd, bson_t *data, enum fp_action *action, int *code,
                         ms_error_t *err) {
    bson_iter_t it;
    int64_t v;
    *action = FP_HANG;
    *code = MS_ERR_FAIL_POINT_ENABLED;
    if (!bson_iter_init_find(&it, cmd, "data")) {
        bson_init(data);
        return 0;
    }
    if (!BSON_ITER_HOLDS_DOCUMENT(&it))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "failpoint 'data' must be a document");
    {
        const uint8_t *buf;
        uint32_t len;
        bson_t view;
        bson_iter_document(&it, &len, &buf);
        if (!bson_init_static(&view, buf, len))
            return err_set(err, MS_ERR_INVALID_BSON, "failpoint 'data' is not valid BSON");
        if (bson_iter_init_find(&it, &view, "action")) {
            const char *a = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : "";
            if (strcmp(a, "hang") == 0) *action = FP_HANG;
            else if (strcmp(a, "error") == 0) *action = FP_ERROR;
            else if (strcmp(a, "crash") == 0) *action = FP_CRASH;
            else
                return err_set(err, MS_ERR_BAD_VALUE,
                               "failpoint data.action must be \"hang\", \"error\" or \"crash\"");
        }
        if (bson_iter_init_find(&it, &view, "code")) {
            if (!bsonx_as_int64_exact(&it, &v) || v <= 0 || v > INT32_MAX)
                return err_set(err, MS_ERR_BAD_VALUE, "failpoint data.code must be a positive integer");
            *code = (int)v;
        }
        bson_copy_to(&view, data);
    }
    return 0;
}

int fp_configure(const bson_t *cmd, bson_t *reply, ms_error_t *err) {
    fp_t *p;
    enum fp_mode mode = FP_OFF;
    enum fp_action action;
    int64_t n = 0;
    double prob = 0;
    int code, rc;
    bson_t data;

    if ((rc = fp_cmd_point(cmd, &p, err)) != 0) return rc;
    if ((rc = fp_parse_mode(cmd, &mode, &n, &prob, err)) != 0) return rc;
    if ((rc = fp_parse_data(cmd, &data, &action, &code, err)) != 0) return rc;

    pthread_mutex_lock(&fp_mu);
    BSON_APPEND_INT64(reply, "count", (int64_t)p->entered);
    bson_destroy(&p->data);
    bson_steal(&p->data, &data);
    p->action = action;
    p->code = code;
    p->n = n;
    p->prob = prob;
    if (mode == FP_OFF) {
        fp_set_off_locked(p);
        p->off_gen++;
        pthread_cond_broadcast(&fp_cv);  /* hung threads go on */
    } else {
        p->mode = mode;
        atomic_store(&p->on, true);
    }
    pthread_mutex_unlock(&fp_mu);
    log_info("failpoint configured name=%s mode=%s n=%lld action=%s", p->name, fp_mode_name(mode),
             (long long)n, fp_action_name(action));
    return 0;
}

/* The monotonic time ms from now, for pthread_cond_timedwait on fp_cv. */
static void fp_deadline_in(int64_t ms, struct timespec *deadline) {
    clock_gettime(CLOCK_MONOTONIC, deadline);
    deadline->tv_sec += (time_t)(ms / 1000);
    deadline->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (deadline->tv_nsec >= 1000000000L) {
        deadline->tv_sec++;
        deadline->tv_nsec -= 1000000000L;
    }
}

/* Bumped by fp_release_all: ends every fp_sleep_ms early (a daemon stopping). */
static uint64_t fp_release_gen;

void fp_sleep_ms(int64_t ms) {
    struct timespec deadline;
    uint64_t gen;
    if (ms <= 0) return;
    pthread_once(&fp_once, fp_init_once);
    fp_deadline_in(ms, &deadline);
    pthread_mutex_lock(&fp_mu);
    gen = fp_release_gen;
    /* Bounded: timedwait answers ETIMEDOUT once the deadline passes. */
    while (fp_release_gen == gen && pthread_cond_timedwait(&fp_cv, &fp_mu, &deadline) == 0) {
    }
    pthread_mutex_unlock(&fp_mu);
}

int fp_wait(const bson_t *cmd, bson_t *reply, ms_error_t *err) {
    fp_t *p;
    bson_iter_t it;
    int64_t target, max_ms = FP_WAIT_MS_DEFAULT;
    struct timespec deadline;
    uint64_t entered;
    int rc;

    if ((rc = fp_cmd_point(cmd, &p, err)) != 0) return rc;
    if (!bson_iter_init_find(&it, cmd, "timesEntered"))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "waitForFailPoint: missing 'timesEntered'");
    if (!bsonx_as_int64_exact(&it, &target) || target < 0)
        return err_set(err, MS_ERR_BAD_VALUE, "timesEntered must be a non-negative integer");
    if (bson_iter_init_find(&it, cmd, "maxTimeMS") &&
        (!bsonx_as_int64_exact(&it, &max_ms) || max_ms < 0 || max_ms > FP_WAIT_MS_MAX))
        return err_set(err, MS_ERR_BAD_VALUE, "maxTimeMS must be an integer in [0, %lld]",
                       FP_WAIT_MS_MAX);

    fp_deadline_in(max_ms, &deadline);
    pthread_mutex_lock(&fp_mu);
    /* Bounded by the deadline: timedwait returns ETIMEDOUT once it passes. */
    while (p->entered < (uint64_t)target) {
        if (pthread_cond_timedwait(&fp_cv, &fp_mu, &deadline) != 0 && p->entered < (uint64_t)target)
            break;
    }
    entered = p->entered;
    pthread_mutex_unlock(&fp_mu);
    if (entered < (uint64_t)target)
        return err_set(err, MS_ERR_MAX_TIME_MS_EXPIRED,
                       "waitForFailPoint %s: entered %llu times, waited for %lld, %lld ms passed",
                       p->name, (unsigned long long)entered, (long long)target, (long long)max_ms);
    BSON_APPEND_INT64(reply, "timesEntered", (int64_t)entered);
    return 0;
}

void fp_append_status(bson_t *reply) {
    int n = atomic_load_explicit(&fp_count, memory_order_acquire);
    pthread_mutex_lock(&fp_mu);
    for (int i = 0; i < n; i++) {
        fp_t *p = &fp_table[i];
        bson_t sub;
        BSON_APPEND_DOCUMENT_BEGIN(reply, p->name, &sub);
        BSON_APPEND_UTF8(&sub, "mode", fp_mode_name(p->mode));
        if (p->mode == FP_TIMES || p->mode == FP_SKIP) BSON_APPEND_INT64(&sub, "n", p->n);
        if (p->mode == FP_RANDOM) BSON_APPEND_DOUBLE(&sub, "activationProbability", p->prob);
        BSON_APPEND_INT64(&sub, "timesEntered", (int64_t)p->entered);
        if (p->mode != FP_OFF) {
            BSON_APPEND_UTF8(&sub, "action", fp_action_name(p->action));
            BSON_APPEND_DOCUMENT(&sub, "data", &p->data);
        }
        bson_append_document_end(reply, &sub);
    }
    pthread_mutex_unlock(&fp_mu);
}

void fp_release_all(void) {
    int n = atomic_load_explicit(&fp_count, memory_order_acquire);
    pthread_once(&fp_once, fp_init_once);
    pthread_mutex_lock(&fp_mu);
    for (int i = 0; i < n; i++) {
        fp_set_off_locked(&fp_table[i]);
        fp_table[i].off_gen++;
    }
    fp_release_gen++;
    pthread_cond_broadcast(&fp_cv);
    pthread_mutex_unlock(&fp_mu);
}
